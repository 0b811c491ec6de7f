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
// depth of a queue: a time-weighted, exponentially decaying average that
// jumps up to every new peak at once and then decays towards the value
// actually held, with time constant τ (tau).
//
// The value is a step function of time: it is set by [Gauge.Update] (or
// changed by [Gauge.Add]) at some instant and held until the next change. At
// an update to v at time t, the gauge first folds in the value held since the
// previous update at time last,
//
//	w = exp(−max(t−last, 0)/τ)
//	A = A·w + held·(1−w)
//
// then takes the peak step, if v > A then A = v, and finally records held = v
// and last = max(last, t). Because the value is constant between updates,
// the fold is exact: A is the exponentially weighted time-average of the step
// function, weight e^(−age/τ), whatever the spacing of updates and reads —
// except that every rise above the average resets it to the new peak. A read
// at time t ([Gauge.ValueAt], [Gauge.Value]) applies the same fold to a copy
// and changes nothing. The fold never leaves the interval between A and the
// held value, and after the peak step A ≥ held, so a read is never below
// [Gauge.Last]: the gauge may over-report the recent past, never under-report
// the present. One τ after a burst that ended, what remains of its excess is
// e^(−1) ≈ 37%; after 10τ it is e^(−10) ≈ 4.5·10⁻⁵.
//
// Why not sample the instant value? A metrics pipeline reads a gauge once per
// collection interval. A queue that fills and drains between two collections
// is invisible to a sampled instant, and one that happens to be read during
// a burst looks permanently busy until the next read; either way what is
// reported depends on when the reader looks. A plain time-average sees the
// burst but flattens a short one to nearly nothing. The Peak-EWMA reports a
// burst at its full height the moment it happens and keeps it visible for a
// few τ, so a collection that comes Δ later still sees at least e^(−Δ/τ) of
// its excess. Choose τ at least as long as the collection interval; twice to
// five times as long keeps 60–80% of a peak for the next collection.
//
// Time. [Gauge.UpdateAt], [Gauge.AddAt] and [Gauge.ValueAt] take the time
// explicitly; [Gauge.Update], [Gauge.Add] and [Gauge.Value] use the gauge's
// clock. Times are compared as [time.Time.Sub] does: by their monotonic clock
// readings when both carry one (as times from [time.Now] do) and by the wall
// clock otherwise; on the real clock, Update, Add and Value read only the
// monotonic clock, so steps of the wall clock do not affect them. A time earlier than the latest update counts as no time
// passed: the fold is skipped and the latest update time is not moved back,
// so after a backwards step of the clock the average holds still until the
// clock passes the latest update again. Times more than about 270 years
// away from the gauge's creation saturate.
//
// The first update. A new gauge holds the value 0 with average 0, so the
// first update at time t folds nothing in (0 folded with 0 is 0), then takes
// the peak step: the average becomes max(v, 0) and the latest update time
// becomes t. Before the first update every read returns 0.
//
// Input outside the reals. An update to NaN or ±Inf, an Add of NaN or ±Inf,
// and an Add whose sum is not finite are ignored: nothing changes, not even
// the latest update time. Negative values are accepted and averaged like any
// other (the peak step only ever moves up); a queue depth never goes below
// zero unless the caller miscounts. With finite input every read is finite
// and lies between the least and the greatest of 0 and the values set.
//
// Goroutine safety. A Gauge is safe for concurrent use by multiple
// goroutines. Updates are serialized by a mutex whose critical section is the
// fold itself: a few loads, one exponential (a degree-4 polynomial when
// t−last < τ/1024, as between the frequent updates of a busy queue;
// [math.Exp] otherwise; nothing when no time passed or the average equals
// the held value), a few float operations and stores. Readers hold the same
// mutex only to copy three words, and compute outside it. So a reader, such
// as the OpenTelemetry callback of [Gauge.Register], waits if at all only for
// updates in progress, each holding the mutex for some nanoseconds, and
// neither allocates nor blocks a writer for longer than the copy. A sequence
// lock that spares readers the mutex was measured at about twice the cost of
// an update, because every field must then be stored atomically, and updates
// are the hot path; an update costs about 20 ns and no allocation.
//
// The zero value is usable but degenerate: it has τ = 0, so it does not
// average at all (a read at the instant of an update returns the peak set at
// that instant, any later read returns [Gauge.Last]), and it reads
// [time.Now]. Use [New]. A Gauge must not be copied after first use.
type Gauge struct {
	// Immutable after New.
	tau float64            // τ in nanoseconds; 0 in the zero Gauge
	clk clock.PassiveClock // nil in the zero Gauge: time.Now
	// Times are kept as int64 nanoseconds since an origin: the time of New
	// on the gauge's clock, or the Unix epoch in the zero Gauge.
	base     time.Time // the origin, with its monotonic reading when mono
	baseSec  int64     // base.Unix(); 0 in the zero Gauge
	baseNsec int64     // base.Nanosecond(); 0 in the zero Gauge
	mono     bool      // the real clock: base carries a monotonic reading

	mu   sync.Mutex // guards the fields below
	avg  float64    // A: the Peak-EWMA as of last
	cur  float64    // the value held since last
	last int64      // ns since base of the latest update, once init
	init bool       // an update has happened
}

