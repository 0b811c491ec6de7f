package ewma_test

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/quietpatch/quietpatch/ewma"
	"github.com/quietpatch/quietpatch/internal/base"
)

// fuzzRecord is the size of one operation in FuzzGauge's input: a kind byte,
// a signed time step in nanoseconds (8 bytes) and a float64 (8 bytes).
const fuzzRecord = 17

// encodeOps builds FuzzGauge input from (kind, step, value) triples.
func encodeOps(ops ...struct {
	kind byte
	step time.Duration
	v    float64
}) []byte {
	var b []byte
	for _, o := range ops {
		b = append(b, o.kind)
		b = binary.LittleEndian.AppendUint64(b, uint64(o.step))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(o.v))
	}
	return b
}

// FuzzGauge drives a gauge through arbitrary updates, changes by a delta
// (an update to the value held plus the delta, as a queue's depth changes)
// and reads at times that may step backwards, and checks that
//   - construction fails exactly for τ ≤ 0, with a *ConfigError naming tau;
//   - every read is finite, at least the value held (the model: non-finite
//     input and non-finite sums ignored), and within the least and greatest
//     of 0 and the values set — for non-negative input, within [0, max set].
//
// FuzzPeak in internal/peak checks the value held itself (Peak.Last).
func FuzzGauge(f *testing.F) {
	type op = struct {
		kind byte
		step time.Duration
		v    float64
	}
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

	f.Fuzz(func(t *testing.T, tauNs int64, data []byte) {
		tau := time.Duration(tauNs)
		g, err := ewma.New(tau, nil)
		if tau <= 0 {
			var ce *base.ConfigError
			if !errors.As(err, &ce) || ce.Field != "tau" || g != nil {
				t.Fatalf("New(%v) = %v, %v; want a *ConfigError naming tau", tau, g, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("New(%v): %v", tau, err)
		}
		now := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
		last := 0.0        // the model of the value held
		lo, hi := 0.0, 0.0 // least and greatest of 0 and the values set
		for len(data) >= fuzzRecord {
			kind := data[0] % 3
			step := time.Duration(binary.LittleEndian.Uint64(data[1:]))
			v := math.Float64frombits(binary.LittleEndian.Uint64(data[9:]))
			data = data[fuzzRecord:]
			now = now.Add(step)
			switch kind {
			case 0:
				g.UpdateAt(now, v)
				if !math.IsNaN(v) && !math.IsInf(v, 0) {
					last = v
				}
			case 1:
				sum := last + v
				g.UpdateAt(now, sum)
				if !math.IsNaN(sum) && !math.IsInf(sum, 0) {
					last = sum
				}
			}
			lo, hi = min(lo, last), max(hi, last)
			got := g.ValueAt(now)
			if math.IsNaN(got) || math.IsInf(got, 0) {
				t.Fatalf("ValueAt = %v, want finite", got)
			}
			if got < lo || got > hi {
				t.Fatalf("ValueAt = %v, want within [%v, %v]", got, lo, hi)
			}
			if got < last {
				t.Fatalf("ValueAt = %v, below the value held %v", got, last)
			}
		}
	})
}
