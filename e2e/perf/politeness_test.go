package perf

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// competitorNamespace holds the competitor's ServiceAccount and ConfigMaps.
const competitorNamespace = "qp-perf-competitor"

// competitor is another client of the API server: QP_PERF_COMPETITORS
// goroutines (2), each doing at most QP_PERF_COMPETITOR_RATE / goroutines
// requests a second (20 in all) — a GET of a ConfigMap of its own, then a
// merge PATCH of it, and so on — as the ServiceAccount
// qp-perf-competitor/competitor, which may only get and patch ConfigMaps in
// its namespace: a normal user to API Priority and Fairness (flow schema
// service-accounts, its own flow in priority level workload-low), as the
// storm's status writer is. No client-side rate limit: the latency is the
// server's.
type competitor struct {
	kube    kubernetes.Interface
	names   []string // one ConfigMap per goroutine
	rate    float64  // requests a second, all goroutines together
	workers int
}

func newCompetitor(ctx context.Context, w *world) (*competitor, error) {
	cfg, err := w.cp.ConfigFor(ctx, competitorNamespace, "competitor")
	if err != nil {
		return nil, err
	}
	cfg.QPS = -1
	if err := w.cp.Grant(ctx, competitorNamespace, "competitor", rbacv1.PolicyRule{
		APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "patch"},
	}); err != nil {
		return nil, err
	}
	if err := waitAllowed(ctx, cfg, authorizationv1.ResourceAttributes{Namespace: competitorNamespace, Verb: "patch", Resource: "configmaps"}); err != nil {
		return nil, err
	}
	c := &competitor{rate: w.cfg.CompetitorRate, workers: w.cfg.Competitors}
	if c.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	for i := range c.workers {
		name := fmt.Sprintf("competitor-%d", i)
		_, err := w.kube.CoreV1().ConfigMaps(competitorNamespace).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"n": "0"},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
		c.names = append(c.names, name)
	}
	return c, nil
}

// latencies are request latencies, in the order they were measured.
type latencies struct {
	mu     sync.Mutex
	d      []time.Duration
	errors int
}

func (l *latencies) add(d time.Duration, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.errors++
		return
	}
	l.d = append(l.d, d)
}

func (l *latencies) merge(o *latencies) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.d = append(l.d, o.d...)
	l.errors += o.errors
}

// quantile returns the q-quantile (nearest rank) of the latencies.
func (l *latencies) quantile(q float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	s := slices.Clone(l.d)
	slices.Sort(s)
	i := min(len(s)-1, max(0, int(q*float64(len(s))+0.5)-1))
	return s[i]
}

func (l *latencies) String() string {
	return fmt.Sprintf("%d requests (%d failed): p50 %v, p90 %v, p99 %v, max %v", len(l.d), l.errors,
		l.quantile(0.5).Round(10*time.Microsecond), l.quantile(0.9).Round(10*time.Microsecond),
		l.quantile(0.99).Round(10*time.Microsecond), l.quantile(1).Round(10*time.Microsecond))
}

// run makes the competitor's requests until ctx ends, recording each
// one's latency into lat. A goroutine whose request took longer than its
// period starts the next one at once; ticks missed meanwhile are dropped,
// so the rate never exceeds the configured one.
func (c *competitor) run(ctx context.Context, lat *latencies) {
	period := time.Duration(float64(c.workers) / c.rate * float64(time.Second))
	var wg sync.WaitGroup
	for _, name := range c.names {
		wg.Go(func() {
			cms := c.kube.CoreV1().ConfigMaps(competitorNamespace)
			t := time.NewTicker(period)
			defer t.Stop()
			for i := 0; ; i++ {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				begin := time.Now()
				var err error
				if i%2 == 0 {
					_, err = cms.Get(ctx, name, metav1.GetOptions{})
				} else {
					_, err = cms.Patch(ctx, name, types.MergePatchType, fmt.Appendf(nil, `{"data":{"n":"%d"}}`, i), metav1.PatchOptions{})
				}
				if ctx.Err() != nil {
					return // cut short: not a latency
				}
				lat.add(time.Since(begin), err)
			}
		})
	}
	wg.Wait()
}

// measure runs the competitor for d.
func (c *competitor) measure(ctx context.Context, d time.Duration) *latencies {
	var lat latencies
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	c.run(ctx, &lat)
	return &lat
}

