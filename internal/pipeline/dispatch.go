package pipeline

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/internal/queue"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
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
	dropHeld        = "held"         // the cache did not hold our last write yet: served at its event
)

var dropReasons = []string{dropUnchanged, dropDeleted, dropError, dropNotLeader, dropStaleEpoch, dropClaimEnding, dropReleased, dropShutdown, dropHeld}

// DispatcherStats are a dispatcher's counters, and the state of its in-flight
// limit and Retry-After window.
type DispatcherStats struct {
	// Patches counts patch calls by outcome; Dropped keys served without
	// a call, by reason: unchanged (the status was right by then),
	// deleted, error (the Source or the StatusComputer failed), not_leader,
	// stale_epoch (calls were made under a newer epoch), claim_ending
	// (less than the claim margin left), released (the claim was being
	// given up), shutdown, held (the cache did not yet hold our own last
	// write of the key: requeued once it does, or after a second).
	Patches map[outcome.Outcome]int64
	Dropped map[string]int64
	// Echoes counts the events of our own writes dropped without a serve
	// ([Dispatcher.Echo]); with a statuspatch.VersionPatcher they no longer
	// count as Dropped unchanged.
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
// pass finds the object still changed. Its in-flight state is one value
// under one lock (flight). Build one with [NewDispatcher]; Run it once.
type Dispatcher[O, S, P any] struct {
	queue    *queue.Queue[types.NamespacedName]
	src      statuspatch.Source[O]
	comp     statuspatch.StatusComputer[O, S, P]
	patcher  statuspatch.Patcher[P]
	versions statuspatch.VersionPatcher[P] // patcher, if it reports versions; else nil
	holds    clock.WithDelayedExecution    // the clock's timers of holds; nil: no hold
	leader   Leader
	writer   statuspatch.WriteClaim // without the epoch
	opts     Options
	metrics  *Metrics
	flight   *flight
	life     base.Lifecycle

	patches  base.Counters[outcome.Outcome]
	dropped  base.Counters[string]             // by reason (dropReasons)
	lastWarn map[outcome.Outcome]*atomic.Int64 // unix nanos of the last warning, by outcome
}

// NewDispatcher returns a dispatcher of q's keys, whose objects it gets
// from src and whose patches comp builds and patcher sends while l says
// we lead. Every call's context carries the statuspatch.WriteClaim of
// l's Identity, opts.Lease and the claim's epoch; a fenced patcher (one
// with a method Fenced() bool that reports true) that cannot name that
// writer in a field manager is rejected here, with a *base.ConfigError.
// If l has an AddWriter(leader.Writer) func() method, as *leader.Claimer
// does, the dispatcher registers itself so that the claimer quiesces it
// before it gives the Lease up.
func NewDispatcher[O, S, P any](q *queue.Queue[types.NamespacedName], src statuspatch.Source[O], comp statuspatch.StatusComputer[O, S, P], patcher statuspatch.Patcher[P], l Leader, opts Options, m *Metrics) (*Dispatcher[O, S, P], error) {
	if err := checkParts(src, comp, q, l); err != nil {
		return nil, err
	}
	if patcher == nil {
		return nil, &base.ConfigError{Field: "Patcher", Reason: "must not be nil"}
	}
	writer := statuspatch.WriteClaim{Identity: l.Identity(), LeaseNamespace: opts.Lease.Namespace, LeaseName: opts.Lease.Name}
	if f, ok := patcher.(interface{ Fenced() bool }); ok && f.Fenced() {
		if _, err := statuspatch.FencedFieldManager(writer); err != nil {
			return nil, err
		}
	}
	opts, err := opts.Complete()
	if err != nil {
		return nil, err
	}
	vp, _ := patcher.(statuspatch.VersionPatcher[P])
	holds, _ := opts.Clock.(clock.WithDelayedExecution) // the real clock and client-go's fake have it
	d := &Dispatcher[O, S, P]{queue: q, src: src, comp: comp, patcher: patcher, versions: vp, holds: holds, leader: l, writer: writer, opts: opts, metrics: m,
		flight:  newFlight(newControl(opts.Clock.Now(), opts.Workers == 0, cmp.Or(opts.Workers, opts.MaxInFlight))),
		patches: base.NewCounters(base.Outcomes()...), dropped: base.NewCounters(dropReasons...), lastWarn: map[outcome.Outcome]*atomic.Int64{}}
	for _, o := range []outcome.Outcome{outcome.Forbidden, outcome.Unauthorized, outcome.Invalid, outcome.Abandoned, outcome.Timeout, outcome.Failed} {
		d.lastWarn[o] = new(atomic.Int64) // the outcomes warned about, at most once a minute each
	}
	if w, ok := l.(interface {
		AddWriter(leader.Writer) (remove func())
	}); ok {
		w.AddWriter(d)
	}
	return d, nil
}

// Run serves the queue until ctx ends or the queue is closed and drained,
// and returns nil; a second call returns base.ErrAlreadyStarted. On
// ctx's end no new call starts, no serve starts reading the Source, the
// calls in flight run to their answer (at most twice PatchTimeout is
// waited for a Patcher that ignores its context), and the keys still
// queued are dropped (reason shutdown).
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
				d.flight.observe(d.claim)
			case <-stopWatch: // an Observer need not close the channel
				return
			}
		}
	}()
	var calls sync.WaitGroup
	reason := "queue closed and drained"
	for {
		if d.flight.acquire(ctx) != nil {
			break
		}
		// A slot held, no key is taken inside a Retry-After window.
		if d.waitWindow(ctx) != nil {
			d.flight.release()
			break
		}
		key, since, err := d.queue.GetSince(ctx)
		if err != nil || ctx.Err() != nil {
			if err == nil {
				d.drop(key, dropShutdown, nil)
				d.queue.Done(key)
			}
			d.flight.release()
			break
		}
		calls.Go(func() {
			defer d.queue.Done(key)
			d.serve(ctx, key, since)
		})
	}
	if ctx.Err() != nil {
		reason = "context cancelled"
		d.waitCalls(&calls)
		d.DropQueued()
	} else {
		calls.Wait()
	}
	d.flight.stopHolds()
	unsubscribe()
	close(stopWatch)
	<-watchDone
	stopped(&d.life, "dispatcher", reason)
	d.opts.Logger.Info("statuspatch: dispatcher stopped", slog.String("reason", reason))
	return nil
}

