package ewma_test

import (
	"errors"
	"fmt"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/ewma"
)

// A queue records its depth with Update on every insertion and every
// removal. A burst of 50 items that drains within a second is
// reported at its full height; one τ (30 s) later 50·e⁻¹ of it remains, ten τ
// later 50·e⁻¹⁰. Sampling the instant depth every 30 s would most likely
// never have seen it.
func Example() {
	start := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakeClock(start)
	depth, err := ewma.New(30*time.Second, clk)
	if err != nil {
		fmt.Println(err)
		return
	}

	n := 0         // the queue's depth
	for range 50 { // a burst of 50 insertions
		n++
		depth.Update(float64(n))
	}
	clk.Step(time.Second)
	for range 50 { // all drained a second later
		n--
		depth.Update(float64(n))
	}
	for _, d := range []time.Duration{0, 30 * time.Second, 300 * time.Second} {
		clk.SetTime(start.Add(time.Second + d))
		fmt.Printf("%v after the burst: depth %v, Peak-EWMA %.4f\n", d, n, depth.Value())
	}
	// Output:
	// 0s after the burst: depth 0, Peak-EWMA 50.0000
	// 30s after the burst: depth 0, Peak-EWMA 18.3940
	// 5m0s after the burst: depth 0, Peak-EWMA 0.0023
}

// Explicit times make the arithmetic visible: with τ = 1 s, one τ after the
// value dropped from 4 to 0 what remains is 4·e⁻¹, and a rise above the
// average is taken at once.
func ExampleGauge_UpdateAt() {
	t0 := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	g, err := ewma.New(time.Second, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	g.UpdateAt(t0, 4)                                      // first update: the average jumps to 4
	g.UpdateAt(t0.Add(time.Second), 0)                     // 4 was held for 1 s: still 4
	fmt.Printf("%.4f\n", g.ValueAt(t0.Add(2*time.Second))) // 4·e⁻¹
	g.UpdateAt(t0.Add(2*time.Second), 2)                   // 2 > 4·e⁻¹: peak step
	fmt.Printf("%.4f\n", g.ValueAt(t0.Add(2*time.Second)))
	g.UpdateAt(t0, 9) // in the past: no time passes, but the peak counts
	fmt.Printf("%.4f\n", g.ValueAt(t0.Add(2*time.Second)))
	// Output:
	// 1.4715
	// 2.0000
	// 9.0000
}

// New rejects a time constant that is not positive with a
// [quietpatch.ConfigError] naming the field.
func ExampleNew() {
	_, err := ewma.New(0, nil)
	fmt.Println(err)
	var ce *quietpatch.ConfigError
	fmt.Println(errors.As(err, &ce), ce.Field)
	// Output:
	// quietpatch: invalid config: tau must be > 0, got 0s
	// true tau
}
