package ewma_test

import (
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/quietpatch/quietpatch/ewma"
	"github.com/quietpatch/quietpatch/internal/base"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// t0 is the origin of the explicit times in these tests.
var t0 = time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)

// at returns t0 + d.
func at(d time.Duration) time.Time { return t0.Add(d) }

// newGauge returns a Gauge with time constant tau whose clock stands at t0.
func newGauge(t *testing.T, tau time.Duration) (*ewma.Gauge, *testingclock.FakeClock) {
	t.Helper()
	clk := testingclock.NewFakeClock(t0)
	g, err := ewma.New(tau, clk)
	if err != nil {
		t.Fatalf("New(%v): %v", tau, err)
	}
	return g, clk
}

// approx reports whether got is want up to float rounding.
func approx(got, want float64) bool {
	return math.Abs(got-want) <= 1e-12*math.Max(1, math.Abs(want))
}

type op int

const (
	read op = iota
	update
)

func (o op) String() string {
	return [...]string{"read", "update"}[o]
}

// step is one operation on a gauge and the Peak-EWMA read right after it,
// at the same time. (The value held, Last, and changes by a delta are
// checked on the arithmetic itself, in internal/peak.)
type step struct {
	label string
	op    op
	at    time.Duration // since t0
	v     float64       // the value for update
	want  float64       // ValueAt(at) after the operation
}

// runSteps applies steps to g in order and checks every read.
func runSteps(t *testing.T, g *ewma.Gauge, steps []step) {
	t.Helper()
	for i, s := range steps {
		if s.op == update {
			g.UpdateAt(at(s.at), s.v)
		}
		if got := g.ValueAt(at(s.at)); !approx(got, s.want) {
			t.Errorf("step %d %q (%v %v at t0+%v): ValueAt = %.17g, want %.17g", i, s.label, s.op, s.v, s.at, got, s.want)
		}
	}
}

// TestStepFunction follows a gauge with τ = 1 s through a step function.
// With A the average, q the value held since the latest update and e⁻ˣ the
// decay over x·τ, a read x·τ after the latest update is q + (A−q)·e⁻ˣ.
func TestStepFunction(t *testing.T) {
	const s = time.Second
	g, _ := newGauge(t, s)
	runSteps(t, g, []step{
		// Nothing set yet: A = 0, q = 0.
		{label: "before any update", op: read, at: 0, want: 0},
		// The first update folds 0 into 0, then peaks: A = max(0, 4) = 4.
		{label: "first update peaks to 4", op: update, at: 0, v: 4, want: 4},
		// q = A = 4: 4 + (4−4)·e⁻¹ = 4.
		{label: "held at its average", op: read, at: 1 * s, want: 4},
		// Fold 4 held for 1 s into A = 4: 4. No peak (0 < 4): A = 4, q = 0.
		{label: "drop to 0", op: update, at: 1 * s, v: 0, want: 4},
		// 0 + (4−0)·e⁻¹ = 4·0.36787944117144233.
		{label: "1τ at 0", op: read, at: 2 * s, want: 1.4715177646857693},
		// 0 + 4·e⁻⁴.
		{label: "4τ at 0", op: read, at: 5 * s, want: 0.07326255555493671},
		// Reads change nothing: back at 2 s it is still 4·e⁻¹.
		{label: "reads do not mutate", op: read, at: 2 * s, want: 1.4715177646857693},
		// Fold: A = 4·e⁻¹ ≈ 1.47 < 2, so the peak step sets A = 2.
		{label: "rise above the average", op: update, at: 2 * s, v: 2, want: 2},
		// Fold 2 held for 1 s into A = 2: 2. No peak (1 < 2): A = 2, q = 1.
		{label: "fall to 1", op: update, at: 3 * s, v: 1, want: 2},
		// 1 + (2−1)·e^(−½) = 1 + 0.6065306597126334.
		{label: "τ/2 at 1", op: read, at: 3500 * time.Millisecond, want: 1.6065306597126334},
		// Fold: A = 1.6065306597126334; 1.5 < A: no peak step.
		{label: "rise to 1.5 below the average", op: update, at: 3500 * time.Millisecond, v: 1.5, want: 1.6065306597126334},
		// 1.5 + (1.6065306597126334−1.5)·e⁻¹ = 1.5 + 0.1065306597126334·0.36787944117144233.
		{label: "1τ at 1.5", op: read, at: 4500 * time.Millisecond, want: 1.5391904395627087},
		// Fold as the read above; q = 0 is below A.
		{label: "back to 0", op: update, at: 4500 * time.Millisecond, v: 0, want: 1.5391904395627087},
		// 0 + 1.5391904395627087·e⁻² = 1.5391904395627087·0.1353352832366127.
		{label: "2τ at 0", op: read, at: 6500 * time.Millisecond, want: 0.20830677409330559},
	})
}

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		label   string
		tau     time.Duration
		wantErr bool
	}{
		{label: "zero tau", tau: 0, wantErr: true},
		{label: "negative tau", tau: -time.Second, wantErr: true},
		{label: "most negative tau", tau: math.MinInt64, wantErr: true},
		{label: "one nanosecond", tau: 1},
		{label: "ten seconds", tau: 10 * time.Second},
		{label: "largest tau", tau: math.MaxInt64},
	} {
		t.Run(tc.label, func(t *testing.T) {
			g, err := ewma.New(tc.tau, nil)
			if !tc.wantErr {
				if err != nil || g == nil {
					t.Fatalf("New(%v) = %v, %v; want a gauge", tc.tau, g, err)
				}
				return
			}
			if g != nil {
				t.Errorf("New(%v) returned a gauge with an error", tc.tau)
			}
			var ce *base.ConfigError
			if !errors.As(err, &ce) || ce.Field != "tau" || !errors.Is(err, base.ErrInvalidConfig) {
				t.Fatalf("New(%v) error = %v, want a *ConfigError naming tau", tc.tau, err)
			}
			if msg := err.Error(); !strings.Contains(msg, "tau") || !strings.Contains(msg, tc.tau.String()) {
				t.Errorf("New(%v) error %q does not name the field tau and the value %v", tc.tau, msg, tc.tau)
			}
		})
	}
}

