package statuspatch

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// Reasons a key is served without a call: the keys of
// DispatcherStats.Dropped and the values of the reason attribute of
// quietpatch.dispatch.dropped.
const (
	dropUnchanged   = "unchanged"    // the status was right by then
	dropDeleted     = "deleted"      // the Source no longer has the object
	dropError       = "error"        // the Source or the StatusComputer failed
	dropNotLeader   = "not_leader"   // the claim was not current for us, or ended
	dropStaleEpoch  = "stale_epoch"  // calls were made under a newer epoch already
	dropClaimEnding = "claim_ending" // less than the claim margin was left
	dropReleased    = "released"     // the claim was being given up on purpose
	dropShutdown    = "shutdown"     // the dispatcher stopped first
)

var dropReasons = []string{dropUnchanged, dropDeleted, dropError, dropNotLeader, dropStaleEpoch, dropClaimEnding, dropReleased, dropShutdown}

// DispatcherStats are a dispatcher's counters, and the state of its in-flight
// limit and Retry-After window.
type DispatcherStats struct {
	// Patches counts patch calls by outcome; Dropped keys served without
	// a call, by reason: unchanged (the status was right by then: every
	// event of our own writes ends so), deleted, error (the Source or the
	// StatusComputer failed), not_leader, stale_epoch (calls were made
	// under a newer epoch), claim_ending (less than the claim margin
	// left), released (the claim was being given up), shutdown.
	Patches map[outcome.Outcome]int64
	Dropped map[string]int64
	// Echoes counts the events of our own writes dropped without a serve
	// ([Dispatcher.Echo]); with a [VersionPatcher] they no longer count as
	// Dropped unchanged.
	Echoes int64
	// InFlight is the number of calls in progress; Unanswered counts calls
	// that ended without an answer from the API server (such a write may
	// still land).
	InFlight   int
	Unanswered int64
	// Limit is the in-flight limit now, Latency its latency estimate,
	// DrainRate = Limit / Latency in patches per second (0 before the first
	// call), Backoff what is left of a Retry-After window, RetryAfters the
	// windows honoured.
	Limit       int
	Latency     time.Duration
	DrainRate   float64
	Backoff     time.Duration
	RetryAfters int64
}

// Dispatcher takes keys from the queue, leader or not, and for each builds
// and sends the patch the object needs now: it reads the claim, gets the
// object from the Source, computes its desired status (a key whose status
// is already right is dropped, unchanged), builds the patch and calls the
// Patcher, at the moment the in-flight limit, the claim and any Retry-After
// window allow. A patch is never older than the cache nor built without a
// call ready to carry it. Workers call the StatusComputer concurrently,
// never for one key twice at once.
//
// Every call is scoped to our claim: it starts only while the claim is
// current, of the epoch the patch was computed under, with at least the
// claim margin left; its deadline is min(PatchTimeout, claim left), and it
// is cancelled the moment the claim ends involuntarily. When the claim is
// given up on purpose ([Dispatcher.Quiesce]) no call starts and the calls
// in flight run to their answer. A failed patch is not retried: the next
// pass finds the object still changed. See package quietpatch for what
// this does and does not guarantee about writes that land late.
//
// Build one with [NewDispatcher]; Run it once.
type Dispatcher[O, S, P any] struct {
	queue   *PatchQueue[types.NamespacedName]
	src     Source[O]
	comp    StatusComputer[O, S, P]
	patcher Patcher[P]
	leader  leader.Observer
	writer  WriteClaim // without the epoch
	opts    Options
	gate    gate   // calls in flight, sized by ctl
	window  window // Retry-After windows
	fence   fence  // calls scoped to the claim
	mu      sync.Mutex
	ctl     control // the in-flight limit and the latency estimate; guarded by mu
	inst    *dispatchInstruments
	life    outcome.Lifecycle

	echoes     echoes // our writes' versions, until their events (Echo)
	patches    outcome.Counters[outcome.Outcome]
	dropped    outcome.Counters[string] // by reason (dropReasons)
	echoed     atomic.Int64             // events found to be our writes' echoes
	unanswered atomic.Int64
	lastWarn   map[outcome.Outcome]*atomic.Int64 // unix nanos of the last warning, by outcome
}

