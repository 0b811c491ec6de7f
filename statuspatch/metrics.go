package statuspatch

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// Instrument names of the reconciler and the dispatcher; the package
// documentation has the table.
const (
	reconcilePassesMetric   = "quietpatch.reconcile.passes"
	reconcileDurationMetric = "quietpatch.reconcile.duration"
	reconcileObjectsMetric  = "quietpatch.reconcile.objects"
	reconcileHaltedMetric   = "quietpatch.reconcile.halted"
	dispatchPatchesMetric   = "quietpatch.dispatch.patches"
	dispatchDurationMetric  = "quietpatch.dispatch.duration"
	dispatchDroppedMetric   = "quietpatch.dispatch.dropped"
	dispatchInFlightMetric  = "quietpatch.dispatch.in_flight"
	dispatchLatencyMetric   = "quietpatch.dispatch.latency.peak_ewma"
	dispatchLimitMetric     = "quietpatch.dispatch.limit"
	dispatchBackoffMetric   = "quietpatch.dispatch.backoff"
	dispatchRetryAfter      = "quietpatch.dispatch.retry_after"
)

// numOutcomes is len(outcome.All()); an init check keeps it honest.
const numOutcomes = 10

func init() {
	if len(outcome.All()) != numOutcomes {
		panic("statuspatch: numOutcomes is out of date")
	}
}

// Histogram bucket boundaries in seconds. Patch calls take milliseconds on
// a healthy API server and up to PatchTimeout on a sick one; passes take
// milliseconds to seconds.
func patchBuckets() []float64 {
	return []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
}

func passBuckets() []float64 {
	return []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
}

// isNoop reports whether m creates no instruments at all.
func isNoop(m metric.Meter) bool {
	if m == nil {
		return true
	}
	_, ok := m.(noop.Meter)
	return ok
}

// PassResult values: the result of a reconcile pass, the values of the
// result attribute of quietpatch.reconcile.passes and .duration.
const (
	passCompleted = "completed"  // every object visited
	passHalted    = "halted"     // queue at capacity
	passNotLeader = "not_leader" // leadership lost (or never held) during the pass
	passError     = "error"      // Source.List failed
	passCanceled  = "canceled"   // ctx cancelled
	passClosed    = "closed"     // queue closed
)

func passResults() []string {
	return []string{passCompleted, passHalted, passNotLeader, passError, passCanceled, passClosed}
}

const numPassResults = 6

func passIndex(r string) int {
	for i, x := range passResults() {
		if x == r {
			return i
		}
	}
	return 0
}

// Object results, the values of the result attribute of
// quietpatch.reconcile.objects.
const (
	objUnchanged = "unchanged" // desired equals current: nothing done
	objChanged   = "changed"   // a patch was queued
	objQueued    = "queued"    // changed, but the same patch already waits
	objError     = "error"     // the status could not be computed
)

func objResults() []string { return []string{objUnchanged, objChanged, objQueued, objError} }

const numObjResults = 4

// reconcileCounters are a reconciler's counters, kept in atomics whether or
// not a meter is set: Stats reads them, and observable instruments report
// them.
type reconcileCounters struct {
	passes  [numPassResults]atomic.Int64
	objects [numObjResults]atomic.Int64
	halted  atomic.Int64
}

// reconcileInstruments reports a reconciler's counters and records pass
// durations. A nil *reconcileInstruments records nothing.
type reconcileInstruments struct {
	duration metric.Float64Histogram
	passOpts [numPassResults][]metric.RecordOption
	reg      metric.Registration
}

func newReconcileInstruments(m metric.Meter, name string, c *reconcileCounters) (*reconcileInstruments, error) {
	if isNoop(m) {
		return nil, nil
	}
	nameKV := attribute.String(pipelineAttr, name)
	var ri reconcileInstruments
	var err, e error
	ri.duration, e = m.Float64Histogram(reconcileDurationMetric,
		metric.WithUnit("s"),
		metric.WithDescription("Duration of reconcile passes, by result."),
		metric.WithExplicitBucketBoundaries(passBuckets()...))
	err = errors.Join(err, e)
	passes, e := m.Int64ObservableCounter(reconcilePassesMetric,
		metric.WithUnit("{pass}"),
		metric.WithDescription("Reconcile passes, by result: completed, halted (queue at capacity), not_leader, error (listing failed), canceled, closed (queue closed)."))
	err = errors.Join(err, e)
	objects, e := m.Int64ObservableCounter(reconcileObjectsMetric,
		metric.WithUnit("{object}"),
		metric.WithDescription("Objects reconciled, by result: unchanged, changed (a patch was queued), queued (the same patch already waited) or error."))
	err = errors.Join(err, e)
	halted, e := m.Int64ObservableCounter(reconcileHaltedMetric,
		metric.WithUnit("{pass}"),
		metric.WithDescription("Reconcile passes (and batches of enqueued keys) halted because the patch queue was at capacity."))
	err = errors.Join(err, e)
	if err != nil {
		return nil, err
	}
	var passObs [numPassResults][]metric.ObserveOption
	for i, r := range passResults() {
		set := attribute.NewSet(nameKV, attribute.String(resultAttr, r))
		ri.passOpts[i] = []metric.RecordOption{metric.WithAttributeSet(set)}
		passObs[i] = []metric.ObserveOption{metric.WithAttributeSet(set)}
	}
	var objObs [numObjResults][]metric.ObserveOption
	for i, r := range objResults() {
		objObs[i] = []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(nameKV, attribute.String(resultAttr, r)))}
	}
	nameObs := []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(nameKV))}
	ri.reg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for i := range passObs {
			o.ObserveInt64(passes, c.passes[i].Load(), passObs[i]...)
		}
		for i := range objObs {
			o.ObserveInt64(objects, c.objects[i].Load(), objObs[i]...)
		}
		o.ObserveInt64(halted, c.halted.Load(), nameObs...)
		return nil
	}, passes, objects, halted)
	if err != nil {
		return nil, fmt.Errorf("registering the reconciler's instruments: %w", err)
	}
	return &ri, nil
}

