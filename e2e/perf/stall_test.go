package perf

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"k8s.io/client-go/dynamic"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/statuspatch"
)

// BenchmarkStalledMemory measures the live heap of a controller whose API
// server stops answering: every status PATCH is held by a FaultProxy
// (Fault{Stall: true}) until the client gives up. All QP_PERF_ROUTES routes
// (10,000) need a patch at every pass — the computer is told their current
// status is empty — and the benchmark makes QP_PERF_STALL_PASSES passes (10)
// QP_PERF_STALL_INTERVAL apart (1 s). Then the stall is cleared and sampling
// goes on for QP_PERF_STALL_RECOVER (5 s). Every QP_PERF_SAMPLE (500 ms) a
// sample records the live heap (runtime.MemStats.HeapAlloc after a forced
// GC), the queue depth and, for quietpatch, its depth Peak-EWMA gauge.
//
//   - quietpatch: Reconciler + PatchQueue of route keys (capacity
//     QP_PERF_CAPACITY, 1,000; the library's depth Peak-EWMA, τ = 10 s) +
//     Dispatcher (QP_PERF_WORKERS workers, PatchTimeout 5 s), which builds
//     each patch when it can send it. A pass halts when the pass lane is
//     full.
//   - unbounded: the seed: one patch per route per pass appended to an
//     unbounded queue, one dispatcher without a deadline.
//
// Reported: heap-MiB, the process's live heap after the last stalled pass
// (it includes what both variants share: the informer caches of the routes
// and the fixtures); growth-MiB, its growth since just before the first
// pass; depth, what waits then (quietpatch: route keys; unbounded:
// patches). The samples go to a CSV, and plots
// are drawn (WriteAll), into QP_PLOTS_DIR if set, else into
// $TMPDIR/quietpatch-perf.
func BenchmarkStalledMemory(b *testing.B) {
	w := shared.get(b)
	ctx := benchContext(b, 10*time.Minute)
	proxy, err := w.cp.NewFaultProxy()
	if err != nil {
		b.Fatal(err)
	}
	defer proxy.Close()
	cfg, err := w.identity(ctx, "stall-writer")
	if err != nil {
		b.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(proxy.Config(cfg))
	if err != nil {
		b.Fatal(err)
	}

	var all []Sample
	report := func(b *testing.B, samples []Sample, final, baseline Sample) {
		all = append(all, samples...)
		b.Logf("%s: live heap %.1f MiB before the first pass, %.1f MiB after the last stalled pass; %d waiting",
			final.Variant, baseline.HeapMiB(), final.HeapMiB(), final.Depth)
		b.ReportMetric(final.HeapMiB(), "heap-MiB")
		b.ReportMetric(final.HeapMiB()-baseline.HeapMiB(), "growth-MiB")
		b.ReportMetric(float64(final.Depth), "depth")
	}

	b.Run(VariantQuietpatch, func(b *testing.B) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		defer mp.Shutdown(context.Background())
		st, err := w.newStack(stackConfig{
			Name: "stall", Capacity: w.cfg.Capacity, Workers: w.cfg.Workers, Client: proxy.Config(cfg),
			Current: func(*gatewayv1.HTTPRoute) gatewayv1.HTTPRouteStatus { return gatewayv1.HTTPRouteStatus{} },
			Meter:   mp.Meter("perf"),
		})
		if err != nil {
			b.Fatal(err)
		}
		if err := st.start(ctx, false); err != nil {
			_ = st.stop()
			b.Fatal(err)
		}
		samples, final, baseline, err := w.runStall(ctx, b, proxy, stallRun{
			variant: VariantQuietpatch,
			pass: func(ctx context.Context) error {
				_, err := st.reconciler.ReconcileAll(ctx)
				if errors.Is(err, statuspatch.ErrFull) {
					return nil // halted on the full queue: the point
				}
				return err
			},
			depth: func() int { return st.queue.Stats().Depth },
			peak:  func() float64 { return peakEWMA(reader) },
		})
		if serr := st.stop(); serr != nil {
			b.Error(serr)
		}
		if err != nil {
			b.Fatal(err)
		}
		qs := st.queue.Stats()
		b.Logf("quietpatch queue: %d enqueued, %d dropped (full), %d dequeued; dispatcher: %d ok, %d failed (first: %v)",
			qs.Enqueued, qs.DroppedFull, qs.Dequeued, st.rec.ok.Load(), st.rec.failed.Load(), st.rec.err())
		report(b, samples, final, baseline)
	})

	b.Run(VariantUnbounded, func(b *testing.B) {
		q := newUnbounded[statuspatch.MergePatch]()
		dctx, cancel := context.WithCancel(ctx)
		var rec recorder
		wait := q.drain(dctx, 1, func(ctx context.Context, p statuspatch.MergePatch) error {
			return send(ctx, dyn, p)
		}, &rec)
		samples, final, baseline, err := w.runStall(ctx, b, proxy, stallRun{
			variant: VariantUnbounded,
			pass: func(ctx context.Context) error {
				for _, r := range w.list(nil) {
					p, err := buildPatch(r, w.desired(r))
					if err != nil {
						return err
					}
					q.push(p)
				}
				return nil
			},
			depth: q.len,
			peak:  func() float64 { return math.NaN() },
		})
		cancel()
		wait()
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("unbounded queue: %d patches answered during the recovery (%d failed)", rec.done(), rec.failed.Load())
		report(b, samples, final, baseline)
	})

	dir := w.cfg.PlotsDir
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "quietpatch-perf")
	}
	written, err := WriteAll(dir, all)
	if err != nil {
		b.Error(err)
	}
	b.Logf("stall samples and plots: %v", written)
}

