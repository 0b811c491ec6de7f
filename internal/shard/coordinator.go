package shard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/internal/leases"
	"github.com/quietpatch/quietpatch/leader"
)

// ErrNotRunning is returned by [Coordinator.Ready] before Run and once it
// stops.
var ErrNotRunning = errors.New("shard: coordinator not running")

// Config configures a [Coordinator].
type Config struct {
	// Shards is the shard count K, 2 to MaxShards.
	Shards int
	// Leases is the client of the shard and membership Leases.
	Leases coordinationv1client.LeasesGetter
	// Lease is what every shard's claimer starts from, with Identity,
	// Clock, Logger and Meter set: shard i's Lease is
	// <Name>-shard-<i>-of-<K>, this replica's membership Lease
	// <Name>-member-<hash>. The coordinator logs to Lease.Logger and
	// registers the quietpatch.shard instruments on Lease.Meter while it
	// runs.
	Lease leader.Config
	// Name is the pipeline attribute of the instruments and logs.
	Name string
}

// Coordinator runs, on one replica, the shards of a resource it holds: it
// keeps the replica in the shard group (a membership Lease, a list of the
// Leases every RetryPeriod), applies [Plan] — at most ⌈K/R⌉ shards each,
// extras given up on purpose when a replica joins — and runs, for each
// shard it competes for or holds, the [Pipeline] Build makes. Build one
// with [NewCoordinator]; Run it once. Its methods are safe for concurrent
// use.
type Coordinator[P Pipeline] struct {
	cfg    Config
	lw     cache.ListerWatcher
	build  Build[P]
	ranges []Range
	group  *group
	log    *slog.Logger
	life   base.Lifecycle
	moves  base.Counters[string] // by direction: acquired, given_up, lost
	told   atomic.Bool           // logged that the server does not filter

	mu     sync.Mutex
	shards map[int]*slot[P] // every shard run here, leaving ones included
	wg     sync.WaitGroup   // the shards' goroutines
}

// phase is where a shard run here stands.
type phase int

const (
	competing phase = iota // its pipeline runs, not leading
	held                   // its pipeline runs and leads
	leaving                // given up: stopping, or stopped while the view still names us
)

// slot is one shard run here.
type slot[P Pipeline] struct {
	phase  phase
	p      P
	since  time.Time // it started competing
	cancel context.CancelFunc
	done   chan struct{} // closed once its pipeline returned
	err    error         // the pipeline's failure, once done
	reason string        // why it leaves
}

// NewCoordinator returns the coordinator of the cfg.Shards shards of the
// objects lw lists and watches, building each shard's pipeline with
// build. It starts nothing; it rejects an invalid cfg with a
// [*base.ConfigError] naming the field.
func NewCoordinator[P Pipeline](cfg Config, lw cache.ListerWatcher, build Build[P]) (*Coordinator[P], error) {
	bad := func(field, reason string) error { return &base.ConfigError{Field: field, Reason: reason} }
	switch {
	case cfg.Leases == nil:
		return nil, bad("Leases", "must not be nil")
	case lw == nil || build == nil:
		return nil, bad("ListerWatcher", "and the pipeline's Build must not be nil")
	case cfg.Shards < 2 || cfg.Shards > MaxShards:
		return nil, bad("Shards", fmt.Sprintf("must be between 2 and %d, got %d", MaxShards, cfg.Shards))
	}
	lease, err := cfg.Lease.Complete()
	if err != nil {
		return nil, base.Prefix("Lease.", err)
	}
	cfg.Lease = lease
	c := &Coordinator[P]{cfg: cfg, lw: lw, build: build, shards: map[int]*slot[P]{},
		log: lease.Logger.With(slog.String("pipeline", cfg.Name)), moves: base.NewCounters(moveDirections...)}
	c.ranges, _ = Split(cfg.Shards)
	if c.group, err = newGroup(cfg.Leases, lease, cfg.Shards); err != nil {
		return nil, err
	}
	return c, nil
}

