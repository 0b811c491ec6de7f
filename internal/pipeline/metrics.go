package pipeline

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"k8s.io/apimachinery/pkg/types"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/internal/queue"
	"github.com/quietpatch/quietpatch/internal/telemetry"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// Attribute names.
const (
	pipelineAttr = "pipeline"
	reasonAttr   = "reason"
	resultAttr   = "result"
	outcomeAttr  = "outcome"
)

var (
	callBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	passBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	waitBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
)

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

// Metrics are a pipeline's instruments (docs/metrics.md): three histograms
// recorded at events — a call's duration by the dispatcher, a pass's by
// the reconciler, a key's wait in the queue by the dispatcher as it takes
// the key — and the observable counters and gauges, read from the parts'
// Stats at each collection while Register's registration lasts. A nil
// *Metrics records nothing.
type Metrics struct {
	in               *telemetry.Instruments
	call, pass, wait metric.Float64Histogram
	outcomes         map[outcome.Outcome]metric.MeasurementOption // of call and dispatch.patches
	passes           map[string]metric.MeasurementOption          // of pass and reconcile.passes
	waitOpts         []metric.RecordOption                        // made once: a variadic argument built per call allocates
	queue            func(ob metric.Observer, q queue.Stats, capacity int)
	reconciler       func(ob metric.Observer, r ReconcilerStats)
	dispatcher       func(ob metric.Observer, d DispatcherStats)
}

// sets returns, for each key, the attributes of in plus attr=key.
func sets[K ~string](in *telemetry.Instruments, attr string, keys ...K) map[K]metric.MeasurementOption {
	m := make(map[K]metric.MeasurementOption, len(keys))
	for _, k := range keys {
		m[k] = in.Set(attribute.String(attr, string(k)))
	}
	return m
}