func (ri *reconcileInstruments) recordPass(ctx context.Context, result int, d time.Duration) {
	if ri != nil {
		ri.duration.Record(ctx, d.Seconds(), ri.passOpts[result]...)
	}
}

// dispatchInstruments reports a dispatcher's counters and records patch
// call durations. A nil *dispatchInstruments records nothing.
type dispatchInstruments struct {
	duration metric.Float64Histogram
	durOpts  [numOutcomes][]metric.RecordOption
	wait     metric.Float64Histogram // quietpatch.queue.wait
	waitOpts []metric.RecordOption
	reg      metric.Registration
}

// dispatchSource is what the dispatcher's observable instruments read.
type dispatchSource interface {
	Stats() DispatcherStats
}

func newDispatchInstruments(m metric.Meter, name string, src dispatchSource) (*dispatchInstruments, error) {
	if isNoop(m) {
		return nil, nil
	}
	nameKV := attribute.String(pipelineAttr, name)
	var di dispatchInstruments
	var err, e error
	di.duration, e = m.Float64Histogram(dispatchDurationMetric,
		metric.WithUnit("s"),
		metric.WithDescription("Duration of status patch calls, by outcome."),
		metric.WithExplicitBucketBoundaries(patchBuckets()...))
	err = errors.Join(err, e)
	di.wait, e = m.Float64Histogram(queueWaitMetric,
		metric.WithUnit("s"),
		metric.WithDescription("Time a patch waited in the queue: from the enqueue of its latest value to its delivery to the dispatcher."),
		metric.WithExplicitBucketBoundaries(queueWaitBuckets()...))
	err = errors.Join(err, e)
	patches, e := m.Int64ObservableCounter(dispatchPatchesMetric,
		metric.WithUnit("{patch}"),
		metric.WithDescription("Status patch calls, by outcome."))
	err = errors.Join(err, e)
	dropped, e := m.Int64ObservableCounter(dispatchDroppedMetric,
		metric.WithUnit("{patch}"),
		metric.WithDescription("Patches dequeued and not applied, by reason."))
	err = errors.Join(err, e)
	inFlight, e := m.Int64ObservableGauge(dispatchInFlightMetric,
		metric.WithUnit("{patch}"),
		metric.WithDescription("Status patch calls in progress."))
	err = errors.Join(err, e)
	latency, e := m.Float64ObservableGauge(dispatchLatencyMetric,
		metric.WithUnit("s"),
		metric.WithDescription("Peak-EWMA of the status patch call latency."))
	err = errors.Join(err, e)
	limit, e := m.Int64ObservableGauge(dispatchLimitMetric,
		metric.WithUnit("{patch}"),
		metric.WithDescription("Patch calls allowed in flight: fixed, or the adaptive limit."))
	err = errors.Join(err, e)
	backoff, e := m.Float64ObservableGauge(dispatchBackoffMetric,
		metric.WithUnit("s"),
		metric.WithDescription("Time left before any patch call may start, after a 429 with Retry-After."))
	err = errors.Join(err, e)
	retryAfter, e := m.Int64ObservableCounter(dispatchRetryAfter,
		metric.WithUnit("{wait}"),
		metric.WithDescription("Retry-After windows of 429 answers honoured: no call started inside them."))
	err = errors.Join(err, e)
	if err != nil {
		return nil, err
	}
	var patchObs [numOutcomes][]metric.ObserveOption
	for i, o := range outcome.All() {
		set := attribute.NewSet(nameKV, attribute.String(outcomeAttr, string(o)))
		di.durOpts[i] = []metric.RecordOption{metric.WithAttributeSet(set)}
		patchObs[i] = []metric.ObserveOption{metric.WithAttributeSet(set)}
	}
	var dropObs [numDropReasons][]metric.ObserveOption
	for i, r := range DropReasons() {
		dropObs[i] = []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(nameKV, attribute.String(reasonAttr, string(r))))}
	}
	nameObs := []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(nameKV))}
	di.waitOpts = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(nameKV))}
	di.reg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := src.Stats()
		for i, oc := range outcome.All() {
			o.ObserveInt64(patches, st.Patches[oc], patchObs[i]...)
		}
		for i, r := range DropReasons() {
			o.ObserveInt64(dropped, st.Dropped[r], dropObs[i]...)
		}
		o.ObserveInt64(inFlight, int64(st.InFlight), nameObs...)
		o.ObserveFloat64(latency, st.Latency.Seconds(), nameObs...)
		o.ObserveInt64(limit, int64(st.Limit), nameObs...)
		o.ObserveFloat64(backoff, st.Backoff.Seconds(), nameObs...)
		o.ObserveInt64(retryAfter, st.RetryAfters, nameObs...)
		return nil
	}, patches, dropped, inFlight, latency, limit, backoff, retryAfter)
	if err != nil {
		return nil, fmt.Errorf("registering the dispatcher's instruments: %w", err)
	}
	return &di, nil
}

func (di *dispatchInstruments) recordWait(ctx context.Context, d time.Duration) {
	if di != nil {
		di.wait.Record(ctx, d.Seconds(), di.waitOpts...)
	}
}

func (di *dispatchInstruments) recordCall(ctx context.Context, o outcome.Outcome, d time.Duration) {
	if di != nil {
		di.duration.Record(ctx, d.Seconds(), di.durOpts[outcomeIndex[o]]...)
	}
}