// stallRun is one variant of the stall scenario.
type stallRun struct {
	variant string
	pass    func(context.Context) error
	depth   func() int
	peak    func() float64
}

// runStall stalls the API (through proxy), makes the passes, clears the
// stall, waits for the recovery window, and returns every sample, the one
// taken right after the last stalled pass, and the one taken before the
// first.
func (w *world) runStall(ctx context.Context, b *testing.B, proxy *cluster.FaultProxy, v stallRun) (samples []Sample, final, baseline Sample, err error) {
	var (
		mu      sync.Mutex
		stalled atomic.Bool
		start   = time.Now()
	)
	take := func() Sample {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		s := Sample{Variant: v.variant, T: time.Since(start), Stalled: stalled.Load(), Depth: v.depth(), DepthPeakEWMA: v.peak(), HeapBytes: ms.HeapAlloc}
		mu.Lock()
		samples = append(samples, s)
		mu.Unlock()
		return s
	}
	baseline = take()
	stalled.Store(true)
	if err := proxy.SetFault(cluster.Fault{Stall: true}); err != nil {
		return nil, final, baseline, err
	}
	defer proxy.ClearFault()

	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(w.cfg.SamplePeriod)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				take()
			case <-sctx.Done():
				return
			}
		}
	})
	defer func() {
		stop()
		wg.Wait()
		mu.Lock()
		slices.SortFunc(samples, func(a, b Sample) int { return cmp.Compare(a.T, b.T) })
		mu.Unlock()
	}()

	tick := time.NewTicker(w.cfg.StallInterval)
	defer tick.Stop()
	for i := range w.cfg.StallPasses {
		begin := time.Now()
		if err := v.pass(ctx); err != nil {
			return nil, final, baseline, fmt.Errorf("pass %d: %w", i, err)
		}
		b.Logf("%s: pass %d took %v, %d waiting", v.variant, i, time.Since(begin).Round(time.Millisecond), v.depth())
		if i == w.cfg.StallPasses-1 {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, final, baseline, ctx.Err()
		}
	}
	final = take()
	stalled.Store(false)
	proxy.ClearFault()
	select {
	case <-time.After(w.cfg.StallRecover):
	case <-ctx.Done():
		return nil, final, baseline, ctx.Err()
	}
	take()
	return samples, final, baseline, nil
}

// peakEWMA reads the queue's quietpatch.queue.depth.peak_ewma gauge
// through the reader; NaN if it is missing.
func peakEWMA(reader *sdkmetric.ManualReader) float64 {
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		return math.NaN()
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "quietpatch.queue.depth.peak_ewma" {
				continue
			}
			if g, ok := m.Data.(metricdata.Gauge[float64]); ok && len(g.DataPoints) > 0 {
				return g.DataPoints[0].Value
			}
		}
	}
	return math.NaN()
}
