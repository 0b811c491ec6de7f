package telemetry

import (
	"errors"

	"github.com/quietpatch/quietpatch/internal/base"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// Instruments creates the instruments of one part of quietpatch on a
// meter, each data point with the part's attributes, and registers one
// callback for all its observable ones: they read the part's own
// [Counters] at collection, so they cost nothing per event. It is not safe
// for concurrent use while instruments are created.
type Instruments struct {
	m     metric.Meter
	attrs []attribute.KeyValue
	insts []metric.Observable
	err   error
}

// NewInstruments returns the Instruments of a part on m with attrs, or nil
// when m is nil or a no-op meter: the part then records nothing.
func NewInstruments(m metric.Meter, attrs ...attribute.KeyValue) *Instruments {
	if _, ok := m.(noop.Meter); ok || m == nil {
		return nil
	}
	return &Instruments{m: m, attrs: attrs}
}

// Set returns the part's attributes plus kv, as a measurement option.
func (in *Instruments) Set(kv ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(append(append([]attribute.KeyValue{}, in.attrs...), kv...)...))
}

// Counter creates an observable counter.
func (in *Instruments) Counter(name, unit, desc string) metric.Int64ObservableCounter {
	c, err := in.m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	in.add(c, err)
	return c
}

// Gauge creates an observable gauge.
func (in *Instruments) Gauge(name, unit, desc string) metric.Int64ObservableGauge {
	g, err := in.m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
	in.add(g, err)
	return g
}

// FloatGauge creates an observable gauge of float64 values.
func (in *Instruments) FloatGauge(name, unit, desc string) metric.Float64ObservableGauge {
	g, err := in.m.Float64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
	in.add(g, err)
	return g
}

// Histogram creates a histogram of seconds with the bucket boundaries given.
func (in *Instruments) Histogram(name, desc string, buckets ...float64) metric.Float64Histogram {
	h, err := in.m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(buckets...))
	in.err = errors.Join(in.err, err)
	return h
}

func (in *Instruments) add(o metric.Observable, err error) {
	in.err = errors.Join(in.err, err)
	in.insts = append(in.insts, o)
}

// Register registers f as the callback of every observable instrument
// created, and returns the function that unregisters it: the parts
// register when their Run starts and unregister when it returns. An
// instrument the meter refused, or the registration, fails with a
// *base.ConfigError naming Meter.
func (in *Instruments) Register(f metric.Callback) (unregister func(), err error) {
	err = in.err
	var reg metric.Registration
	if err == nil {
		reg, err = in.m.RegisterCallback(f, in.insts...)
	}
	if err != nil {
		return nil, &base.ConfigError{Field: "Meter", Reason: "cannot create the instruments: " + err.Error()}
	}
	return func() { _ = reg.Unregister() }, nil
}
