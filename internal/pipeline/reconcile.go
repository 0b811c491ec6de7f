package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/internal/queue"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
)

// FreshFanout is the most keys one call of [Reconciler.Enqueue] puts in
// the fresh lane: an event that affects more objects makes a pass.
const FreshFanout = 16

// leaderCheckEvery is how many objects a pass handles between two checks
// of the claim and the context.
const leaderCheckEvery = 256

// Reconciler finds the objects whose status differs from the one their
// StatusComputer wants, while this replica leads, and adds their keys to
// the queue: a full pass every Interval and at once on gaining a new
// epoch (the pass lane), and the keys given to Enqueue (the fresh lane).
// A key that waits already, in either lane, stays where it is, not
// counted as enqueued again. It builds no patch: the [Dispatcher] computes
// it again when it sends it.
//
// An unchanged object costs Current, Desired and Equal and no allocation
// by the library. A pass that finds the pass lane full stops there
// (halted, logged at most once a minute) and the next pass — made as soon
// as half of the lane is free — resumes after the last object handled, in
// key order, so none starves. An object whose computer fails or panics is
// counted as an error and the pass goes on. Passes are serialized; all
// methods are safe for concurrent use. Build one with [NewReconciler].
type Reconciler[O, S, P any] struct {
	src     statuspatch.Source[O]
	comp    statuspatch.StatusComputer[O, S, P]
	queue   *queue.Queue[types.NamespacedName]
	leader  Leader
	opts    Options
	metrics *Metrics
	life    base.Lifecycle
	kick    chan struct{}
	settle  *settler // the keys of events close together; nil without Options.Settle

	passes  base.Counters[string] // by result (passResults)
	objects base.Counters[string] // by result (objResults)

	mu        sync.Mutex // serializes passes; guards the cursor and halt log
	cursor    types.NamespacedName
	hasCursor bool
	halts     haltLog
}

// PassResult counts what one pass did.
type PassResult struct {
	// Objects is how many objects the Source listed; Visited how many the
	// pass handled before it ended, split by result into Unchanged,
	// Changed (key queued) and Errors.
	Objects, Visited, Unchanged, Changed, Errors int
	// Halted: the pass stopped at a full pass lane. Resumed: it started
	// after the cursor an earlier pass left.
	Halted, Resumed bool
}

// ReconcilerStats are a reconciler's counters: passes by result
// (completed, halted, not_leader, error, canceled, closed), objects by
// result (unchanged, changed, error), and halted passes.
type ReconcilerStats struct {
	Passes, Objects map[string]int64
	Halted          int64
}

// NewReconciler returns a reconciler of src's objects that adds the keys
// of changed ones to q while l says we lead; it reads Interval, Name,
// Logger and Clock of opts, and records its passes' durations in m (nil:
// none). Nothing runs until Run or ReconcileAll.
func NewReconciler[O, S, P any](src statuspatch.Source[O], comp statuspatch.StatusComputer[O, S, P], q *queue.Queue[types.NamespacedName], l Leader, opts Options, m *Metrics) (*Reconciler[O, S, P], error) {
	if err := checkParts(src, comp, q, l); err != nil {
		return nil, err
	}
	opts, err := opts.Complete()
	if err != nil {
		return nil, err
	}
	r := &Reconciler[O, S, P]{src: src, comp: comp, queue: q, leader: l, opts: opts, metrics: m, kick: make(chan struct{}, 1),
		passes: base.NewCounters(passResults...), objects: base.NewCounters(objResults...)}
	if opts.Settle > 0 {
		r.settle = newSettler()
	}
	return r, nil
}

// checkParts names the first missing part: a nil one, a nil field of a
// ComputerFuncs, a Leader without an identity.
func checkParts[O, S, P any](src statuspatch.Source[O], comp statuspatch.StatusComputer[O, S, P], q *queue.Queue[types.NamespacedName], l Leader) error {
	missing := func(f string) error { return &base.ConfigError{Field: f, Reason: "must not be nil"} }
	switch {
	case src == nil:
		return missing("Source")
	case comp == nil:
		return missing("Computer")
	case q == nil:
		return missing("Queue")
	}
	if f, ok := any(comp).(*ComputerFuncs[O, S, P]); ok {
		if f == nil {
			return missing("Computer")
		}
		comp = *f
	}
	if f, ok := any(comp).(ComputerFuncs[O, S, P]); ok && f.missing() != "" {
		return &base.ConfigError{Field: "Computer", Reason: "ComputerFuncs." + f.missing() + " must be set"}
	}
	if l == nil || l.Identity() == "" {
		return &base.ConfigError{Field: "Leader", Reason: "must be set, with a non-empty Identity()"}
	}
	return nil
}

// Enqueue asks for the objects with keys to be reconciled soon: the keys
// of one event. Up to [FreshFanout] keys go to the fresh lane, served
// before the passes' keys — with Options.Settle, once the events close
// together are over, in one batch —; more, or a full fresh lane, make a
// pass instead, which queues only the objects that changed. Nothing is
// queued while we do not lead (the pass made on gaining the lead covers
// every object). It never blocks.
func (r *Reconciler[O, S, P]) Enqueue(keys ...types.NamespacedName) {
	now := r.opts.Clock.Now()
	if len(keys) == 0 || !r.leader.Current().IsCurrentFor(r.leader.Identity(), now) {
		return
	}
	if len(keys) > FreshFanout {
		r.Resync()
		return
	}
	if r.settle != nil {
		if !r.settle.add(now, r.queue.Cap(), keys) {
			r.Resync()
		}
		return
	}
	r.enqueue(keys)
}

