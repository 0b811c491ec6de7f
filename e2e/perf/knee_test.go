package perf

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// kneeRow is one mode's line of BenchmarkKnee's table.
type kneeRow struct {
	mode               string
	cold               bool // a first convergence
	workers            int  // 0: the default, adaptive
	routesPerSecond    float64
	p50, p99           time.Duration // the neighbour's during the run
	fresh95            time.Duration
	limitMedian        float64
	rssMiB             float64
	patches, conflicts int64 // status calls answered, 409s (the API server's count)
}

// BenchmarkKnee measures where a controller runs against the API server's
// other clients (issue 32): for each mode of QP_PERF_KNEE_MODES — storm
// modes, fixed-N (Config.Workers N) and adaptive (the default), each
// prefixed converge- for a first convergence (see BenchmarkStorm) — a storm
// of QP_PERF_STORM_ROUTES routes (10,000) with the fresh edits of
// BenchmarkStorm, while the neighbour of BenchmarkPoliteness (its own
// ServiceAccount, 20 GET+PATCH a second of ConfigMaps of its own, no
// client limit) measures its latency; the neighbour alone is measured in
// slices before, between and after the runs (QP_PERF_ALONE in all), pooled.
// The controller's status client is a ServiceAccount of its own too.
//
// Reported per mode: routes/s, the neighbour's p50 and p99 during the run
// as multiples of its p50 and p99 alone (p50-x, p99-x), fresh-p95-s, the
// in-flight limit's median, the benchmark process's RSS at the run's end
// (rss-MiB: the informers of the whole world are in it), and the ratio of
// routes/s to the best fixed-N of the same kind (storm or first
// convergence) of the same run (ratio-best). The table is logged as
// markdown (go test -v), and the modes' rates against the neighbour's
// inflation are written to QP_PLOTS_DIR (default $TMPDIR/quietpatch-perf)
// as knee-<routes>.csv and knee-<routes>.svg (WriteKneeCurve).
//
// Goals (issue 32): adaptive ≥ 0.85 × the best fixed-N with the neighbour
// within ×2.5 at p50 and ×8 at p99; fresh-p95-s ≤ 1.
func BenchmarkKnee(b *testing.B) {
	w := shared.get(b)
	s := storms.get(b, w)
	ctx := benchContext(b, 90*time.Minute)
	comp, err := newCompetitor(ctx, w)
	if err != nil {
		b.Fatal(err)
	}
	modes := defaultKneeModes
	if v := os.Getenv("QP_PERF_KNEE_MODES"); v != "" {
		if modes, err = parseStormModes(v); err != nil {
			b.Fatalf("QP_PERF_KNEE_MODES: %v", err)
		}
	}
	slice := w.cfg.AloneFor / time.Duration(len(modes)+1)
	alone := &latencies{}
	var rows []kneeRow
	for _, m := range modes {
		alone.merge(comp.measure(ctx, slice))
		if m.plain {
			b.Fatalf("mode %s: BenchmarkKnee runs controllers only (fixed-N, adaptive)", m.name)
		}
		b.Run(m.name, func(b *testing.B) {
			var lat latencies
			run := controllerRun{workers: m.workers, cold: m.cold, name: "knee-" + m.name, sample: w.cfg.StormSample,
				during: func(ctx context.Context) { comp.run(ctx, &lat) }}
			fr, err := s.runFresh(ctx, b, freshChanges, freshDelay, run)
			if err != nil {
				b.Fatal(err)
			}
			rss, _ := procStatus(os.Getpid(), "VmRSS:")
			var lim limitSampler
			for _, smp := range fr.storm.samples {
				lim.limits = append(lim.limits, smp.Limit)
			}
			row := kneeRow{mode: m.name, cold: m.cold, workers: m.workers, routesPerSecond: fr.storm.routesPerSecond(len(s.keys)),
				p50: lat.quantile(0.5), p99: lat.quantile(0.99), fresh95: fr.latencies().quantile(0.95),
				limitMedian: lim.median(), rssMiB: rss, patches: fr.storm.patches, conflicts: int64(fr.serverConflicts)}
			rows = append(rows, row)
			b.Logf("%s: %v; neighbour during: %v; limit median %.1f; RSS %.0f MiB", m.name, fr, &lat, row.limitMedian, rss)
			b.ReportMetric(row.routesPerSecond, "routes/s")
			b.ReportMetric(row.fresh95.Seconds(), "fresh-p95-s")
			b.ReportMetric(row.limitMedian, "limit-median")
			b.ReportMetric(rss, "rss-MiB")
		})
	}
	alone.merge(comp.measure(ctx, w.cfg.AloneFor-slice*time.Duration(len(modes))))
	b.Logf("neighbour alone: %v", alone)
	a50, a99 := alone.quantile(0.5), alone.quantile(0.99)
	best := map[bool]float64{}
	for _, r := range rows {
		if r.workers > 0 {
			best[r.cold] = max(best[r.cold], r.routesPerSecond)
		}
	}
	var t strings.Builder
	fmt.Fprintf(&t, "\n| %d routes | routes/s | ratio to the best fixed | neighbour p50 × alone | neighbour p99 × alone | fresh p95 | limit median | RSS | 409s |\n|---|---|---|---|---|---|---|---|---|\n", len(s.keys))
	slices.SortStableFunc(rows, func(x, y kneeRow) int { return cmp.Compare(boolInt(x.cold), boolInt(y.cold)) }) // storms first
	for _, r := range rows {
		ratio := 0.0
		if best[r.cold] > 0 {
			ratio = r.routesPerSecond / best[r.cold]
		}
		x50, x99 := float64(r.p50)/float64(a50), float64(r.p99)/float64(a99)
		fmt.Fprintf(&t, "| %s | %.0f | %.2f | ×%.1f | ×%.1f | %.2f s | %.1f | %.0f MiB | %d |\n", r.mode, r.routesPerSecond, ratio, x50, x99,
			r.fresh95.Seconds(), r.limitMedian, r.rssMiB, r.conflicts)
		b.Run(r.mode+"/vs", func(b *testing.B) {
			b.ReportMetric(ratio, "ratio-best")
			b.ReportMetric(x50, "p50-x")
			b.ReportMetric(x99, "p99-x")
		})
	}
	var points []CurvePoint
	for _, r := range rows {
		points = append(points, CurvePoint{Mode: r.mode, Limit: r.limitMedian, RoutesPerSecond: r.routesPerSecond,
			P99Ms: ms(r.p99), AloneP99Ms: ms(a99), P50Ms: ms(r.p50), AloneP50Ms: ms(a50)})
	}
	written, err := WriteKneeCurve(cmp.Or(w.cfg.PlotsDir, filepath.Join(os.TempDir(), "quietpatch-perf")), len(s.keys), points)
	if err != nil {
		b.Error(err)
	}
	fmt.Fprintf(&t, "\ncurve: %v", written)
	fmt.Fprintf(&t, "\nneighbour alone: p50 %v, p99 %v (%d requests)\n", a50.Round(10*time.Microsecond), a99.Round(10*time.Microsecond), len(alone.d))
	b.Log(t.String())
}

// defaultKneeModes are BenchmarkKnee's modes without QP_PERF_KNEE_MODES.
var defaultKneeModes = []stormMode{
	{name: "fixed-1", workers: 1}, {name: "fixed-2", workers: 2}, {name: "fixed-4", workers: 4}, {name: "fixed-16", workers: 16},
	{name: "adaptive"}, {name: "converge-fixed-2", workers: 2, cold: true}, {name: "converge-fixed-16", workers: 16, cold: true},
	{name: "converge-adaptive", cold: true},
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
