package ewma

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"k8s.io/utils/clock"
)

// ErrInvalidTau is returned (wrapped) by [New] when the time constant is not
// positive. The message names the field and the value given, for example
// "ewma: tau must be > 0, got 0s".
var ErrInvalidTau = errors.New("ewma: tau must be > 0")

// A Gauge is a Peak-EWMA of a value that changes at events, such as the
// depth of a queue: the exponentially weighted time-average of the value
// (time constant τ), raised at once to every value above it.
//
// The value is a step function, set by [Gauge.Update] or changed by
// [Gauge.Add] and held until the next change. An update to v at time t
// folds in the value held since the latest update, at time last,
//
//	w = exp(−(t−last)/τ);  A = A·w + held·(1−w)
//
// then sets A = v if v > A. A read applies the same fold up to its time and
// changes nothing, so it is never below [Gauge.Last]. A time before the latest
// update counts as no time passed and does not move last back. NaN or ±Inf
// input, and an Add whose sum is not finite, are ignored. Every method that
// depends on time has an ...At variant taking it explicitly; times are
// compared as [time.Time.Sub] compares them. A new gauge holds 0 with
// average 0.
//
// Use [New]. The zero value is usable but does not average (τ = 0: a read
// after an update's instant returns [Gauge.Last]) and reads [time.Now].
// A Gauge is safe for concurrent use by multiple goroutines and must not be
// copied after first use.
type Gauge struct {
	clk clock.PassiveClock // nil in the zero Gauge: time.Now

	mu sync.Mutex // guards p
	p  Peak
}

// Peak is the Peak-EWMA of a [Gauge] as a plain value, for code that keeps
// it under a lock of its own or in a pure function: UpdateAt returns the
// new value and changes nothing. The zero Peak does not average (τ = 0);
// [NewPeak] gives one with a time constant.
type Peak struct {
	tau  time.Duration
	avg  float64   // A: the Peak-EWMA as of last
	cur  float64   // the value held since last
	last time.Time // the latest update, once set
	set  bool      // an update has happened
}

// NewPeak returns an empty Peak with time constant tau, or an error
// wrapping [ErrInvalidTau] when tau is not positive.
func NewPeak(tau time.Duration) (Peak, error) {
	if tau <= 0 {
		return Peak{}, fmt.Errorf("%w, got %v", ErrInvalidTau, tau)
	}
	return Peak{tau: tau}, nil
}

// UpdateAt returns p with its value set to v at time t ([Gauge.UpdateAt]).
func (p Peak) UpdateAt(t time.Time, v float64) Peak {
	if !finite(v) {
		return p
	}
	avg := p.ValueAt(t)
	if !p.set || t.After(p.last) {
		p.last, p.set = t, true
	}
	p.avg, p.cur = max(avg, v), v
	return p
}

// ValueAt returns the Peak-EWMA at time t ([Gauge.ValueAt]): the average as
// of the latest update with the value held since then folded in.
func (p Peak) ValueAt(t time.Time) float64 {
	dt := t.Sub(p.last)
	if !p.set || dt <= 0 {
		return p.avg // 0 before the first update
	}
	w := math.Exp(-float64(dt) / float64(p.tau)) // τ = 0: exp(−Inf) = 0
	x := p.avg*w + p.cur*(1-w)
	// x lies between avg and cur, but rounding can step an ulp outside,
	// or overflow near ±MaxFloat64.
	return min(max(x, min(p.avg, p.cur)), max(p.avg, p.cur))
}

// Last returns the value most recently set, or 0 before the first update.
func (p Peak) Last() float64 { return p.cur }

// New returns a Gauge with time constant tau that reads time from clk. A nil
// clk means the real clock (k8s.io/utils/clock.RealClock). A tau that is not
// positive is rejected with an error wrapping [ErrInvalidTau].
func New(tau time.Duration, clk clock.PassiveClock) (*Gauge, error) {
	p, err := NewPeak(tau)
	if err != nil {
		return nil, err
	}
	switch clk.(type) {
	case nil, *clock.RealClock: // a nil *RealClock too
		clk = clock.RealClock{}
	}
	return &Gauge{clk: clk, p: p}, nil
}

// Update sets the value to v now. See [Gauge.UpdateAt].
func (g *Gauge) Update(v float64) { g.UpdateAt(g.now(), v) }

// UpdateAt sets the value to v at time t.
func (g *Gauge) UpdateAt(t time.Time, v float64) {
	g.mu.Lock()
	g.p = g.p.UpdateAt(t, v)
	g.mu.Unlock()
}

// Add changes the value by delta now, for example +1 when an item enters a
// queue and −1 when it leaves. See [Gauge.AddAt].
func (g *Gauge) Add(delta float64) { g.AddAt(g.now(), delta) }

// AddAt changes the value by delta at time t, as UpdateAt(t, Last()+delta)
// would, but atomically.
func (g *Gauge) AddAt(t time.Time, delta float64) {
	g.mu.Lock()
	g.p = g.p.UpdateAt(t, g.p.cur+delta)
	g.mu.Unlock()
}

// Value returns the Peak-EWMA now. See [Gauge.ValueAt].
func (g *Gauge) Value() float64 { return g.ValueAt(g.now()) }

// ValueAt returns the Peak-EWMA at time t without changing the gauge, or 0
// before the first update.
func (g *Gauge) ValueAt(t time.Time) float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.p.ValueAt(t)
}

// Last returns the value most recently set, or 0 before the first update.
func (g *Gauge) Last() float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.p.cur
}

// Register creates a Float64ObservableGauge named name on m, with opts (for
// example a unit and a description), whose callback observes [Gauge.Value]
// at each collection, without attributes. The name is the caller's to
// choose and document. A nil m means no-op. The returned Registration is
// never nil: on error it is a no-op one.
func (g *Gauge) Register(m metric.Meter, name string, opts ...metric.Float64ObservableGaugeOption) (metric.Registration, error) {
	if m == nil {
		return noop.Registration{}, nil
	}
	inst, err := m.Float64ObservableGauge(name, opts...)
	if err != nil {
		return noop.Registration{}, fmt.Errorf("ewma: creating gauge %q: %w", name, err)
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveFloat64(inst, g.Value())
		return nil
	}, inst)
	if err != nil {
		return noop.Registration{}, fmt.Errorf("ewma: registering callback for gauge %q: %w", name, err)
	}
	return reg, nil
}

func (g *Gauge) now() time.Time {
	if g.clk == nil {
		return time.Now()
	}
	return g.clk.Now()
}

// finite reports whether f is neither NaN nor ±Inf.
func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