// New returns a Gauge with time constant tau that reads time from clk. A nil
// clk means the real clock (k8s.io/utils/clock.RealClock). A tau that is not
// positive is rejected with an error wrapping [ErrInvalidTau].
//
// The gauge starts at 0 with average 0; see [Gauge] for what the first
// update does.
func New(tau time.Duration, clk clock.PassiveClock) (*Gauge, error) {
	if tau <= 0 {
		return nil, fmt.Errorf("%w, got %v", ErrInvalidTau, tau)
	}
	isReal := false
	switch clk.(type) {
	case nil:
		clk, isReal = clock.RealClock{}, true
	case clock.RealClock, *clock.RealClock: // a nil *RealClock too
		clk, isReal = clock.RealClock{}, true
	}
	base := clk.Now()
	return &Gauge{
		tau:      float64(tau),
		clk:      clk,
		base:     base,
		baseSec:  base.Unix(),
		baseNsec: int64(base.Nanosecond()),
		// Round(0) strips the monotonic reading, if any.
		mono: isReal && base != base.Round(0),
	}, nil
}

// Update sets the value to v at the gauge clock's current time. See
// [Gauge.UpdateAt].
func (g *Gauge) Update(v float64) {
	g.update(g.nowOffset(), v)
}

// UpdateAt sets the value to v at time t: it folds the value held since the
// latest update into the average, raises the average to v if v is above it,
// and holds v from t on. A t before the latest update counts as no time
// passed. A NaN or infinite v is ignored.
func (g *Gauge) UpdateAt(t time.Time, v float64) {
	g.update(g.offset(t), v)
}

func (g *Gauge) update(now int64, v float64) {
	if !finite(v) {
		return
	}
	g.mu.Lock()
	g.setLocked(now, v)
	g.mu.Unlock()
}

// Add changes the value by delta at the gauge clock's current time, for
// example +1 when an item enters a queue and −1 when it leaves. See
// [Gauge.AddAt].
func (g *Gauge) Add(delta float64) {
	g.add(g.nowOffset(), delta)
}

// AddAt changes the value by delta at time t, as UpdateAt(t, Last()+delta)
// would but atomically. A NaN or infinite delta, or a sum that is not
// finite, is ignored.
func (g *Gauge) AddAt(t time.Time, delta float64) {
	g.add(g.offset(t), delta)
}

func (g *Gauge) add(now int64, delta float64) {
	if !finite(delta) {
		return
	}
	g.mu.Lock()
	if v := g.cur + delta; finite(v) {
		g.setLocked(now, v)
	}
	g.mu.Unlock()
}

// Value returns the Peak-EWMA at the gauge clock's current time without
// changing the gauge. See [Gauge.ValueAt].
func (g *Gauge) Value() float64 {
	return g.valueAt(g.nowOffset())
}

// ValueAt returns the Peak-EWMA at time t: the average as of the latest
// update with the value held since then folded in up to t. It changes
// nothing. A t before the latest update counts as no time passed, so the
// result is the average as of the latest update. Before the first update
// it returns 0.
func (g *Gauge) ValueAt(t time.Time) float64 {
	return g.valueAt(g.offset(t))
}

func (g *Gauge) valueAt(now int64) float64 {
	g.mu.Lock()
	avg, cur, last := g.avg, g.cur, g.last
	g.mu.Unlock()
	// Before the first update avg and cur are both 0 and fold returns 0.
	return g.fold(avg, cur, last, now)
}

// Last returns the raw value most recently set by an update or an add that
// was not ignored, or 0 before the first one.
func (g *Gauge) Last() float64 {
	g.mu.Lock()
	v := g.cur
	g.mu.Unlock()
	return v
}

