// Package peak is the Peak-EWMA arithmetic as a plain value, for the code
// that keeps one under a lock of its own (the queue's depth, package ewma's
// Gauge) or in a pure function (the dispatcher's latency estimate).
package peak

import (
	"math"
	"time"
)

// Peak is the Peak-EWMA of a value that changes at events: the
// exponentially weighted time-average of the value (time constant Tau),
// raised at once to every value above it. UpdateAt returns the new value
// and changes nothing. The zero Peak does not average (τ = 0: a read after
// an update's instant returns the value last set).
type Peak struct {
	tau  time.Duration
	avg  float64   // the Peak-EWMA as of last
	cur  float64   // the value held since last
	last time.Time // the latest update, once set
	set  bool      // an update has happened
}

// New returns an empty Peak with time constant tau (> 0; the callers
// check it).
func New(tau time.Duration) Peak { return Peak{tau: tau} }

// UpdateAt returns p with its value set to v at time t: the value held
// since the latest update is folded in up to t, then the average is raised
// to v if v is above it. A time before the latest update counts as no time
// passed. NaN and ±Inf are ignored.
func (p Peak) UpdateAt(t time.Time, v float64) Peak {
	p.Record(t, v)
	return p
}

// Record is UpdateAt in place, for a Peak kept under a lock of its own
// (the queue's depth): it copies nothing.
func (p *Peak) Record(t time.Time, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	if !p.set {
		p.last, p.set = t, true
	} else if dt := t.Sub(p.last); dt > 0 {
		p.avg = p.foldAt(dt)
		p.last = t
	}
	p.avg, p.cur = max(p.avg, v), v
}

// ValueAt returns the Peak-EWMA at time t: the average as of the latest
// update with the value held since then folded in.
func (p Peak) ValueAt(t time.Time) float64 {
	if dt := t.Sub(p.last); p.set && dt > 0 {
		return p.foldAt(dt)
	}
	return p.avg // 0 before the first update
}

// foldAt is the average with the value held for dt (> 0) folded in.
func (p *Peak) foldAt(dt time.Duration) float64 {
	if p.avg == p.cur {
		return p.avg
	}
	w := weight(dt, p.tau)
	x := p.avg*w + p.cur*(1-w)
	// x lies between avg and cur, but rounding can step an ulp outside,
	// or overflow near ±MaxFloat64.
	return min(max(x, min(p.avg, p.cur)), max(p.avg, p.cur))
}

// Last returns the value most recently set, or 0 before the first update.
func (p Peak) Last() float64 { return p.cur }

// weight is exp(−dt/tau); for the short steps of frequent updates (dt
// below tau/1024) its second-order expansion, whose error, x³/6, is under 2e-10.
func weight(dt, tau time.Duration) float64 {
	if tau <= 0 {
		return 0
	}
	x := float64(dt) / float64(tau)
	if x < 1.0/1024 {
		return 1 - x + x*x/2
	}
	return math.Exp(-x)
}
