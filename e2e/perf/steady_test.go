package perf

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quietpatch/quietpatch/statuspatch"
)

// BenchmarkSteadyState counts the status PATCH requests the API server
// receives per reconcile interval in a converged cluster of QP_PERF_ROUTES
// routes (10,000) where QP_PERF_K routes (50) change per interval, as the
// API server's apiserver_request_total reports them.
//
// An interval here is one full reconcile pass driven by the benchmark
// (ReconcileAll) after the k spec changes reached the informer, followed by
// the dispatch of what it queued; so each interval's count is exact and no
// patch races a cache that has not seen its route's change yet.
//
//   - quietpatch: Reconciler (typed Equal) + PatchQueue + Dispatcher with
//     QP_PERF_WORKERS workers, QP_PERF_INTERVALS (5) intervals. Every
//     interval must send exactly k patches.
//   - naive: the seed controller: compute every route, build and queue a
//     patch for each into an unbounded queue, changed or not, drained by
//     QP_PERF_WORKERS workers; QP_PERF_NAIVE_INTERVALS (1) interval, as it
//     sends one patch per route and its count does not depend on k.
func BenchmarkSteadyState(b *testing.B) {
	w := shared.get(b)
	ctx := benchContext(b, 15*time.Minute)
	begin := time.Now()
	if err := w.converge(ctx, nil); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d routes converged in %v", len(w.keys), time.Since(begin).Round(time.Millisecond))
	k := w.cfg.K

	b.Run("quietpatch", func(b *testing.B) {
		st, err := w.newStack(stackConfig{Name: "steady", Capacity: w.cfg.Capacity, Workers: w.cfg.Workers})
		if err != nil {
			b.Fatal(err)
		}
		defer func() {
			if err := st.stop(); err != nil {
				b.Error(err)
			}
		}()
		if err := st.start(ctx, false); err != nil {
			b.Fatal(err)
		}
		total := 0
		for i := range w.cfg.Intervals {
			keys := w.pick(k)
			if err := w.changeSpecs(ctx, keys); err != nil {
				b.Fatal(err)
			}
			before, err := w.patchCount(ctx)
			if err != nil {
				b.Fatal(err)
			}
			answered := st.rec.done()
			res, err := st.reconciler.ReconcileAll(ctx)
			if err != nil {
				b.Fatalf("interval %d: pass: %v", i, err)
			}
			if err := waitDone(ctx, &st.rec, answered+int64(res.Changed)); err != nil {
				b.Fatal(err)
			}
			n, err := w.patchesSince(ctx, before, res.Changed, 300*time.Millisecond)
			if err != nil {
				b.Fatal(err)
			}
			b.Logf("interval %d: %d routes, %d changed, %d queued, %d PATCH requests", i, res.Objects, k, res.Changed, n)
			if n != k || res.Changed != k {
				b.Errorf("interval %d: %d PATCH requests for %d queued patches, want exactly k=%d", i, n, res.Changed, k)
			}
			total += n
			if err := w.waitConverged(ctx, keysOf(keys)); err != nil {
				b.Fatal(err)
			}
		}
		if f := st.rec.failed.Load(); f > 0 {
			b.Errorf("%d patches failed, first: %v", f, st.rec.err())
		}
		b.ReportMetric(float64(total)/float64(w.cfg.Intervals), "patches/interval")
	})

	b.Run("naive", func(b *testing.B) {
		var rec recorder
		total := 0
		for i := range w.cfg.NaiveIntervals {
			keys := w.pick(k)
			if err := w.changeSpecs(ctx, keys); err != nil {
				b.Fatal(err)
			}
			before, err := w.patchCount(ctx)
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			n, err := w.naivePass(ctx, &rec)
			if err != nil {
				b.Fatal(err)
			}
			got, err := w.patchesSince(ctx, before, n, 300*time.Millisecond)
			if err != nil {
				b.Fatal(err)
			}
			b.Logf("interval %d: %d routes, %d changed, %d queued, %d PATCH requests in %v",
				i, len(w.keys), k, n, got, time.Since(start).Round(time.Millisecond))
			total += got
		}
		if f := rec.failed.Load(); f > 0 {
			b.Logf("%d naive patches failed, first: %v", f, rec.err())
		}
		b.ReportMetric(float64(total)/float64(w.cfg.NaiveIntervals), "patches/interval")
		if err := w.waitConverged(ctx, nil); err != nil {
			b.Fatal(err)
		}
	})
}

// naivePass is one interval of the seed controller: every route computed,
// a patch built and queued for each, changed or not, into an unbounded
// queue drained by workers dispatchers without a deadline. It returns the
// number of patches queued once all of them were answered; rec counts the
// answers.
func (w *world) naivePass(ctx context.Context, rec *recorder) (int, error) {
	q := newUnbounded[statuspatch.MergePatch]()
	dctx, cancel := context.WithCancel(ctx)
	answered := rec.done()
	wait := q.drain(dctx, w.cfg.Workers, func(ctx context.Context, p statuspatch.MergePatch) error {
		return send(ctx, w.dyn, p)
	}, rec)
	queued := 0
	var errs []error
	for _, r := range w.list(nil) {
		p, err := buildPatch(r, w.desired(r))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		q.push(p)
		queued++
	}
	errs = append(errs, waitDone(ctx, rec, answered+int64(queued)))
	cancel()
	wait()
	return queued, errors.Join(errs...)
}
