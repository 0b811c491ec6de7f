package ewma_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// collectGauge collects reader and returns the data points of the gauge
// named name, and whether the metric was exported at all.
func collectGauge(t *testing.T, reader *sdkmetric.ManualReader, name string) ([]metricdata.DataPoint[float64], metricdata.Metrics, bool) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			gauge, ok := m.Data.(metricdata.Gauge[float64])
			if !ok {
				t.Fatalf("metric %q has data %T, want metricdata.Gauge[float64]", name, m.Data)
			}
			return gauge.DataPoints, m, true
		}
	}
	return nil, metricdata.Metrics{}, false
}

func TestRegister(t *testing.T) {
	const name = "quietpatch.test.queue.depth"
	g, clk := newGauge(t, time.Second)
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() {
		if err := provider.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	}()
	reg, err := g.Register(provider.Meter("ewma_test"), name,
		metric.WithUnit("{patch}"), metric.WithDescription("Peak-EWMA of the queue depth."))
	if err != nil {
		t.Fatalf("Register: %v", err)
	}

	g.Update(4)
	clk.Step(time.Second)
	g.Update(0) // A = 4, q = 0
	clk.Step(time.Second)
	for _, want := range []float64{
		1.4715177646857693, // 4·e⁻¹ one τ after dropping to 0
		1.4715177646857693, // collecting reads without changing the gauge
	} {
		points, m, ok := collectGauge(t, reader, name)
		if !ok || len(points) != 1 {
			t.Fatalf("collected %d points of %q (exported: %v), want 1", len(points), name, ok)
		}
		if m.Unit != "{patch}" || m.Description != "Peak-EWMA of the queue depth." {
			t.Errorf("unit, description = %q, %q; want the options given", m.Unit, m.Description)
		}
		if got := points[0].Value; !approx(got, want) {
			t.Errorf("observed %v, want %v", got, want)
		}
		if n := points[0].Attributes.Len(); n != 0 {
			t.Errorf("observed %d attributes, want none", n)
		}
	}

	if err := reg.Unregister(); err != nil {
		t.Fatalf("Unregister: %v", err)
	}
	g.Update(7)
	if points, _, _ := collectGauge(t, reader, name); len(points) != 0 {
		t.Errorf("after Unregister collected %v, want no points", points)
	}
}

func TestRegisterNilMeter(t *testing.T) {
	g, _ := newGauge(t, time.Second)
	reg, err := g.Register(nil, "quietpatch.test.queue.depth")
	if err != nil {
		t.Fatalf("Register(nil meter): %v", err)
	}
	if reg == nil {
		t.Fatal("Register(nil meter) returned a nil Registration")
	}
	if err := reg.Unregister(); err != nil {
		t.Errorf("Unregister: %v", err)
	}
}

func TestRegisterInvalidName(t *testing.T) {
	g, _ := newGauge(t, time.Second)
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = provider.Shutdown(context.Background()) }()
	reg, err := g.Register(provider.Meter("ewma_test"), "")
	if err == nil {
		t.Fatal("Register with an empty name succeeded, want an error")
	}
	if reg == nil {
		t.Fatal("Register returned a nil Registration with its error")
	}
	if err := reg.Unregister(); err != nil {
		t.Errorf("Unregister of the no-op Registration: %v", err)
	}
	g.Update(1)
	if points, _, _ := collectGauge(t, reader, ""); len(points) != 0 {
		t.Errorf("collected %v after a failed Register, want nothing", points)
	}
}