// waitWindow returns once the clock is outside the Retry-After window —
// one that moved later meanwhile is waited out too — or with ctx's error.
func (d *Dispatcher[O, S, P]) waitWindow(ctx context.Context) error {
	for {
		left := d.flight.windowAt(d.opts.Clock.Now())
		if left <= 0 {
			return nil
		}
		t := d.opts.Clock.NewTimer(left)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
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

// DropQueued drops, reason shutdown, the keys ready in the queue, without
// waiting: Run does at its end, and the pipeline once more after it closed
// the queue.
func (d *Dispatcher[O, S, P]) DropQueued() {
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
	return d.flight.quiesce(ctx, epoch)
}

// Stats returns the dispatcher's counters.
func (d *Dispatcher[O, S, P]) Stats() DispatcherStats {
	s, _ := d.flight.statsAt(d.opts.Clock.Now())
	s.Patches, s.Dropped = d.patches.Snapshot(), d.dropped.Snapshot()
	return s
}

// Healthy returns nil while Run serves the queue; an error wrapping
// [ErrNotRunning] before and after; an error when a patch call has run for
// more than twice PatchTimeout (a Patcher that ignores its context).
func (d *Dispatcher[O, S, P]) Healthy() error {
	if err := healthy(&d.life); err != nil {
		return err
	}
	now := d.opts.Clock.Now()
	if _, oldest := d.flight.statsAt(now); !oldest.IsZero() {
		if stuck := now.Sub(oldest); stuck > 2*d.opts.PatchTimeout {
			return fmt.Errorf("statuspatch: a patch call has been stuck for %s (PatchTimeout %s): the Patcher does not return when its context ends",
				stuck, d.opts.PatchTimeout)
		}
	}
	return nil
}

// Echo reports whether an update event of the object with key — the
// StatusComputer's Key of the object —, which now has resourceVersion,
// needs no reconcile because it is the echo of the dispatcher's own write,
// as its statuspatch.VersionPatcher reported the write's version: the
// object is then exactly the one the status was computed from, with that
// status. An event that comes while a call for key is in flight is held
// (Echo reports true): when the call ends it is counted as the echo if it
// has the write's version, and the dispatcher enqueues the key (fresh
// lane) otherwise. Every call forgets the write, so that only the write's
// own event matches; a deletion calls it with "" (never an echo) to
// forget. Someone else's write always has another resourceVersion; a
// change of what the status is computed from (a dependency) enqueues the
// key by its own event. With a Patcher that does not report versions it
// always reports false.
func (d *Dispatcher[O, S, P]) Echo(key types.NamespacedName, resourceVersion string) bool {
	echo, held := d.flight.event(key, resourceVersion)
	return echo || held
}