// TestPeakAndDecay: a burst shows at its full height at once and decays
// below 1e-4 of that height after 10τ idle.
func TestPeakAndDecay(t *testing.T) {
	const tau = 30 * time.Second
	g, _ := newGauge(t, tau)
	g.UpdateAt(at(0), 0)
	quiet := 100 * tau
	if got := g.ValueAt(at(quiet)); got != 0 {
		t.Fatalf("idle at 0: ValueAt = %v, want 0", got)
	}
	// A burst of 100 arrives and drains at one instant.
	g.UpdateAt(at(quiet), 100)
	if got := g.ValueAt(at(quiet)); got != 100 {
		t.Errorf("at the burst: ValueAt = %v, want the peak 100", got)
	}
	g.UpdateAt(at(quiet), 0)
	if got := g.ValueAt(at(quiet)); got != 100 {
		t.Errorf("drained at the same instant: ValueAt = %v, want still 100", got)
	}
	// 1τ later: 100·e⁻¹.
	if got, want := g.ValueAt(at(quiet+tau)), 36.787944117144233; !approx(got, want) {
		t.Errorf("1τ after: ValueAt = %v, want %v", got, want)
	}
	// 10τ later: 100·e⁻¹⁰ = 0.004539992976248485 < 1e-4·100.
	got := g.ValueAt(at(quiet + 10*tau))
	if got >= 1e-4*100 {
		t.Errorf("10τ after: ValueAt = %v, want below 1e-4 of the peak", got)
	}
	if want := 0.004539992976248485; !approx(got, want) {
		t.Errorf("10τ after: ValueAt = %v, want 100·e⁻¹⁰ = %v", got, want)
	}
}

