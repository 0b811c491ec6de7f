package outcome_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

func TestConfigError(t *testing.T) {
	err := error(&outcome.ConfigError{Field: "RenewGrace", Reason: "must be < LeaseDuration (15s), got 20s"})
	if got, want := err.Error(), "quietpatch: invalid config: RenewGrace must be < LeaseDuration (15s), got 20s"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, outcome.ErrInvalidConfig) {
		t.Error("a ConfigError does not wrap ErrInvalidConfig")
	}
}

func TestLifecycle(t *testing.T) {
	var l outcome.Lifecycle
	for _, step := range []struct {
		label            string
		do               func() error
		wantErr          error
		started, running bool
		why              error
	}{
		{"zero", nil, nil, false, false, nil},
		{"start", l.Start, nil, true, true, nil},
		{"second start", l.Start, outcome.ErrAlreadyStarted, true, true, nil},
		{"stop", func() error { l.Stop(errors.New("lease lost")); return nil }, nil, true, false, errors.New("lease lost")},
		{"start after stop", l.Start, outcome.ErrAlreadyStarted, true, false, errors.New("lease lost")},
	} {
		if step.do != nil {
			if err := step.do(); !errors.Is(err, step.wantErr) {
				t.Errorf("%s: %v, want %v", step.label, err, step.wantErr)
			}
		}
		started, running, why := l.State()
		if started != step.started || running != step.running || (why == nil) != (step.why == nil) || why != nil && why.Error() != step.why.Error() {
			t.Errorf("%s: State() = %v, %v, %v; want %v, %v, %v", step.label, started, running, why, step.started, step.running, step.why)
		}
	}
}

func TestCounters(t *testing.T) {
	c := outcome.NewCounters(outcome.OK, outcome.Conflict, outcome.Timeout)
	c.Add(outcome.OK)
	c.Add(outcome.OK)
	c.Add(outcome.Timeout)
	c.Add(outcome.Error) // not a key: not counted
	if got, want := c.Snapshot(), map[outcome.Outcome]int64{outcome.OK: 2, outcome.Timeout: 1}; !maps.Equal(got, want) {
		t.Errorf("Snapshot() = %v, want %v", got, want)
	}
	if c.Get(outcome.Conflict) != 0 || c.Get(outcome.Error) != 0 || c.Get(outcome.OK) != 2 {
		t.Errorf("Get: conflict %d, error %d, ok %d", c.Get(outcome.Conflict), c.Get(outcome.Error), c.Get(outcome.OK))
	}
	keys := c.Keys()
	keys[0] = "changed"
	if c.Keys()[0] != outcome.OK {
		t.Error("Keys() shares the counters' slice")
	}
}

func TestPrefix(t *testing.T) {
	err := outcome.Prefix("Lease.", fmt.Errorf("claimer: %w", &outcome.ConfigError{Field: "RenewGrace", Reason: "must be > 0"}))
	var ce *outcome.ConfigError
	if !errors.As(err, &ce) || ce.Field != "Lease.RenewGrace" || ce.Reason != "must be > 0" {
		t.Errorf("Prefix = %v, want the field Lease.RenewGrace", err)
	}
	other := errors.New("not a config error")
	if got := outcome.Prefix("Lease.", other); got != other {
		t.Errorf("Prefix of another error = %v, want it unchanged", got)
	}
}

func TestInstruments(t *testing.T) {
	if outcome.NewInstruments(nil) != nil || outcome.NewInstruments(noop.Meter{}) != nil {
		t.Fatal("instruments on a nil or no-op meter")
	}
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = provider.Shutdown(context.Background()) }()
	in := outcome.NewInstruments(provider.Meter("test"), attribute.String("pipeline", "p"))
	calls := outcome.NewCounters(outcome.OK, outcome.Timeout)
	calls.Add(outcome.OK)
	counter := in.Counter("x.calls", "{call}", "Calls.")
	gauge := in.Gauge("x.limit", "{call}", "Limit.")
	sets := map[outcome.Outcome]metric.ObserveOption{}
	for _, o := range calls.Keys() {
		sets[o] = in.Set(attribute.String("outcome", string(o)))
	}
	reg, err := in.Register(func(_ context.Context, ob metric.Observer) error {
		for _, o := range calls.Keys() {
			ob.ObserveInt64(counter, calls.Get(o), sets[o])
		}
		ob.ObserveInt64(gauge, 7, in.Set())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reg.Unregister() }()
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
	bad := outcome.NewInstruments(provider.Meter("test"))
	bad.Counter("", "", "") // an invalid name
	if _, err := bad.Register(func(context.Context, metric.Observer) error { return nil }); !errors.Is(err, outcome.ErrInvalidConfig) {
		t.Errorf("Register after a refused instrument: %v, want a ConfigError", err)
	}
}
