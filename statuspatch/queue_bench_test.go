package statuspatch_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"k8s.io/client-go/util/workqueue"

	"github.com/quietpatch/quietpatch/statuspatch"
)

// queueBenchKeys are the distinct keys the benchmarks cycle through, shaped
// like the namespace/name keys of a controller.
func queueBenchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "namespace-" + strconv.Itoa(i%7) + "/httproute-" + strconv.Itoa(i)
	}
	return keys
}

func queueBenchIdentity(s string) string { return s }

// BenchmarkQueue compares one send, one receive and one completion on:
//
//   - chan: a buffered channel, the floor (no keys, no bound accounting,
//     no coalescing);
//   - workqueue: client-go's typed workqueue (Add, Get, Done), the peer
//     with per-key dedup and exclusivity but no bound;
//   - patchqueue: PatchQueue with a Key function and no meter (TrySend,
//     Receive, Done), keys cycling through 1024 distinct keys;
//   - patchqueue-parallel: producers in b.RunParallel blocking in Send,
//     one consumer goroutine receiving and completing.
//
// and, to explain the figures:
//
//   - patchqueue-keyless: the same without a Key function (no map);
//   - patchqueue-otel: the same with what a deployment installs — the
//     OpenTelemetry SDK with the Prometheus exporter — as the meter (the
//     observable counters cost nothing per item; the depth Peak-EWMA and
//     the wait histogram are recorded);
//   - workqueue-metrics: the fair baseline for it, client-go's typed
//     workqueue with a Prometheus metrics provider installed (the
//     instruments of k8s.io/component-base's provider: adds, depth,
//     latency, work duration, unfinished work, retries);
//   - floor-clock: one monotonic clock read, what stamping Item.Enqueued
//     costs per send;
//   - floor-mutex3: three uncontended Lock/Unlock pairs, one per call of
//     TrySend, Receive and Done.
//
// Compare them from one run: go test -run '^$' -bench Queue -benchmem.
func BenchmarkQueue(b *testing.B) {
	const nkeys = 1024
	keys := queueBenchKeys(nkeys)
	ctx := context.Background()

	b.Run("chan", func(b *testing.B) {
		ch := make(chan string, nkeys)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			ch <- keys[i%nkeys]
			<-ch
		}
	})

	b.Run("workqueue", func(b *testing.B) {
		q := workqueue.NewTyped[string]()
		defer q.ShutDown()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			q.Add(keys[i%nkeys])
			k, _ := q.Get()
			q.Done(k)
		}
	})

	sendReceiveDone := func(b *testing.B, cfg statuspatch.QueueConfig[string]) {
		q, err := statuspatch.NewPatchQueue(cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer q.Close()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if err := q.TrySend(keys[i%nkeys]); err != nil {
				b.Fatal(err)
			}
			it, err := q.Receive(ctx)
			if err != nil {
				b.Fatal(err)
			}
			q.Done(it)
		}
	}

	b.Run("patchqueue", func(b *testing.B) {
		sendReceiveDone(b, statuspatch.QueueConfig[string]{Capacity: nkeys, Key: queueBenchIdentity})
	})

	b.Run("patchqueue-keyless", func(b *testing.B) {
		sendReceiveDone(b, statuspatch.QueueConfig[string]{Capacity: nkeys})
	})

	b.Run("patchqueue-otel", func(b *testing.B) {
		reg := prometheus.NewRegistry()
		exp, err := otelprom.New(otelprom.WithRegisterer(reg))
		if err != nil {
			b.Fatal(err)
		}
		provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
		defer func() { _ = provider.Shutdown(ctx) }()
		sendReceiveDone(b, statuspatch.QueueConfig[string]{Capacity: nkeys, Key: queueBenchIdentity, Meter: provider.Meter("bench")})
		if fams, err := reg.Gather(); err != nil || len(fams) == 0 {
			b.Fatalf("the exporter gathered %d families: %v", len(fams), err)
		}
	})

	b.Run("workqueue-metrics", func(b *testing.B) {
		reg := prometheus.NewRegistry()
		q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{
			Name: "bench", MetricsProvider: newPromWorkqueueMetrics(reg),
		})
		defer q.ShutDown()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			q.Add(keys[i%nkeys])
			k, _ := q.Get()
			q.Done(k)
		}
		if fams, err := reg.Gather(); err != nil || len(fams) == 0 {
			b.Fatalf("the registry gathered %d families: %v", len(fams), err)
		}
	})

	b.Run("floor-clock", func(b *testing.B) {
		base := time.Now()
		var sink time.Duration
		for b.Loop() {
			sink += time.Since(base)
		}
		if sink < 0 {
			b.Fatal("clock went backwards")
		}
	})

	b.Run("floor-mutex3", func(b *testing.B) {
		var mu sync.Mutex
		for b.Loop() {
			mu.Lock()
			mu.Unlock() //nolint:staticcheck // measuring the empty critical section
			mu.Lock()
			mu.Unlock() //nolint:staticcheck
			mu.Lock()
			mu.Unlock() //nolint:staticcheck
		}
	})

	b.Run("patchqueue-parallel", func(b *testing.B) {
		q, err := statuspatch.NewPatchQueue(statuspatch.QueueConfig[string]{Capacity: nkeys, Key: queueBenchIdentity})
		if err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				it, err := q.Receive(ctx)
				if err != nil {
					return
				}
				q.Done(it)
			}
		}()
		var producer atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			// Each producer cycles through its own keys, so nothing
			// coalesces and every send is an item to deliver.
			p := int(producer.Add(1))
			own := queueBenchKeys(nkeys)
			for i := range own {
				own[i] = strconv.Itoa(p) + "/" + own[i]
			}
			for i := 0; pb.Next(); i++ {
				if err := q.Send(ctx, own[i%nkeys]); err != nil {
					b.Error(err)
					return
				}
			}
		})
		q.Close()
		wg.Wait()
	})
}

