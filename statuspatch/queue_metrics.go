package statuspatch

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"k8s.io/utils/clock"

	"github.com/quietpatch/quietpatch/ewma"
)

// Instrument names of PatchQueue; the package documentation has the table.
const (
	queueEnqueuedMetric   = "quietpatch.queue.enqueued"
	queueDequeuedMetric   = "quietpatch.queue.dequeued"
	queueSupersededMetric = "quietpatch.queue.superseded"
	queueDroppedMetric    = "quietpatch.queue.dropped"
	queueDepthMetric      = "quietpatch.queue.depth"
	queueDepthPeakMetric  = "quietpatch.queue.depth.peak_ewma"
	queueCapacityMetric   = "quietpatch.queue.capacity"
	queueWaitMetric       = "quietpatch.queue.wait" // recorded by the dispatcher
)

// Attribute keys shared by the package's instruments.
const (
	// pipelineAttr carries the Name of the queue, reconciler or
	// dispatcher: one value per pipeline.
	pipelineAttr = "pipeline"
	reasonAttr   = "reason"
	resultAttr   = "result"
	outcomeAttr  = "outcome"
)

// queueWaitBuckets are the bucket boundaries, in seconds, of
// quietpatch.queue.wait: from a millisecond to a few reconcile intervals.
func queueWaitBuckets() []float64 {
	return []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
}

// queueMetrics holds a queue's instruments. They are all observable: the
// SDK reads the queue's own counters, depth and capacity at collection
// time, so producers and consumers pay nothing for them but the depth
// Peak-EWMA (package ewma; the queue's own state, updated under the queue's
// lock so that updates keep their order). The time items waited is
// recorded by their consumer, the dispatcher, which reads Item.Enqueued.
// With on false every method returns at once.
type queueMetrics struct {
	on         bool
	gauge      *ewma.Gauge
	registered metric.Registration
}

// queueSnapshot is what the observable instruments read: the queue's
// counters and its capacity, taken under its lock.
type queueSnapshot func() (QueueStats, int)

// init creates the instruments of a queue built from cfg. clk nil means
// the real clock.
func (m *queueMetrics) init(cfg *queueMetricsConfig, clk clock.PassiveClock, snap queueSnapshot) error {
	if cfg.meter == nil {
		return nil
	}
	if _, isNoop := cfg.meter.(noop.Meter); isNoop {
		return nil
	}
	mt := cfg.meter
	name := cfg.name
	if name == "" {
		name = DefaultQueueName
	}
	tau := cfg.tau
	if tau == 0 {
		tau = DefaultDepthTau
	}
	nameKV := attribute.String(pipelineAttr, name)
	set := attribute.NewSet(nameKV)
	obs := []metric.ObserveOption{metric.WithAttributeSet(set)}
	var dropObs [3][]metric.ObserveOption
	for r, v := range [...]QueueDropReason{queueDropFull: QueueDropFull, queueDropClosed: QueueDropClosed, queueDropExpired: QueueDropExpired} {
		dropObs[r] = []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(nameKV, attribute.String(reasonAttr, string(v))))}
	}

	wrap := func(inst string, e error) error {
		return fmt.Errorf("statuspatch: creating instrument %s: %w", inst, e)
	}
	enq, err := mt.Int64ObservableCounter(queueEnqueuedMetric, metric.WithUnit("{patch}"),
		metric.WithDescription("Items accepted by the queue, including those that replaced a waiting item of the same key."))
	if err != nil {
		return wrap(queueEnqueuedMetric, err)
	}
	deq, err := mt.Int64ObservableCounter(queueDequeuedMetric, metric.WithUnit("{patch}"),
		metric.WithDescription("Items delivered to a consumer."))
	if err != nil {
		return wrap(queueDequeuedMetric, err)
	}
	sup, err := mt.Int64ObservableCounter(queueSupersededMetric, metric.WithUnit("{patch}"),
		metric.WithDescription("Waiting items replaced by a newer item of the same key."))
	if err != nil {
		return wrap(queueSupersededMetric, err)
	}
	drop, err := mt.Int64ObservableCounter(queueDroppedMetric, metric.WithUnit("{patch}"),
		metric.WithDescription("Items not delivered, by reason: full and closed are refused sends (never enqueued); expired were enqueued and dropped at dequeue."))
	if err != nil {
		return wrap(queueDroppedMetric, err)
	}
	depth, err := mt.Int64ObservableGauge(queueDepthMetric, metric.WithUnit("{patch}"),
		metric.WithDescription("Items waiting in the queue."))
	if err != nil {
		return wrap(queueDepthMetric, err)
	}
	peak, err := mt.Float64ObservableGauge(queueDepthPeakMetric, metric.WithUnit("{patch}"),
		metric.WithDescription("Peak-EWMA of the number of items waiting: jumps to every peak, decays with the configured time constant."))
	if err != nil {
		return wrap(queueDepthPeakMetric, err)
	}
	capg, err := mt.Int64ObservableGauge(queueCapacityMetric, metric.WithUnit("{patch}"),
		metric.WithDescription("Capacity of the queue (slots for waiting items and reservations)."))
	if err != nil {
		return wrap(queueCapacityMetric, err)
	}
	if m.gauge, err = ewma.New(tau, clk); err != nil {
		return fmt.Errorf("statuspatch: creating depth gauge: %w", err)
	}
	g := m.gauge
	m.registered, err = mt.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st, capacity := snap()
		o.ObserveInt64(enq, st.Enqueued, obs...)
		o.ObserveInt64(deq, st.Dequeued, obs...)
		o.ObserveInt64(sup, st.Superseded, obs...)
		o.ObserveInt64(drop, st.DroppedFull, dropObs[queueDropFull]...)
		o.ObserveInt64(drop, st.DroppedClosed, dropObs[queueDropClosed]...)
		o.ObserveInt64(drop, st.DroppedExpired, dropObs[queueDropExpired]...)
		o.ObserveInt64(depth, int64(st.Depth), obs...)
		o.ObserveFloat64(peak, g.Value(), obs...)
		o.ObserveInt64(capg, int64(capacity), obs...)
		return nil
	}, enq, deq, sup, drop, depth, peak, capg)
	if err != nil {
		return fmt.Errorf("statuspatch: registering queue instruments: %w", err)
	}
	m.on = true
	return nil
}

// queueMetricsConfig is the part of QueueConfig that the instruments
// need; it does not depend on the item type.
type queueMetricsConfig struct {
	meter metric.Meter
	name  string
	tau   time.Duration
}

// depthChanged records the depth in the Peak-EWMA gauge. The caller holds
// the queue's lock, so updates are applied in the order of the changes.
func (m *queueMetrics) depthChanged(now time.Time, depth int) {
	if m.on {
		m.gauge.UpdateAt(now, float64(depth))
	}
}

func (m *queueMetrics) unregister() {
	if m.registered != nil {
		// Unregister fails only if the registration is unknown to the
		// meter, which it cannot be; there is nobody to tell.
		_ = m.registered.Unregister()
	}
}
