package statuspatch

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quietpatch/quietpatch/ewma"
	"github.com/quietpatch/quietpatch/leader"
)

// lrig drives a limiter with explicit times.
type lrig struct {
	t   *testing.T
	l   *limiter
	now time.Time
}

// limT0 is the fake clocks' start time in the limiter tests.
var limT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newLrig(t *testing.T, adaptive bool, max int) *lrig {
	l, err := newLimiter(clocktesting.NewFakeClock(limT0), adaptive, max)
	if err != nil {
		t.Fatal(err)
	}
	return &lrig{t: t, l: l, now: limT0}
}

// call runs one call that took latency and ended with err, with n calls in
// flight at its end (saturating the limit when n >= limit). est, when
// positive, first sets the latency estimate (a Peak-EWMA) to est, and its
// copy read without the lock (which sets the round's length).
func (r *lrig) call(latency time.Duration, est time.Duration, err error, n int) {
	r.t.Helper()
	if est > 0 {
		r.l.est = mustGauge(r.t, r.l.clk)
		r.l.est.UpdateAt(r.now, est.Seconds())
		r.l.estimate.Store(math.Float64bits(est.Seconds()))
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
		if _, wait, reason := r.l.begin(1, r.now); wait != 0 || reason != "" {
			t.Fatalf("begin: wait %v, reason %q", wait, reason)
		}
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
			clk := clocktesting.NewFakeClock(limT0)
			l, err := newLimiter(clk, true, DefaultMaxInFlight)
			if err != nil {
				t.Fatal(err)
			}
			now := limT0
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

// newFixedLimiter returns a fixed limiter of n permits on a fake clock.
func newFixedLimiter(t *testing.T, n int) (*limiter, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(limT0)
	l, err := newLimiter(clk, false, n)
	if err != nil {
		t.Fatal(err)
	}
	return l, clk
}

// pollUntil polls cond until it holds, failing after a deadline.
func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func (l *limiter) waiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.waiters)
}

func (l *limiter) permitsHeld() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}

// acquirer runs acquire(ctx) in a goroutine; its result arrives on the
// channel returned.
func acquirer(l *limiter, ctx context.Context) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- l.acquire(ctx) }()
	return ch
}

// queueAcquirers starts n acquirers one after the other, each once the
// previous one waits in line, and returns their results in arrival order.
func queueAcquirers(t *testing.T, l *limiter, ctxs ...context.Context) []<-chan error {
	t.Helper()
	var res []<-chan error
	for _, ctx := range ctxs {
		before := l.waiting()
		res = append(res, acquirer(l, ctx))
		pollUntil(t, fmt.Sprintf("waiter %d in line", len(res)), func() bool { return l.waiting() == before+1 })
	}
	return res
}

