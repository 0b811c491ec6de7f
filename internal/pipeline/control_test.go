package pipeline

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/quietpatch/quietpatch/internal/peak"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// limT0 is the start time of the limit's tests.
var limT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// crig drives a control with explicit times: it is a value, next its
// only move.
type crig struct {
	t   *testing.T
	c   control
	now time.Time
}

func newCrig(t *testing.T, adaptive bool, max int) *crig {
	return &crig{t: t, c: newControl(limT0, adaptive, max), now: limT0}
}

// call takes one call that took latency and ended with err, with inFlight
// calls in flight at its end (saturating the limit when inFlight >= the
// limit). est, when positive, first sets the latency estimate (a
// Peak-EWMA) to est, and its copy that sets the round's length.
func (r *crig) call(latency, est time.Duration, err error, inFlight int) {
	if est > 0 {
		p := peak.New(latencyTau)
		r.c.est, r.c.estimate = p.UpdateAt(r.now, est.Seconds()), est.Seconds()
	}
	r.c = r.c.next(sample{at: r.now, latency: latency, outcome: outcome.Of(err), saturated: inFlight >= r.c.size()})
}

func (r *crig) step(d time.Duration) { r.now = r.now.Add(d) }

// round steps past one round and takes one call that ends it.
func (r *crig) round(latency, est time.Duration, err error, inFlight int) {
	r.step(max(limitRound, est))
	r.call(latency, est, err, inFlight)
}

// The adaptive limit step by step: slow start, then additive increase and
// a multiplicative decrease on rising latency, as a table of rounds.
func TestControlSlowStartThenAdditiveIncrease(t *testing.T) {
	const ms = time.Millisecond
	r := newCrig(t, true, 64)
	if r.c.limit != 1 {
		t.Fatalf("initial limit %v, want 1", r.c.limit)
	}
	for _, s := range []struct {
		label    string
		within   time.Duration // > 0: a call this long into the round, not ending it
		latency  time.Duration // the call's and the estimate's
		inFlight int           // -1: the limit, in use
		want     float64
	}{
		{"slow start: latency at its best, the limit in use: doubling", 0, 10 * ms, -1, 2},
		{"slow start", 0, 10 * ms, -1, 4},
		{"slow start", 0, 10 * ms, -1, 8},
		{"slow start", 0, 10 * ms, -1, 16},
		{"a call within the round decides nothing", 10 * ms, 10 * ms, 1, 16},
		{"a round where the limit was not in use: no growth", 0, 10 * ms, 1, 16},
		{"latency rises: 16 × (1 − 10/30) ≈ 10.7 calls wait > beta: ×0.9, slow start over", 0, 30 * ms, 16, 14.4},
		{"holds: 14 × (1 − 10/12) = 2.3 wait (> beta) but the estimate is 1.2 × the best (< 1.25)", 0, 12 * ms, 14, 14.4},
		{"back at its best: +1 per round", 0, 10 * ms, 14, 15.4},
		{"within 1.1 × the best the latency holds: 15 × (1 − 10/10.5) = 0.7 > alpha, still +1", 0, 10500 * time.Microsecond, 15, 16.4},
	} {
		n := s.inFlight
		if n < 0 {
			n = r.c.size()
		}
		if s.within > 0 {
			r.step(s.within)
			r.call(s.latency, s.latency, nil, n)
		} else {
			r.round(s.latency, s.latency, nil, n)
		}
		if math.Abs(r.c.limit-s.want) > 1e-9 {
			t.Fatalf("%s: limit %v, want %v", s.label, r.c.limit, s.want)
		}
	}
}

// The best latency is the lowest round mean, comparable with the
// estimate (a Peak-EWMA of round means): a round of calls of 2 and 18 ms
// has a mean of 10 ms, and at that best nothing queues, so the limit
// grows. Taken from the fastest single call (2 ms), the same round would
// read as 8 of 10 calls queued at 5× the best, and shrink the limit.
func TestControlBestIsTheLowestRoundMean(t *testing.T) {
	r := newCrig(t, true, 64)
	r.c.limit, r.c.slowStart = 10, false
	r.step(time.Millisecond)
	r.call(2*time.Millisecond, 0, nil, 10) // inside the round
	r.round(18*time.Millisecond, 10*time.Millisecond, nil, 10)
	if got := r.c.limit; got != 11 {
		t.Fatalf("limit %v after a round of 2 and 18 ms calls, want 11 (best = the round's mean, 10 ms)", got)
	}
}

