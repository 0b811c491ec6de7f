package ewma_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/quietpatch/quietpatch/ewma"
)

// A queue records its depth with Add(+1) on every insertion and Add(−1) on
// every removal. A burst of 50 items that drains within a second is
// reported at its full height; one τ (30 s) later 50·e⁻¹ of it remains, ten τ
// later 50·e⁻¹⁰. Sampling the instant depth every 30 s would most likely
// never have seen it.
func Example() {
	start := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakeClock(start)
	depth, err := ewma.New(30*time.Second, clk)
	if err != nil {
		fmt.Println(err)
		return
	}

	for range 50 { // a burst of 50 insertions
		depth.Add(1)
	}
	clk.Step(time.Second)
	for range 50 { // all drained a second later
		depth.Add(-1)
	}
	for _, d := range []time.Duration{0, 30 * time.Second, 300 * time.Second} {
		clk.SetTime(start.Add(time.Second + d))
		fmt.Printf("%v after the burst: depth %v, Peak-EWMA %.4f\n", d, depth.Last(), depth.Value())
	}
	// Output:
	// 0s after the burst: depth 0, Peak-EWMA 50.0000
	// 30s after the burst: depth 0, Peak-EWMA 18.3940
	// 5m0s after the burst: depth 0, Peak-EWMA 0.0023
}

// Explicit times make the arithmetic visible: with τ = 1 s, one τ after the
// value dropped from 4 to 0 what remains is 4·e⁻¹, and a rise above the
// average is taken at once.
func ExampleGauge_UpdateAt() {
	t0 := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	g, err := ewma.New(time.Second, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	g.UpdateAt(t0, 4)                                      // first update: the average jumps to 4
	g.UpdateAt(t0.Add(time.Second), 0)                     // 4 was held for 1 s: still 4
	fmt.Printf("%.4f\n", g.ValueAt(t0.Add(2*time.Second))) // 4·e⁻¹
	g.UpdateAt(t0.Add(2*time.Second), 2)                   // 2 > 4·e⁻¹: peak step
	fmt.Printf("%.4f\n", g.ValueAt(t0.Add(2*time.Second)))
	g.UpdateAt(t0, 9) // in the past: no time passes, but the peak counts
	fmt.Printf("%.4f %v\n", g.ValueAt(t0.Add(2*time.Second)), g.Last())
	// Output:
	// 1.4715
	// 2.0000
	// 9.0000 9
}

// New rejects a time constant that is not positive, naming the field.
func ExampleNew() {
	_, err := ewma.New(0, nil)
	fmt.Println(err)
	fmt.Println(errors.Is(err, ewma.ErrInvalidTau))
	// Output:
	// ewma: tau must be > 0, got 0s
	// true
}

// Register exports the gauge through OpenTelemetry; the callback reads the
// Peak-EWMA at each collection.
func ExampleGauge_Register() {
	start := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakeClock(start)
	depth, err := ewma.New(10*time.Second, clk)
	if err != nil {
		fmt.Println(err)
		return
	}
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = provider.Shutdown(context.Background()) }()

	reg, err := depth.Register(provider.Meter("example"), "example.queue.depth",
		metric.WithUnit("{item}"), metric.WithDescription("Peak-EWMA of the queue depth."))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = reg.Unregister() }()

	depth.Update(12)
	clk.Step(time.Second)
	depth.Update(2)
	clk.Step(10 * time.Second) // one τ later: 2 + (12−2)·e⁻¹

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		fmt.Println(err)
		return
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			for _, p := range m.Data.(metricdata.Gauge[float64]).DataPoints {
				fmt.Printf("%s = %.3f %s\n", m.Name, p.Value, m.Unit)
			}
		}
	}
	// Output:
	// example.queue.depth = 5.679 {item}
}