// wantGranted checks which of the acquirers returned: only those in
// granted, with a nil error.
func wantGranted(t *testing.T, res []<-chan error, granted ...int) {
	t.Helper()
	for _, i := range granted {
		select {
		case err := <-res[i]:
			if err != nil {
				t.Fatalf("acquirer %d: %v", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("acquirer %d not granted", i)
		}
	}
	for i, ch := range res {
		select {
		case err := <-ch:
			t.Fatalf("acquirer %d returned %v out of turn (want only %v)", i, err, granted)
		default:
		}
	}
}

// Waiters are served in arrival order, one per permit released, and a
// newcomer does not pass them (tryAcquireAt refuses while they wait).
func TestLimiterFIFOWaiters(t *testing.T) {
	l, clk := newFixedLimiter(t, 1)
	if !l.tryAcquireAt(clk.Now()) {
		t.Fatal("no first permit")
	}
	bg := context.Background()
	res := queueAcquirers(t, l, bg, bg, bg)
	for i := range res {
		l.release()
		wantGranted(t, res[i:], 0)
		if l.tryAcquireAt(clk.Now()) {
			t.Fatalf("after release %d: tryAcquireAt took the permit granted to waiter %d", i, i)
		}
	}
	if l.waiting() != 0 || l.permitsHeld() != 1 {
		t.Fatalf("%d waiting, %d held; want 0 and 1", l.waiting(), l.permitsHeld())
	}
	l.release()
	if !l.tryAcquireAt(clk.Now()) {
		t.Fatal("no permit once the line is empty")
	}
}

// A waiter whose ctx ends leaves the line; the others keep their order.
func TestLimiterWaiterLeaves(t *testing.T) {
	l, clk := newFixedLimiter(t, 1)
	if !l.tryAcquireAt(clk.Now()) {
		t.Fatal("no first permit")
	}
	bg := context.Background()
	ctx, cancel := context.WithCancel(bg)
	res := queueAcquirers(t, l, bg, ctx, bg)
	cancel()
	select {
	case err := <-res[1]:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled waiter: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancelled waiter still waiting")
	}
	pollUntil(t, "the cancelled waiter out of line", func() bool { return l.waiting() == 2 })
	res = []<-chan error{res[0], res[2]}
	l.release()
	wantGranted(t, res, 0)
	l.release()
	wantGranted(t, res[1:], 0)
	if l.permitsHeld() != 1 {
		t.Fatalf("%d permits held, want 1", l.permitsHeld())
	}
}

// A waiter whose ctx ends at the moment a permit is granted to it gives
// the permit back, to the next waiter: here it is granted while the waiter,
// woken by its ctx, waits for the limiter's lock.
func TestLimiterCancelledWaiterGivesGrantBack(t *testing.T) {
	l, clk := newFixedLimiter(t, 1)
	if !l.tryAcquireAt(clk.Now()) {
		t.Fatal("no first permit")
	}
	ctx, cancel := context.WithCancel(context.Background())
	res := queueAcquirers(t, l, ctx, context.Background())
	l.mu.Lock()
	cancel()
	pollUntil(t, "the cancelled waiter blocked on the limiter's lock", func() bool {
		return goroutineBlocked("sync.Mutex.Lock", "(*limiter).acquire")
	})
	l.held-- // release(), under the lock already held
	l.grantLocked(clk.Now())
	l.mu.Unlock()
	select {
	case err := <-res[0]:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled waiter: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancelled waiter still waiting")
	}
	wantGranted(t, res[1:], 0)
	if l.waiting() != 0 || l.permitsHeld() != 1 {
		t.Fatalf("%d waiting, %d held; want 0 and 1 (the permit went to the second waiter)", l.waiting(), l.permitsHeld())
	}
}

// goroutineBlocked reports whether a goroutine is blocked in state with
// fn on its stack.
func goroutineBlocked(state, fn string) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		if strings.Contains(header, "["+state) && strings.Contains(g, fn) {
			return true
		}
	}
	return false
}

// A 429 with Retry-After holds every call back until the window ends:
// new permits, the calls of permits acquired before it (begin says how
// long to wait), and the waiters already in line.
func TestLimiterRetryAfterWindow(t *testing.T) {
	throttled := apierrors.NewTooManyRequests("x", 1)
	t.Run("permits and calls", func(t *testing.T) {
		l, clk := newFixedLimiter(t, 2)
		t0 := clk.Now()
		if !l.tryAcquireAt(t0) || !l.tryAcquireAt(t0) {
			t.Fatal("no permits")
		}
		c, wait, reason := l.begin(1, t0)
		if wait != 0 || reason != "" {
			t.Fatalf("begin before the 429: wait %v, reason %q", wait, reason)
		}
		l.end(c, 5*time.Millisecond, throttled, true)
		for _, tc := range []struct {
			after time.Duration
			ok    bool
		}{{0, false}, {999 * time.Millisecond, false}, {time.Second, true}} {
			if got := l.tryAcquireAt(t0.Add(tc.after)); got != tc.ok {
				t.Errorf("tryAcquireAt(+%v) = %v, want %v", tc.after, got, tc.ok)
			}
		}
		// The second permit was acquired before the 429: its call waits.
		if _, wait, reason := l.begin(1, t0.Add(100*time.Millisecond)); wait != 900*time.Millisecond || reason != "" {
			t.Errorf("begin inside the window: wait %v, reason %q; want 900ms", wait, reason)
		}
		if st := l.stateAt(t0.Add(100 * time.Millisecond)); st.calls != 0 || st.backoff != 900*time.Millisecond || st.retryAfters != 1 {
			t.Errorf("inside the window: %d calls, backoff %v, %d Retry-Afters; want 0, 900ms, 1", st.calls, st.backoff, st.retryAfters)
		}
		if _, wait, reason := l.begin(1, t0.Add(time.Second)); wait != 0 || reason != "" {
			t.Errorf("begin at the end of the window: wait %v, reason %q", wait, reason)
		}
	})
	t.Run("waiters in line before the 429", func(t *testing.T) {
		l, clk := newFixedLimiter(t, 1)
		if !l.tryAcquireAt(clk.Now()) {
			t.Fatal("no permit")
		}
		c, _, _ := l.begin(1, clk.Now())
		res := queueAcquirers(t, l, context.Background())
		l.end(c, 5*time.Millisecond, throttled, true) // frees the permit inside the window
		wantGranted(t, res)
		clk.Step(999 * time.Millisecond)
		wantGranted(t, res)
		pollUntil(t, "the waiter's timer", clk.HasWaiters)
		clk.Step(time.Millisecond)
		wantGranted(t, res, 0)
	})
	t.Run("waiters arriving inside the window", func(t *testing.T) {
		l, clk := newFixedLimiter(t, 2)
		if !l.tryAcquireAt(clk.Now()) {
			t.Fatal("no permit")
		}
		c, _, _ := l.begin(1, clk.Now())
		l.end(c, 5*time.Millisecond, throttled, true)
		res := queueAcquirers(t, l, context.Background(), context.Background())
		pollUntil(t, "the waiters' timers", func() bool { return clk.Waiters() == 2 })
		clk.Step(999 * time.Millisecond)
		wantGranted(t, res)
		clk.Step(time.Millisecond)
		wantGranted(t, res, 0, 1)
	})
}

