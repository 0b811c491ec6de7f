package perf

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/internal/pipeline"
	"github.com/quietpatch/quietpatch/statuspatch"
)

// dispatchMode is how many patch calls a dispatcher lets in flight: 0 for
// the adaptive limit (Workers 0, up to MaxInFlight 64),
// else a fixed number.
type dispatchMode struct {
	name    string
	workers int
}

// defaultAdaptiveModes are the modes BenchmarkAdaptive compares
// (QP_PERF_ADAPTIVE_MODES), in the order it runs them: the adaptive limit
// between the fixed ones closest to the server's knee, so that a drift of
// the machine's load affects it and its best rival alike.
var defaultAdaptiveModes = []dispatchMode{
	{"fixed-1", 1}, {"fixed-4", 4}, {"fixed-16", 16}, {"adaptive", 0}, {"fixed-64", 64},
}

// parseModes reads a comma-separated list of modes: "adaptive" or
// "fixed-N" with N in [1, 1024].
func parseModes(s string) ([]dispatchMode, error) {
	var out []dispatchMode
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "adaptive" {
			out = append(out, dispatchMode{f, 0})
			continue
		}
		n, err := strconv.Atoi(strings.TrimPrefix(f, "fixed-"))
		if !strings.HasPrefix(f, "fixed-") || err != nil || n < 1 || n > 1024 {
			return nil, fmt.Errorf("mode %q is neither adaptive nor fixed-N with N in [1, 1024]", f)
		}
		out = append(out, dispatchMode{f, n})
	}
	return out, nil
}

// callTimer times the calls of a Patcher.
type callTimer struct {
	mu    sync.Mutex
	d     []time.Duration
	total time.Duration
}

func (c *callTimer) wrap(p statuspatch.Patcher[statuspatch.MergePatch]) statuspatch.Patcher[statuspatch.MergePatch] {
	return pipeline.PatcherFunc[statuspatch.MergePatch](func(ctx context.Context, mp statuspatch.MergePatch) error {
		begin := time.Now()
		err := p.Patch(ctx, mp)
		d := time.Since(begin)
		c.mu.Lock()
		c.d = append(c.d, d)
		c.total += d
		c.mu.Unlock()
		return err
	})
}

func (c *callTimer) mean() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.d) == 0 {
		return 0
	}
	return c.total / time.Duration(len(c.d))
}

func (c *callTimer) String() string {
	c.mu.Lock()
	s := slices.Clone(c.d)
	c.mu.Unlock()
	if len(s) == 0 {
		return "none"
	}
	slices.Sort(s)
	q := func(f float64) time.Duration {
		return s[min(len(s)-1, int(f*float64(len(s))))].Round(10 * time.Microsecond)
	}
	return fmt.Sprintf("min %v, p50 %v, mean %v, p99 %v", s[0].Round(10*time.Microsecond), q(0.5), c.mean().Round(10*time.Microsecond), q(0.99))
}

