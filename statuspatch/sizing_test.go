package statuspatch

import (
	"testing"
	"time"
)

func TestSuggestCapacity(t *testing.T) {
	cases := []struct {
		label    string
		interval time.Duration
		latency  time.Duration
		qps      float32
		workers  int
		want     int
	}{
		{"design: 1 in flight ≈ 144/s, limiter off", 10 * time.Second, time.Second / 144, 0, 1, 1440},
		{"design: client-go defaults QPS 5", 10 * time.Second, time.Second / 144, 5, 1, 50},
		{"design: 4 in flight ≈ 265/s", 10 * time.Second, 4 * time.Second / 265, 0, 4, 2650},
		{"design: 16 in flight ≈ 300/s", 10 * time.Second, 16 * time.Second / 300, 0, 16, 3000},
		{"QPS above what the server absorbs does not count", 10 * time.Second, 10 * time.Millisecond, 1000, 1, 1000},
		{"QPS alone, latency unknown", 10 * time.Second, 0, 50, 1, 500},
		{"workers < 1 count as 1", 10 * time.Second, 10 * time.Millisecond, 0, 0, 1000},
		{"fractions round up", time.Second, 300 * time.Millisecond, 0, 1, 4},
		{"at least 1", time.Millisecond, time.Second, 0, 1, 1},
		{"no interval", 0, time.Millisecond, 0, 1, 0},
		{"negative interval", -time.Second, time.Millisecond, 0, 1, 0},
		{"neither latency nor QPS", 10 * time.Second, 0, 0, 1, 0},
		{"huge figures are capped", 1000 * time.Hour, time.Nanosecond, 0, 1000, 1<<31 - 1},
	}
	for _, c := range cases {
		if got := SuggestCapacity(c.interval, c.latency, c.qps, c.workers); got != c.want {
			t.Errorf("%s: SuggestCapacity(%s, %s, %v, %d) = %d, want %d", c.label, c.interval, c.latency, c.qps, c.workers, got, c.want)
		}
	}
}
