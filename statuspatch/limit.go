package statuspatch

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"

	"github.com/quietpatch/quietpatch/ewma"
	"github.com/quietpatch/quietpatch/leader"
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

// limiter admits patch calls: a semaphore whose size is fixed (Workers) or
// adaptive, with FIFO waiters, a Retry-After window that holds every call
// back, and the fence that scopes calls to the claim they were started
// under. One mutex guards it all. Methods ending in At take the time, for
// tests.
//
// The latency estimate is a Peak-EWMA (package ewma) fed once per round
// with the mean latency of the round's calls: it rises at once when the
// server slows down, and one slow call among many does not move it.
type limiter struct {
	clk      clock.WithTicker
	adaptive bool
	max      float64
	est      *ewma.Gauge   // seconds
	estimate atomic.Uint64 // float64 bits of est at its last update

	mu          sync.Mutex
	limit       float64         // calls admitted at once (floor)
	held        int             // permits held (by workers, in a call or about to be)
	calls       int             // calls in progress
	waiters     []chan struct{} // FIFO; closed when granted
	since       map[int64]int64 // call id → unix nanos it began, for Healthy
	nextID      int64
	cur         *epochCalls   // the newest epoch seen; nil before any
	idle        chan struct{} // closed and replaced when a call ends
	slowStart   bool          // double per round until the first congestion
	best        [2]float64    // lowest round mean latency (s) of the current and the previous window; 0: none
	bestFrom    time.Time     // start of the current window
	roundFrom   time.Time     // start of the current round
	roundSum    float64       // latencies (s) of the round's calls
	roundN      int           //
	usedInRound bool          // a call of the round ended with the limit in use
	probeSaved  float64       // during a probe round, the limit to restore; else 0
	lastBackoff time.Time
	blockUntil  time.Time     // no call before (Retry-After)
	windowed    chan struct{} // closed and replaced when blockUntil moves later
	retryAfters int64         // Retry-After waits honoured
}

// epochCalls are the calls of one epoch: their contexts' parent, cancelled
// when the claim ends involuntarily.
type epochCalls struct {
	epoch      int64
	ctx        context.Context
	cancel     context.CancelFunc
	ended      bool // the claim ended involuntarily: ctx is cancelled
	quiesced   bool // given up on purpose: no new call
	unanswered bool // a call under this epoch ended without an answer
}

// call is one admitted patch call.
type call struct {
	ec *epochCalls
	id int64
}

func newLimiter(clk clock.WithTicker, adaptive bool, max int) (*limiter, error) {
	est, err := ewma.New(latencyTau, clk)
	if err != nil {
		return nil, err
	}
	now := clk.Now()
	l := &limiter{clk: clk, adaptive: adaptive, max: float64(max), est: est,
		since: map[int64]int64{}, idle: make(chan struct{}), windowed: make(chan struct{}), bestFrom: now, roundFrom: now}
	if adaptive {
		l.limit, l.slowStart = 1, true
	} else {
		l.limit = float64(max)
	}
	return l, nil
}

// acquire waits for a permit — a place under the limit, outside any
// Retry-After window, after the waiters before it — or for ctx to end.
func (l *limiter) acquire(ctx context.Context) error {
	l.mu.Lock()
	if len(l.waiters) == 0 && l.canGrantLocked(l.clk.Now()) {
		l.held++
		l.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	l.waiters = append(l.waiters, ch)
	for {
		var (
			t     clock.Timer
			timer <-chan time.Time
		)
		if wait := l.blockUntil.Sub(l.clk.Now()); wait > 0 {
			t = l.clk.NewTimer(wait)
			timer = t.C()
		}
		// A window opened while we wait ends after our timer, if any:
		// nobody else would grant a permit at its end.
		windowed := l.windowed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-timer:
		case <-windowed:
		case <-ctx.Done():
		}
		if t != nil {
			t.Stop()
		}
		select {
		case <-ch:
			return nil
		default:
		}
		l.mu.Lock()
		if ctx.Err() == nil {
			l.grantLocked(l.clk.Now())
			continue
		}
		select {
		case <-ch: // granted meanwhile: give it back
			l.held--
			l.grantLocked(l.clk.Now())
		default:
			l.waiters = slices.DeleteFunc(l.waiters, func(c chan struct{}) bool { return c == ch })
		}
		l.mu.Unlock()
		return ctx.Err()
	}
}

// tryAcquireAt takes a permit if one is free at now and nobody waits.
func (l *limiter) tryAcquireAt(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.waiters) == 0 && l.canGrantLocked(now) {
		l.held++
		return true
	}
	return false
}

func (l *limiter) canGrantLocked(now time.Time) bool {
	return l.held < int(l.limit) && !now.Before(l.blockUntil)
}

