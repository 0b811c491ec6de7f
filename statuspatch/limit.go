package statuspatch

import (
	"context"
	"math"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"

	"github.com/quietpatch/quietpatch/ewma"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// Parameters of the adaptive in-flight limit; see [Dispatcher] for the
// algorithm.
const (
	// limitAlpha and limitBeta bound the calls the latency says wait at
	// the server, limit × (1 − best/estimate): below alpha the limit grows,
	// above beta it shrinks.
	limitAlpha = 3.0
	limitBeta  = 6.0
	// limitRatioLow and limitRatioHigh bound the latency estimate against
	// the best: below Low the latency holds whatever the calls in flight
	// (a long round trip adds no queueing), and the limit shrinks only
	// above High. Without them a long round trip, plus the CPU a busy
	// client itself adds, would read as calls queued at the server.
	limitRatioLow  = 1.5
	limitRatioHigh = 2.0
	// limitDecrease is the factor of a decrease on rising latency;
	// limitBackoff the factor on a throttled or timed-out call.
	limitDecrease = 0.9
	limitBackoff  = 0.5
	// limitBestWindow is the span of each of the two windows whose minimum
	// latency is the "best recent latency", and how often the server's
	// base latency is probed.
	limitBestWindow = 10 * time.Second
	// limitRound is the shortest round: the estimate is updated, and the
	// limit moves, at most once per max(limitRound, latency estimate).
	limitRound = 100 * time.Millisecond
	// latencyTau is the time constant of the latency Peak-EWMA.
	latencyTau = 2 * time.Second
)

// limiter decides how many patch calls may be in flight at once, keeps the
// latency estimate, and holds every call back during a server's
// Retry-After. Fixed, it admits up to max calls; adaptive, it moves its
// limit between 1 and max from what it observes. Methods ending in At take
// the time explicitly, for tests.
//
// The latency estimate is a Peak-EWMA (package ewma) fed once per round
// with the mean latency of the round's calls: it rises at once when the
// server slows down, and one slow call among many does not move it.
type limiter struct {
	clk      clock.PassiveClock
	adaptive bool
	max      float64
	est      *ewma.Gauge // seconds

	mu          sync.Mutex
	limit       float64    // calls admitted at once (floor)
	held        int        // permits held (by workers, in a call or about to be)
	calls       int        // calls in progress
	slowStart   bool       // double per round until the first congestion
	best        [2]float64 // lowest round mean latency (s) of the current and the previous window; 0: none
	bestFrom    time.Time  // start of the current window
	roundFrom   time.Time  // start of the current round
	roundSum    float64    // latencies (s) of the round's calls
	roundN      int        //
	usedInRound bool       // a call of the round ended with the limit in use
	probeSaved  float64    // during a probe round, the limit to restore; else 0
	lastBackoff time.Time
	blockUntil  time.Time     // no call before (Retry-After)
	retryAfters int64         // Retry-After waits honoured
	changed     chan struct{} // closed and replaced at every change
}

func newLimiter(clk clock.PassiveClock, adaptive bool, max int) (*limiter, error) {
	est, err := ewma.New(latencyTau, clk)
	if err != nil {
		return nil, err
	}
	now := clk.Now()
	l := &limiter{clk: clk, adaptive: adaptive, max: float64(max), est: est, changed: make(chan struct{}),
		bestFrom: now, roundFrom: now}
	if adaptive {
		l.limit, l.slowStart = 1, true
	} else {
		l.limit = float64(max)
	}
	return l, nil
}

// acquire waits for a permit: a free place under the limit, outside any
// Retry-After window. It returns ctx's error if ctx ends first.
func (l *limiter) acquire(ctx context.Context) error {
	for {
		l.mu.Lock()
		now := l.clk.Now()
		if l.tryAcquireLocked(now) {
			l.mu.Unlock()
			return nil
		}
		ch := l.changed
		wait := l.blockUntil.Sub(now)
		l.mu.Unlock()
		var timer <-chan time.Time
		var t *time.Timer
		if wait > 0 {
			t = time.NewTimer(wait)
			timer = t.C
		}
		select {
		case <-ch:
		case <-timer:
		case <-ctx.Done():
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// tryAcquireAt takes a permit if one is free at now.
func (l *limiter) tryAcquireAt(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tryAcquireLocked(now)
}

func (l *limiter) tryAcquireLocked(now time.Time) bool {
	if l.held >= int(l.limit) || now.Before(l.blockUntil) {
		return false
	}
	l.held++
	return true
}

// callStarted records that a permit is used for a call.
func (l *limiter) callStarted() {
	l.mu.Lock()
	l.calls++
	l.mu.Unlock()
}

// release gives a permit back without a call (the patch was dropped, or
// the worker stops).
func (l *limiter) release() {
	l.mu.Lock()
	l.held--
	l.broadcastLocked()
	l.mu.Unlock()
}

// done gives a permit back after a call that took latency and ended with
// err, and updates the estimate and the limit.
func (l *limiter) done(latency time.Duration, err error) {
	l.doneAt(l.clk.Now(), latency, err)
}

func (l *limiter) doneAt(now time.Time, latency time.Duration, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	saturated := l.calls >= int(l.limit)
	l.calls--
	l.held--
	if secs, ok := retryAfter(err); ok {
		if until := now.Add(secs); until.After(l.blockUntil) {
			l.blockUntil = until
			l.retryAfters++
		}
	}
	l.sampleLocked(now, latency, err, saturated)
	l.broadcastLocked()
}

// sampleLocked takes one call into account. Throttled and timed-out calls
// halve an adaptive limit at once (at most once per round). Otherwise the
// call's latency goes into the round; at the end of a round — max(
// limitRound, latency estimate) — the estimate takes the round's mean, the
// lowest round mean of the window is the best latency (a mean against a
// mean: the fastest single call would make every round look queued), and
// an adaptive limit moves. The latency holds when the calls it says wait
// at the server, limit × (1 − best/estimate), are fewer than alpha, or the
// estimate is below 1.5 × the best: then the limit grows (doubling in slow
// start, then +1 per round) if it was in use during the round. It rises
// when more than beta calls wait and the estimate is above 2 × the best:
// then the limit shrinks by 10 %.
func (l *limiter) sampleLocked(now time.Time, latency time.Duration, err error, saturated bool) {
	switch outcome.Of(err) {
	case outcome.Throttled, outcome.Timeout:
		if l.adaptive {
			l.shrinkLocked(now, limitBackoff)
		}
		return
	case outcome.Canceled, outcome.Error:
		return // says nothing about the server's latency
	}
	l.roundSum += latency.Seconds()
	l.roundN++
	l.usedInRound = l.usedInRound || saturated
	if now.Sub(l.roundFrom) < l.roundLocked(now) {
		return
	}
	mean := l.roundSum / float64(l.roundN)
	l.est.UpdateAt(now, mean)
	if mean > 0 && (l.best[0] == 0 || mean < l.best[0]) {
		l.best[0] = mean // the best round, comparable with the estimate
	}
	used := l.usedInRound
	l.roundFrom, l.roundSum, l.roundN, l.usedInRound = now, 0, 0, false
	if !l.adaptive {
		return
	}
	if l.probeSaved > 0 { // the probe round is over
		l.limit, l.probeSaved = l.probeSaved, 0
		return
	}
	if now.Sub(l.bestFrom) >= limitBestWindow {
		// A new window. Calls that always queue at the server never show
		// its base latency: probe for it with one call in flight for a
		// round (as BBR's ProbeRTT does), at the cost of one round at a
		// low rate per window.
		l.best[1], l.best[0], l.bestFrom = l.best[0], 0, now
		if !l.slowStart && l.limit > 2 {
			l.probeSaved, l.limit = l.limit, 1
			return
		}
	}
	best := l.best[0]
	if b := l.best[1]; b > 0 && (best == 0 || b < best) {
		best = b
	}
	est := l.est.ValueAt(now)
	if best <= 0 || est <= 0 {
		return
	}
	queued := l.limit * (1 - best/est) // calls the latency says wait at the server
	ratio := est / best
	switch {
	case queued > limitBeta && ratio > limitRatioHigh:
		l.slowStart = false
		l.limit = math.Max(1, l.limit*limitDecrease)
	case (queued < limitAlpha || ratio < limitRatioLow) && used:
		if l.slowStart {
			l.limit *= 2
		} else {
			l.limit++
		}
		l.limit = math.Min(l.limit, l.max)
	}
}

// roundLocked returns the length of a round at now.
func (l *limiter) roundLocked(now time.Time) time.Duration {
	return max(limitRound, time.Duration(l.est.ValueAt(now)*float64(time.Second)))
}

// shrinkLocked multiplies the limit by factor, at most once per round, and
// ends slow start.
func (l *limiter) shrinkLocked(now time.Time, factor float64) {
	if !l.lastBackoff.IsZero() && now.Sub(l.lastBackoff) < l.roundLocked(now) {
		return
	}
	l.lastBackoff = now
	l.slowStart = false
	if l.probeSaved > 0 {
		l.probeSaved = math.Max(1, l.probeSaved*factor)
		return
	}
	l.limit = math.Max(1, l.limit*factor)
}

func (l *limiter) broadcastLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// limiterState is a consistent snapshot of a limiter.
type limiterState struct {
	limit       int           // calls admitted at once now
	latency     float64       // latency estimate (s); 0: none yet
	drainRate   float64       // patches/s the limit and the estimate allow
	backoff     time.Duration // left of a Retry-After window
	retryAfters int64         // Retry-After waits honoured
}

// stateAt returns the limiter's state at now. The drain rate is limit /
// estimate (0 without an estimate); during a probe round it uses the limit
// the probe will restore, so that one round at a single call does not read
// as the dispatcher's rate.
func (l *limiter) stateAt(now time.Time) limiterState {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := limiterState{limit: int(l.limit), latency: l.est.ValueAt(now),
		backoff: max(l.blockUntil.Sub(now), 0), retryAfters: l.retryAfters}
	if st.latency > 0 {
		steady := l.limit
		if l.probeSaved > 0 {
			steady = l.probeSaved
		}
		st.drainRate = math.Floor(steady) / st.latency
	}
	return st
}

// retryAfter returns the delay a throttled call's answer asks for: a 429
// carrying Retry-After.
func retryAfter(err error) (time.Duration, bool) {
	if err == nil || outcome.Of(err) != outcome.Throttled {
		return 0, false
	}
	secs, ok := apierrors.SuggestsClientDelay(err)
	if !ok || secs <= 0 {
		return 0, false
	}
	return time.Duration(secs) * time.Second, true
}