// Throttled and timed-out calls halve the limit at once, at most once per
// round; never below 1.
func TestControlThrottledAndTimeoutsHalve(t *testing.T) {
	for _, tc := range []struct {
		label string
		err   error
	}{
		{"429", apierrors.NewTooManyRequests("slow down", 0)},
		{"timeout", apierrors.NewTimeoutError("gave up", 0)},
		{"deadline", errors.Join(errors.New("patch"), contextDeadline{})},
	} {
		t.Run(tc.label, func(t *testing.T) {
			r := newCrig(t, true, 64)
			r.c.limit = 16
			r.call(5*time.Millisecond, 5*time.Millisecond, tc.err, 16)
			if r.c.limit != 8 {
				t.Errorf("limit %v, want 8", r.c.limit)
			}
			r.step(10 * time.Millisecond)
			r.call(5*time.Millisecond, 5*time.Millisecond, tc.err, 8)
			if r.c.limit != 8 {
				t.Errorf("limit %v after a second one within the round, want 8", r.c.limit)
			}
			r.step(time.Second)
			r.c.limit = 1.5
			r.call(5*time.Millisecond, 5*time.Millisecond, tc.err, 1)
			if r.c.limit != 1 {
				t.Errorf("limit %v, want the floor 1", r.c.limit)
			}
		})
	}
}

type contextDeadline struct{}

func (contextDeadline) Error() string   { return "context deadline exceeded" }
func (contextDeadline) Timeout() bool   { return true }
func (contextDeadline) Temporary() bool { return true }

func TestControlBounds(t *testing.T) {
	r := newCrig(t, true, 3)
	for range 10 {
		r.round(time.Millisecond, time.Millisecond, nil, r.c.size())
	}
	if r.c.limit != 3 {
		t.Errorf("limit %v, want the maximum 3", r.c.limit)
	}
	fixed := newCrig(t, false, 7)
	fixed.call(time.Millisecond, time.Second, apierrors.NewTooManyRequests("x", 0), 7)
	for range 10 {
		fixed.round(time.Millisecond, 50*time.Millisecond, nil, 7)
	}
	if fixed.c.size() != 7 {
		t.Errorf("fixed limit moved to %v", fixed.c.limit)
	}
	if fixed.c.latencyAt(fixed.now) <= 0 {
		t.Error("a fixed limit estimates no latency")
	}
}

// Every window the limit probes the server's base latency with one call
// in flight for a round, then goes back to its value; the best latency is
// a minimum over the last one or two windows, so it rises again after a
// server became slower for good.
func TestControlProbesAndForgetsTheBestLatency(t *testing.T) {
	r := newCrig(t, true, 64)
	r.c.limit, r.c.slowStart = 10, false
	r.round(10*time.Millisecond, 10*time.Millisecond, nil, 1) // best 10 ms
	r.step(limitBestWindow)
	r.round(50*time.Millisecond, 50*time.Millisecond, nil, 10)
	if r.c.limit != 1 {
		t.Fatalf("limit %v at a new window, want a probe round at 1", r.c.limit)
	}
	// The drain rate (what the queue's capacity follows) is the limit's,
	// not the probe round's: 10 calls / the estimate.
	lat := r.c.latencyAt(r.now)
	if got, want := r.c.drainRateAt(r.now), 10/lat; math.Abs(got-want) > 1e-9 {
		t.Fatalf("drain rate during the probe round %.1f/s, want %.1f/s (10 calls / %.3f s)", got, want, lat)
	}
	r.round(50*time.Millisecond, 50*time.Millisecond, nil, 1)
	if r.c.limit != 10 {
		t.Fatalf("limit %v after the probe round, want 10 back", r.c.limit)
	}
	// The server is 50 ms now: two windows later 10 ms is forgotten, and
	// at 50 ms the limit grows again.
	for range 2 {
		r.step(limitBestWindow)
		r.round(50*time.Millisecond, 50*time.Millisecond, nil, 10) // probe starts
		r.round(50*time.Millisecond, 50*time.Millisecond, nil, 1)  // probe ends
	}
	before := r.c.limit
	r.round(50*time.Millisecond, 50*time.Millisecond, nil, r.c.size())
	if r.c.limit <= before {
		t.Errorf("at the new best latency the limit does not grow: %v → %v", before, r.c.limit)
	}
}