func TestLimiterRetryAfterErrors(t *testing.T) {
	for _, tc := range []struct {
		label string
		err   error
		want  time.Duration
	}{
		{"nil", nil, 0},
		{"429 with Retry-After", apierrors.NewTooManyRequests("x", 2), 2 * time.Second},
		{"429 without", apierrors.NewTooManyRequests("x", 0), 0},
		{"wrapped 429", fmt.Errorf("patch: %w", apierrors.NewTooManyRequests("x", 3)), 3 * time.Second},
		{"server timeout with Retry-After: not throttled", apierrors.NewServerTimeout(schema.GroupResource{}, "patch", 4), 0},
		{"conflict", apierrors.NewConflict(schema.GroupResource{}, "x", errors.New("changed")), 0},
	} {
		t.Run(tc.label, func(t *testing.T) {
			got, ok := retryAfter(tc.err)
			if got != tc.want || ok != (tc.want > 0) {
				t.Errorf("retryAfter = %v, %v; want %v", got, ok, tc.want)
			}
		})
	}
}

// The epoch fence: a call begins only under the newest epoch seen, and
// its ctx ends when that epoch's claim ends.
func TestLimiterEpochFence(t *testing.T) {
	begin := func(t *testing.T, l *limiter, epoch int64) call {
		t.Helper()
		c, wait, reason := l.begin(epoch, l.clk.Now())
		if wait != 0 || reason != "" {
			t.Fatalf("begin(%d): wait %v, reason %q", epoch, wait, reason)
		}
		return c
	}
	t.Run("an older epoch is refused; a newer one ends the older calls", func(t *testing.T) {
		l, _ := newFixedLimiter(t, 4)
		c1 := begin(t, l, 1)
		c2 := begin(t, l, 2)
		if c1.ec.ctx.Err() == nil {
			t.Error("the epoch 1 call's ctx is not cancelled by a call under epoch 2")
		}
		if c2.ec.ctx.Err() != nil {
			t.Error("the epoch 2 call's ctx is cancelled")
		}
		if _, _, reason := l.begin(1, l.clk.Now()); reason != dropStaleEpoch {
			t.Errorf("begin(1) after epoch 2: reason %q, want %q", reason, dropStaleEpoch)
		}
		begin(t, l, 2)
	})
	for _, tc := range []struct {
		label     string
		claim     leader.Claim
		ours      bool
		wantEnded bool
	}{
		{"ours, same epoch: nothing ends", leader.Claim{Holder: "me", Epoch: 5}, true, false},
		{"not ours", leader.Claim{Holder: "other", Epoch: 5}, false, true},
		{"ours, another epoch", leader.Claim{Holder: "me", Epoch: 6}, true, true},
		{"nobody's", leader.Claim{}, false, true},
	} {
		t.Run("observe: "+tc.label, func(t *testing.T) {
			l, _ := newFixedLimiter(t, 4)
			c := begin(t, l, 5)
			l.observe(tc.claim, tc.ours)
			if ended := c.ec.ctx.Err() != nil; ended != tc.wantEnded {
				t.Errorf("call ctx ended: %v, want %v", ended, tc.wantEnded)
			}
			_, _, reason := l.begin(5, l.clk.Now())
			if want := map[bool]string{true: dropNotLeader}[tc.wantEnded]; reason != want {
				t.Errorf("begin(5) after observe: reason %q, want %q", reason, want)
			}
			// A newer epoch (a claim regained) begins afresh.
			if c6 := begin(t, l, 6); c6.ec.ctx.Err() != nil {
				t.Error("a call of the next epoch has an ended ctx")
			}
		})
	}
	t.Run("observe before any call ends nothing", func(t *testing.T) {
		l, _ := newFixedLimiter(t, 4)
		l.observe(leader.Claim{}, false)
		begin(t, l, 1)
	})
}

