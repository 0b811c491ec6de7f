package statuspatch

import (
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// Instrument names of the reconciler and the dispatcher. They are stable:
// dashboards and alerts may rely on them. The package documentation lists
// them with their units and attributes.
const (
	// ReconcileDurationMetric is the histogram of reconcile pass durations
	// in seconds, by pass result (ResultAttr).
	ReconcileDurationMetric = "statuspatch.reconcile.duration"
	// ReconcileObjectsMetric counts objects visited by reconcile passes and
	// on-demand reconciles, by result: unchanged, changed or error.
	ReconcileObjectsMetric = "statuspatch.reconcile.objects"
	// ReconcileHaltedMetric counts reconcile passes, and batches of
	// Enqueue'd keys, halted because the queue was at capacity.
	ReconcileHaltedMetric = "statuspatch.reconcile.halted"
	// DispatchDurationMetric is the histogram of patch call durations in
	// seconds, by outcome (see [Outcome]).
	DispatchDurationMetric = "statuspatch.dispatch.duration"
	// DispatchPatchesMetric counts patch calls by outcome.
	DispatchPatchesMetric = "statuspatch.dispatch.patches"
	// DispatchDroppedMetric counts patches the dispatcher dequeued and did
	// not apply, by reason (see [DropReason]).
	DispatchDroppedMetric = "statuspatch.dispatch.dropped"
	// DispatchInFlightMetric is the number of patch calls in progress.
	DispatchInFlightMetric = "statuspatch.dispatch.in_flight"
)

// Attribute keys on the instruments above, and where their values come
// from.
const (
	// ReconcilerAttrKey carries ReconcilerConfig.Name.
	ReconcilerAttrKey = "reconciler"
	// DispatcherAttrKey carries DispatcherConfig.Name.
	DispatcherAttrKey = "dispatcher"
	// ResultAttrKey carries a pass result (completed, halted, not_leader,
	// error, canceled, closed) or an object result (unchanged, changed,
	// error).
	ResultAttrKey = "result"
	// OutcomeAttrKey carries a patch call's [Outcome].
	OutcomeAttrKey = "outcome"
	// DropReasonAttrKey carries a [DropReason].
	DropReasonAttrKey = "reason"
)

// Histogram bucket boundaries in seconds. Patch calls take milliseconds on
// a healthy API server and up to PatchTimeout on a sick one; passes take
// milliseconds to seconds.
func patchBuckets() []float64 {
	return []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
}

func passBuckets() []float64 {
	return []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
}

// meterOrNoop returns m, or a no-op meter when m is nil.
func meterOrNoop(m metric.Meter) metric.Meter {
	if m == nil {
		return noop.NewMeterProvider().Meter("github.com/quietpatch/quietpatch/statuspatch")
	}
	return m
}

// Pass results, the values of ResultAttrKey on ReconcileDurationMetric.
const (
	passCompleted = "completed"  // every object visited
	passHalted    = "halted"     // queue at capacity
	passNotLeader = "not_leader" // leadership lost (or never held) during the pass
	passError     = "error"      // Source.List failed
	passCanceled  = "canceled"   // ctx cancelled
	passClosed    = "closed"     // queue closed
)

// Object results, the values of ResultAttrKey on ReconcileObjectsMetric.
const (
	objUnchanged = "unchanged"
	objChanged   = "changed"
	objError     = "error"
)

// reconcileInstruments holds the reconciler's instruments and the measurement
// options for every attribute combination, built once so that recording
// allocates nothing.
type reconcileInstruments struct {
	duration metric.Float64Histogram
	objects  metric.Int64Counter
	halted   metric.Int64Counter

	passOpts map[string][]metric.RecordOption // by pass result
	objOpts  [3][]metric.AddOption            // unchanged, changed, error
	nameOpts []metric.AddOption
}

func newReconcileInstruments(m metric.Meter, name string) (*reconcileInstruments, error) {
	m = meterOrNoop(m)
	var ri reconcileInstruments
	var err, e error
	ri.duration, e = m.Float64Histogram(ReconcileDurationMetric,
		metric.WithUnit("s"),
		metric.WithDescription("Duration of reconcile passes, by result."),
		metric.WithExplicitBucketBoundaries(passBuckets()...))
	err = errors.Join(err, e)
	ri.objects, e = m.Int64Counter(ReconcileObjectsMetric,
		metric.WithUnit("{object}"),
		metric.WithDescription("Objects reconciled, by result: unchanged, changed (a patch was queued) or error."))
	err = errors.Join(err, e)
	ri.halted, e = m.Int64Counter(ReconcileHaltedMetric,
		metric.WithUnit("{pass}"),
		metric.WithDescription("Reconcile passes (and batches of enqueued keys) halted because the patch queue was at capacity."))
	err = errors.Join(err, e)
	if err != nil {
		return nil, err
	}
	nameKV := attribute.String(ReconcilerAttrKey, name)
	ri.passOpts = make(map[string][]metric.RecordOption)
	for _, r := range []string{passCompleted, passHalted, passNotLeader, passError, passCanceled, passClosed} {
		ri.passOpts[r] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(nameKV, attribute.String(ResultAttrKey, r)))}
	}
	for i, r := range []string{objUnchanged, objChanged, objError} {
		ri.objOpts[i] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(nameKV, attribute.String(ResultAttrKey, r)))}
	}
	ri.nameOpts = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(nameKV))}
	return &ri, nil
}