// The adaptive limit against a model server: throughput min(n/rtt, μ),
// latency max(rtt, n/μ) with n calls in flight, a backlog always waiting.
// Whatever the round-trip time, the limit settles just above the knee
// rtt·μ — the server busy, its latency at most about max(the base plus
// beta calls, 1.5 × the base) — so throughput reaches μ without piling
// calls up at the server.
func TestControlConvergesOnAModelServer(t *testing.T) {
	for _, tc := range []struct {
		rtt    time.Duration
		mu     float64 // patches/s the server absorbs
		spikes bool    // one call a second takes 60 ms longer (a GC pause)
	}{
		{3 * time.Millisecond, 600, false},
		{10 * time.Millisecond, 600, false},
		{50 * time.Millisecond, 600, false},
		{10 * time.Millisecond, 150, false},
		{3 * time.Millisecond, 600, true},
		{50 * time.Millisecond, 600, true},
	} {
		t.Run(fmt.Sprintf("rtt=%v,mu=%v,spikes=%v", tc.rtt, tc.mu, tc.spikes), func(t *testing.T) {
			c := newControl(limT0, true, DefaultMaxInFlight)
			now := limT0
			var doneLate float64
			end := 60 * time.Second
			nextSpike := time.Second
			for elapsed := time.Duration(0); elapsed < end; {
				n := c.size() // saturated: a backlog always waits
				lat := max(tc.rtt.Seconds(), float64(n)/tc.mu)
				sampled := lat
				if tc.spikes && elapsed >= nextSpike {
					sampled, nextSpike = lat+0.060, nextSpike+time.Second
				}
				// The n calls in flight complete over one latency.
				step := time.Duration(lat / float64(n) * float64(time.Second))
				now = now.Add(step)
				elapsed += step
				c = c.next(sample{at: now, latency: time.Duration(sampled * float64(time.Second)), outcome: outcome.OK, saturated: true})
				if elapsed > end/2 {
					doneLate++
				}
			}
			knee := tc.rtt.Seconds() * tc.mu
			throughput := doneLate / (end / 2).Seconds()
			t.Logf("limit %.1f (knee %.1f), throughput %.0f/s of %.0f", c.limit, knee, throughput, tc.mu)
			want := 0.95
			if tc.spikes {
				want = 0.9
			} else if top := max(knee+limitBeta+2, limitRatioLow*knee+2); c.limit < knee || c.limit > top {
				t.Errorf("limit %.1f, want within [knee %.1f, %.1f]", c.limit, knee, top)
			}
			if throughput < want*tc.mu {
				t.Errorf("throughput %.0f/s, want at least %.0f%% of %.0f", throughput, 100*want, tc.mu)
			}
		})
	}
}

// next is a function of its samples: the state it was called on does not
// change.
func TestControlNextChangesNothing(t *testing.T) {
	c := newControl(limT0, true, 64)
	before := c
	_ = c.next(sample{at: limT0.Add(time.Second), latency: 10 * time.Millisecond, outcome: outcome.OK, saturated: true})
	if c != before {
		t.Errorf("next changed its receiver: %+v, was %+v", c, before)
	}
}

// measuredLatency is the status PATCH latency of kube-apiserver 1.37 on 2
// cores with n calls in flight, as issue 32 measured it at 10,000 routes
// (1: 4.3 ms, 2: 5.8, 4: 11.4, 16: 40.5), interpolated; 64: 160 ms.
func measuredLatency(n int) time.Duration {
	pts := [][2]float64{{1, 4.3}, {2, 5.8}, {4, 11.4}, {16, 40.5}, {64, 160}}
	x := float64(min(n, 64))
	for i := 1; i < len(pts); i++ {
		if a, b := pts[i-1], pts[i]; x <= b[0] {
			return time.Duration((a[1] + (x-a[0])/(b[0]-a[0])*(b[1]-a[1])) * float64(time.Millisecond))
		}
	}
	return 160 * time.Millisecond
}

// On the server as measured — the rate rising little past 2 calls in
// flight while the latency climbs — the limit settles at the knee: 2 calls
// in flight, at least 0.85 of the rate of 16 (the neighbours' median
// latency ×2.3 there, against ×10 at 16), with or without ±20 % noise on
// each call.
func TestControlSettlesAtTheKneeOfTheMeasuredServer(t *testing.T) {
	best := 16 / measuredLatency(16).Seconds() // the rate of 16 in flight
	for _, noise := range []float64{0, 0.2} {
		c := newControl(limT0, true, DefaultMaxInFlight)
		now, end := limT0, 2*time.Minute
		var done, inFlight float64
		for i, elapsed := 0, time.Duration(0); elapsed < end; i++ {
			n := c.size()
			lat := measuredLatency(n)
			jitter := 1 + noise*(float64(i*7919%13)/6-1) // a fixed pattern in [1-noise, 1+noise]
			step := lat / time.Duration(n)
			now, elapsed = now.Add(step), elapsed+step
			c = c.next(sample{at: now, latency: time.Duration(float64(lat) * jitter), outcome: outcome.OK, saturated: true})
			if elapsed > end/2 {
				done++
				inFlight += float64(n)
			}
		}
		rate := done / (end / 2).Seconds()
		t.Logf("noise %.1f: %.2f calls in flight on average, %.0f/s (16 in flight: %.0f/s)", noise, inFlight/done, rate, best)
		if mean := inFlight / done; mean < 1.8 || mean > 3 {
			t.Errorf("noise %.1f: %.2f calls in flight on average, want the knee, 2 to 3", noise, mean)
		}
		if rate < 0.85*best {
			t.Errorf("noise %.1f: %.0f/s, want at least 0.85 of 16 in flight's %.0f/s", noise, rate, best)
		}
	}
}
