package ewma_test

import (
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/quietpatch/quietpatch/ewma"
)

// BenchmarkGauge measures the cost of an update and of a read.
//
//   - update: UpdateAt at precomputed times 1 µs apart, τ = 1 h (dt/τ tiny,
//     as for a busy queue), on a gauge with a fake clock, so the figure is
//     the gauge's own cost; reading the clock is measured apart below.
//   - update_sparse: as update, but 10 ms apart with τ = 1 s (dt/τ = 0.01),
//     as for a queue that changes rarely — where the cost per update
//     matters little.
//   - value: ValueAt 1 µs after the previous read, average ≠ value.
//   - update_now, value_now: Update and Value on the real clock, to show
//     what reading the clock adds.
//   - update_parallel: UpdateAt from GOMAXPROCS goroutines on one gauge.
//
// The updates set 1000 every 256th time and 0–7 otherwise: the average stays
// above the value, so nearly every update folds a value different from the
// average and does not take the peak step.
//
// Besides ns/op (wall time), each reports cpu-ns/op: the process's CPU time
// per operation, which stays meaningful on a machine shared with other work,
// where wall time per operation grows with the load.
func BenchmarkGauge(b *testing.B) {
	fake := func(b *testing.B, tau time.Duration) *ewma.Gauge {
		g, err := ewma.New(tau, testingclock.NewFakePassiveClock(t0))
		if err != nil {
			b.Fatal(err)
		}
		return g
	}
	realClock := func(b *testing.B, tau time.Duration) *ewma.Gauge {
		g, err := ewma.New(tau, nil)
		if err != nil {
			b.Fatal(err)
		}
		return g
	}
	updates := func(b *testing.B, g *ewma.Gauge, step time.Duration) {
		times := benchTimes(step)
		b.ReportAllocs()
		defer reportCPU(b)()
		for i := 0; b.Loop(); i++ {
			g.UpdateAt(times[i%len(times)], benchValue(i))
		}
	}
	b.Run("update", func(b *testing.B) {
		updates(b, fake(b, time.Hour), time.Microsecond)
	})
	b.Run("update_sparse", func(b *testing.B) {
		updates(b, fake(b, time.Second), 10*time.Millisecond)
	})
	b.Run("value", func(b *testing.B) {
		g := fake(b, time.Hour)
		g.UpdateAt(t0, 1000)
		g.UpdateAt(t0, 0)
		times := benchTimes(time.Microsecond)
		var sink float64
		b.ReportAllocs()
		defer reportCPU(b)()
		for i := 0; b.Loop(); i++ {
			sink += g.ValueAt(times[i%len(times)])
		}
		if sink <= 0 {
			b.Fatal("no value read")
		}
	})
	b.Run("update_now", func(b *testing.B) {
		g := realClock(b, time.Hour)
		b.ReportAllocs()
		defer reportCPU(b)()
		for i := 0; b.Loop(); i++ {
			g.Update(benchValue(i))
		}
	})
	b.Run("value_now", func(b *testing.B) {
		g := realClock(b, time.Hour)
		g.Update(1000)
		g.Update(0)
		var sink float64
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			sink += g.Value()
		}
		if sink <= 0 {
			b.Fatal("no value read")
		}
	})
	b.Run("update_parallel", func(b *testing.B) {
		g := fake(b, time.Hour)
		b.ReportAllocs()
		defer reportCPU(b)()
		times := benchTimes(time.Microsecond)
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				g.UpdateAt(times[i%len(times)], benchValue(i))
			}
		})
	})
}

// benchTimes returns 4096 times step apart from t0 on, which the benchmarks
// go through in a loop, so that computing times is not measured with the
// gauge (at each wrap one update goes back in time: no time passes).
func benchTimes(step time.Duration) []time.Time {
	times := make([]time.Time, 4096)
	for i := range times {
		times[i] = t0.Add(time.Duration(i+1) * step)
	}
	return times
}

// benchValue is the i-th value the update benchmarks set: a peak of 1000
// every 256 updates, 0–7 in between.
func benchValue(i int) float64 {
	if i%256 == 0 {
		return 1000
	}
	return float64(i & 7)
}

// reportCPU starts measuring the process's CPU time; the function it returns
// reports it per operation as cpu-ns/op. Call it right before the timed loop
// and defer the result.
func reportCPU(b *testing.B) func() {
	start, ok := processCPU()
	if !ok {
		return func() {}
	}
	return func() {
		end, _ := processCPU()
		if b.N > 0 {
			b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
		}
	}
}
