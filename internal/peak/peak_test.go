package peak

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// t0 is the origin of the explicit times in these tests.
var t0 = time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)

// at returns t0 + d.
func at(d time.Duration) time.Time { return t0.Add(d) }

// approx reports whether got is want up to float rounding.
func approx(got, want float64) bool {
	return math.Abs(got-want) <= 1e-12*math.Max(1, math.Abs(want))
}

// add changes p's value by delta at t, as a queue's depth changes by +1 and
// −1: an update to Last()+delta, so a sum that is not finite is ignored.
func add(p Peak, t time.Time, delta float64) Peak { return p.UpdateAt(t, p.Last()+delta) }

type op int

const (
	read op = iota
	update
	addOp
)

func (o op) String() string {
	return [...]string{"read", "update", "add"}[o]
}

// step is one operation on a Peak and the Peak-EWMA read right after it,
// at the same time.
type step struct {
	label    string
	op       op
	at       time.Duration // since t0
	v        float64       // the value for update, the delta for add
	want     float64       // ValueAt(at) after the operation
	wantLast float64       // Last() after the operation
}

// runSteps applies steps to p in order and checks every read.
func runSteps(t *testing.T, p Peak, steps []step) {
	t.Helper()
	for i, s := range steps {
		switch s.op {
		case update:
			p = p.UpdateAt(at(s.at), s.v)
		case addOp:
			p = add(p, at(s.at), s.v)
		}
		if got := p.ValueAt(at(s.at)); !approx(got, s.want) {
			t.Errorf("step %d %q (%v %v at t0+%v): ValueAt = %.17g, want %.17g", i, s.label, s.op, s.v, s.at, got, s.want)
		}
		if got := p.Last(); got != s.wantLast {
			t.Errorf("step %d %q: Last = %v, want %v", i, s.label, got, s.wantLast)
		}
	}
}