// BenchmarkPoliteness measures what a storm costs another client of the
// API server. The competitor (see competitor: 2 goroutines, 20 requests a
// second in all, GETs and PATCHes of ConfigMaps in another namespace, under
// a ServiceAccount of its own) measures its request latency:
//
//   - alone: with nothing else running, QP_PERF_ALONE (45 s) in slices
//     before, between and after the storms, pooled: about 900 requests, as
//     many as during a storm, so that the p99s compare like with like;
//   - adaptive: while quietpatch.New with its defaults (adaptive in-flight
//     limit) handles a storm of BenchmarkStorm (every one of the 10,000
//     storm routes changes status), from the Gateway's change until every
//     route has its new status;
//   - fixed-64: the same storm, with Config.Workers 64.
//
// (QP_PERF_POLITENESS_MODES changes the storms' modes: adaptive or
// fixed-N, as in BenchmarkAdaptive.)
//
// The controller's status client is a ServiceAccount too (no admin rights,
// subject to API Priority and Fairness like the competitor). Reported:
// p99-ms, p50-ms and max-ms of the competitor's requests, requests; for
// the storms also routes/s.
//
// Goal: with adaptive, the competitor's p99 ≤ 2 × its p99 alone (fixed-64
// reported beside it).
func BenchmarkPoliteness(b *testing.B) {
	w := shared.get(b)
	s := storms.get(b, w)
	ctx := benchContext(b, 30*time.Minute)
	comp, err := newCompetitor(ctx, w)
	if err != nil {
		b.Fatal(err)
	}
	report := func(b *testing.B, lat *latencies) {
		b.Logf("competitor: %v", lat)
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		b.ReportMetric(ms(lat.quantile(0.99)), "p99-ms")
		b.ReportMetric(ms(lat.quantile(0.5)), "p50-ms")
		b.ReportMetric(ms(lat.quantile(1)), "max-ms")
		b.ReportMetric(float64(len(lat.d)), "requests")
	}
	// Alone: in slices before, between and after the storms, pooled.
	slice := w.cfg.AloneFor / time.Duration(len(w.cfg.PolitenessModes)+1)
	alone := &latencies{}
	var points []CurvePoint
	for _, m := range w.cfg.PolitenessModes {
		alone.merge(comp.measure(ctx, slice))
		b.Run(m.name, func(b *testing.B) {
			var lat latencies
			res, err := s.runController(ctx, b, controllerRun{workers: m.workers, sample: w.cfg.StormSample, name: "politeness-" + m.name,
				during: func(ctx context.Context) { comp.run(ctx, &lat) }})
			if err != nil {
				b.Fatal(err)
			}
			var lim limitSampler
			var est []float64
			for _, smp := range res.samples {
				lim.limits = append(lim.limits, smp.Limit)
				if smp.Latency > 0 {
					est = append(est, float64(smp.Latency)/float64(time.Millisecond))
				}
			}
			slices.Sort(est)
			latency := 0.0
			if len(est) > 0 {
				latency = est[len(est)/2]
			}
			b.Logf("%s storm: %d routes in %v; dispatcher limit %d (median %.0f), latency estimate median %.1f ms; %v", m.name, len(s.keys),
				res.took.Round(time.Millisecond), res.stats.Dispatcher.Limit, lim.median(), latency, res.cpu)
			report(b, &lat)
			b.ReportMetric(res.routesPerSecond(len(s.keys)), "routes/s")
			b.ReportMetric(lim.median(), "limit-median")
			b.ReportMetric(latency, "latency-ms")
			points = append(points, CurvePoint{Mode: m.name, Limit: lim.median(), RoutesPerSecond: res.routesPerSecond(len(s.keys)),
				P99Ms: float64(lat.quantile(0.99)) / float64(time.Millisecond), P50Ms: float64(lat.quantile(0.5)) / float64(time.Millisecond)})
		})
	}
	b.Run("alone", func(b *testing.B) {
		alone.merge(comp.measure(ctx, w.cfg.AloneFor-slice*time.Duration(len(w.cfg.PolitenessModes))))
		report(b, alone)
		for i := range points {
			points[i].AloneP99Ms = float64(alone.quantile(0.99)) / float64(time.Millisecond)
			points[i].AloneP50Ms = float64(alone.quantile(0.5)) / float64(time.Millisecond)
		}
		dir := cmp.Or(w.cfg.PlotsDir, filepath.Join(os.TempDir(), "quietpatch-perf"))
		written, err := WriteCurve(dir, points)
		if err != nil {
			b.Error(err)
		}
		b.Logf("trade-off curve: %v", written)
	})
}