// grantLocked hands permits to the waiters, in order, while there is room.
func (l *limiter) grantLocked(now time.Time) {
	for len(l.waiters) > 0 && l.canGrantLocked(now) {
		l.held++
		close(l.waiters[0])
		l.waiters = l.waiters[1:]
	}
}

// release gives a permit back without a call.
func (l *limiter) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held--
	l.grantLocked(l.clk.Now())
}

// begin starts a call under epoch with a permit held, at the moment it is
// made: it returns how long to wait first if a Retry-After window is open,
// or the reason the call may not be made under epoch.
func (l *limiter) begin(epoch int64, now time.Time) (c call, wait time.Duration, reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Before(l.blockUntil) {
		return call{}, l.blockUntil.Sub(now), ""
	}
	switch {
	case l.cur == nil || epoch > l.cur.epoch:
		l.advanceLocked(epoch)
	case epoch < l.cur.epoch:
		return call{}, 0, dropStaleEpoch
	}
	switch {
	case l.cur.quiesced:
		return call{}, 0, dropReleased
	case l.cur.ended:
		return call{}, 0, dropNotLeader
	}
	l.calls++
	l.nextID++
	l.since[l.nextID] = now.UnixNano()
	return call{ec: l.cur, id: l.nextID}, 0, ""
}

// advanceLocked makes epoch the newest, ending the older one.
func (l *limiter) advanceLocked(epoch int64) {
	if l.cur != nil {
		l.cur.ended = true
		l.cur.cancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cur = &epochCalls{epoch: epoch, ctx: ctx, cancel: cancel}
}

// end ends a call begun with begin, which took latency and ended with err,
// gives its permit back and updates the estimate and the limit.
func (l *limiter) end(c call, latency time.Duration, err error, answered bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.since, c.id)
	if !answered {
		c.ec.unanswered = true
	}
	close(l.idle)
	l.idle = make(chan struct{})
	l.doneLocked(l.clk.Now(), latency, err)
}

func (l *limiter) doneAt(now time.Time, latency time.Duration, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.doneLocked(now, latency, err)
}

func (l *limiter) doneLocked(now time.Time, latency time.Duration, err error) {
	saturated := l.calls >= int(l.limit)
	l.calls--
	l.held--
	if secs, ok := retryAfter(err); ok {
		if until := now.Add(secs); until.After(l.blockUntil) {
			l.blockUntil = until
			l.retryAfters++
			close(l.windowed)
			l.windowed = make(chan struct{})
		}
	}
	l.sampleLocked(now, latency, err, saturated)
	l.grantLocked(now)
}

// observe ends the newest epoch's calls when its claim is over: the claim
// current returns now is not ours, or of another epoch. It reads the claim
// under the lock, so that a call begun under a fresher claim than the one
// a lagging notification carried is not ended by it.
func (l *limiter) observe(current func() (leader.Claim, bool)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ours := current()
	if l.cur != nil && !l.cur.ended && (!ours || c.Epoch != l.cur.epoch) {
		l.cur.ended = true
		l.cur.cancel()
	}
}

// quiesce stops new calls under epoch and waits for every call in flight;
// it reports whether every call under epoch got an answer.
func (l *limiter) quiesce(ctx context.Context, epoch int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.cur == nil || epoch > l.cur.epoch:
		l.advanceLocked(epoch) // no call was made under epoch; none may start
	case epoch < l.cur.epoch:
		return false // calls were made under a newer epoch
	}
	ec := l.cur
	ec.quiesced = true
	for len(l.since) > 0 {
		idle := l.idle
		l.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
		}
		l.mu.Lock()
		if ctx.Err() != nil && len(l.since) > 0 {
			return false
		}
	}
	// A newer epoch seen meanwhile made calls under a newer epoch, as above.
	return l.cur == ec && !ec.unanswered
}

// oldestCall returns when the oldest call in flight began (unix nanos), or 0.
func (l *limiter) oldestCall() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var oldest int64
	for _, t := range l.since {
		if oldest == 0 || t < oldest {
			oldest = t
		}
	}
	return oldest
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
	l.estimate.Store(math.Float64bits(l.est.ValueAt(now)))
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

// lastEstimate is the latency estimate (s) at its last update, read
// without the lock.
func (l *limiter) lastEstimate() float64 { return math.Float64frombits(l.estimate.Load()) }

// roundLocked returns the length of a round at now.
func (l *limiter) roundLocked(now time.Time) time.Duration {
	return max(limitRound, time.Duration(l.lastEstimate()*float64(time.Second)))
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

// limiterState is a consistent snapshot of a limiter.
type limiterState struct {
	limit       int           // calls admitted at once now
	calls       int           // calls in progress
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
	st := limiterState{limit: int(l.limit), calls: l.calls, latency: l.est.ValueAt(now),
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
