package statuspatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// Source gives the pipeline the objects, typically an informer's cache.
type Source[O any] interface {
	// List returns every object in a slice the caller may reorder.
	List() ([]O, error)
	// Get returns the object with key, and false if there is none.
	Get(key types.NamespacedName) (obj O, found bool, err error)
}

// freshFanout is the most keys one call of [Reconciler.Enqueue] puts in
// the fresh lane; an event that affects more objects makes a pass.
const freshFanout = 16

// leaderCheckEvery is how many objects a pass handles between two checks
// of the claim and the context.
const leaderCheckEvery = 256

// Reconciler finds the objects whose status differs from the one their
// StatusComputer wants, while this replica leads, and adds their keys to
// the queue: a full pass every Interval and at once on gaining a new
// epoch (the pass lane), and the keys given to Enqueue (the fresh lane).
// It builds no patch: the [Dispatcher] computes it again when it sends it.
//
// An unchanged object costs Current, Desired and Equal and no allocation
// by the library. A pass that finds the pass lane full stops there
// (halted, logged at most once a minute) and the next pass — made as soon
// as half of the lane is free — resumes after the last object handled, in
// key order, so none starves. An object whose computer fails or panics is
// counted as an error and the pass goes on. Passes are serialized; all
// methods are safe for concurrent use. Build one with [NewReconciler].
type Reconciler[O, S, P any] struct {
	src    Source[O]
	comp   StatusComputer[O, S, P]
	queue  *PatchQueue[types.NamespacedName]
	leader leader.Observer
	opts   Options
	inst   *reconcileInstruments
	life   outcome.Lifecycle
	kick   chan struct{}

	passes  outcome.Counters[string] // by result (passResults)
	objects outcome.Counters[string] // by result (objResults)

	mu        sync.Mutex // serializes passes; guards the cursor and halt log
	cursor    types.NamespacedName
	hasCursor bool
	halts     haltLog
}

