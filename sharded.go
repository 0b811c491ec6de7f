package quietpatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/shard"
	"github.com/quietpatch/quietpatch/statuspatch/source"
)

// Sharded keeps the status of the objects of one resource up to date from
// several replicas: the UIDs' hash space is split into Config.Shards
// shards, and each replica runs, for each shard it holds, the pipeline of
// a [Controller] — its own informer on the shard's range (the server's
// sharded list and watch, or client-side filtering), its own Lease,
// claimer, queue, reconciler and dispatcher. Build it with [NewSharded]. All
// methods are safe for concurrent use.
type Sharded[O, S, P any] struct {
	cfg     Config
	lw      cache.ListerWatcher
	comp    statuspatch.StatusComputer[O, S, P]
	patcher statuspatch.Patcher[P]
	ranges  []shard.Range
	group   *leader.Group
	log     *slog.Logger
	synced  []cache.InformerSynced
	in      shardInstruments

	single *Controller[O, S, P] // Shards == 1
	inf1   cache.SharedIndexInformer

	mu      sync.Mutex
	slots   map[int]*slot[O, S, P]
	leaving map[int]chan struct{} // shards given up whose pipeline has not stopped, or the view still names us
	wg      sync.WaitGroup        // the goroutines finishing those
	started atomic.Bool
	running atomic.Bool
	moves   [3]atomic.Int64 // acquired, given up, lost
	told    atomic.Bool     // logged that the server does not filter
}

// slot is one shard this replica runs: its cache and its pipeline.
type slot[O, S, P any] struct {
	r       shard.Range
	objects *atomic.Int64 // in inf's cache, counted by a handler: no list per scrape
	ctrl    *Controller[O, S, P]
	cancel  context.CancelFunc
	done    chan struct{}
	err     error // Run's, once done is closed
	meter   *trackedMeter
	held    bool // leading, as last seen by the coordinator
	since   time.Time
}

// ShardedStats is a snapshot of a [Sharded]'s state.
type ShardedStats struct {
	// Shards is K; Members the replicas alive as this one sees them.
	Shards  int
	Members []string
	// Held lists the shards this replica leads; Running those it runs
	// (leading or competing for).
	Held, Running []int
	// Acquired, GivenUp and Lost count shard moves of this replica.
	Acquired, GivenUp, Lost int64
	// Objects is the number of objects in the caches of the shards run.
	Objects int64
	// Unfiltered is true once the API server returned an object outside
	// the range asked for (it does not honour ShardSelector): each shard's
	// cache is then filtered client-side.
	Unfiltered bool
	// PerShard has the Stats of each shard run, by shard index.
	PerShard map[int]Stats
}