// NewDispatcher returns a dispatcher of q's keys, whose objects it gets
// from src and whose patches comp builds and patcher sends while l says
// we lead; it reads Workers, MaxInFlight, PatchTimeout, ClaimMargin,
// DiffOptions, Name, Logger, Meter and Clock of opts. If l has an
// AddWriter(leader.Writer) func() method, as *leader.Claimer does, the
// dispatcher registers itself so that the claimer quiesces it before it
// gives the Lease up. Every call's context carries the [WriteClaim]: l's
// Identity, the Lease if l has a Config() leader.Config method (as
// *leader.Claimer has), and the epoch of the claim; a patcher that names
// the writer in its field manager and cannot (see [CheckFieldManager]) is
// rejected here, with a *outcome.ConfigError.
func NewDispatcher[O, S, P any](q *PatchQueue[types.NamespacedName], src Source[O], comp StatusComputer[O, S, P], patcher Patcher[P], l leader.Observer, opts Options) (*Dispatcher[O, S, P], error) {
	if err := checkParts(src, comp, q, l); err != nil {
		return nil, err
	}
	if patcher == nil {
		return nil, &outcome.ConfigError{Field: "Patcher", Reason: "must not be nil"}
	}
	writer := WriteClaim{Identity: l.Identity()}
	if c, ok := l.(interface{ Config() leader.Config }); ok {
		writer.LeaseNamespace, writer.LeaseName = c.Config().Namespace, c.Config().Name
	}
	if err := CheckFieldManager(patcher, writer); err != nil {
		return nil, err
	}
	opts, err := opts.complete()
	if err != nil {
		return nil, err
	}
	size := opts.Workers
	if size == 0 {
		size = opts.MaxInFlight
	}
	d := &Dispatcher[O, S, P]{queue: q, src: src, comp: comp, patcher: patcher, leader: l, writer: writer, opts: opts,
		ctl:     newControl(opts.Clock.Now(), opts.Workers == 0, size),
		patches: outcome.NewCounters(outcome.All()...), dropped: outcome.NewCounters(dropReasons...), lastWarn: map[outcome.Outcome]*atomic.Int64{}}
	for _, o := range []outcome.Outcome{outcome.Forbidden, outcome.Unauthorized, outcome.Invalid, outcome.Abandoned, outcome.Timeout, outcome.Error} {
		d.lastWarn[o] = new(atomic.Int64) // the outcomes warned about, at most once a minute each
	}
	d.gate.setSize(d.ctl.size())
	if d.inst, err = newDispatchInstruments(opts, d.Stats); err != nil {
		return nil, err
	}
	if w, ok := l.(interface {
		AddWriter(leader.Writer) (remove func())
	}); ok {
		w.AddWriter(d)
	}
	return d, nil
}

// Run serves the queue until ctx ends or the queue is closed and drained,
// and returns nil; a second call returns outcome.ErrAlreadyStarted. On
// ctx's end no new call starts, the calls in flight run to their answer
// (at most twice PatchTimeout is waited for a Patcher that ignores its
// context), and the keys still queued are dropped (reason shutdown).
func (d *Dispatcher[O, S, P]) Run(ctx context.Context) error {
	if err := d.life.Start(); err != nil {
		return err
	}
	changes, unsubscribe := d.leader.Subscribe()
	stopWatch, watchDone := make(chan struct{}), make(chan struct{})
	go func() { // ends the calls of a claim that ends
		defer close(watchDone)
		for {
			select {
			case _, ok := <-changes:
				if !ok {
					return
				}
				d.fence.observe(d.claim)
			case <-stopWatch: // an Observer need not close the channel
				return
			}
		}
	}()
	var calls sync.WaitGroup
	reason := "queue closed and drained"
	for {
		if d.gate.acquire(ctx) != nil {
			break
		}
		// A permit held, no key is taken inside a Retry-After window.
		if d.window.wait(ctx, d.opts.Clock) != nil {
			d.gate.release()
			break
		}
		key, err := d.queue.Get(ctx)
		if err != nil || ctx.Err() != nil {
			if err == nil {
				d.drop(key, dropShutdown, nil)
				d.queue.Done(key)
			}
			d.gate.release()
			break
		}
		calls.Go(func() {
			defer d.queue.Done(key)
			d.serve(ctx, key)
		})
	}
	if ctx.Err() != nil {
		reason = "context cancelled"
		d.waitCalls(&calls)
		d.dropQueued()
	} else {
		calls.Wait()
	}
	unsubscribe()
	close(stopWatch)
	<-watchDone
	stopped(&d.life, "dispatcher", reason)
	d.opts.Logger.Info("statuspatch: dispatcher stopped", slog.String("reason", reason))
	return nil
}

// waitCalls waits for the calls in flight, at most twice PatchTimeout.
func (d *Dispatcher[O, S, P]) waitCalls(calls *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { calls.Wait(); close(done) }()
	t := time.NewTimer(2 * d.opts.PatchTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		d.opts.Logger.Error("statuspatch: dispatcher stopping without a patch call that did not return within twice PatchTimeout: the Patcher ignores its context",
			slog.Duration("patch_timeout", d.opts.PatchTimeout))
	}
}