// haltLog is the state of the halted-pass log.
type haltLog struct {
	streak  int       // consecutive halted passes
	since   time.Time // start of the first of them
	lastLog time.Time // last record about halts
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
// Logger, Meter and Clock of opts. Nothing runs until Run or ReconcileAll.
func NewReconciler[O, S, P any](src Source[O], comp StatusComputer[O, S, P], q *PatchQueue[types.NamespacedName], l leader.Observer, opts Options) (*Reconciler[O, S, P], error) {
	if err := checkParts(src, comp, q, l); err != nil {
		return nil, err
	}
	opts, err := opts.complete()
	if err != nil {
		return nil, err
	}
	r := &Reconciler[O, S, P]{src: src, comp: comp, queue: q, leader: l, opts: opts, kick: make(chan struct{}, 1),
		passes: outcome.NewCounters(passResults...), objects: outcome.NewCounters(objResults...)}
	if r.inst, err = newReconcileInstruments(opts, r.Stats); err != nil {
		return nil, err
	}
	return r, nil
}

// checkParts names the first missing part.
func checkParts[O, S, P any](src Source[O], comp StatusComputer[O, S, P], q *PatchQueue[types.NamespacedName], l leader.Observer) error {
	missing := func(f string) error { return &outcome.ConfigError{Field: f, Reason: "must not be nil"} }
	switch {
	case src == nil:
		return missing("Source")
	case comp == nil:
		return missing("Computer")
	case q == nil:
		return missing("Queue")
	}
	var err error
	switch f := any(comp).(type) {
	case ComputerFuncs[O, S, P]:
		err = f.validate()
	case *ComputerFuncs[O, S, P]:
		if f == nil {
			return missing("Computer")
		}
		err = f.validate()
	}
	if err != nil {
		return &outcome.ConfigError{Field: "Computer", Reason: err.Error()}
	}
	return checkLeader(l)
}

// Enqueue asks for the objects with keys to be reconciled soon: the keys
// of one event. Up to 16 keys go to the fresh lane, served
// before the passes' keys; more, or a full fresh lane, make a pass
// instead, which queues only the objects that changed. Nothing is queued
// while we do not lead (the pass made on gaining the lead covers every
// object). It never blocks.
func (r *Reconciler[O, S, P]) Enqueue(keys ...types.NamespacedName) {
	if len(keys) == 0 || !r.leader.Current().IsCurrentFor(r.leader.Identity(), r.opts.Clock.Now()) {
		return
	}
	if len(keys) > freshFanout {
		r.Resync()
		return
	}
	for _, k := range keys {
		if err := r.queue.Add(k, LaneFresh); errors.Is(err, ErrFull) {
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
// an error wrapping [ErrNotLeader], [ErrFull] (halted), [ErrClosed], the
// Source's error or ctx's.
func (r *Reconciler[O, S, P]) ReconcileAll(ctx context.Context) (PassResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	start := r.opts.Clock.Now()
	res, kind, err := r.pass(ctx)
	r.passes.Add(kind)
	r.inst.pass(kind, r.opts.Clock.Since(start))
	if kind == passHalted || kind == passCompleted {
		r.logHalts(ctx, res, kind == passHalted, r.opts.Clock.Now())
	}
	return res, err
}

func (r *Reconciler[O, S, P]) claim() (leader.Claim, bool) {
	c := r.leader.Current()
	return c, c.IsCurrentFor(r.leader.Identity(), r.opts.Clock.Now())
}

// pass does the work of ReconcileAll with r.mu held.
func (r *Reconciler[O, S, P]) pass(ctx context.Context) (res PassResult, kind string, err error) {
	claim, ok := r.claim()
	if !ok {
		return res, passNotLeader, ErrNotLeader
	}
	objs, err := r.src.List()
	if err != nil {
		r.opts.Logger.Warn("statuspatch: reconcile pass failed: listing objects", slog.Any("error", err))
		return res, passError, fmt.Errorf("statuspatch: list objects: %w", err)
	}
	res.Objects = len(objs)
	var (
		keys     []types.NamespacedName // in objs' order, when resuming
		firstErr error
	)
	first := 0
	if r.hasCursor && len(objs) > 0 {
		res.Resumed = true
		var bad int
		objs, keys, bad, firstErr = r.sortByKey(objs)
		res.Visited, res.Errors = bad, bad
		first, _ = slices.BinarySearchFunc(keys, r.cursor, compareKeys)
		if first < len(keys) && keys[first] == r.cursor {
			first++
		}
		if first >= len(objs) {
			first = 0
		}
	}
	kind = passCompleted
	last := -1
	for j := range objs {
		i := (first + j) % len(objs)
		if j%leaderCheckEvery == leaderCheckEvery-1 {
			if ctx.Err() != nil {
				kind, err = passCanceled, ctx.Err()
				break
			}
			if c, ok := r.claim(); !ok || c.Epoch != claim.Epoch {
				kind, err = passNotLeader, fmt.Errorf("%w: leadership changed during the pass", ErrNotLeader)
				break
			}
		}
		key, changed, cerr := r.check(objs[i], keys, i)
		if cerr == nil && changed {
			if aerr := r.queue.Add(key, LanePass); aerr != nil {
				kind = passClosed
				if errors.Is(aerr, ErrFull) {
					kind, res.Halted = passHalted, true
				}
				err = fmt.Errorf("statuspatch: reconcile pass stopped at object %d of %d: %w", j+1, len(objs), aerr)
				break
			}
		}
		switch {
		case cerr != nil:
			res.Errors++
			r.objects.Add(objError)
			if firstErr == nil {
				if keys == nil { // check names changed objects only
					key, _ = r.key(objs[i])
				}
				firstErr = fmt.Errorf("%s: %w", key, cerr)
			}
		case changed:
			res.Changed++
			r.objects.Add(objChanged)
		default:
			res.Unchanged++
			r.objects.Add(objUnchanged)
		}
		res.Visited++
		last = i
	}
	switch {
	case err == nil:
		r.hasCursor = false
	case last >= 0:
		if keys == nil {
			k, _ := r.key(objs[last])
			r.cursor, r.hasCursor = k, true
		} else {
			r.cursor, r.hasCursor = keys[last], true
		}
	}
	if res.Errors > 0 {
		r.opts.Logger.Warn("statuspatch: some objects were not reconciled",
			slog.Int("errors", res.Errors), slog.Int("objects", res.Objects), slog.Any("first_error", firstErr))
	}
	return res, kind, err
}

// check compares an object's current and desired status, recovering from
// a panicking computer. keys, when not nil, holds the keys by index.
func (r *Reconciler[O, S, P]) check(obj O, keys []types.NamespacedName, i int) (key types.NamespacedName, changed bool, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("StatusComputer panicked: %v", v)
		}
	}()
	if keys != nil {
		key = keys[i]
	}
	current := r.comp.Current(obj)
	desired, err := r.comp.Desired(obj)
	if err != nil || r.comp.Equal(current, desired) {
		return key, false, err
	}
	if keys == nil {
		key = r.comp.Key(obj)
	}
	return key, true, nil
}

// key returns the object's key, or an error if Key panics.
func (r *Reconciler[O, S, P]) key(obj O) (k types.NamespacedName, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("StatusComputer.Key panicked: %v", v)
		}
	}()
	return r.comp.Key(obj), nil
}

