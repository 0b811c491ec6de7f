package statuspatch

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"k8s.io/utils/clock"

	"github.com/quietpatch/quietpatch/ewma"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// Attribute names.
const (
	pipelineAttr = "pipeline"
	reasonAttr   = "reason"
	resultAttr   = "result"
	outcomeAttr  = "outcome"
)

// depthTau is the time constant of the queue depth's Peak-EWMA.
const depthTau = 10 * time.Second

// newInstruments returns the instruments of a part of the pipeline, nil
// without a meter.
func newInstruments(o Options) *outcome.Instruments {
	return outcome.NewInstruments(o.Meter, attribute.String(pipelineAttr, o.Name))
}

// register registers f as the callback of in's observable instruments.
func register(in *outcome.Instruments, f metric.Callback) error {
	_, err := in.Register(f)
	return err
}

var (
	callBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	passBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	waitBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
)

// queueInstruments are a queue's: counters read from its Stats, the depth
// Peak-EWMA fed at every insertion and removal, the wait histogram.
type queueInstruments struct {
	clock clock.PassiveClock
	peak  *ewma.Gauge
	wait  metric.Float64Histogram
	opts  metric.MeasurementOption
	rec   []metric.RecordOption // opts, made once: a variadic argument built per call allocates
}

func newQueueInstruments[K comparable](o Options, q *PatchQueue[K]) (*queueInstruments, error) {
	in := newInstruments(o)
	if in == nil {
		return nil, nil
	}
	peak, err := ewma.New(depthTau, o.Clock)
	if err != nil {
		return nil, err
	}
	qi := &queueInstruments{clock: o.Clock, peak: peak, opts: in.Set()}
	qi.rec = []metric.RecordOption{qi.opts}
	qi.wait = in.Histogram("quietpatch.queue.wait", "Time a key waited in the queue: from its first add to its delivery.", waitBuckets...)
	enq := in.Counter("quietpatch.queue.enqueued", "{key}", "Keys added, including those that were waiting already (superseded).")
	deq := in.Counter("quietpatch.queue.dequeued", "{key}", "Keys delivered to a worker.")
	sup := in.Counter("quietpatch.queue.superseded", "{key}", "Keys added while they were waiting already: coalesced, no slot taken.")
	drop := in.Counter("quietpatch.queue.dropped", "{key}", "Adds and reservations refused, by reason: full, closed.")
	depth := in.Gauge("quietpatch.queue.depth", "{key}", "Keys waiting in the queue.")
	peakG := in.FloatGauge("quietpatch.queue.depth.peak_ewma", "{key}", "Peak-EWMA of the keys waiting: jumps to every peak, decays with a 10 s time constant.")
	capG := in.Gauge("quietpatch.queue.capacity", "{key}", "Capacity of each lane of the queue.")
	full, closed := in.Set(attribute.String(reasonAttr, "full")), in.Set(attribute.String(reasonAttr, "closed"))
	err = register(in, func(_ context.Context, ob metric.Observer) error {
		s, c := q.Stats(), q.Cap()
		ob.ObserveInt64(enq, s.Enqueued, qi.opts)
		ob.ObserveInt64(deq, s.Dequeued, qi.opts)
		ob.ObserveInt64(sup, s.Coalesced, qi.opts)
		ob.ObserveInt64(drop, s.DroppedFull, full)
		ob.ObserveInt64(drop, s.DroppedClosed, closed)
		ob.ObserveInt64(depth, int64(s.Depth), qi.opts)
		ob.ObserveFloat64(peakG, peak.Value(), qi.opts)
		ob.ObserveInt64(capG, int64(c), qi.opts)
		return nil
	})
	return qi, err
}

// depth feeds the Peak-EWMA; a negative depth means no change.
func (qi *queueInstruments) depth(now time.Time, depth int) {
	if qi != nil && depth >= 0 {
		qi.peak.UpdateAt(now, float64(depth))
	}
}

func (qi *queueInstruments) waited(now, since time.Time) {
	if qi != nil {
		qi.wait.Record(context.Background(), now.Sub(since).Seconds(), qi.rec...)
	}
}

// Results of a pass, the values of the result attribute of
// quietpatch.reconcile.passes.
const (
	passCompleted = "completed"
	passHalted    = "halted"
	passNotLeader = "not_leader"
	passError     = "error"
	passCanceled  = "canceled"
	passClosed    = "closed"
)

var passResults = []string{passCompleted, passHalted, passNotLeader, passError, passCanceled, passClosed}

// Results of an object in a pass, of quietpatch.reconcile.objects.
const (
	objUnchanged = "unchanged"
	objChanged   = "changed"
	objError     = "error"
)

var objResults = []string{objUnchanged, objChanged, objError}

type reconcileInstruments struct {
	duration metric.Float64Histogram
	opts     map[string]metric.RecordOption
}