// BenchmarkAdaptive compares the dispatcher's adaptive in-flight limit with
// fixed ones, untuned, at several round-trip times. QP_PERF_ADAPTIVE_ROUTES
// routes (1,000; the first of the shared set) go from an empty status to
// their desired status, once per mode, as in BenchmarkConvergence: their
// status.parents are emptied first (as the admin, straight to the API
// server) and the informer has seen it; then one ReconcileAll pass queues
// them all (capacity = the number of routes) and a Dispatcher applies them.
// Its patcher is the one the documentation recommends,
// statuspatch.NewMergePatcher (QPS -1, 429s left to the
// dispatcher), under a ServiceAccount that may only patch HTTPRoute
// statuses, through a FaultProxy that adds each RTT of QP_PERF_RTTS (0s,
// 10ms, 50ms) before it forwards a status PATCH: what a client meets when
// the API server is a network hop away rather than on loopback.
//
// Sub-benchmarks rtt=<RTT>/<mode>, modes fixed-1, fixed-4, fixed-16,
// adaptive, fixed-64 (Workers 1, 4, 16, 0, 64), run back to back for each
// RTT. Reported: routes/s, from the start of the pass to the answer of the
// last successful patch; for adaptive also limit-median and limit-final,
// the in-flight limit sampled every 100 ms (DispatcherStats.Limit), and
// latency-ms, the median of its latency estimate.
//
// Goal: at every RTT, adaptive ≥ 0.9 × the best fixed mode of the same run.
func BenchmarkAdaptive(b *testing.B) {
	w := shared.get(b)
	ctx := benchContext(b, 30*time.Minute)
	keys := w.keySet(w.cfg.AdaptiveRoutes)
	proxy, err := w.cp.NewFaultProxy()
	if err != nil {
		b.Fatal(err)
	}
	defer proxy.Close()
	writer, err := w.statusWriter(ctx, "adaptive-writer")
	if err != nil {
		b.Fatal(err)
	}
	// One patcher for every mode: the same client and connections.
	patcher, err := statuspatch.NewMergePatcher(proxy.Config(writer), routeGVR, fieldManager)
	if err != nil {
		b.Fatal(err)
	}
	if err := w.converge(ctx, keys); err != nil {
		b.Fatal(err)
	}
	for _, rtt := range w.cfg.RTTs {
		b.Run("rtt="+rtt.String(), func(b *testing.B) {
			if err := proxy.SetFault(cluster.Fault{Match: isRouteStatusPatch, Latency: rtt}); err != nil {
				b.Fatal(err)
			}
			defer proxy.ClearFault()
			for _, m := range w.cfg.AdaptiveModes {
				b.Run(m.name, func(b *testing.B) {
					if err := w.reset(ctx, keys); err != nil {
						b.Fatal(err)
					}
					var lim limitSampler
					var calls callTimer
					start, last, patches, err := w.convergeStack(ctx, keys, stackConfig{
						Name: "adaptive", Capacity: len(keys), Workers: m.workers,
						Keys: keys, Patcher: calls.wrap(patcher),
					}, lim.watch)
					if err != nil {
						b.Fatal(err)
					}
					if err := w.waitConverged(ctx, keys); err != nil {
						b.Fatal(err)
					}
					took := last.Sub(start)
					b.Logf("rtt %v, %s: %d routes, %d patches answered, last one %v after the start; calls %v; limit %s",
						rtt, m.name, len(keys), patches, took.Round(time.Millisecond), &calls, lim.summary())
					b.ReportMetric(float64(len(keys))/took.Seconds(), "routes/s")
					b.ReportMetric(calls.mean().Seconds()*1e3, "call-ms")
					if m.workers == 0 {
						b.ReportMetric(lim.median(), "limit-median")
						b.ReportMetric(lim.final(), "limit-final")
						b.ReportMetric(lim.medianLatency().Seconds()*1e3, "latency-ms")
					}
				})
			}
		})
	}
}

// limitSampler samples a dispatcher's in-flight limit and latency
// estimate every 100 ms while it works.
type limitSampler struct {
	mu       sync.Mutex
	limits   []int
	latency  []time.Duration
	interval time.Duration
}

// watch starts sampling st's dispatcher; the function returned stops it
// after one last sample.
func (l *limitSampler) watch(st *stack) (stop func()) {
	if l.interval == 0 {
		l.interval = 100 * time.Millisecond
	}
	sample := func() {
		s := st.dispatcher.Stats()
		l.mu.Lock()
		l.limits = append(l.limits, s.Limit)
		if s.Latency > 0 {
			l.latency = append(l.latency, s.Latency)
		}
		l.mu.Unlock()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(l.interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				sample()
			}
		}
	}()
	return func() {
		cancel()
		<-done
		sample()
	}
}

func (l *limitSampler) median() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return float64(median(l.limits))
}

func (l *limitSampler) final() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.limits) == 0 {
		return 0
	}
	return float64(l.limits[len(l.limits)-1])
}

func (l *limitSampler) medianLatency() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return median(l.latency)
}

// median returns the upper median of s (s is not changed), or zero.
func median[T cmp.Ordered](s []T) T {
	if len(s) == 0 {
		var zero T
		return zero
	}
	c := slices.Clone(s)
	slices.Sort(c)
	return c[len(c)/2]
}

// summary lists the limits sampled, one every 250 ms at most, for the log.
func (l *limitSampler) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	every := max(1, int(250*time.Millisecond/max(l.interval, time.Millisecond)))
	var parts []string
	for i := 0; i < len(l.limits); i += every {
		parts = append(parts, fmt.Sprint(l.limits[i]))
	}
	return fmt.Sprintf("every %v: %s", time.Duration(every)*l.interval, strings.Join(parts, " "))
}