// TestClockBackwards: a time before the latest update counts as no time
// passed and does not move the latest update time back.
func TestClockBackwards(t *testing.T) {
	const s = time.Second
	for _, tc := range []struct {
		label string
		apply func(g *ewma.Gauge, clk *testingclock.FakeClock)
	}{
		{label: "UpdateAt", apply: func(g *ewma.Gauge, _ *testingclock.FakeClock) {
			g.UpdateAt(at(5*s), 0)
		}},
		{label: "Update with the clock set back", apply: func(g *ewma.Gauge, clk *testingclock.FakeClock) {
			clk.SetTime(at(5 * s))
			g.Update(0)
		}},
	} {
		t.Run(tc.label, func(t *testing.T) {
			g, clk := newGauge(t, s)
			clk.SetTime(at(10 * s))
			g.Update(2) // A = 2, q = 2, last = 10 s
			tc.apply(g, clk)
			// Back in time: no fold, no peak (0 < 2): A = 2, q = 0.
			// Reads before the latest update see no time passed.
			for _, d := range []time.Duration{3 * s, 5 * s, 10 * s} {
				if got := g.ValueAt(at(d)); got != 2 {
					t.Errorf("ValueAt(t0+%v) = %v, want 2", d, got)
				}
			}
			// q = 0 and last stayed at 10 s: 2·e⁻¹ at 11 s (2·e⁻⁶ had it
			// moved to 5 s, 2 had q stayed at 2).
			if got, want := g.ValueAt(at(11*s)), 0.7357588823428847; !approx(got, want) {
				t.Errorf("ValueAt(t0+11s) = %v, want 2·e⁻¹ = %v", got, want)
			}
			clk.SetTime(at(11 * s))
			if got, want := g.Value(), 0.7357588823428847; !approx(got, want) {
				t.Errorf("Value at t0+11s = %v, want 2·e⁻¹ = %v", got, want)
			}
		})
	}
}

// TestIgnoredInput: non-finite input changes nothing, not even the latest
// update time.
func TestIgnoredInput(t *testing.T) {
	const s = time.Second
	for _, tc := range []struct {
		label string
		apply func(g *ewma.Gauge)
	}{
		{label: "update NaN", apply: func(g *ewma.Gauge) { g.UpdateAt(at(5*s), math.NaN()) }},
		{label: "update +Inf", apply: func(g *ewma.Gauge) { g.UpdateAt(at(5*s), math.Inf(1)) }},
		{label: "update -Inf", apply: func(g *ewma.Gauge) { g.UpdateAt(at(5*s), math.Inf(-1)) }},
		{label: "update NaN now", apply: func(g *ewma.Gauge) { g.Update(math.NaN()) }},
		{label: "update +Inf now", apply: func(g *ewma.Gauge) { g.Update(math.Inf(1)) }},
	} {
		t.Run(tc.label, func(t *testing.T) {
			g, _ := newGauge(t, s)
			g.UpdateAt(at(0), 4)
			g.UpdateAt(at(1*s), 0) // A = 4, q = 0, last = 1 s
			tc.apply(g)
			// Still 4·e⁻² at 3 s: q is still 0 and last still 1 s (4 had
			// it moved to 5 s).
			if got, want := g.ValueAt(at(3*s)), 0.5413411329464508; !approx(got, want) {
				t.Errorf("ValueAt(t0+3s) = %v, want 4·e⁻² = %v", got, want)
			}
		})
	}
}

// TestExtremeValues: folds of values near ±MaxFloat64 stay finite. (Sums
// that overflow are checked on the arithmetic, in internal/peak.)
func TestExtremeValues(t *testing.T) {
	g, _ := newGauge(t, time.Second)
	g.UpdateAt(at(0), math.MaxFloat64)
	g.UpdateAt(at(0), 0)
	if got := g.ValueAt(at(0)); got != math.MaxFloat64 {
		t.Errorf("ValueAt = %v, want the peak MaxFloat64", got)
	}
	g.UpdateAt(at(0), -math.MaxFloat64)
	for _, d := range []time.Duration{1, time.Second, time.Hour} {
		if got := g.ValueAt(at(d)); math.IsNaN(got) || math.IsInf(got, 0) {
			t.Errorf("ValueAt(t0+%v) = %v, want finite", d, got)
		}
	}
}

// TestNegativeValues: negative values are averaged like any other; the peak
// step only moves up.
func TestNegativeValues(t *testing.T) {
	const s = time.Second
	g, _ := newGauge(t, s)
	runSteps(t, g, []step{
		// The first update folds 0 into 0; −2 < 0: no peak. A = 0, q = −2.
		{label: "first update below 0", op: update, at: 0, v: -2, want: 0},
		// −2 + (0−(−2))·e⁻¹ = −2·(1 − e⁻¹).
		{label: "1τ at −2", op: read, at: 1 * s, want: -1.2642411176571153},
		// Fold as above; 1 > A: peak step to 1.
		{label: "rise to 1", op: update, at: 1 * s, v: 1, want: 1},
	})
}

