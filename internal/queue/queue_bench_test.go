package queue_test

import (
	"context"
	"strconv"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
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

// BenchmarkQueue compares one Add, one Get and one Done, keys cycling
// through 1024 distinct keys, on:
//
//   - chan: a buffered channel, the floor (no keys, no bound, no
//     coalescing);
//   - workqueue: client-go's typed workqueue (Add, Get, Done), the peer
//     with the same dirty/processing rules but no bound and no lanes;
//   - patchqueue: PatchQueue without a meter, in the fresh lane;
//   - patchqueue-pass: the same in the pass lane;
//   - patchqueue-otel: PatchQueue with the OpenTelemetry SDK as its meter
//     (the counters are observable and cost nothing per key; the depth
//     Peak-EWMA and the wait histogram are recorded per key).
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

	addGetDone := func(b *testing.B, opts statuspatch.Options, lane statuspatch.Lane) {
		opts.Capacity = nkeys
		q, err := statuspatch.NewPatchQueue[string](opts)
		if err != nil {
			b.Fatal(err)
		}
		defer q.Close()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if err := q.Add(keys[i%nkeys], lane); err != nil {
				b.Fatal(err)
			}
			k, err := q.Get(ctx)
			if err != nil {
				b.Fatal(err)
			}
			q.Done(k)
		}
	}

	b.Run("patchqueue", func(b *testing.B) {
		addGetDone(b, statuspatch.Options{}, statuspatch.LaneFresh)
	})

	b.Run("patchqueue-pass", func(b *testing.B) {
		addGetDone(b, statuspatch.Options{}, statuspatch.LanePass)
	})

	b.Run("patchqueue-otel", func(b *testing.B) {
		reader := sdkmetric.NewManualReader()
		provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		defer func() { _ = provider.Shutdown(ctx) }()
		addGetDone(b, statuspatch.Options{Meter: provider.Meter("bench")}, statuspatch.LaneFresh)
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(ctx, &rm); err != nil || len(rm.ScopeMetrics) == 0 {
			b.Fatalf("the reader collected %d scopes: %v", len(rm.ScopeMetrics), err)
		}
	})
}
