package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/quietpatch/quietpatch/internal/queue"
	"k8s.io/apimachinery/pkg/types"
)

// haltLog is the state of the halted-pass log.
type haltLog struct {
	streak  int       // consecutive halted passes
	since   time.Time // start of the first of them
	lastLog time.Time // last record about halts
}

// pass does the work of ReconcileAll with r.mu held.
func (r *Reconciler[O, S, P]) pass(ctx context.Context) (res PassResult, kind string, err error) {
	claim, ok := r.claim()
	if !ok {
		return res, passNotLeader, ErrNotLeader
	}
	if ctx.Err() != nil { // the informers may be stopping: no read
		return res, passCanceled, ctx.Err()
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
			if aerr := r.queue.AddNew(key, queue.LanePass); aerr != nil {
				kind = passClosed
				if errors.Is(aerr, queue.ErrFull) {
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