// TestZeroGauge: the zero Gauge has τ = 0 and the real clock; it reports the
// value set, or the peak at the instant of an update.
func TestZeroGauge(t *testing.T) {
	var g ewma.Gauge
	if got := g.ValueAt(t0); got != 0 {
		t.Errorf("ValueAt before any update = %v, want 0", got)
	}
	g.UpdateAt(t0, 3)
	g.UpdateAt(t0, 1)
	if got := g.ValueAt(t0); got != 3 {
		t.Errorf("ValueAt at the instant = %v, want the peak 3", got)
	}
	if got := g.ValueAt(t0.Add(time.Nanosecond)); got != 1 {
		t.Errorf("ValueAt 1ns later = %v, want 1", got)
	}
	g.Update(5) // on the real clock, long after t0
	if got := g.Value(); got != 5 {
		t.Errorf("Value after Update(5) on the real clock = %v, want 5", got)
	}
}

// TestRealClock: a nil clock means the real clock; so does any form of
// clock.RealClock, a nil pointer included.
func TestRealClock(t *testing.T) {
	for _, tc := range []struct {
		label string
		clk   clock.PassiveClock
	}{
		{label: "nil", clk: nil},
		{label: "RealClock", clk: clock.RealClock{}},
		{label: "*RealClock", clk: &clock.RealClock{}},
		{label: "nil *RealClock", clk: (*clock.RealClock)(nil)},
	} {
		t.Run(tc.label, func(t *testing.T) {
			g, err := ewma.New(time.Hour, tc.clk)
			if err != nil {
				t.Fatal(err)
			}
			g.Update(3)
			if got := g.Value(); got != 3 {
				t.Errorf("Value = %v, want 3", got)
			}
			g.Update(0)
			// Decays from 3 towards 0 with τ = 1 h: above 2.9 for 2 min.
			if got := g.Value(); got <= 2.9 || got > 3 {
				t.Errorf("Value just after dropping to 0 = %v, want in (2.9, 3]", got)
			}
			// Times from time.Now (monotonic) and Update agree.
			now := time.Now()
			g.UpdateAt(now.Add(time.Hour), 3) // one τ at 0 first
			if got, want := g.ValueAt(now.Add(time.Hour)), 3.0; got != want {
				t.Errorf("ValueAt(now+1h) = %v, want the peak %v", got, want)
			}
			// Wall-clock times far from the gauge's creation are ordered
			// all the same.
			wall := now.Round(0)
			g.UpdateAt(wall.Add(24*time.Hour), 0)
			if got := g.ValueAt(wall.Add(48 * time.Hour)); got > 3*math.Exp(-23) {
				t.Errorf("ValueAt(48h) = %v, want about 0", got)
			}
		})
	}
}

// TestConcurrent runs writers and readers at once (meant for -race). Each
// writer sets its own value in [1, writers] and then 0 again, so the value
// stays in [0, writers], and every read must be there too; once all
// writers are done the value held is 0, whichever wrote last.
func TestConcurrent(t *testing.T) {
	const (
		writers = 4
		readers = 2
		rounds  = 2000
		tau     = 10 * time.Millisecond
	)
	g, err := ewma.New(tau, nil)
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg      sync.WaitGroup
		done    atomic.Bool
		badRead atomic.Value // float64: a read out of range
	)
	for range readers {
		wg.Go(func() {
			for {
				stop := done.Load()
				if v := g.Value(); !(v >= 0 && v <= writers) {
					badRead.Store(v)
				}
				if stop {
					return
				}
			}
		})
	}
	var writersWG sync.WaitGroup
	for i := range writers {
		writersWG.Go(func() {
			for range rounds {
				g.Update(float64(i + 1))
				if i == 0 {
					// An explicit time in the past must not disturb others.
					g.UpdateAt(t0, 0)
				}
				g.Update(0)
			}
		})
	}
	writersWG.Wait()
	done.Store(true)
	wg.Wait()
	if b := badRead.Load(); b != nil {
		t.Errorf("a reader saw Value = %v, want it in [0, %d]", b, writers)
	}
	// 0 held for 100τ: what remains of the peaks is below writers·e⁻¹⁰⁰.
	if got := g.ValueAt(time.Now().Add(100 * tau)); got > writers*math.Exp(-100) {
		t.Errorf("ValueAt 100τ after all writers = %v, want about 0 (the value held is not 0)", got)
	}
}
