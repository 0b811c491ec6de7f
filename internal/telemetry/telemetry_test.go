package telemetry_test

import (
	"context"
	"errors"
	"maps"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/internal/telemetry"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

func TestInstruments(t *testing.T) {
	if telemetry.NewInstruments(nil) != nil || telemetry.NewInstruments(noop.Meter{}) != nil {
		t.Fatal("instruments on a nil or no-op meter")
	}
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = provider.Shutdown(context.Background()) }()
	in := telemetry.NewInstruments(provider.Meter("test"), attribute.String("pipeline", "p"))
	calls := base.NewCounters(outcome.OK, outcome.Timeout)
	calls.Add(outcome.OK)
	counter := in.Counter("x.calls", "{call}", "Calls.")
	gauge := in.Gauge("x.limit", "{call}", "Limit.")
	sets := map[outcome.Outcome]metric.ObserveOption{}
	for _, o := range calls.Keys() {
		sets[o] = in.Set(attribute.String("outcome", string(o)))
	}
	unregister, err := in.Register(func(_ context.Context, ob metric.Observer) error {
		for _, o := range calls.Keys() {
			ob.ObserveInt64(counter, calls.Get(o), sets[o])
		}
		ob.ObserveInt64(gauge, 7, in.Set())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		var points []metricdata.DataPoint[int64]
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			points = d.DataPoints
		case metricdata.Gauge[int64]:
			points = d.DataPoints
		}
		for _, p := range points {
			if v, _ := p.Attributes.Value("pipeline"); v.AsString() != "p" {
				t.Errorf("%s: no pipeline attribute", m.Name)
			}
			o, _ := p.Attributes.Value("outcome")
			got[m.Name+"/"+o.AsString()] = p.Value
		}
	}
	if want := map[string]int64{"x.calls/ok": 1, "x.calls/timeout": 0, "x.limit/": 7}; !maps.Equal(got, want) {
		t.Errorf("points %v, want %v", got, want)
	}
	unregister()
	rm = metricdata.ResourceMetrics{}
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				if len(d.DataPoints) != 0 {
					t.Errorf("%s: %d points after unregister, want none", m.Name, len(d.DataPoints))
				}
			case metricdata.Gauge[int64]:
				if len(d.DataPoints) != 0 {
					t.Errorf("%s: %d points after unregister, want none", m.Name, len(d.DataPoints))
				}
			}
		}
	}
	bad := telemetry.NewInstruments(provider.Meter("test"))
	bad.Counter("", "", "") // an invalid name
	if _, err := bad.Register(func(context.Context, metric.Observer) error { return nil }); !errors.Is(err, base.ErrInvalidConfig) {
		t.Errorf("Register after a refused instrument: %v, want a ConfigError", err)
	}
}