// enqueue adds keys to the fresh lane; a full lane makes a pass.
func (r *Reconciler[O, S, P]) enqueue(keys []types.NamespacedName) {
	for _, k := range keys {
		if err := r.queue.Add(k, queue.LaneFresh); errors.Is(err, queue.ErrFull) {
			r.Resync()
			return
		}
	}
}

// Resync asks Run for a full pass soon.
func (r *Reconciler[O, S, P]) Resync() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// ReconcileAll makes one pass now, if we lead: it returns what it did, and
// an error wrapping [ErrNotLeader], [queue.ErrFull] (halted), [queue.ErrClosed], the
// Source's error or ctx's.
func (r *Reconciler[O, S, P]) ReconcileAll(ctx context.Context) (PassResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	start := r.opts.Clock.Now()
	res, kind, err := r.pass(ctx)
	r.passes.Add(kind)
	r.metrics.recordPass(kind, r.opts.Clock.Since(start))
	if kind == passHalted || kind == passCompleted {
		r.logHalts(ctx, res, kind == passHalted, r.opts.Clock.Now())
	}
	return res, err
}

func (r *Reconciler[O, S, P]) claim() (leader.Claim, bool) {
	c := r.leader.Current()
	return c, c.IsCurrentFor(r.leader.Identity(), r.opts.Clock.Now())
}

// Run reconciles while we lead, until ctx ends (nil) or the queue is
// closed (an error wrapping queue.ErrClosed); a second call returns
// base.ErrAlreadyStarted. It makes a full pass at every tick of
// Interval (skipping a tick less than Interval/2 after the last pass), at
// once on gaining leadership of a new epoch — seen by notification or at
// a tick, whichever comes first —, on Resync, and after a halted pass as
// soon as half of the pass lane is free.
func (r *Reconciler[O, S, P]) Run(ctx context.Context) error {
	if err := r.life.Start(); err != nil {
		return err
	}
	changes, unsubscribe := r.leader.Subscribe()
	defer unsubscribe()
	ticker := r.opts.Clock.NewTicker(r.opts.Interval)
	defer ticker.Stop()
	err := r.loop(ctx, changes, ticker.C())
	reason := "context cancelled"
	if err != nil {
		reason = err.Error()
	}
	stopped(&r.life, "reconciler", reason)
	r.opts.Logger.Info("statuspatch: reconciler stopped", slog.String("reason", reason))
	return err
}

func (r *Reconciler[O, S, P]) loop(ctx context.Context, changes <-chan leader.Claim, ticks <-chan time.Time) error {
	var (
		leading   bool
		epoch     int64
		lastStart time.Time
		room      <-chan struct{} // after a halted pass: half of the lane free
		forget    = func() {}     // forgets room
	)
	defer func() { forget() }()
	var settled <-chan time.Time // the batch of events is due
	var begun <-chan struct{}
	if r.settle != nil {
		begun = r.settle.begun
	}
	settle := func() {
		settled = nil
		switch wait, ok := r.settle.due(r.opts.Clock.Now(), r.opts.Settle); {
		case !ok:
		case wait <= 0:
			r.enqueue(r.settle.take())
		default:
			settled = r.opts.Clock.After(wait)
		}
	}
	full := func() error {
		forget()
		lastStart, room, forget = r.opts.Clock.Now(), nil, func() {}
		_, err := r.ReconcileAll(ctx)
		switch {
		case errors.Is(err, queue.ErrClosed):
			return err
		case errors.Is(err, queue.ErrFull):
			room, forget = r.queue.Room(queue.LanePass, max(r.queue.Cap()/2, 1))
		}
		return nil
	}
	handle := func(c leader.Claim, tick bool) error {
		cur := c.IsCurrentFor(r.leader.Identity(), r.opts.Clock.Now())
		gained := cur && (!leading || c.Epoch != epoch)
		leading, epoch = cur, c.Epoch
		if gained || tick && cur && (lastStart.IsZero() || r.opts.Clock.Since(lastStart) >= r.opts.Interval/2) {
			return full()
		}
		return nil
	}
	if err := handle(r.leader.Current(), false); err != nil {
		return err
	}
	for {
		var err error
		select {
		case <-ctx.Done():
			return nil
		case c, ok := <-changes:
			if !ok {
				changes = nil
				continue
			}
			err = handle(c, false)
		case <-ticks:
			err = handle(r.leader.Current(), true)
		case <-room:
			room = nil
			if _, ok := r.claim(); ok {
				err = full()
			}
		case <-r.kick:
			if _, ok := r.claim(); ok {
				err = full()
			}
		case <-begun:
			settle()
		case <-settled:
			settle()
		}
		if err != nil {
			return err
		}
	}
}

// Healthy returns nil while Run runs, else an error wrapping
// [ErrNotRunning]. A reconciler that does not lead is healthy: it waits.
func (r *Reconciler[O, S, P]) Healthy() error { return healthy(&r.life) }

// Stats returns the reconciler's counters.
func (r *Reconciler[O, S, P]) Stats() ReconcilerStats {
	return ReconcilerStats{Passes: r.passes.Snapshot(), Objects: r.objects.Snapshot(), Halted: r.passes.Get(passHalted)}
}
