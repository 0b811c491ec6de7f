// Package ewma provides a Peak-EWMA gauge: a time-weighted, peak-sensitive
// average of a value that changes at events, such as the depth of a queue.
//
// # The problem
//
// A bounded queue between producers and an API server is healthy when it is
// mostly empty and worrying when it is often full. Its depth changes at every
// insertion and removal, many times a second, but a metrics pipeline looks at
// a gauge once per collection interval, every 10 to 60 seconds. Reporting
// the depth at that instant is sampling a fast signal far too slowly: a burst
// that filled the queue and drained again between two collections is never
// seen, and a collection that lands inside a burst reports it as if it had
// lasted the whole interval. What an operator wants to know — how full the
// queue has been lately, and whether it hit its capacity — is lost.
//
// # The gauge
//
// A [Gauge] is told about every change ([Gauge.Update] to the value now)
// and keeps the exponentially weighted time-average of the value
// with time constant τ, with one twist taken from the Peak-EWMA load
// balancers: whenever the value rises above the average, the average jumps
// to it. A burst therefore shows at its full height at once and decays with
// τ after it ends, and a read is never below the value held right now.
// Reading is cheap and side-effect free, so the OpenTelemetry callback, a
// log line and a test can all look without disturbing each other. The type
// documentation of [Gauge] gives the exact formula.
//
// Each change costs one short critical section and no allocation, so a
// queue can record its depth on every insertion and removal
// (docs/performance.md has the figures). A Gauge is safe for concurrent
// use.
//
// # Choosing τ
//
// τ sets how long a peak stays visible: a burst whose excess over the
// current value was P still shows P·e^(−Δ/τ) a time Δ after it ended (37% at
// Δ = τ, under 0.01% at Δ = 10τ). Take τ at least as long as the collection
// interval of the metrics pipeline, so that every burst is still visible at
// the next collection; two to five intervals keep 60–80% of it.
//
// # Time
//
// Every method that depends on time has an ...At variant taking the time
// explicitly, in the style of golang.org/x/time/rate; the variants without
// it read the [k8s.io/utils/clock.PassiveClock] given to [New] (the real
// clock when nil). Tests drive a gauge with explicit times, or with a fake
// clock from k8s.io/utils/clock/testing, instead of sleeping.
//
// # Metrics
//
// This package names no instrument: whoever exports a gauge observes
// [Gauge.Value] in an OpenTelemetry callback (a Float64ObservableGauge of
// its own name), as quietpatch's queue depth gauge does
// (quietpatch.queue.depth.peak_ewma, docs/metrics.md).
package ewma
