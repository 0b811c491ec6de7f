package ewma

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestWeight: the polynomial used for small dt/τ agrees with math.Exp to
// within 2 ulps, and the weight is continuous where it switches to math.Exp.
func TestWeight(t *testing.T) {
	ulp := func(x float64) float64 { return math.Nextafter(x, 2) - x }
	xs := []float64{5e-324, 1e-300, 1e-18, 1e-12, 1e-9, 1e-6, 1e-4, 1e-3, smallX / 2, math.Nextafter(smallX, 0)}
	for i := 1; i <= 1000; i++ {
		xs = append(xs, smallX*float64(i)/1000)
	}
	for _, x := range xs {
		got, want := weight(x), math.Exp(-x)
		if d := math.Abs(got - want); d > 2*ulp(want) {
			t.Errorf("weight(%g) = %.17g, math.Exp(−x) = %.17g: %g ulps apart", x, got, want, d/ulp(want))
		}
	}
	below, at := weight(math.Nextafter(smallX, 0)), weight(smallX)
	if d := math.Abs(below - at); d > 2*ulp(at) {
		t.Errorf("weight jumps by %g at the switch to math.Exp (%.17g → %.17g)", d, below, at)
	}
	for _, tc := range []struct {
		label string
		x     float64
		want  float64
	}{
		{label: "one τ", x: 1, want: math.Exp(-1)},
		{label: "+Inf (τ = 0)", x: math.Inf(1), want: 0},
		{label: "beyond underflow", x: 1e6, want: 0},
	} {
		if got := weight(tc.x); got != tc.want {
			t.Errorf("%s: weight(%g) = %v, want %v", tc.label, tc.x, got, tc.want)
		}
	}
}

// TestFoldStaysBetween: a fold lies between the average and the held value
// even where rounding of A·w + held·(1−w) alone would step outside (which
// happens for values a few ulps apart), and stays finite near MaxFloat64.
func TestFoldStaysBetween(t *testing.T) {
	g := &Gauge{tau: float64(time.Second)}
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
		dt := r.Int64N(int64(5 * time.Second))
		got := g.fold(avg, cur, 0, dt)
		if lo, hi := min(avg, cur), max(avg, cur); !(got >= lo && got <= hi) {
			t.Fatalf("fold(%v, %v) over %v = %v, outside [%v, %v]", avg, cur, time.Duration(dt), got, lo, hi)
		}
	}
}