// quiesce stops new calls under an epoch, waits for the calls in flight,
// and reports whether every call under it got an answer.
func TestLimiterQuiesce(t *testing.T) {
	answered, unanswered := true, false
	bg := context.Background()
	quiesced := func(l *limiter) bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.cur != nil && l.cur.quiesced
	}
	startCall := func(t *testing.T, l *limiter, epoch int64) call {
		t.Helper()
		if !l.tryAcquireAt(l.clk.Now()) {
			t.Fatal("no permit")
		}
		c, wait, reason := l.begin(epoch, l.clk.Now())
		if wait != 0 || reason != "" {
			t.Fatalf("begin(%d): wait %v, reason %q", epoch, wait, reason)
		}
		return c
	}
	quiesceAsync := func(ctx context.Context, l *limiter, epoch int64) <-chan bool {
		ch := make(chan bool, 1)
		go func() { ch <- l.quiesce(ctx, epoch) }()
		return ch
	}
	wantResult := func(t *testing.T, ch <-chan bool, want bool) {
		t.Helper()
		select {
		case got := <-ch:
			if got != want {
				t.Fatalf("quiesce = %v, want %v", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("quiesce still waiting")
		}
	}

	t.Run("waits for the call in flight, lets it run, every call answered", func(t *testing.T) {
		l, _ := newFixedLimiter(t, 4)
		done := startCall(t, l, 1)
		l.end(done, time.Millisecond, nil, answered)
		c := startCall(t, l, 1)
		res := quiesceAsync(bg, l, 1)
		pollUntil(t, "quiesce to begin", func() bool { return quiesced(l) })
		if _, _, reason := l.begin(1, l.clk.Now()); reason != dropReleased {
			t.Errorf("begin while quiescing: reason %q, want %q", reason, dropReleased)
		}
		select {
		case got := <-res:
			t.Fatalf("quiesce returned %v with a call in flight", got)
		default:
		}
		if c.ec.ctx.Err() != nil {
			t.Error("quiesce cancelled the call in flight")
		}
		l.end(c, time.Millisecond, nil, answered)
		wantResult(t, res, true)
	})
	t.Run("a call ended without an answer", func(t *testing.T) {
		l, _ := newFixedLimiter(t, 4)
		l.end(startCall(t, l, 1), time.Millisecond, context.DeadlineExceeded, unanswered)
		l.end(startCall(t, l, 1), time.Millisecond, nil, answered)
		wantResult(t, quiesceAsync(bg, l, 1), false)
	})
	t.Run("ctx ends with a call in flight", func(t *testing.T) {
		l, _ := newFixedLimiter(t, 4)
		c := startCall(t, l, 1)
		ctx, cancel := context.WithCancel(bg)
		res := quiesceAsync(ctx, l, 1)
		pollUntil(t, "quiesce to begin", func() bool { return quiesced(l) })
		cancel()
		wantResult(t, res, false)
		l.end(c, time.Millisecond, nil, answered)
	})
	t.Run("an epoch older than the newest", func(t *testing.T) {
		l, _ := newFixedLimiter(t, 4)
		l.end(startCall(t, l, 2), time.Millisecond, nil, answered)
		wantResult(t, quiesceAsync(bg, l, 1), false)
	})
	t.Run("a newer epoch: no call may start under it, the older calls are waited for", func(t *testing.T) {
		l, _ := newFixedLimiter(t, 4)
		c := startCall(t, l, 1)
		res := quiesceAsync(bg, l, 2)
		pollUntil(t, "quiesce to begin", func() bool { return quiesced(l) })
		if c.ec.ctx.Err() == nil {
			t.Error("the epoch 1 call's ctx is not cancelled by quiescing epoch 2")
		}
		if _, _, reason := l.begin(2, l.clk.Now()); reason != dropReleased {
			t.Errorf("begin(2) while quiescing epoch 2: reason %q, want %q", reason, dropReleased)
		}
		select {
		case got := <-res:
			t.Fatalf("quiesce returned %v with a call in flight", got)
		default:
		}
		l.end(c, time.Millisecond, nil, answered)
		wantResult(t, res, true)
	})
	t.Run("a newer epoch begins while quiescing: not every call of the epoch quiesced was answered", func(t *testing.T) {
		l, _ := newFixedLimiter(t, 4)
		c1 := startCall(t, l, 1)
		res := quiesceAsync(bg, l, 1)
		pollUntil(t, "quiesce to begin", func() bool { return quiesced(l) })
		c2 := startCall(t, l, 2)
		l.end(c1, time.Millisecond, context.Canceled, unanswered)
		l.end(c2, time.Millisecond, nil, answered)
		wantResult(t, res, false)
	})
	t.Run("no call ever", func(t *testing.T) {
		l, _ := newFixedLimiter(t, 4)
		wantResult(t, quiesceAsync(bg, l, 1), true)
	})
}