// TestSteps follows Peaks through step functions. With A the average, q the
// value held since the latest update and e⁻ˣ the decay over x·τ, a read x·τ
// after the latest update is q + (A−q)·e⁻ˣ.
func TestSteps(t *testing.T) {
	const s = time.Second
	for _, tc := range []struct {
		label string
		tau   time.Duration
		steps []step
	}{{
		label: "step function",
		tau:   s,
		steps: []step{
			// Nothing set yet: A = 0, q = 0.
			{label: "before any update", op: read, at: 0, want: 0, wantLast: 0},
			// The first update folds 0 into 0, then peaks: A = max(0, 4) = 4.
			{label: "first update peaks to 4", op: update, at: 0, v: 4, want: 4, wantLast: 4},
			// q = A = 4: 4 + (4−4)·e⁻¹ = 4.
			{label: "held at its average", op: read, at: 1 * s, want: 4, wantLast: 4},
			// Fold 4 held for 1 s into A = 4: 4. No peak (0 < 4): A = 4, q = 0.
			{label: "drop to 0", op: update, at: 1 * s, v: 0, want: 4, wantLast: 0},
			// 0 + (4−0)·e⁻¹ = 4·0.36787944117144233.
			{label: "1τ at 0", op: read, at: 2 * s, want: 1.4715177646857693, wantLast: 0},
			// 0 + 4·e⁻⁴.
			{label: "4τ at 0", op: read, at: 5 * s, want: 0.07326255555493671, wantLast: 0},
			// Reads change nothing: back at 2 s it is still 4·e⁻¹.
			{label: "reads do not mutate", op: read, at: 2 * s, want: 1.4715177646857693, wantLast: 0},
			// Fold: A = 4·e⁻¹ ≈ 1.47 < 2, so the peak step sets A = 2.
			{label: "rise above the average", op: update, at: 2 * s, v: 2, want: 2, wantLast: 2},
			// Fold 2 held for 1 s into A = 2: 2. No peak (1 < 2): A = 2, q = 1.
			{label: "fall to 1", op: update, at: 3 * s, v: 1, want: 2, wantLast: 1},
			// 1 + (2−1)·e^(−½) = 1 + 0.6065306597126334.
			{label: "τ/2 at 1", op: read, at: 3500 * time.Millisecond, want: 1.6065306597126334, wantLast: 1},
			// Fold: A = 1.6065306597126334; q + 0.5 = 1.5 < A: no peak step.
			{label: "add +0.5 below the average", op: addOp, at: 3500 * time.Millisecond, v: 0.5, want: 1.6065306597126334, wantLast: 1.5},
			// 1.5 + (1.6065306597126334−1.5)·e⁻¹ = 1.5 + 0.1065306597126334·0.36787944117144233.
			{label: "1τ at 1.5", op: read, at: 4500 * time.Millisecond, want: 1.5391904395627087, wantLast: 1.5},
			// Fold as the read above; q = 1.5 − 1.5 = 0 is below A.
			{label: "add −1.5 back to 0", op: addOp, at: 4500 * time.Millisecond, v: -1.5, want: 1.5391904395627087, wantLast: 0},
			// 0 + 1.5391904395627087·e⁻² = 1.5391904395627087·0.1353352832366127.
			{label: "2τ at 0", op: read, at: 6500 * time.Millisecond, want: 0.20830677409330559, wantLast: 0},
		},
	}, {
		// Negative values are averaged like any other; the peak step only
		// moves up.
		label: "negative values",
		tau:   s,
		steps: []step{
			// The first update folds 0 into 0; −2 < 0: no peak. A = 0, q = −2.
			{label: "first update below 0", op: update, at: 0, v: -2, want: 0, wantLast: -2},
			// −2 + (0−(−2))·e⁻¹ = −2·(1 − e⁻¹).
			{label: "1τ at −2", op: read, at: 1 * s, want: -1.2642411176571153, wantLast: -2},
			// Fold as above; 1 > A: peak step to 1.
			{label: "rise to 1", op: addOp, at: 1 * s, v: 3, want: 1, wantLast: 1},
		},
	}, {
		// A burst shows at its full height at once and decays with τ
		// (τ = 30 s, after 100τ idle at 0).
		label: "peak and decay",
		tau:   30 * s,
		steps: []step{
			{label: "idle at 0", op: update, at: 0, v: 0, want: 0, wantLast: 0},
			{label: "still 0 after 100τ", op: read, at: 3000 * s, want: 0, wantLast: 0},
			// A burst of 100 arrives and drains at one instant.
			{label: "the burst", op: addOp, at: 3000 * s, v: 100, want: 100, wantLast: 100},
			{label: "drained at the same instant", op: addOp, at: 3000 * s, v: -100, want: 100, wantLast: 0},
			// 1τ later: 100·e⁻¹.
			{label: "1τ after", op: read, at: 3030 * s, want: 36.787944117144233, wantLast: 0},
			// 10τ later: 100·e⁻¹⁰, below 1e-4 of the peak (checked in
			// TestDecayBelowAfterTenTau).
			{label: "10τ after", op: read, at: 3300 * s, want: 0.004539992976248485, wantLast: 0},
		},
	}} {
		t.Run(tc.label, func(t *testing.T) {
			runSteps(t, New(tc.tau), tc.steps)
		})
	}
}

// TestDecayBelowAfterTenTau: a burst decays below 1e-4 of its height after
// 10τ idle.
func TestDecayBelowAfterTenTau(t *testing.T) {
	for _, tau := range []time.Duration{time.Millisecond, time.Second, 30 * time.Second, time.Hour} {
		p := New(tau).UpdateAt(t0, 100)
		p = p.UpdateAt(t0, 0)
		if got := p.ValueAt(t0.Add(10 * tau)); got >= 1e-4*100 {
			t.Errorf("τ = %v: 10τ after a burst of 100: ValueAt = %v, want below 1e-4 of the peak", tau, got)
		}
	}
}