// Run runs until ctx is cancelled, then stops every shard's pipeline, leaves
// the group and returns nil; or until a part fails (a shard's pipeline,
// the group's Lease calls), then stops and returns that failure. A second
// call returns base.ErrAlreadyStarted.
//
// It joins the group and — once the group has listed the Leases twice, so
// that replicas started together see each other before any takes a shard
// — every RetryPeriod (or when the group's view changes) applies [Plan]:
// it starts the pipelines of the shards to compete for and stops those to
// give up.
func (c *Coordinator[P]) Run(ctx context.Context) error {
	if err := c.life.Start(); err != nil {
		return err
	}
	unregister, err := register(c.cfg.Lease.Meter, c.cfg.Name, c.cfg.Lease.Identity, c.Stats)
	if err != nil {
		c.life.Stop(err)
		return err
	}
	defer unregister()
	c.log.Info("quietpatch: joining the shard group", slog.Int("shards", len(c.ranges)), slog.String("identity", c.cfg.Lease.Identity))
	gctx, stopGroup := context.WithCancel(context.WithoutCancel(ctx))
	groupDone := make(chan error, 1)
	go func() { groupDone <- c.group.run(gctx) }()

	err = c.coordinate(ctx, groupDone)

	c.life.Stop(err)
	c.log.Info("quietpatch: stopping every shard")
	c.mu.Lock()
	for i, sl := range c.shards {
		if sl.phase != leaving {
			c.leaveLocked(i, sl, "stopping")
		}
	}
	c.mu.Unlock()
	c.wg.Wait() // every shard, those given up just before too, is quiesced and vacated
	stopGroup()
	<-groupDone // the group left (coordinate reported its failure, if any)
	c.log.Info("quietpatch: stopped", slog.Any("error", err))
	return err
}

// coordinate applies the plan until ctx ends or a part fails.
func (c *Coordinator[P]) coordinate(ctx context.Context, groupDone chan error) error {
	for {
		// Plan once the group listed twice: one RetryPeriod for the
		// replicas started with this one to show up.
		if c.group.listed() >= 2 {
			if err := c.step(ctx); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-groupDone:
			groupDone <- err
			if err == nil {
				err = errors.New("stopped unexpectedly")
			}
			return fmt.Errorf("quietpatch: shard group: %w", err)
		case <-c.group.changed:
		case <-c.cfg.Lease.Clock.After(c.cfg.Lease.RetryPeriod):
		}
	}
}