// dispatchInstruments holds the dispatcher's instruments and precomputed
// measurement options.
type dispatchInstruments struct {
	duration metric.Float64Histogram
	patches  metric.Int64Counter
	dropped  metric.Int64Counter
	inFlight metric.Int64UpDownCounter

	durOpts   map[Outcome][]metric.RecordOption
	countOpts map[Outcome][]metric.AddOption
	dropOpts  map[DropReason][]metric.AddOption
	nameOpts  []metric.AddOption
}

func newDispatchInstruments(m metric.Meter, name string) (*dispatchInstruments, error) {
	m = meterOrNoop(m)
	var di dispatchInstruments
	var err, e error
	di.duration, e = m.Float64Histogram(DispatchDurationMetric,
		metric.WithUnit("s"),
		metric.WithDescription("Duration of status patch calls, by outcome."),
		metric.WithExplicitBucketBoundaries(patchBuckets()...))
	err = errors.Join(err, e)
	di.patches, e = m.Int64Counter(DispatchPatchesMetric,
		metric.WithUnit("{patch}"),
		metric.WithDescription("Status patch calls, by outcome."))
	err = errors.Join(err, e)
	di.dropped, e = m.Int64Counter(DispatchDroppedMetric,
		metric.WithUnit("{patch}"),
		metric.WithDescription("Patches dequeued and not applied, by reason."))
	err = errors.Join(err, e)
	di.inFlight, e = m.Int64UpDownCounter(DispatchInFlightMetric,
		metric.WithUnit("{patch}"),
		metric.WithDescription("Status patch calls in progress."))
	err = errors.Join(err, e)
	if err != nil {
		return nil, err
	}
	nameKV := attribute.String(DispatcherAttrKey, name)
	di.durOpts = make(map[Outcome][]metric.RecordOption)
	di.countOpts = make(map[Outcome][]metric.AddOption)
	for _, o := range outcomes() {
		set := attribute.NewSet(nameKV, attribute.String(OutcomeAttrKey, string(o)))
		di.durOpts[o] = []metric.RecordOption{metric.WithAttributeSet(set)}
		di.countOpts[o] = []metric.AddOption{metric.WithAttributeSet(set)}
	}
	di.dropOpts = make(map[DropReason][]metric.AddOption)
	for _, r := range dropReasons() {
		di.dropOpts[r] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(nameKV, attribute.String(DropReasonAttrKey, string(r))))}
	}
	di.nameOpts = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(nameKV))}
	return &di, nil
}
