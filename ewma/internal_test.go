package ewma

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestFoldStaysBetween: a fold lies between the average and the held value
// even where rounding of A·w + held·(1−w) alone would step outside (which
// happens for values a few ulps apart), and stays finite near MaxFloat64.
func TestFoldStaysBetween(t *testing.T) {
	t0 := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
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
		g := Peak{tau: time.Second, avg: avg, cur: cur, last: t0, set: true}
		dt := time.Duration(r.Int64N(int64(5 * time.Second)))
		got := g.ValueAt(t0.Add(dt))
		if lo, hi := min(avg, cur), max(avg, cur); !(got >= lo && got <= hi) {
			t.Fatalf("fold(%v, %v) over %v = %v, outside [%v, %v]", avg, cur, dt, got, lo, hi)
		}
	}
}