// TestClockBackwards: a time before the latest update counts as no time
// passed and does not move the latest update time back.
func TestClockBackwards(t *testing.T) {
	const s = time.Second
	for _, tc := range []struct {
		label string
		apply func(p Peak) Peak
	}{
		{label: "UpdateAt", apply: func(p Peak) Peak { return p.UpdateAt(at(5*s), 0) }},
		{label: "add", apply: func(p Peak) Peak { return add(p, at(5*s), -2) }},
	} {
		t.Run(tc.label, func(t *testing.T) {
			p := New(s).UpdateAt(at(10*s), 2) // A = 2, q = 2, last = 10 s
			p = tc.apply(p)
			// Back in time: no fold, no peak (0 < 2): A = 2, q = 0.
			if got := p.Last(); got != 0 {
				t.Errorf("Last = %v, want 0", got)
			}
			// Reads before the latest update see no time passed.
			for _, d := range []time.Duration{3 * s, 5 * s, 10 * s} {
				if got := p.ValueAt(at(d)); got != 2 {
					t.Errorf("ValueAt(t0+%v) = %v, want 2", d, got)
				}
			}
			// last stayed at 10 s: 2·e⁻¹ at 11 s (2·e⁻⁶ had it moved to 5 s).
			if got, want := p.ValueAt(at(11*s)), 0.7357588823428847; !approx(got, want) {
				t.Errorf("ValueAt(t0+11s) = %v, want 2·e⁻¹ = %v", got, want)
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
		apply func(p Peak) Peak
	}{
		{label: "update NaN", apply: func(p Peak) Peak { return p.UpdateAt(at(5*s), math.NaN()) }},
		{label: "update +Inf", apply: func(p Peak) Peak { return p.UpdateAt(at(5*s), math.Inf(1)) }},
		{label: "update -Inf", apply: func(p Peak) Peak { return p.UpdateAt(at(5*s), math.Inf(-1)) }},
		{label: "add NaN", apply: func(p Peak) Peak { return add(p, at(5*s), math.NaN()) }},
		{label: "add +Inf", apply: func(p Peak) Peak { return add(p, at(5*s), math.Inf(1)) }},
		{label: "add -Inf", apply: func(p Peak) Peak { return add(p, at(5*s), math.Inf(-1)) }},
	} {
		t.Run(tc.label, func(t *testing.T) {
			p := New(s).UpdateAt(at(0), 4)
			p = p.UpdateAt(at(1*s), 0) // A = 4, q = 0, last = 1 s
			p = tc.apply(p)
			if got := p.Last(); got != 0 {
				t.Errorf("Last = %v, want 0", got)
			}
			// Still 4·e⁻² at 3 s: last is still 1 s (4 had it moved to 5 s).
			if got, want := p.ValueAt(at(3*s)), 0.5413411329464508; !approx(got, want) {
				t.Errorf("ValueAt(t0+3s) = %v, want 4·e⁻² = %v", got, want)
			}
		})
	}
}

// TestAddOverflow: an add whose sum is not finite is ignored, and folds of
// values near ±MaxFloat64 stay finite.
func TestAddOverflow(t *testing.T) {
	p := New(time.Second)
	p = add(p, at(0), math.MaxFloat64)
	p = add(p, at(0), math.MaxFloat64) // +Inf: ignored
	if got := p.Last(); got != math.MaxFloat64 {
		t.Errorf("Last = %v, want MaxFloat64", got)
	}
	p = add(p, at(0), -math.MaxFloat64)
	if got := p.Last(); got != 0 {
		t.Errorf("Last = %v, want 0 after +Max, (ignored) +Max, −Max", got)
	}
	if got := p.ValueAt(at(0)); got != math.MaxFloat64 {
		t.Errorf("ValueAt = %v, want the peak MaxFloat64", got)
	}
	p = p.UpdateAt(at(0), -math.MaxFloat64)
	for _, d := range []time.Duration{1, time.Second, time.Hour} {
		if got := p.ValueAt(at(d)); math.IsNaN(got) || math.IsInf(got, 0) {
			t.Errorf("ValueAt(t0+%v) = %v, want finite", d, got)
		}
	}
}

// TestZeroPeak: the zero Peak has τ = 0; it reports the value set, or the
// peak at the instant of an update.
func TestZeroPeak(t *testing.T) {
	var p Peak
	if got := p.ValueAt(t0); got != 0 {
		t.Errorf("ValueAt before any update = %v, want 0", got)
	}
	p = p.UpdateAt(t0, 3)
	p = p.UpdateAt(t0, 1)
	if got := p.ValueAt(t0); got != 3 {
		t.Errorf("ValueAt at the instant = %v, want the peak 3", got)
	}
	if got := p.ValueAt(t0.Add(time.Nanosecond)); got != 1 {
		t.Errorf("ValueAt 1ns later = %v, want 1", got)
	}
	if got := p.Last(); got != 1 {
		t.Errorf("Last = %v, want 1", got)
	}
	later := t0.Add(time.Hour)
	p = add(p, later, 4)
	if got := p.ValueAt(later); got != 5 {
		t.Errorf("ValueAt after adding 4 an hour later = %v, want 5", got)
	}
}

// TestUpdateReturnsANewPeak: UpdateAt returns the new Peak and leaves the
// one it was called on as it was.
func TestUpdateReturnsANewPeak(t *testing.T) {
	p := New(time.Second)
	for i, v := range []float64{3, 1, 7, 0, 2} {
		when := t0.Add(time.Duration(i) * 700 * time.Millisecond)
		before := p
		read := when.Add(300 * time.Millisecond)
		beforeValue := before.ValueAt(read)
		p = p.UpdateAt(when, v)
		if before.ValueAt(read) != beforeValue || i > 0 && before.Last() == v {
			t.Fatalf("update %d changed the Peak it was called on", i)
		}
		if p.Last() != v {
			t.Fatalf("update %d: Last = %v, want %v", i, p.Last(), v)
		}
	}
}

// TestFoldStaysBetween: a fold lies between the average and the held value
// even where rounding of A·w + held·(1−w) alone would step outside (which
// happens for values a few ulps apart), and stays finite near MaxFloat64.
func TestFoldStaysBetween(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 100000 {
		var avg, cur float64
		switch i % 3 {
		case 0: // a few ulps apart
			avg = r.Float64() * 100
			cur = avg + r.Float64()*1e-13
		case 1:
			avg = math.MaxFloat64 * (1 - r.Float64()*1e-10)
			cur = math.MaxFloat64
		case 2:
			avg, cur = -math.MaxFloat64, math.MaxFloat64
		}
		if r.IntN(2) == 0 {
			avg, cur = cur, avg
		}
		p := Peak{tau: time.Second, avg: avg, cur: cur, last: t0, set: true}
		dt := time.Duration(r.Int64N(int64(5 * time.Second)))
		got := p.ValueAt(t0.Add(dt))
		if lo, hi := min(avg, cur), max(avg, cur); !(got >= lo && got <= hi) {
			t.Fatalf("fold(%v, %v) over %v = %v, outside [%v, %v]", avg, cur, dt, got, lo, hi)
		}
	}
}

// TestWeight: weight is exp(−dt/τ), exactly from dt = τ/1024 on and within
// the second-order expansion's remainder (x³/6) below; 0 for τ ≤ 0.
func TestWeight(t *testing.T) {
	for _, tc := range []struct {
		label string
		dt    time.Duration
		tau   time.Duration
		exact bool
	}{
		{label: "1 ns of 1 h", dt: 1, tau: time.Hour},
		{label: "1 µs of 1 h", dt: time.Microsecond, tau: time.Hour},
		{label: "1 ms of 1 s", dt: time.Millisecond, tau: time.Second, exact: true}, // x = 1/1000 > 1/1024
		{label: "just below τ/1024", dt: 1024*time.Microsecond - 1, tau: 1024 * 1024 * time.Microsecond},
		{label: "τ/1024", dt: time.Microsecond, tau: 1024 * time.Microsecond, exact: true},
		{label: "τ/2", dt: 500 * time.Millisecond, tau: time.Second, exact: true},
		{label: "10τ", dt: 10 * time.Second, tau: time.Second, exact: true},
		{label: "τ = 0", dt: time.Second, tau: 0},
		{label: "τ < 0", dt: time.Second, tau: -time.Second},
	} {
		t.Run(tc.label, func(t *testing.T) {
			got := weight(tc.dt, tc.tau)
			if tc.tau <= 0 {
				if got != 0 {
					t.Errorf("weight(%v, %v) = %v, want 0", tc.dt, tc.tau, got)
				}
				return
			}
			x := float64(tc.dt) / float64(tc.tau)
			want := math.Exp(-x)
			if tc.exact && got != want {
				t.Errorf("weight(%v, %v) = %v, want exp(−%v) = %v", tc.dt, tc.tau, got, x, want)
			}
			if bound := x * x * x / 6; math.Abs(got-want) > bound+1e-16 {
				t.Errorf("weight(%v, %v) = %v, exp(−%v) = %v: error %g above x³/6 = %g", tc.dt, tc.tau, got, x, want, math.Abs(got-want), bound)
			}
		})
	}
}

// fuzzRecord is the size of one operation in FuzzPeak's input: a kind byte,
// a signed time step in nanoseconds (8 bytes) and a float64 (8 bytes).
const fuzzRecord = 17

// encodeOps builds FuzzPeak input from (kind, step, value) triples.
func encodeOps(ops ...fuzzOp) []byte {
	var b []byte
	for _, o := range ops {
		b = append(b, o.kind)
		b = binary.LittleEndian.AppendUint64(b, uint64(o.step))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(o.v))
	}
	return b
}

type fuzzOp struct {
	kind byte // 0 update, 1 add, 2 read
	step time.Duration
	v    float64
}

// FuzzPeak drives a Peak through arbitrary updates, adds and reads at times
// that may step backwards (τ > 0: New's callers reject the rest), and
// checks that
//   - Last follows the model: non-finite input and non-finite sums ignored;
//   - every read is finite, at least Last, and within the least and greatest
//     of 0 and the values set — for non-negative input, within [0, max set].
func FuzzPeak(f *testing.F) {
	type op = fuzzOp
	const s = int64(time.Second)
	f.Add(s, encodeOps())
	f.Add(int64(0), encodeOps(op{0, 0, 1}))
	f.Add(-s, encodeOps(op{0, 0, 1}))
	f.Add(s, encodeOps(op{0, 0, 4}, op{0, time.Second, 0}, op{2, time.Second, 0}, op{0, 0, 2}, op{1, time.Second, -1}))
	f.Add(s, encodeOps(op{1, 0, 1}, op{1, time.Millisecond, 1}, op{1, time.Millisecond, -1}, op{1, time.Millisecond, -1}, op{2, time.Hour, 0}))
	f.Add(s, encodeOps(op{0, 10 * time.Second, 2}, op{0, -5 * time.Second, 0}, op{2, -time.Second, 0}, op{2, 7 * time.Second, 0}))
	f.Add(s, encodeOps(op{0, 0, math.NaN()}, op{1, 0, math.Inf(1)}, op{0, 0, math.Inf(-1)}, op{2, 0, 0}))
	f.Add(int64(1), encodeOps(op{1, 0, math.MaxFloat64}, op{1, 1, math.MaxFloat64}, op{0, 1, -math.MaxFloat64}, op{2, 1, 0}))
	f.Add(int64(math.MaxInt64), encodeOps(op{0, math.MaxInt64, 1e300}, op{0, math.MinInt64, 5e-324}, op{2, math.MaxInt64, 0}))
	f.Add(s, encodeOps(op{0, 0, -3}, op{1, time.Second, 5}, op{2, time.Second, 0}))
	f.Add(int64(time.Hour), encodeOps(op{0, 0, 7}, op{1, time.Microsecond, -1}, op{1, time.Microsecond, -6}, op{2, time.Microsecond, 0}))

	f.Fuzz(func(t *testing.T, tauNs int64, data []byte) {
		tau := time.Duration(tauNs)
		if tau <= 0 {
			return
		}
		p := New(tau)
		now := t0
		last := 0.0        // the model of Last
		lo, hi := 0.0, 0.0 // least and greatest of 0 and the values set
		for len(data) >= fuzzRecord {
			kind := data[0] % 3
			step := time.Duration(binary.LittleEndian.Uint64(data[1:]))
			v := math.Float64frombits(binary.LittleEndian.Uint64(data[9:]))
			data = data[fuzzRecord:]
			now = now.Add(step)
			switch kind {
			case 0:
				p = p.UpdateAt(now, v)
				if !math.IsNaN(v) && !math.IsInf(v, 0) {
					last = v
				}
			case 1:
				p = add(p, now, v)
				if sum := last + v; !math.IsNaN(sum) && !math.IsInf(sum, 0) {
					last = sum
				}
			}
			lo, hi = min(lo, last), max(hi, last)
			if got := p.Last(); got != last {
				t.Fatalf("Last = %v, want %v", got, last)
			}
			got := p.ValueAt(now)
			if math.IsNaN(got) || math.IsInf(got, 0) {
				t.Fatalf("ValueAt = %v, want finite", got)
			}
			if got < lo || got > hi {
				t.Fatalf("ValueAt = %v, want within [%v, %v]", got, lo, hi)
			}
			if got < last {
				t.Fatalf("ValueAt = %v, below Last = %v", got, last)
			}
		}
	})
}