func newReconcileInstruments(o Options, stats func() ReconcilerStats) (*reconcileInstruments, error) {
	in := newInstruments(o)
	if in == nil {
		return nil, nil
	}
	ri := &reconcileInstruments{opts: map[string]metric.RecordOption{}, duration: in.Histogram("quietpatch.reconcile.duration", "Duration of reconcile passes, by result.", passBuckets...)}
	passes := in.Counter("quietpatch.reconcile.passes", "{pass}", "Reconcile passes, by result: completed, halted (a lane at capacity), not_leader, error (listing failed), canceled, closed (queue closed).")
	objects := in.Counter("quietpatch.reconcile.objects", "{object}", "Objects compared by passes, by result: unchanged, changed (key queued), error.")
	halted := in.Counter("quietpatch.reconcile.halted", "{pass}", "Passes halted because the pass lane was at capacity.")
	passSets, objSets := map[string]metric.MeasurementOption{}, map[string]metric.MeasurementOption{}
	for _, r := range passResults {
		passSets[r] = in.Set(attribute.String(resultAttr, r))
		ri.opts[r] = passSets[r]
	}
	for _, r := range objResults {
		objSets[r] = in.Set(attribute.String(resultAttr, r))
	}
	plain := in.Set()
	return ri, register(in, func(_ context.Context, ob metric.Observer) error {
		s := stats()
		for r, set := range passSets {
			ob.ObserveInt64(passes, s.Passes[r], set)
		}
		for r, set := range objSets {
			ob.ObserveInt64(objects, s.Objects[r], set)
		}
		ob.ObserveInt64(halted, s.Halted, plain)
		return nil
	})
}

func (ri *reconcileInstruments) pass(result string, d time.Duration) {
	if ri != nil {
		ri.duration.Record(context.Background(), d.Seconds(), ri.opts[result])
	}
}

type dispatchInstruments struct {
	duration metric.Float64Histogram
	opts     map[outcome.Outcome]metric.RecordOption
}

func newDispatchInstruments(o Options, stats func() DispatcherStats) (*dispatchInstruments, error) {
	in := newInstruments(o)
	if in == nil {
		return nil, nil
	}
	di := &dispatchInstruments{opts: map[outcome.Outcome]metric.RecordOption{},
		duration: in.Histogram("quietpatch.dispatch.duration", "Duration of status patch calls, by outcome.", callBuckets...)}
	patches := in.Counter("quietpatch.dispatch.patches", "{patch}", "Status patch calls, by outcome.")
	dropped := in.Counter("quietpatch.dispatch.dropped", "{key}", "Keys dequeued and not sent, by reason.")
	echoes := in.Counter("quietpatch.dispatch.echoes", "{event}", "Events of our own writes (the version the patch call returned), dropped without a serve.")
	inFlight := in.Gauge("quietpatch.dispatch.in_flight", "{patch}", "Status patch calls in progress.")
	latency := in.FloatGauge("quietpatch.dispatch.latency.peak_ewma", "s", "Peak-EWMA of the status patch call latency.")
	limit := in.Gauge("quietpatch.dispatch.limit", "{patch}", "Patch calls allowed in flight: fixed, or the adaptive limit.")
	backoff := in.FloatGauge("quietpatch.dispatch.backoff", "s", "Time left before any patch call may start, after a 429 with Retry-After.")
	retry := in.Counter("quietpatch.dispatch.retry_after", "{wait}", "Retry-After windows of 429 answers honoured: no call started inside them.")
	outSets := map[outcome.Outcome]metric.MeasurementOption{}
	for _, oc := range outcome.All() {
		outSets[oc] = in.Set(attribute.String(outcomeAttr, string(oc)))
		di.opts[oc] = outSets[oc]
	}
	dropSets := map[string]metric.MeasurementOption{}
	for _, r := range dropReasons {
		dropSets[r] = in.Set(attribute.String(reasonAttr, r))
	}
	plain := in.Set()
	return di, register(in, func(_ context.Context, ob metric.Observer) error {
		s := stats()
		for oc, set := range outSets {
			ob.ObserveInt64(patches, s.Patches[oc], set)
		}
		for r, set := range dropSets {
			ob.ObserveInt64(dropped, s.Dropped[r], set)
		}
		ob.ObserveInt64(echoes, s.Echoes, plain)
		ob.ObserveInt64(inFlight, int64(s.InFlight), plain)
		ob.ObserveFloat64(latency, s.Latency.Seconds(), plain)
		ob.ObserveInt64(limit, int64(s.Limit), plain)
		ob.ObserveFloat64(backoff, s.Backoff.Seconds(), plain)
		ob.ObserveInt64(retry, s.RetryAfters, plain)
		return nil
	})
}

func (di *dispatchInstruments) call(o outcome.Outcome, d time.Duration) {
	if di != nil {
		di.duration.Record(context.Background(), d.Seconds(), di.opts[o])
	}
}