// Register creates a Float64ObservableGauge named name on m, with opts (for
// example a unit and a description), and registers a callback that observes
// [Gauge.Value] at each collection, without attributes. Unregister on the
// returned Registration removes the callback; the instrument stays known to
// m, as OpenTelemetry instruments do, but no longer reports this gauge.
//
// A nil m means no-op: nothing is created and the returned Registration does
// nothing. The returned Registration is never nil: when m fails to create the
// instrument or to register the callback, Register returns that error and a
// no-op Registration.
//
// The name is the caller's to choose and document; the OpenTelemetry naming
// rules apply (for example "quietpatch.queue.depth" with unit "{patch}").
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

// setLocked applies an update to v at offset now. g.mu must be held.
func (g *Gauge) setLocked(now int64, v float64) {
	// The first update folds nothing in: the gauge held 0 with average 0,
	// and fold returns 0.
	avg := g.fold(g.avg, g.cur, g.last, now)
	if now > g.last || !g.init {
		g.last, g.init = now, true
	}
	if v > avg {
		avg = v
	}
	g.avg, g.cur = avg, v
}

// fold returns the average at offset now of a gauge whose average was avg
// at offset last and that has held cur since.
func (g *Gauge) fold(avg, cur float64, last, now int64) float64 {
	if now <= last || avg == cur {
		// No time passed, or folding cur into an average equal to it
		// changes nothing.
		return avg
	}
	// now > last, so the difference is positive and below 2⁶⁴: exact in
	// uint64 arithmetic even where the int64 subtraction would overflow.
	dt := float64(uint64(now) - uint64(last))
	w := weight(dt / g.tau) // τ = 0 (the zero Gauge): dt/τ = +Inf, w = 0
	x := avg*w + cur*(1-w)
	// Mathematically x lies between avg and cur. Rounding can step outside
	// by an ulp, or overflow to ±Inf for values near ±MaxFloat64: clamp.
	lo, hi := avg, cur
	if lo > hi {
		lo, hi = hi, lo
	}
	if x < lo {
		x = lo
	} else if x > hi {
		x = hi
	}
	return x
}

// smallX bounds the arguments for which weight uses a polynomial.
const smallX = 1.0 / 1024

// weight returns e^(−x) for x > 0 (x = dt/τ). Updates to a busy queue come
// much closer together than τ, so x is usually tiny; there the Taylor
// polynomial of degree 4 is as exact as math.Exp (the first term left out,
// x⁵/120, is below 7.5e-18, less than a tenth of the spacing of float64
// values just below 1) and costs about half as much. Larger x go to
// math.Exp.
func weight(x float64) float64 {
	if x < smallX {
		return 1 + x*(-1+x*(1.0/2+x*(-1.0/6+x*(1.0/24))))
	}
	return math.Exp(-x)
}

// maxOffsetSec bounds the offsets in seconds: beyond ±2³³ s (about 272
// years) they saturate, so that seconds·10⁹ cannot overflow.
const maxOffsetSec = 1 << 33

// offset returns t as nanoseconds since the origin, saturating. Like
// [time.Time.Sub], it uses the monotonic clock readings when both t and the
// origin have one and the wall clock otherwise.
func (g *Gauge) offset(t time.Time) int64 {
	if g.mono {
		// Sub takes the monotonic difference when t has a reading too.
		return int64(t.Sub(g.base))
	}
	// Wall clock, computed here: Sub's wall-clock path checks for overflow
	// by adding its result back, which costs more than this.
	s := t.Unix() - g.baseSec
	switch {
	case s >= maxOffsetSec:
		return math.MaxInt64
	case s <= -maxOffsetSec:
		return math.MinInt64
	}
	return s*1e9 + int64(t.Nanosecond()) - g.baseNsec
}

// nowOffset returns the current time of g's clock as an offset.
func (g *Gauge) nowOffset() int64 {
	switch {
	case g.mono:
		// time.Since reads only the monotonic clock, which is cheaper
		// than time.Now.
		return int64(time.Since(g.base))
	case g.clk == nil:
		return g.offset(time.Now()) // the zero Gauge
	default:
		return g.offset(g.clk.Now())
	}
}

// finite reports whether f is neither NaN nor ±Inf: f−f is 0 for every
// finite f and NaN otherwise.
func finite(f float64) bool {
	return f-f == 0
}