// sortByKey returns the objects whose Key works sorted by key, with their
// keys; the others are counted as errors (bad, the first one's error) and
// left out.
func (r *Reconciler[O, S, P]) sortByKey(objs []O) (_ []O, _ []types.NamespacedName, bad int, firstErr error) {
	type keyed struct {
		k types.NamespacedName
		o O
	}
	ks := make([]keyed, 0, len(objs))
	for _, o := range objs {
		k, err := r.key(o)
		if err != nil {
			r.objects.Add(objError)
			if bad++; firstErr == nil {
				firstErr = err
			}
			continue
		}
		ks = append(ks, keyed{k, o})
	}
	slices.SortFunc(ks, func(a, b keyed) int { return compareKeys(a.k, b.k) })
	out, keys := objs[:0], make([]types.NamespacedName, len(ks))
	for i, x := range ks {
		out, keys[i] = append(out, x.o), x.k
	}
	return out, keys, bad, firstErr
}

func compareKeys(a, b types.NamespacedName) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// logHalts writes at most one record a minute about halted passes: info
// while a backlog drains, a warning once passes have kept halting for
// max(1 minute, 3 intervals), info when a pass completes again.
func (r *Reconciler[O, S, P]) logHalts(ctx context.Context, res PassResult, halted bool, now time.Time) {
	h := &r.halts
	if !halted {
		if h.streak > 0 {
			r.opts.Logger.LogAttrs(ctx, slog.LevelInfo, "statuspatch: backlog drained: a reconcile pass completed",
				slog.Int("halted_passes", h.streak), slog.Duration("after", now.Sub(h.since)))
		}
		*h = haltLog{}
		return
	}
	if h.streak == 0 {
		h.since = now
	}
	h.streak++
	if !h.lastLog.IsZero() && now.Sub(h.lastLog) < time.Minute {
		return
	}
	h.lastLog = now
	attrs := []slog.Attr{slog.Int("capacity", r.queue.Cap()), slog.Int("objects", res.Objects),
		slog.Int("visited", res.Visited), slog.Int("queued_this_pass", res.Changed),
		slog.String("resume_after", r.cursor.String()), slog.Int("halted_passes", h.streak)}
	if now.Sub(h.since) < max(time.Minute, 3*r.opts.Interval) {
		r.opts.Logger.LogAttrs(ctx, slog.LevelInfo,
			"statuspatch: backlog: more changed objects than the pass lane holds; passes resume where they stopped until it is drained", attrs...)
		return
	}
	attrs = append(attrs, slog.Duration("halting_for", now.Sub(h.since)), slog.String("hint",
		"the dispatcher does not drain what passes find changed: raise the capacity or the in-flight limit, or lengthen the interval"))
	r.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "statuspatch: reconcile passes keep halting: the pass lane stays at capacity", attrs...)
}

// Run reconciles while we lead, until ctx ends (nil) or the queue is
// closed (an error wrapping ErrClosed); a second call returns
// outcome.ErrAlreadyStarted. It makes a full pass at every tick of
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
	)
	full := func() error {
		lastStart, room = r.opts.Clock.Now(), nil
		_, err := r.ReconcileAll(ctx)
		switch {
		case errors.Is(err, ErrClosed):
			return err
		case errors.Is(err, ErrFull):
			room = r.queue.Room(LanePass, max(r.queue.Cap()/2, 1))
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
