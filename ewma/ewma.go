package ewma

import (
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/internal/peak"
)

// A Gauge is a Peak-EWMA of a value that changes at events, such as the
// depth of a queue: the exponentially weighted time-average of the value
// (time constant τ), raised at once to every value above it.
//
// The value is a step function, set by [Gauge.Update] and held until the
// next change. An update to v at time t
// folds in the value held since the latest update, at time last,
//
//	w = exp(−(t−last)/τ);  A = A·w + held·(1−w)
//
// then sets A = v if v > A. A read applies the same fold up to its time and
// changes nothing, so it is never below the value held. A time before the
// latest update counts as no time passed and does not move last back. NaN
// or ±Inf input is ignored. Every method that
// depends on time has an ...At variant taking it explicitly; times are
// compared as [time.Time.Sub] compares them. A new gauge holds 0 with
// average 0.
//
// Use [New]. The zero value is usable but does not average (τ = 0: a read
// after an update's instant returns the value held) and reads [time.Now].
// A Gauge is safe for concurrent use by multiple goroutines and must not be
// copied after first use.
type Gauge struct {
	clk clock.PassiveClock // nil in the zero Gauge: time.Now

	mu sync.Mutex // guards p
	p  peak.Peak
}

// New returns a Gauge with time constant tau that reads time from clk. A nil
// clk means the real clock (k8s.io/utils/clock.RealClock). A tau that is not
// positive is rejected with a *quietpatch.ConfigError naming tau.
func New(tau time.Duration, clk clock.PassiveClock) (*Gauge, error) {
	if tau <= 0 {
		return nil, &base.ConfigError{Field: "tau", Reason: fmt.Sprintf("must be > 0, got %s", tau)}
	}
	p := peak.New(tau)
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
	g.p.Record(t, v)
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

func (g *Gauge) now() time.Time {
	if g.clk == nil {
		return time.Now()
	}
	return g.clk.Now()
}