// promWorkqueueMetrics is a client-go workqueue.MetricsProvider on
// Prometheus collectors, with the metrics and buckets of
// k8s.io/component-base/metrics/prometheus/workqueue (which the library
// does not depend on): the baseline a Kubernetes controller runs.
type promWorkqueueMetrics struct {
	depth                   *prometheus.GaugeVec
	adds, retries           *prometheus.CounterVec
	latency, workDuration   *prometheus.HistogramVec
	unfinished, longestWork *prometheus.GaugeVec
}

func newPromWorkqueueMetrics(reg prometheus.Registerer) *promWorkqueueMetrics {
	buckets := prometheus.ExponentialBuckets(10e-9, 10, 12)
	m := &promWorkqueueMetrics{
		depth:        prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "workqueue", Name: "depth"}, []string{"name"}),
		adds:         prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "workqueue", Name: "adds_total"}, []string{"name"}),
		retries:      prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "workqueue", Name: "retries_total"}, []string{"name"}),
		latency:      prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: "workqueue", Name: "queue_duration_seconds", Buckets: buckets}, []string{"name"}),
		workDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: "workqueue", Name: "work_duration_seconds", Buckets: buckets}, []string{"name"}),
		unfinished:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "workqueue", Name: "unfinished_work_seconds"}, []string{"name"}),
		longestWork:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "workqueue", Name: "longest_running_processor_seconds"}, []string{"name"}),
	}
	reg.MustRegister(m.depth, m.adds, m.retries, m.latency, m.workDuration, m.unfinished, m.longestWork)
	return m
}

func (m *promWorkqueueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return m.depth.WithLabelValues(name)
}
func (m *promWorkqueueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return m.adds.WithLabelValues(name)
}
func (m *promWorkqueueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return m.latency.WithLabelValues(name)
}
func (m *promWorkqueueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return m.workDuration.WithLabelValues(name)
}
func (m *promWorkqueueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return m.unfinished.WithLabelValues(name)
}
func (m *promWorkqueueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return m.longestWork.WithLabelValues(name)
}
func (m *promWorkqueueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return m.retries.WithLabelValues(name)
}