// NewSharded builds a [Sharded] for the objects lw lists and watches, whose
// status comp computes and patcher writes, and starts nothing.
// Config.Shards is the shard count K; with K = 0 or 1 it runs exactly the
// pipeline [New] builds, on one informer over lw. With K > 1 it needs
// Config.Leases and Config.Lease (not an Observer): shard i's Lease is
// named <Lease.Name>-shard-<i>-of-<K>, each replica keeps a membership
// Lease <Lease.Name>-member-<hash>, and Lease's durations apply to all.
//
// lw is the resource's ListerWatcher, for example
// cache.NewListWatchFromClient(client.RESTClient(), "httproutes", "", fields.Everything()),
// or a cache.ListWatch with ListWithContextFunc and WatchFuncWithContext;
// O must be the pointer type of its objects (*gatewayv1.HTTPRoute). NewSharded
// adds the shard selector to its options and filters what comes back.
// Dependencies are full caches, shared by all shards: their events reach
// the shards held.
func NewSharded[O, S, P any](lw cache.ListerWatcher, comp statuspatch.StatusComputer[O, S, P], patcher statuspatch.Patcher[P], cfg Config) (*Sharded[O, S, P], error) {
	if lw == nil {
		return nil, &ConfigError{Field: "ListerWatcher", Reason: "must not be nil"}
	}
	var zero O
	if _, ok := any(zero).(runtime.Object); !ok {
		return nil, &ConfigError{Field: "O", Reason: fmt.Sprintf("must be the runtime.Object pointer type of the resource, got %T", zero)}
	}
	if cfg.Shards < 0 {
		return nil, &ConfigError{Field: "Shards", Reason: fmt.Sprintf("must be between 0 and %d, got %d", shard.MaxShards, cfg.Shards)}
	}
	k := max(cfg.Shards, 1)
	s := &Sharded[O, S, P]{lw: lw, comp: comp, patcher: patcher, slots: map[int]*slot[O, S, P]{}, leaving: map[int]chan struct{}{}}
	if k == 1 {
		cfg.Shards = 0
		s.inf1 = s.informer(lw)
		ctrl, err := New(source.Informer[O](s.inf1), comp, patcher, cfg)
		if err != nil {
			return nil, err
		}
		s.single, s.cfg, s.log = ctrl, ctrl.cfg, ctrl.log
		s.ranges, _ = shard.Split(1)
		return s, nil
	}
	if cfg.Observer != nil {
		return nil, &ConfigError{Field: "Observer", Reason: "cannot be used with Shards > 1: each shard has its own Lease and claimer (set Leases and Lease)"}
	}
	var err error
	if s.ranges, err = shard.Split(k); err != nil {
		return nil, &ConfigError{Field: "Shards", Reason: fmt.Sprintf("must be between 0 and %d, got %d", shard.MaxShards, cfg.Shards)}
	}
	cfg.Shards = 0 // each shard's pipeline is unsharded
	if s.cfg, err = cfg.complete(); err != nil {
		return nil, err
	}
	s.cfg.Shards = k
	if _, err := statuspatch.NewPatchQueue[types.NamespacedName](s.cfg.Options); err != nil {
		return nil, err // the Options' own checks, once, before any shard runs
	}
	gcfg := s.cfg.Lease
	if s.group, err = leader.NewGroup(s.cfg.Leases, gcfg, k); err != nil {
		return nil, prefix("Lease.", err)
	}
	if err := statuspatch.CheckFieldManager(patcher, statuspatch.WriteClaim{Identity: gcfg.Identity, LeaseNamespace: gcfg.Namespace, LeaseName: s.group.ShardLease(k - 1)}); err != nil {
		return nil, err // the longest shard Lease name
	}
	s.log = s.cfg.Logger.With(slog.String("pipeline", s.cfg.Name))
	for i, d := range s.cfg.Dependencies {
		if d.Informer == nil {
			return nil, &ConfigError{Field: fmt.Sprintf("Dependencies[%d].Informer", i), Reason: "must not be nil"}
		}
		s.synced = append(s.synced, d.Informer.HasSynced)
		if _, err := d.Informer.AddEventHandler(dependencyHandler(d.Keys, s.Enqueue, s.resync)); err != nil {
			return nil, fmt.Errorf("quietpatch: registering the event handler of Dependencies[%d]: %w", i, err)
		}
	}
	if err := s.in.init(s.cfg.Meter, s.cfg.Name, s.group.Identity(), s.Stats); err != nil {
		return nil, err
	}
	return s, nil
}

// informer is the cache of one shard (or of everything, for K = 1).
func (s *Sharded[O, S, P]) informer(lw cache.ListerWatcher) cache.SharedIndexInformer {
	var zero O
	return cache.NewSharedIndexInformer(lw, any(zero).(runtime.Object), 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

// Run runs until ctx is cancelled, then stops every shard's pipeline —
// each in [Controller.Run]'s safe order, so each held shard is quiesced and
// vacated — leaves the group and returns nil; or until a part fails (a
// shard's pipeline, the group's Lease calls), then stops and returns that
// failure. A second call returns [ErrAlreadyStarted].
//
// It waits for the dependencies' caches (at most SyncTimeout), joins the
// group, and — once the group has listed the Leases twice, so that
// replicas started together see each other before any takes a shard —
// every RetryPeriod (or when the group's view changes) applies
// [leader.Plan]: starts a shard's informer and pipeline — which competes
// for the shard's Lease only once that informer synced — and stops those
// to give up. The informers are its own: it stops them after their
// pipelines. Stop the dependencies' informers after Run returned.
func (s *Sharded[O, S, P]) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return ErrAlreadyStarted
	}
	if s.single != nil {
		ictx, stop := context.WithCancel(context.WithoutCancel(ctx))
		var wg sync.WaitGroup
		defer wg.Wait()
		defer stop() // after the pipeline that reads it
		wg.Go(func() { s.inf1.RunWithContext(ictx) })
		return s.single.Run(ctx)
	}
	if err := waitSynced(ctx, s.log, s.cfg.SyncTimeout, s.synced, "the dependencies' caches"); err != nil || ctx.Err() != nil {
		return err
	}
	s.log.Info("quietpatch: joining the shard group", slog.Int("shards", len(s.ranges)), slog.String("identity", s.group.Identity()))
	gctx, stopGroup := context.WithCancel(context.WithoutCancel(ctx))
	groupDone := make(chan error, 1)
	go func() { groupDone <- s.group.Run(gctx) }()
	s.running.Store(true)

	err := s.coordinate(ctx, groupDone)

	s.running.Store(false)
	s.log.Info("quietpatch: stopping every shard")
	s.mu.Lock()
	all := make([]*slot[O, S, P], 0, len(s.slots))
	for i, sl := range s.slots {
		all = append(all, sl)
		if sl.held || sl.ctrl.Stats().Leading {
			s.moves[1].Add(1) // given up on purpose: stopping
		}
		delete(s.slots, i)
	}
	s.mu.Unlock()
	for _, sl := range all {
		sl.cancel()
	}
	for _, sl := range all {
		<-sl.done
		s.remove(sl, "stopping")
	}
	s.wg.Wait() // the shards given up just before: they vacate too
	stopGroup()
	if gerr := <-groupDone; err == nil && gerr != nil && ctx.Err() == nil {
		err = gerr
	}
	s.log.Info("quietpatch: stopped", slog.Any("error", err))
	return err
}

