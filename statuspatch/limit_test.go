package statuspatch

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quietpatch/quietpatch/ewma"
)

// lrig drives a limiter with explicit times.
type lrig struct {
	t   *testing.T
	l   *limiter
	now time.Time
}

func newLrig(t *testing.T, adaptive bool, max int) *lrig {
	clk := clocktesting.NewFakePassiveClock(testStart())
	l, err := newLimiter(clk, adaptive, max)
	if err != nil {
		t.Fatal(err)
	}
	return &lrig{t: t, l: l, now: testStart()}
}

// call runs one call that took latency and ended with err, with n calls in
// flight at its end (saturating the limit when n >= limit). est, when
// positive, first sets the latency estimate (a Peak-EWMA) to est.
func (r *lrig) call(latency time.Duration, est time.Duration, err error, n int) {
	r.t.Helper()
	if est > 0 {
		r.l.est = mustGauge(r.t, r.l.clk)
		r.l.est.UpdateAt(r.now, est.Seconds())
	}
	r.l.mu.Lock()
	r.l.held, r.l.calls = n, n
	r.l.mu.Unlock()
	r.l.doneAt(r.now, latency, err)
}

func mustGauge(t *testing.T, clk clock.PassiveClock) *ewma.Gauge {
	g, err := ewma.New(latencyTau, clk)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func (r *lrig) limit() float64 {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	return r.l.limit
}

func (r *lrig) step(d time.Duration) { r.now = r.now.Add(d) }

// round steps past one round and runs one call that ends it.
func (r *lrig) round(latency, est time.Duration, err error, n int) {
	r.t.Helper()
	r.step(max(limitRound, est))
	r.call(latency, est, err, n)
}

func TestLimiterSlowStartThenAdditiveIncrease(t *testing.T) {
	r := newLrig(t, true, 64)
	if r.limit() != 1 {
		t.Fatalf("initial limit %v, want 1", r.limit())
	}
	// Latency at its best, the limit in use: doubling per round.
	for _, want := range []float64{2, 4, 8, 16} {
		r.round(10*time.Millisecond, 10*time.Millisecond, nil, int(r.limit()))
		if r.limit() != want {
			t.Fatalf("slow start: limit %v, want %v", r.limit(), want)
		}
	}
	// Calls within a round decide nothing.
	r.step(10 * time.Millisecond)
	r.call(10*time.Millisecond, 10*time.Millisecond, nil, 1)
	if r.limit() != 16 {
		t.Fatalf("a call within the round moved the limit to %v", r.limit())
	}
	// A round where the limit was not in use: no growth.
	r.round(10*time.Millisecond, 10*time.Millisecond, nil, 1)
	if r.limit() != 16 {
		t.Fatalf("unused round changed the limit to %v", r.limit())
	}
	// The latency rises: 16 × (1 − 10/30) ≈ 10.7 calls wait > beta: ×0.9,
	// and slow start is over.
	r.round(30*time.Millisecond, 30*time.Millisecond, nil, 16)
	if got := r.limit(); math.Abs(got-14.4) > 1e-9 {
		t.Fatalf("decrease: limit %v, want 14.4", got)
	}
	// Neither holding nor rising, the limit holds: 14.4 × (1 − 10/18) = 6.4
	// calls wait (more than alpha), but the estimate is 1.8 × the best
	// (below 2).
	r.round(18*time.Millisecond, 18*time.Millisecond, nil, 14)
	if got := r.limit(); math.Abs(got-14.4) > 1e-9 {
		t.Fatalf("hold: limit %v, want 14.4", got)
	}
	// Back at its best: +1 per round.
	r.round(10*time.Millisecond, 10*time.Millisecond, nil, 14)
	if got := r.limit(); math.Abs(got-15.4) > 1e-9 {
		t.Fatalf("additive increase: limit %v, want 15.4", got)
	}
	// Within 1.5 × the best the latency holds, however many calls that
	// seems to queue (a long round trip): 15.4 × (1 − 10/14) = 4.4 > alpha,
	// still +1.
	r.round(14*time.Millisecond, 14*time.Millisecond, nil, 15)
	if got := r.limit(); math.Abs(got-16.4) > 1e-9 {
		t.Fatalf("increase within 1.5 × the best: limit %v, want 16.4", got)
	}
}

// The best latency is the lowest round mean, comparable with the
// estimate (a Peak-EWMA of round means): a round of calls of 2 and 18 ms
// has a mean of 10 ms, and at that best nothing queues, so the limit
// grows. Taken from the fastest single call (2 ms), the same round would
// read as 8 of 10 calls queued at 5× the best, and shrink the limit.
func TestLimiterBestIsTheLowestRoundMean(t *testing.T) {
	r := newLrig(t, true, 64)
	r.l.limit, r.l.slowStart = 10, false
	r.step(time.Millisecond)
	r.call(2*time.Millisecond, 0, nil, 10) // inside the round
	r.round(18*time.Millisecond, 10*time.Millisecond, nil, 10)
	if got := r.limit(); got != 11 {
		t.Fatalf("limit %v after a round of 2 and 18 ms calls, want 11 (best = the round's mean, 10 ms)", got)
	}
}

// Throttled and timed-out calls halve the limit at once, at most once per
// round; never below 1.
func TestLimiterThrottledAndTimeoutsHalve(t *testing.T) {
	for _, tc := range []struct {
		label string
		err   error
	}{
		{"429", apierrors.NewTooManyRequests("slow down", 0)},
		{"timeout", apierrors.NewTimeoutError("gave up", 0)},
		{"deadline", errors.Join(errors.New("patch"), contextDeadline{})},
	} {
		t.Run(tc.label, func(t *testing.T) {
			r := newLrig(t, true, 64)
			r.l.limit = 16
			r.call(5*time.Millisecond, 5*time.Millisecond, tc.err, 16)
			if r.limit() != 8 {
				t.Errorf("limit %v, want 8", r.limit())
			}
			r.step(10 * time.Millisecond)
			r.call(5*time.Millisecond, 5*time.Millisecond, tc.err, 8)
			if r.limit() != 8 {
				t.Errorf("limit %v after a second one within the round, want 8", r.limit())
			}
			r.step(time.Second)
			r.l.limit = 1.5
			r.call(5*time.Millisecond, 5*time.Millisecond, tc.err, 1)
			if r.limit() != 1 {
				t.Errorf("limit %v, want the floor 1", r.limit())
			}
		})
	}
}

type contextDeadline struct{}

func (contextDeadline) Error() string   { return "context deadline exceeded" }
func (contextDeadline) Timeout() bool   { return true }
func (contextDeadline) Temporary() bool { return true }

// A 429 with Retry-After holds every call back until then, adaptive or
// fixed, and is counted once per window.
func TestLimiterHonoursRetryAfter(t *testing.T) {
	for _, adaptive := range []bool{true, false} {
		r := newLrig(t, adaptive, 4)
		if !r.l.tryAcquireAt(r.now) {
			t.Fatal("no permit at the start")
		}
		r.l.callStarted()
		r.l.doneAt(r.now, 5*time.Millisecond, apierrors.NewTooManyRequests("slow down", 2))
		if r.l.tryAcquireAt(r.now.Add(1999 * time.Millisecond)) {
			t.Errorf("adaptive=%v: a permit inside the Retry-After window", adaptive)
		}
		if !r.l.tryAcquireAt(r.now.Add(2 * time.Second)) {
			t.Errorf("adaptive=%v: no permit once the window ended", adaptive)
		}
		if st := r.l.stateAt(r.now.Add(500 * time.Millisecond)); st.backoff != 1500*time.Millisecond || st.retryAfters != 1 {
			t.Errorf("adaptive=%v: backoff %v, retry-afters %d; want 1.5s and 1", adaptive, st.backoff, st.retryAfters)
		}
	}
}

func TestLimiterBounds(t *testing.T) {
	r := newLrig(t, true, 3)
	for range 10 {
		r.round(time.Millisecond, time.Millisecond, nil, int(r.limit()))
	}
	if r.limit() != 3 {
		t.Errorf("limit %v, want the maximum 3", r.limit())
	}
	fixed := newLrig(t, false, 7)
	fixed.call(time.Millisecond, time.Second, apierrors.NewTooManyRequests("x", 0), 7)
	if fixed.limit() != 7 {
		t.Errorf("fixed limit moved to %v", fixed.limit())
	}
	fixed.l.held = 0
	held := 0
	for fixed.l.tryAcquireAt(fixed.now) {
		held++
	}
	if held != 7 {
		t.Errorf("fixed limiter admitted %d, want 7", held)
	}
}

// Every window the limiter probes the server's base latency with one call
// in flight for a round, then goes back to its limit; the best latency is a
// minimum over the last one or two windows, so it rises again after a
// server became slower for good.
func TestLimiterProbesAndForgetsTheBestLatency(t *testing.T) {
	r := newLrig(t, true, 64)
	r.l.limit, r.l.slowStart = 10, false
	r.round(10*time.Millisecond, 10*time.Millisecond, nil, 1) // best 10 ms
	r.step(limitBestWindow)
	r.round(50*time.Millisecond, 50*time.Millisecond, nil, 10)
	if r.limit() != 1 {
		t.Fatalf("limit %v at a new window, want a probe round at 1", r.limit())
	}
	// The drain rate (what the queue's capacity follows) is the limit's,
	// not the probe round's: 10 calls / the estimate.
	st := r.l.stateAt(r.now)
	if got, want := st.drainRate, 10/st.latency; math.Abs(got-want) > 1e-9 {
		t.Fatalf("drain rate during the probe round %.1f/s, want %.1f/s (10 calls / %.3f s)", got, want, st.latency)
	}
	r.round(50*time.Millisecond, 50*time.Millisecond, nil, 1)
	if r.limit() != 10 {
		t.Fatalf("limit %v after the probe round, want 10 back", r.limit())
	}
	// The server is 50 ms now: two windows later 10 ms is forgotten, and
	// at 50 ms the limit grows again.
	for range 2 {
		r.step(limitBestWindow)
		r.round(50*time.Millisecond, 50*time.Millisecond, nil, 10) // probe starts
		r.round(50*time.Millisecond, 50*time.Millisecond, nil, 1)  // probe ends
	}
	before := r.limit()
	r.round(50*time.Millisecond, 50*time.Millisecond, nil, int(before))
	if r.limit() <= before {
		t.Errorf("at the new best latency the limit does not grow: %v → %v", before, r.limit())
	}
}

// The adaptive limit against a model server: throughput min(n/rtt, μ),
// latency max(rtt, n/μ) with n calls in flight, a backlog always waiting.
// Whatever the round-trip time, the limit settles just above the knee
// rtt·μ — the server busy, its latency at most about max(the base plus
// beta calls, 1.5 × the base) — so throughput reaches μ without piling
// calls up at the server.
func TestLimiterConvergesOnAModelServer(t *testing.T) {
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
			clk := clocktesting.NewFakePassiveClock(testStart())
			l, err := newLimiter(clk, true, DefaultMaxInFlight)
			if err != nil {
				t.Fatal(err)
			}
			now := testStart()
			var done, doneLate float64
			end := 60 * time.Second
			nextSpike := time.Second
			for elapsed := time.Duration(0); elapsed < end; {
				n := int(l.limit) // saturated: a backlog always waits
				lat := max(tc.rtt.Seconds(), float64(n)/tc.mu)
				sampled := lat
				if tc.spikes && elapsed >= nextSpike {
					sampled, nextSpike = lat+0.060, nextSpike+time.Second
				}
				// The n calls in flight complete over one latency.
				step := time.Duration(lat / float64(n) * float64(time.Second))
				now = now.Add(step)
				elapsed += step
				clk.SetTime(now)
				l.mu.Lock()
				l.held, l.calls = n, n
				l.mu.Unlock()
				l.doneAt(now, time.Duration(sampled*float64(time.Second)), nil)
				done++
				if elapsed > end/2 {
					doneLate++
				}
			}
			knee := tc.rtt.Seconds() * tc.mu
			throughput := doneLate / (end / 2).Seconds()
			t.Logf("limit %.1f (knee %.1f), throughput %.0f/s of %.0f", l.limit, knee, throughput, tc.mu)
			want := 0.95
			if tc.spikes {
				want = 0.9
			} else if top := max(knee+limitBeta+2, limitRatioLow*knee+2); l.limit < knee || l.limit > top {
				t.Errorf("limit %.1f, want within [knee %.1f, %.1f]", l.limit, knee, top)
			}
			if throughput < want*tc.mu {
				t.Errorf("throughput %.0f/s, want at least %.0f%% of %.0f", throughput, 100*want, tc.mu)
			}
		})
	}
}