// step notes what each shard's pipeline did since the last step, then
// applies the plan to the view as this replica knows it: its own claims
// first.
func (c *Coordinator[P]) step(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, me := c.group.view(), c.cfg.Lease.Identity
	for i, sl := range c.shards {
		switch {
		case sl.phase == leaving:
			// Until the view no longer names us — the vacate landed and a
			// list saw it, or the claim ran out — the shard is on its way
			// to be free, not ours: seen as held, it would make this
			// replica a donor once more, and it must not run twice here.
			if sl.stopped() && v.Holders[i] != me {
				delete(c.shards, i)
			}
		case sl.stopped(): // on its own
			delete(c.shards, i)
			if sl.err != nil {
				return fmt.Errorf("quietpatch: %s: %w", c.ranges[i], sl.err)
			}
		default:
			c.noticeLocked(i, sl, v)
		}
	}
	known := View{Members: v.Members, Holders: slices.Clone(v.Holders)} // our own claimers know best
	var mine []int
	for i, sl := range c.shards {
		switch {
		case sl.phase == held:
			known.Holders[i] = me
		case sl.phase == leaving && known.Holders[i] == me:
			known.Holders[i] = ""
		}
		if sl.phase != leaving {
			mine = append(mine, i)
		}
	}
	slices.Sort(mine)
	take, stop := Plan(me, known, mine)
	for _, i := range stop {
		reason := "rebalance: another replica holds fewer than its share"
		if h := known.Holders[i]; h != "" && h != me {
			reason = "held by " + h
		}
		if sl := c.shards[i]; sl.phase == held {
			c.log.Info("quietpatch: giving up shard", slog.Int("shard", i), slog.String("reason", reason), slog.Int("replicas", len(v.Members)))
		} else {
			c.log.Debug("quietpatch: no longer competing for shard", slog.Int("shard", i), slog.String("reason", reason))
		}
		c.leaveLocked(i, c.shards[i], reason)
	}
	for _, i := range take {
		if _, running := c.shards[i]; running { // leaving
			continue
		}
		if err := c.startLocked(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// noticeLocked notes a shard acquired or lost since the last step.
func (c *Coordinator[P]) noticeLocked(i int, sl *slot[P], v View) {
	claim := sl.p.Claim()
	switch leading := claim.IsCurrentFor(c.cfg.Lease.Identity, c.cfg.Lease.Clock.Now()); {
	case leading && sl.phase == competing:
		sl.phase = held
		c.moves.Add(movedAcquired)
		c.log.Info("quietpatch: shard acquired", slog.Int("shard", i), slog.Int64("epoch", claim.Epoch),
			slog.Duration("after", c.cfg.Lease.Clock.Since(sl.since)))
	case !leading && sl.phase == held:
		sl.phase = competing
		c.moves.Add(movedLost)
		c.log.Info("quietpatch: shard lost", slog.Int("shard", i), slog.String("holder", v.Holders[i]))
	}
}

// leads reports whether the claim of p's shard is ours now.
func (c *Coordinator[P]) leads(p P) bool {
	return p.Claim().IsCurrentFor(c.cfg.Lease.Identity, c.cfg.Lease.Clock.Now())
}

// leaveLocked gives shard i up: its pipeline stops in its safe order.
func (c *Coordinator[P]) leaveLocked(i int, sl *slot[P], reason string) {
	if sl.phase == held || c.leads(sl.p) {
		c.moves.Add(movedGivenUp) // on purpose: a rebalance, or stopping
	}
	sl.phase, sl.reason = leaving, reason
	sl.cancel()
}

// startLocked starts shard i's pipeline, which competes for the shard's
// Lease once its cache synced.
func (c *Coordinator[P]) startLocked(ctx context.Context, i int) error {
	r := c.ranges[i]
	lw := ListWatch(c.lw, r, func() {
		if c.told.CompareAndSwap(false, true) {
			c.log.Warn("quietpatch: the API server does not filter by ShardSelector (feature gate ShardedListAndWatch off, or an older server): filtering each shard client-side, every shard's cache lists and watches the whole resource",
				slog.Int("shard", i))
		}
	})
	lease := c.cfg.Lease
	lease.Name = c.group.shardLease(i)
	lease.Logger = c.cfg.Lease.Logger.With(slog.Int("shard", i))
	p, err := c.build(i, lease, leases.Checked{LeasesGetter: c.cfg.Leases, Seen: c.group.seen}, lw)
	if err != nil {
		return fmt.Errorf("quietpatch: building %s: %w", r, err)
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	sl := &slot[P]{p: p, since: c.cfg.Lease.Clock.Now(), cancel: cancel, done: make(chan struct{})}
	c.shards[i] = sl
	c.log.Info("quietpatch: competing for shard", slog.Int("shard", i), slog.String("lease", lease.Name), slog.String("selector", r.Selector()))
	c.wg.Go(func() {
		err := p.Run(sctx)
		if sctx.Err() != nil {
			err = nil
		} else if err == nil {
			err = errors.New("stopped unexpectedly")
		}
		c.mu.Lock()
		sl.err = err
		reason := sl.reason
		c.mu.Unlock()
		if err != nil {
			reason = err.Error()
		}
		c.log.Info("quietpatch: shard stopped", slog.Int("shard", i), slog.String("reason", reason))
		close(sl.done)
	})
	return nil
}

func (sl *slot[P]) stopped() bool {
	select {
	case <-sl.done:
		return true
	default:
		return false
	}
}