// coordinate applies the plan until ctx ends or a part fails.
func (s *Sharded[O, S, P]) coordinate(ctx context.Context, groupDone chan error) error {
	period := s.cfg.Lease.RetryPeriod
	if period == 0 {
		period = leader.DefaultRetryPeriod
	}
	for {
		// Plan once the group listed twice: one RetryPeriod for the
		// replicas started with this one to show up.
		if s.group.Lists() >= 2 {
			if err := s.step(ctx); err != nil {
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
		case <-s.group.Changed():
		case <-s.cfg.Clock.After(period):
		}
	}
}

// step reaps finished shards, notes claims gained and lost, and applies
// the plan.
func (s *Sharded[O, S, P]) step(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.group.View()
	me := s.group.Identity()
	for i, done := range s.leaving {
		// Given up: until the group's view no longer names us — the vacate
		// landed and a list saw it, or the claim ran out — the shard is on
		// its way to be free, not ours. Seen as held, it would make this
		// replica a donor once more; and it must not run twice here.
		select {
		case <-done:
			if v.Holders[i] != me {
				delete(s.leaving, i)
				continue
			}
		default:
		}
		if v.Holders[i] == me {
			v.Holders[i] = ""
		}
	}
	var mine []int
	for i, sl := range s.slots {
		select {
		case <-sl.done:
			delete(s.slots, i)
			if sl.err != nil {
				return fmt.Errorf("quietpatch: %s: %w", sl.r, sl.err)
			}
			continue
		default:
		}
		leading := sl.ctrl.Stats().Leading
		switch {
		case leading && !sl.held:
			s.moves[0].Add(1)
			s.log.Info("quietpatch: shard acquired", slog.Int("shard", i), slog.Int64("epoch", sl.ctrl.Stats().Claim.Epoch),
				slog.Duration("after", s.cfg.Clock.Since(sl.since)))
		case !leading && sl.held:
			s.moves[2].Add(1)
			s.log.Info("quietpatch: shard lost", slog.Int("shard", i), slog.String("holder", v.Holders[i]))
		}
		sl.held = leading
		if leading {
			v.Holders[i] = me // our own claimer knows best
		}
		mine = append(mine, i)
	}
	slices.Sort(mine)
	take, stop := leader.Plan(me, v, mine)
	take = slices.DeleteFunc(take, func(i int) bool { _, ok := s.leaving[i]; return ok })
	for _, i := range stop {
		sl := s.slots[i]
		reason := "rebalance: another replica holds fewer than its share"
		if h := v.Holders[i]; h != "" && h != me {
			reason = "held by " + h
		}
		if sl.held {
			s.moves[1].Add(1)
			s.log.Info("quietpatch: giving up shard", slog.Int("shard", i), slog.String("reason", reason),
				slog.Int("replicas", len(v.Members)))
		} else {
			s.log.Debug("quietpatch: no longer competing for shard", slog.Int("shard", i), slog.String("reason", reason))
		}
		sl.cancel()
		delete(s.slots, i)
		s.leaving[i] = sl.done
		s.wg.Go(func() { <-sl.done; s.remove(sl, reason) })
	}
	for _, i := range take {
		if err := s.startLocked(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// startLocked starts shard i's informer and pipeline.
func (s *Sharded[O, S, P]) startLocked(ctx context.Context, i int) error {
	r := s.ranges[i]
	inf := s.informer(shard.ListWatch(s.lw, r, func() {
		if s.told.CompareAndSwap(false, true) {
			s.log.Warn("quietpatch: the API server does not filter by ShardSelector (feature gate ShardedListAndWatch off, or an older server): filtering each shard client-side, every shard's cache lists and watches the whole resource",
				slog.Int("shard", i))
		}
	}))
	cfg := s.cfg
	cfg.Shards, cfg.Dependencies = 0, nil
	cfg.Lease.Name = s.group.ShardLease(i)
	cfg.Leases = checkedLeases{s.cfg.Leases} // the group warned about its limiter
	cfg.Lease.Seen = s.group.Seen
	cfg.Lease.Logger = s.cfg.Logger.With(slog.Int("shard", i))
	cfg.Logger = cfg.Lease.Logger
	var tm *trackedMeter
	if s.cfg.Meter != nil {
		tm = newTrackedMeter(s.cfg.Meter, i)
		cfg.Meter, cfg.Lease.Meter = tm, tm
	}
	ctrl, err := New(source.Informer[O](inf), s.comp, s.patcher, cfg)
	if err != nil {
		return fmt.Errorf("quietpatch: building %s: %w", r, err)
	}
	objects := new(atomic.Int64)
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { objects.Add(1) },
		DeleteFunc: func(any) { objects.Add(-1) },
	}); err != nil {
		return fmt.Errorf("quietpatch: counting the objects of %s: %w", r, err)
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	sl := &slot[O, S, P]{r: r, objects: objects, ctrl: ctrl, cancel: cancel, done: make(chan struct{}), meter: tm, since: s.cfg.Clock.Now()}
	s.slots[i] = sl
	s.log.Info("quietpatch: competing for shard", slog.Int("shard", i), slog.String("lease", cfg.Lease.Name), slog.String("selector", r.Selector()))
	ictx, stopInf := context.WithCancel(context.WithoutCancel(ctx))
	infDone := make(chan struct{})
	go func() { defer close(infDone); inf.RunWithContext(ictx) }()
	go func() {
		defer close(sl.done)
		defer func() { stopInf(); <-infDone }() // after the pipeline that reads it
		sl.err = ctrl.Run(sctx)
		if sctx.Err() != nil {
			sl.err = nil
		} else if sl.err == nil {
			sl.err = errors.New("stopped unexpectedly")
		}
	}()
	return nil
}

// checkedLeases is the Lease client of the shards' claimers: the group
// checked it already, and logged what there was to say.
type checkedLeases struct {
	coordinationv1client.LeasesGetter
}

// remove finishes a stopped shard: its instruments go.
func (s *Sharded[O, S, P]) remove(sl *slot[O, S, P], reason string) {
	if sl.meter != nil {
		sl.meter.unregister()
	}
	s.log.Info("quietpatch: shard stopped", slog.Int("shard", sl.r.Index), slog.String("reason", reason))
}

// each calls f with every shard's pipeline this replica runs.
func (s *Sharded[O, S, P]) each(f func(i int, c *Controller[O, S, P])) {
	if s.single != nil {
		f(0, s.single)
		return
	}
	s.mu.Lock()
	ctrls := make(map[int]*Controller[O, S, P], len(s.slots))
	for i, sl := range s.slots {
		ctrls[i] = sl.ctrl
	}
	s.mu.Unlock()
	for i, c := range ctrls {
		f(i, c)
	}
}

// Enqueue asks for the objects with keys to be reconciled soon by the
// shards of this replica that hold them ([Controller.Enqueue]'s rules);
// keys of objects in no shard held here are ignored — their shard's holder
// hears the same events.
func (s *Sharded[O, S, P]) Enqueue(keys ...types.NamespacedName) {
	s.each(func(_ int, c *Controller[O, S, P]) {
		if s.single != nil {
			c.Enqueue(keys...)
			return
		}
		var ks []types.NamespacedName
		for _, k := range keys {
			if _, ok, _ := c.src.Get(k); ok {
				ks = append(ks, k)
			}
		}
		if len(ks) > 0 {
			c.Enqueue(ks...)
		}
	})
}

// resync makes a pass in every shard this replica leads.
func (s *Sharded[O, S, P]) resync() {
	s.each(func(_ int, c *Controller[O, S, P]) {
		if c.Stats().Leading {
			c.reconciler.Resync()
		}
	})
}

// Ready reports whether this replica is ready, holding shards or not: nil
// while Run runs and the group's Lease calls and every shard's parts are
// healthy (a shard whose cache is syncing counts as healthy).
func (s *Sharded[O, S, P]) Ready() error {
	if s.single != nil {
		return s.single.Ready()
	}
	if !s.running.Load() {
		return ErrNotSynced
	}
	errs := []error{}
	if err := s.group.Healthy(); err != nil {
		errs = append(errs, fmt.Errorf("shard group: %w", err))
	}
	s.each(func(i int, c *Controller[O, S, P]) {
		if err := c.Ready(); err != nil && !errors.Is(err, ErrNotSynced) {
			errs = append(errs, fmt.Errorf("shard %d: %w", i, err))
		}
	})
	return errors.Join(errs...)
}

// Live reports whether the process should be restarted: a patch call of a
// shard stuck for more than twice PatchTimeout ([Controller.Live]).
func (s *Sharded[O, S, P]) Live() error {
	var errs []error
	s.each(func(i int, c *Controller[O, S, P]) {
		if err := c.Live(); err != nil {
			errs = append(errs, fmt.Errorf("shard %d: %w", i, err))
		}
	})
	return errors.Join(errs...)
}

// ReadyCheck is Ready with the signature of a probe check.
func (s *Sharded[O, S, P]) ReadyCheck(*http.Request) error { return s.Ready() }

// LiveCheck is Live with the signature of a probe check.
func (s *Sharded[O, S, P]) LiveCheck(*http.Request) error { return s.Live() }

// Identity returns this replica's holder identity.
func (s *Sharded[O, S, P]) Identity() string {
	if s.single != nil {
		return s.single.Identity()
	}
	return s.group.Identity()
}

// Stats returns a snapshot: shards held and run, moves, each shard's Stats.
func (s *Sharded[O, S, P]) Stats() ShardedStats {
	st := ShardedStats{Shards: len(s.ranges), PerShard: map[int]Stats{},
		Acquired: s.moves[0].Load(), GivenUp: s.moves[1].Load(), Lost: s.moves[2].Load(), Unfiltered: s.told.Load()}
	if s.group != nil {
		st.Members = s.group.View().Members
	} else {
		st.Members = []string{s.Identity()}
	}
	if s.single != nil {
		st.Objects = int64(len(s.inf1.GetStore().ListKeys()))
	} else {
		s.mu.Lock()
		for _, sl := range s.slots {
			st.Objects += sl.objects.Load()
		}
		s.mu.Unlock()
	}
	s.each(func(i int, c *Controller[O, S, P]) {
		cs := c.Stats()
		st.PerShard[i] = cs
		st.Running = append(st.Running, i)
		if cs.Leading {
			st.Held = append(st.Held, i)
		}
	})
	slices.Sort(st.Running)
	slices.Sort(st.Held)
	return st
}

// trackedMeter is a shard's Meter: every measurement of the shard's parts
// carries the shard attribute (the pipeline attribute stays Config.Name),
// and the callbacks they register are unregistered when the shard stops,
// so a shard run again reports once.
type trackedMeter struct {
	metric.Meter
	shard metric.MeasurementOption
	mu    sync.Mutex
	regs  []metric.Registration
}

func newTrackedMeter(m metric.Meter, i int) *trackedMeter {
	return &trackedMeter{Meter: m, shard: metric.WithAttributes(attribute.Int("shard", i))}
}

func (m *trackedMeter) RegisterCallback(f metric.Callback, insts ...metric.Observable) (metric.Registration, error) {
	r, err := m.Meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		return f(ctx, shardObserver{Observer: o, shard: m.shard})
	}, insts...)
	if err == nil {
		m.mu.Lock()
		m.regs = append(m.regs, r)
		m.mu.Unlock()
	}
	return r, err
}

func (m *trackedMeter) Float64Histogram(name string, opts ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	h, err := m.Meter.Float64Histogram(name, opts...)
	if err != nil {
		return h, err
	}
	return shardHistogram{Float64Histogram: h, shard: m.shard}, nil
}

func (m *trackedMeter) unregister() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.regs {
		_ = r.Unregister()
	}
	m.regs = nil
}

// shardObserver adds the shard attribute to every observation.
type shardObserver struct {
	metric.Observer
	shard metric.MeasurementOption
}

func (o shardObserver) ObserveFloat64(obs metric.Float64Observable, v float64, opts ...metric.ObserveOption) {
	o.Observer.ObserveFloat64(obs, v, append(opts[:len(opts):len(opts)], o.shard)...)
}

func (o shardObserver) ObserveInt64(obs metric.Int64Observable, v int64, opts ...metric.ObserveOption) {
	o.Observer.ObserveInt64(obs, v, append(opts[:len(opts):len(opts)], o.shard)...)
}

// shardHistogram adds the shard attribute to every recording.
type shardHistogram struct {
	metric.Float64Histogram
	shard metric.MeasurementOption
}

func (h shardHistogram) Record(ctx context.Context, v float64, opts ...metric.RecordOption) {
	h.Float64Histogram.Record(ctx, v, append(opts[:len(opts):len(opts)], h.shard)...)
}