// NewMetrics creates a pipeline's instruments on m, every data point with
// the pipeline attribute o.Name and o.Attrs; nil without a meter.
func NewMetrics(m metric.Meter, o Options) *Metrics {
	in := telemetry.NewInstruments(m, append([]attribute.KeyValue{attribute.String(pipelineAttr, o.Name)}, o.Attrs...)...)
	if in == nil {
		return nil
	}
	plain := in.Set()
	x := &Metrics{in: in, outcomes: sets(in, outcomeAttr, base.Outcomes()...), passes: sets(in, resultAttr, passResults...),
		call:     in.Histogram("quietpatch.dispatch.duration", "Duration of status patch calls, by outcome.", callBuckets...),
		pass:     in.Histogram("quietpatch.reconcile.duration", "Duration of reconcile passes, by result.", passBuckets...),
		wait:     in.Histogram("quietpatch.queue.wait", "Time a key waited in the queue: from its first add to its delivery.", waitBuckets...),
		waitOpts: []metric.RecordOption{plain}}

	enq := in.Counter("quietpatch.queue.enqueued", "{key}", "Keys added, including those that were waiting already (superseded).")
	deq := in.Counter("quietpatch.queue.dequeued", "{key}", "Keys delivered to a worker.")
	sup := in.Counter("quietpatch.queue.superseded", "{key}", "Keys added while they were waiting already: coalesced, no slot taken.")
	drop := in.Counter("quietpatch.queue.dropped", "{key}", "Adds and reservations refused, by reason: full, closed.")
	depth := in.Gauge("quietpatch.queue.depth", "{key}", "Keys waiting in the queue.")
	peak := in.FloatGauge("quietpatch.queue.depth.peak_ewma", "{key}", "Peak-EWMA of the keys waiting: jumps to every peak, decays with a 10 s time constant.")
	capG := in.Gauge("quietpatch.queue.capacity", "{key}", "Capacity of each lane of the queue.")
	refused := sets(in, reasonAttr, "full", "closed")

	passes := in.Counter("quietpatch.reconcile.passes", "{pass}", "Reconcile passes, by result: completed, halted (a lane at capacity), not_leader, error (listing failed), canceled, closed (queue closed).")
	objects := in.Counter("quietpatch.reconcile.objects", "{object}", "Objects compared by passes, by result: unchanged, changed (key queued), error.")
	halted := in.Counter("quietpatch.reconcile.halted", "{pass}", "Passes halted because the pass lane was at capacity.")
	objSets := sets(in, resultAttr, objResults...)

	patches := in.Counter("quietpatch.dispatch.patches", "{patch}", "Status patch calls, by outcome.")
	dropped := in.Counter("quietpatch.dispatch.dropped", "{key}", "Keys dequeued and not sent, by reason.")
	echoes := in.Counter("quietpatch.dispatch.echoes", "{event}", "Events of our own writes (the version the patch call returned), dropped without a serve.")
	inFlight := in.Gauge("quietpatch.dispatch.in_flight", "{patch}", "Status patch calls in progress.")
	latency := in.FloatGauge("quietpatch.dispatch.latency.peak_ewma", "s", "Peak-EWMA of the status patch call latency.")
	limit := in.Gauge("quietpatch.dispatch.limit", "{patch}", "Patch calls allowed in flight: fixed, or the adaptive limit.")
	backoff := in.FloatGauge("quietpatch.dispatch.backoff", "s", "Time left before any patch call may start, after a 429 with Retry-After.")
	retry := in.Counter("quietpatch.dispatch.retry_after", "{wait}", "Retry-After windows of 429 answers honoured: no call started inside them.")
	dropSets := sets(in, reasonAttr, dropReasons...)

	x.queue = func(ob metric.Observer, q queue.Stats, c int) {
		ob.ObserveInt64(enq, q.Enqueued, plain)
		ob.ObserveInt64(deq, q.Dequeued, plain)
		ob.ObserveInt64(sup, q.Coalesced, plain)
		ob.ObserveInt64(drop, q.DroppedFull, refused["full"])
		ob.ObserveInt64(drop, q.DroppedClosed, refused["closed"])
		ob.ObserveInt64(depth, int64(q.Depth), plain)
		ob.ObserveFloat64(peak, q.DepthPeak, plain)
		ob.ObserveInt64(capG, int64(c), plain)
	}
	x.reconciler = func(ob metric.Observer, r ReconcilerStats) {
		for res, set := range x.passes {
			ob.ObserveInt64(passes, r.Passes[res], set)
		}
		for res, set := range objSets {
			ob.ObserveInt64(objects, r.Objects[res], set)
		}
		ob.ObserveInt64(halted, r.Halted, plain)
	}
	x.dispatcher = func(ob metric.Observer, d DispatcherStats) {
		for oc, set := range x.outcomes {
			ob.ObserveInt64(patches, d.Patches[oc], set)
		}
		for res, set := range dropSets {
			ob.ObserveInt64(dropped, d.Dropped[res], set)
		}
		ob.ObserveInt64(echoes, d.Echoes, plain)
		ob.ObserveInt64(inFlight, int64(d.InFlight), plain)
		ob.ObserveFloat64(latency, d.Latency.Seconds(), plain)
		ob.ObserveInt64(limit, int64(d.Limit), plain)
		ob.ObserveFloat64(backoff, d.Backoff.Seconds(), plain)
		ob.ObserveInt64(retry, d.RetryAfters, plain)
	}
	return x
}

// Register registers the observable instruments, read at each collection
// from the parts' Stats (a nil part reports nothing), and returns the
// function that unregisters them: the pipeline registers when its Run
// starts and unregisters when it returns. Without a meter it does
// nothing.
func (x *Metrics) Register(q *queue.Queue[types.NamespacedName], rec func() ReconcilerStats, disp func() DispatcherStats) (unregister func(), err error) {
	if x == nil {
		return func() {}, nil
	}
	return x.in.Register(func(_ context.Context, ob metric.Observer) error {
		if q != nil {
			x.queue(ob, q.Stats(), q.Cap())
		}
		if rec != nil {
			x.reconciler(ob, rec())
		}
		if disp != nil {
			x.dispatcher(ob, disp())
		}
		return nil
	})
}

func (x *Metrics) recordCall(o outcome.Outcome, d time.Duration) {
	if x != nil {
		x.call.Record(context.Background(), d.Seconds(), x.outcomes[o])
	}
}

func (x *Metrics) recordPass(result string, d time.Duration) {
	if x != nil {
		x.pass.Record(context.Background(), d.Seconds(), x.passes[result])
	}
}

func (x *Metrics) recordWait(d time.Duration) {
	if x != nil {
		x.wait.Record(context.Background(), d.Seconds(), x.waitOpts...)
	}
}
