package pipeline

import (
	"math"
	"time"

	"github.com/quietpatch/quietpatch/internal/peak"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// Parameters of the adaptive in-flight limit; see [control.next].
const (
	// limitAlpha and limitBeta bound the calls of ours the latency says
	// wait at the server, n × (1 − best/estimate) with n calls in flight
	// (Little's law: n calls take the estimate each, of which best is
	// service): below alpha the limit grows, above beta it shrinks. One
	// or two calls of ours wait: the knee, where one more call in
	// flight buys little rate and makes every other client of the server
	// wait behind it. The best is what a probe with one call in flight
	// measured, lower than one call's latency among others (the client's
	// own work, the server's caches), so Q reads about one call waiting at
	// 2 in flight: alpha and beta leave room for that.
	limitAlpha = 0.75
	limitBeta  = 1.75
	// limitRatioLow and limitRatioHigh are the latency estimate's bounds
	// against the best within which a call waiting counts as noise: below
	// Low the latency holds whatever the calls in flight and the limit
	// grows; it shrinks only above High. On a long round trip one call
	// waiting adds a sliver of latency (n calls share it), which a GC pause
	// or the client's own CPU matches; there, a tenth of added latency is
	// what the limit allows.
	limitRatioLow  = 1.1
	limitRatioHigh = 1.25
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

// sample is one call as the controller sees it.
type sample struct {
	at        time.Time // when it ended
	latency   time.Duration
	outcome   outcome.Outcome
	saturated bool // the calls in flight filled the limit when it ended
}

// control is the in-flight limit and the latency estimate as a value: next
// returns the state after one more call and changes nothing, so that the
// controller is tested, and tuned, as a function of its samples. A fixed
// control (adaptive false) keeps its limit and estimates the latency only.
type control struct {
	adaptive    bool
	limit, max  float64
	est         peak.Peak  // Peak-EWMA of the round means (s)
	estimate    float64    // est at its last update
	slowStart   bool       // double per round until the first congestion
	best        [2]float64 // lowest round mean (s) of the current and the previous window; 0: none
	bestFrom    time.Time  // start of the current window
	roundFrom   time.Time  // start of the current round
	roundSum    float64    // latencies (s) of the round's calls
	roundN      int        //
	usedInRound bool       // a call of the round ended with the limit in use
	probeSaved  float64    // during a probe round, the limit to restore; else 0
	lastBackoff time.Time
}

// newControl returns a control from now: adaptive from one call up to max,
// or fixed at max.
func newControl(now time.Time, adaptive bool, max int) control {
	est := peak.New(latencyTau)
	c := control{adaptive: adaptive, limit: float64(max), max: float64(max), est: est, bestFrom: now, roundFrom: now}
	if adaptive {
		c.limit, c.slowStart = 1, true
	}
	return c
}

// size is the number of calls the limit admits at once.
func (c control) size() int { return int(c.limit) }

// round returns the length of the current round.
func (c control) round() time.Duration {
	return max(limitRound, time.Duration(c.estimate*float64(time.Second)))
}

// next takes one call into account. Throttled and timed-out calls halve an
// adaptive limit at once (at most once per round). Otherwise the call's
// latency goes into the round; at the end of a round — max(limitRound,
// latency estimate) — the estimate takes the round's mean, the lowest round
// mean of the window is the best latency (a mean against a mean: the
// fastest single call would make every round look queued), and an adaptive
// limit moves. The latency holds when the calls it says wait at the server,
// size × (1 − best/estimate), are fewer than limitAlpha, or the estimate is
// below limitRatioLow × the best: then the limit grows (doubling in slow
// start, then +1 per round) if it was in use during the round. It rises
// when more than limitBeta calls wait and the estimate is above
// limitRatioHigh × the best: then the limit shrinks by limitDecrease. Once
// per limitBestWindow an adaptive limit probes the server's base latency
// with one call in flight for a round.
func (c control) next(s sample) control {
	switch s.outcome {
	case outcome.Throttled, outcome.Abandoned, outcome.Timeout:
		if c.adaptive {
			c = c.shrink(s.at, limitBackoff)
		}
		return c
	case outcome.Canceled, outcome.Failed:
		return c // says nothing about the server's latency
	}
	c.roundSum += s.latency.Seconds()
	c.roundN++
	c.usedInRound = c.usedInRound || s.saturated
	if s.at.Sub(c.roundFrom) < c.round() {
		return c
	}
	mean := c.roundSum / float64(c.roundN)
	c.est = c.est.UpdateAt(s.at, mean)
	c.estimate = c.est.ValueAt(s.at)
	if mean > 0 && (c.best[0] == 0 || mean < c.best[0]) {
		c.best[0] = mean // the best round, comparable with the estimate
	}
	used := c.usedInRound
	c.roundFrom, c.roundSum, c.roundN, c.usedInRound = s.at, 0, 0, false
	if !c.adaptive {
		return c
	}
	if c.probeSaved > 0 { // the probe round is over
		c.limit, c.probeSaved = c.probeSaved, 0
		return c
	}
	if s.at.Sub(c.bestFrom) >= limitBestWindow {
		// A new window. Calls that always queue at the server never show
		// its base latency: probe for it with one call in flight for a
		// round (as BBR's ProbeRTT does), at the cost of one round at a
		// low rate per window.
		c.best[1], c.best[0], c.bestFrom = c.best[0], 0, s.at
		if !c.slowStart && c.limit > 2 {
			c.probeSaved, c.limit = c.limit, 1
			return c
		}
	}
	best := c.best[0]
	if b := c.best[1]; b > 0 && (best == 0 || b < best) {
		best = b
	}
	est := c.estimate
	if best <= 0 || est <= 0 {
		return c
	}
	queued := float64(c.size()) * (1 - best/est) // calls the latency says wait at the server
	ratio := est / best
	switch {
	case queued > limitBeta && ratio > limitRatioHigh:
		c.slowStart = false
		c.limit = math.Max(1, c.limit*limitDecrease)
	case (queued < limitAlpha || ratio < limitRatioLow) && used:
		if c.slowStart {
			c.limit *= 2
		} else {
			c.limit++
		}
		c.limit = math.Min(c.limit, c.max)
	}
	return c
}

// shrink multiplies the limit by factor at now, at most once per round,
// and ends slow start.
func (c control) shrink(now time.Time, factor float64) control {
	if !c.lastBackoff.IsZero() && now.Sub(c.lastBackoff) < c.round() {
		return c
	}
	c.lastBackoff = now
	c.slowStart = false
	if c.probeSaved > 0 {
		c.probeSaved = math.Max(1, c.probeSaved*factor)
		return c
	}
	c.limit = math.Max(1, c.limit*factor)
	return c
}

// latencyAt is the latency estimate (s) at now; 0 before the first round.
func (c control) latencyAt(now time.Time) float64 { return c.est.ValueAt(now) }

// drainRateAt is the patches per second the limit and the estimate allow
// at now (0 without an estimate). During a probe round it uses the limit
// the probe will restore, so that one round at a single call does not read
// as the dispatcher's rate.
func (c control) drainRateAt(now time.Time) float64 {
	lat := c.latencyAt(now)
	if lat <= 0 {
		return 0
	}
	steady := c.limit
	if c.probeSaved > 0 {
		steady = c.probeSaved
	}
	return math.Floor(steady) / lat
}