// dropQueued drops the keys left in the queue, without waiting.
func (d *Dispatcher[O, S, P]) dropQueued() {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for {
		key, err := d.queue.Get(done)
		if err != nil {
			return
		}
		d.drop(key, dropShutdown, nil)
		d.queue.Done(key)
	}
}

// Quiesce implements [leader.Writer]: from now on no call starts under
// epoch (keys served are dropped, reason released); the calls in flight
// are not cancelled. It waits until none is in flight, or ctx ends, and
// reports whether every call made under epoch got an answer that settles
// it ([outcome.Answered]).
func (d *Dispatcher[O, S, P]) Quiesce(ctx context.Context, epoch int64) bool {
	return d.fence.quiesce(ctx, epoch)
}

// Stats returns the dispatcher's counters.
func (d *Dispatcher[O, S, P]) Stats() DispatcherStats {
	now, ctl := d.opts.Clock.Now(), d.control()
	inFlight, _ := d.fence.state()
	backoff, opened := d.window.leftAt(now)
	return DispatcherStats{Patches: d.patches.Snapshot(), Dropped: d.dropped.Snapshot(), Echoes: d.echoed.Load(),
		InFlight: inFlight, Unanswered: d.unanswered.Load(), Limit: ctl.size(),
		Latency: time.Duration(ctl.latencyAt(now) * float64(time.Second)), DrainRate: ctl.drainRateAt(now),
		Backoff: backoff, RetryAfters: opened}
}

// Healthy returns nil while Run serves the queue; an error wrapping
// [ErrNotRunning] before and after; an error when a patch call has run for
// more than twice PatchTimeout (a Patcher that ignores its context).
func (d *Dispatcher[O, S, P]) Healthy() error {
	if err := healthy(&d.life); err != nil {
		return err
	}
	if _, from := d.fence.state(); from != 0 {
		if stuck := time.Duration(d.opts.Clock.Now().UnixNano() - from); stuck > 2*d.opts.PatchTimeout {
			return fmt.Errorf("statuspatch: a patch call has been stuck for %s (PatchTimeout %s): the Patcher does not return when its context ends",
				stuck, d.opts.PatchTimeout)
		}
	}
	return nil
}

// call makes one patch call, under the claim of c's epoch, and accounts
// for it.
func (d *Dispatcher[O, S, P]) call(key types.NamespacedName, c call, payload P, timeout time.Duration) {
	w := d.writer
	w.Epoch = c.ec.epoch
	ctx, cancel := context.WithTimeout(WithWriteClaim(c.ec.ctx, w), timeout)
	start := d.opts.Clock.Now()
	var (
		rv  string
		err error
	)
	vp, versioned := d.patcher.(VersionPatcher[P])
	if versioned {
		d.echoes.begin(key)
		rv, err = vp.PatchVersion(ctx, payload)
	} else {
		err = d.patcher.Patch(ctx, payload)
	}
	elapsed := d.opts.Clock.Since(start)
	if versioned {
		if err != nil {
			rv = ""
		}
		echoed, other := d.echoes.end(key, rv)
		d.echoed.Add(echoed)
		if other { // held while we wrote: served after this call (the key is held until Done)
			_ = d.queue.Add(key, LaneFresh) // full: the next pass finds it
		}
	}
	o := outcome.Of(err)
	if err != nil && ctx.Err() != nil && (o == outcome.Error || o == outcome.Canceled || o == outcome.Timeout) {
		// The call gave up because its context ended, whatever the patcher
		// wrapped that in: the claim ended (cancelled) or the deadline.
		o = outcome.Timeout
		if c.ec.ctx.Err() != nil {
			o = outcome.Canceled
		}
	}
	cancel()
	answered := outcome.Answered(err)
	if !answered {
		d.unanswered.Add(1)
	}
	d.end(c, elapsed, err, answered)
	d.patches.Add(o)
	d.inst.call(o, elapsed)
	if err == nil {
		return
	}
	level := slog.LevelDebug
	if last := d.lastWarn[o]; last != nil {
		if prev := last.Load(); start.UnixNano()-prev >= int64(time.Minute) && last.CompareAndSwap(prev, start.UnixNano()) {
			level = slog.LevelWarn
		}
	}
	d.opts.Logger.Log(context.Background(), level, "statuspatch: patch failed; not retried, the next pass recomputes it",
		slog.String("key", key.String()), slog.String("outcome", string(o)),
		slog.Duration("elapsed", elapsed), slog.Duration("deadline", timeout), slog.Any("error", err))
}
