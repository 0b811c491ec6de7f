package perf

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// BenchmarkConvergence measures how fast QP_PERF_CONVERGE_ROUTES routes
// (3,000 by default; the first ones of the shared set) go from an empty
// status to their desired status, in routes/s: from the start of the work to
// the answer of the last successful patch. Before each variant the routes'
// status.parents are emptied and the informer has seen it.
//
//   - quietpatch-1, quietpatch-N: one ReconcileAll pass of the Reconciler
//     (queue capacity = the number of routes, so the pass queues them all)
//     and the Dispatcher with 1 and QP_PERF_WORKERS (16) workers.
//   - floor-1, floor-N: a plain client-go loop over the same routes with
//     the same concurrency: compute, build the same merge patch, send it
//     with the same dynamic client (QPS limiter off), nothing else.
//
// Goals: quietpatch-N ≥ 0.8 × floor-N (the library costs little), and
// quietpatch-N ≥ 4 × quietpatch-1 (workers pay off).
func BenchmarkConvergence(b *testing.B) {
	w := shared.get(b)
	ctx := benchContext(b, 30*time.Minute)
	keys := w.keySet(w.cfg.ConvergeRoutes)
	// Every variant starts right after the reset of the routes' statuses,
	// the first one too: the same recent load on the API server.
	if err := w.converge(ctx, keys); err != nil {
		b.Fatal(err)
	}
	for _, v := range []struct {
		name    string
		workers int
		floor   bool
	}{
		{"quietpatch-1", 1, false}, {"floor-1", 1, true},
		{"quietpatch-N", w.cfg.Workers, false}, {"floor-N", w.cfg.Workers, true},
	} {
		b.Run(v.name, func(b *testing.B) {
			if err := w.reset(ctx, keys); err != nil {
				b.Fatal(err)
			}
			run := w.convergeQuietpatch
			if v.floor {
				run = w.convergeFloor
			}
			start, last, patches, err := run(ctx, keys, v.workers)
			if err != nil {
				b.Fatal(err)
			}
			if err := w.waitConverged(ctx, keys); err != nil {
				b.Fatal(err)
			}
			took := last.Sub(start)
			b.Logf("%d routes, %d workers: %d patches answered, last one %v after the start",
				len(keys), v.workers, patches, took.Round(time.Millisecond))
			b.ReportMetric(float64(len(keys))/took.Seconds(), "routes/s")
		})
	}
}

// convergeQuietpatch runs the quietpatch stack over keys until every route
// was patched successfully: one pass normally, more only if some patches
// failed (each after the informer caught up with the ones that landed). It
// returns when the work started, when the last successful patch was
// answered, and the number of patches answered.
func (w *world) convergeQuietpatch(ctx context.Context, keys map[types.NamespacedName]bool, workers int) (time.Time, time.Time, int64, error) {
	return w.convergeStack(ctx, keys, stackConfig{Name: "converge", Capacity: len(keys), Workers: workers, Keys: keys}, nil)
}

// convergeStack is convergeQuietpatch with the stack sc (whose Keys and
// Capacity should be keys and their number). watch, if set, is called once
// the stack runs, and the function it returns once the work is done.
func (w *world) convergeStack(ctx context.Context, keys map[types.NamespacedName]bool, sc stackConfig, watch func(*stack) (stop func())) (time.Time, time.Time, int64, error) {
	st, err := w.newStack(sc)
	if err != nil {
		return time.Time{}, time.Time{}, 0, err
	}
	defer st.stop()
	if err := st.start(ctx, false); err != nil {
		return time.Time{}, time.Time{}, 0, err
	}
	if watch != nil {
		defer watch(st)()
	}
	start := time.Now()
	for round := 0; ; round++ {
		answered, failed := st.rec.done(), st.rec.failed.Load()
		res, err := st.reconciler.ReconcileAll(ctx)
		if err != nil {
			return start, time.Time{}, 0, fmt.Errorf("pass %d: %w", round, err)
		}
		if err := waitDone(ctx, &st.rec, answered+int64(res.Changed)); err != nil {
			return start, time.Time{}, 0, err
		}
		newFailed := st.rec.failed.Load() - failed
		if newFailed == 0 {
			break
		}
		if round == 2 {
			return start, time.Time{}, 0, fmt.Errorf("%d patches still failing after %d passes, first error: %v", newFailed, round+1, st.rec.err())
		}
		if err := w.settle(ctx, keys, int(newFailed)); err != nil {
			return start, time.Time{}, 0, err
		}
	}
	return start, unixTime(st.rec.lastOK.Load()), st.rec.done(), nil
}

// convergeFloor is convergeQuietpatch's baseline: the plain loop (floor)
// over the routes that need a patch, again for those whose patch failed.
func (w *world) convergeFloor(ctx context.Context, keys map[types.NamespacedName]bool, workers int) (time.Time, time.Time, int64, error) {
	var rec recorder
	start := time.Now()
	for round := 0; ; round++ {
		failed := rec.failed.Load()
		todo := w.list(keys) // every route: their statuses were reset
		if round > 0 {
			todo = w.changed(keys)
		}
		_ = w.floor(ctx, todo, workers, &rec)
		if ctx.Err() != nil {
			return start, time.Time{}, 0, ctx.Err()
		}
		newFailed := rec.failed.Load() - failed
		if newFailed == 0 {
			break
		}
		if round == 2 {
			return start, time.Time{}, 0, fmt.Errorf("%d patches still failing after %d rounds, first error: %v", newFailed, round+1, rec.err())
		}
		if err := w.settle(ctx, keys, int(newFailed)); err != nil {
			return start, time.Time{}, 0, err
		}
	}
	return start, unixTime(rec.lastOK.Load()), rec.done(), nil
}

// settle waits until the informer shows at most left routes among keys not
// converged: every successful patch has reached the cache.
func (w *world) settle(ctx context.Context, keys map[types.NamespacedName]bool, left int) error {
	return poll(ctx, 100*time.Millisecond, "successful patches in the informer cache", func() error {
		if n := len(w.changed(keys)); n > left {
			return fmt.Errorf("%d routes not converged, want at most %d", n, left)
		}
		return nil
	})
}
