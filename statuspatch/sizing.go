package statuspatch

import (
	"math"
	"time"
)

// SuggestCapacity returns a PatchQueue capacity that holds the patches the
// API server can absorb in one reconcile interval: interval divided by the
// time one patch occupies the client, with workers patches in flight.
//
// perPatchLatency is the latency of one patch call measured at the
// concurrency you run (workers in flight): an API server does not scale
// linearly with concurrent writes, so measure at that concurrency rather
// than dividing a single-flight latency. qps is the QPS of the client's rate
// limiter (rest.Config.QPS); a patch can never take less than 1/qps, whatever
// the server does. qps <= 0 means the limiter is off. workers < 1 counts as 1.
//
// In formula: capacity = ceil(interval × min(workers / perPatchLatency, qps)).
//
// A queue much larger than that only holds patches that will be recomputed by
// the next pass before they are sent (the reconciler re-reads every object
// every interval), costing memory and applying stale work late; a queue much
// smaller halts passes that the dispatcher could have absorbed. When a pass
// halts, the reconciler logs the capacity and this formula.
//
// Figures measured for the design (real kube-apiserver and etcd on loopback,
// 2 cores, status merge patches of HTTPRoutes, client limiter off): one patch
// in flight ≈ 144 patches/s, so a 10 s interval absorbs ≈ 1,440 patches; 4 in
// flight ≈ 265/s; 16 or more ≈ 300/s, the server's ceiling. With client-go's
// default limiter (QPS 5, burst 10) the client itself allows 5 patches/s: 50
// per 10 s interval, however fast the server is — set rest.Config QPS and
// Burst explicitly.
//
// It returns 0 when it cannot tell: interval <= 0, or neither a latency nor a
// QPS limit is given. Otherwise the result is at least 1.
func SuggestCapacity(interval, perPatchLatency time.Duration, qps float32, workers int) int {
	if interval <= 0 {
		return 0
	}
	if workers < 1 {
		workers = 1
	}
	rate := math.Inf(1) // patches per second
	if perPatchLatency > 0 {
		rate = float64(workers) / perPatchLatency.Seconds()
	}
	if qps > 0 && float64(qps) < rate {
		rate = float64(qps)
	}
	if math.IsInf(rate, 1) {
		return 0
	}
	// Rounded up, ignoring a relative 1e-6: durations are truncated to whole
	// nanoseconds (time.Second/144), which must not add one to an exact
	// figure.
	x := interval.Seconds() * rate
	n := math.Ceil(x - x*1e-6)
	switch {
	case n < 1:
		return 1
	case n > math.MaxInt32:
		return math.MaxInt32
	}
	return int(n)
}
