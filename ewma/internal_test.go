package ewma

import (
	"testing"
	"time"

	"github.com/quietpatch/quietpatch/internal/peak"
)

// A Gauge is the arithmetic of package peak under a lock: the same updates
// give the same reads and the same value held.
func TestGaugeIsPeak(t *testing.T) {
	t0 := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	g, err := New(time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := peak.New(time.Second)
	for i, v := range []float64{3, 1, 7, 0, 2} {
		at := t0.Add(time.Duration(i) * 700 * time.Millisecond)
		g.UpdateAt(at, v)
		p = p.UpdateAt(at, v)
		if read := at.Add(300 * time.Millisecond); p.ValueAt(read) != g.ValueAt(read) || p.Last() != g.p.Last() {
			t.Fatalf("update %d: Peak reads %v (last %v), Gauge %v (last %v)", i, p.ValueAt(read), p.Last(), g.ValueAt(read), g.p.Last())
		}
	}
}
