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

// Instrument names of PatchQueue. They are stable: dashboards and alerts
// depend on them. See the package documentation for the table.
const (
	// QueueEnqueuedMetric counts items accepted (Int64Counter).
	QueueEnqueuedMetric = "statuspatch.queue.enqueued"
	// QueueDequeuedMetric counts items delivered (Int64Counter).
	QueueDequeuedMetric = "statuspatch.queue.dequeued"
	// QueueSupersededMetric counts waiting items replaced by a newer one
	// of their key (Int64Counter).
	QueueSupersededMetric = "statuspatch.queue.superseded"
	// QueueDroppedMetric counts drops by reason (Int64Counter).
	QueueDroppedMetric = "statuspatch.queue.dropped"
	// QueueDepthMetric is the number of items waiting
	// (Int64UpDownCounter).
	QueueDepthMetric = "statuspatch.queue.depth"
	// QueueDepthPeakMetric is the Peak-EWMA of the depth
	// (Float64ObservableGauge).
	QueueDepthPeakMetric = "statuspatch.queue.depth.peak_ewma"
	// QueueCapacityMetric is the capacity (Int64ObservableGauge).
	QueueCapacityMetric = "statuspatch.queue.capacity"
	// QueueWaitMetric is the time from enqueue to delivery, in seconds
	// (Float64Histogram).
	QueueWaitMetric = "statuspatch.queue.wait"
)

// Attributes of the queue's instruments.
const (
	// QueueAttrKey is the attribute on every queue instrument; its value
	// is QueueConfig.Name.
	QueueAttrKey = "queue"
	// QueueReasonAttrKey is the attribute of statuspatch.queue.dropped
	// that says why.
	QueueReasonAttrKey = "reason"

	// QueueDropReasonFull: rejected because the queue was full.
	QueueDropReasonFull = "full"
	// QueueDropReasonClosed: rejected because the queue was closed.
	QueueDropReasonClosed = "closed"
	// QueueDropReasonExpired: enqueued, then dropped at dequeue for being
	// older than QueueConfig.MaxAge.
	QueueDropReasonExpired = "expired"
)

// queueWaitBuckets are the bucket boundaries, in seconds, of
// statuspatch.queue.wait: from a millisecond to a few reconcile intervals.
var queueWaitBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// queueMetrics holds a queue's instruments and the attribute options
// precomputed for them, so that recording allocates nothing. With on false
// every method returns at once.
type queueMetrics struct {
	on         bool
	enq        metric.Int64Counter
	deq        metric.Int64Counter
	sup        metric.Int64Counter
	drop       metric.Int64Counter
	depth      metric.Int64UpDownCounter
	wait       metric.Float64Histogram
	gauge      *ewma.Gauge
	addOpts    []metric.AddOption
	recOpts    []metric.RecordOption
	dropOpts   [3][]metric.AddOption // by queueDropReason
	registered metric.Registration
}

// init creates the instruments of a queue built from cfg. clk nil means
// the real clock.
func (m *queueMetrics) init(cfg *queueMetricsConfig, clk clock.PassiveClock) error {
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
	set := attribute.NewSet(attribute.String(QueueAttrKey, name))
	opt := metric.WithAttributeSet(set)
	m.addOpts = []metric.AddOption{opt}
	m.recOpts = []metric.RecordOption{opt}
	for r, v := range [...]string{queueDropFull: QueueDropReasonFull, queueDropClosed: QueueDropReasonClosed, queueDropExpired: QueueDropReasonExpired} {
		m.dropOpts[r] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
			attribute.String(QueueAttrKey, name), attribute.String(QueueReasonAttrKey, v)))}
	}

	var err error
	wrap := func(inst string, e error) error {
		return fmt.Errorf("statuspatch: creating instrument %s: %w", inst, e)
	}
	if m.enq, err = mt.Int64Counter(QueueEnqueuedMetric, metric.WithUnit("{item}"),
		metric.WithDescription("Items accepted by the queue, including those that replaced a waiting item of the same key.")); err != nil {
		return wrap(QueueEnqueuedMetric, err)
	}
	if m.deq, err = mt.Int64Counter(QueueDequeuedMetric, metric.WithUnit("{item}"),
		metric.WithDescription("Items delivered to a consumer.")); err != nil {
		return wrap(QueueDequeuedMetric, err)
	}
	if m.sup, err = mt.Int64Counter(QueueSupersededMetric, metric.WithUnit("{item}"),
		metric.WithDescription("Waiting items replaced by a newer item of the same key.")); err != nil {
		return wrap(QueueSupersededMetric, err)
	}
	if m.drop, err = mt.Int64Counter(QueueDroppedMetric, metric.WithUnit("{item}"),
		metric.WithDescription("Items not delivered, by reason: full and closed are rejected sends (never enqueued); expired were enqueued and dropped at dequeue.")); err != nil {
		return wrap(QueueDroppedMetric, err)
	}
	if m.depth, err = mt.Int64UpDownCounter(QueueDepthMetric, metric.WithUnit("{item}"),
		metric.WithDescription("Items waiting in the queue.")); err != nil {
		return wrap(QueueDepthMetric, err)
	}
	if m.wait, err = mt.Float64Histogram(QueueWaitMetric, metric.WithUnit("s"),
		metric.WithDescription("Time from enqueue (of the latest value) to delivery."),
		metric.WithExplicitBucketBoundaries(queueWaitBuckets...)); err != nil {
		return wrap(QueueWaitMetric, err)
	}
	peak, err := mt.Float64ObservableGauge(QueueDepthPeakMetric, metric.WithUnit("{item}"),
		metric.WithDescription("Peak-EWMA of the number of items waiting: jumps to every peak, decays with the configured time constant."))
	if err != nil {
		return wrap(QueueDepthPeakMetric, err)
	}
	capg, err := mt.Int64ObservableGauge(QueueCapacityMetric, metric.WithUnit("{item}"),
		metric.WithDescription("Capacity of the queue (slots for waiting items and reservations)."))
	if err != nil {
		return wrap(QueueCapacityMetric, err)
	}
	if m.gauge, err = ewma.New(tau, clk); err != nil {
		return fmt.Errorf("statuspatch: creating depth gauge: %w", err)
	}
	g, capacity := m.gauge, int64(cfg.capacity)
	obs := []metric.ObserveOption{opt}
	m.registered, err = mt.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveFloat64(peak, g.Value(), obs...)
		o.ObserveInt64(capg, capacity, obs...)
		return nil
	}, peak, capg)
	if err != nil {
		return fmt.Errorf("statuspatch: registering queue gauges: %w", err)
	}
	m.on = true
	return nil
}

// queueMetricsConfig is the part of QueueConfig that the instruments
// need; it does not depend on the item type.
type queueMetricsConfig struct {
	meter    metric.Meter
	name     string
	tau      time.Duration
	capacity int
}

func (m *queueMetrics) enqueued(now time.Time, depth int) {
	if !m.on {
		return
	}
	ctx := context.Background()
	m.enq.Add(ctx, 1, m.addOpts...)
	m.depth.Add(ctx, 1, m.addOpts...)
	m.gauge.UpdateAt(now, float64(depth))
}

func (m *queueMetrics) superseded() {
	if !m.on {
		return
	}
	ctx := context.Background()
	m.enq.Add(ctx, 1, m.addOpts...)
	m.sup.Add(ctx, 1, m.addOpts...)
}

func (m *queueMetrics) dequeued(now time.Time, waited time.Duration, depth int) {
	if !m.on {
		return
	}
	ctx := context.Background()
	m.deq.Add(ctx, 1, m.addOpts...)
	m.depth.Add(ctx, -1, m.addOpts...)
	m.wait.Record(ctx, waited.Seconds(), m.recOpts...)
	m.gauge.UpdateAt(now, float64(depth))
}

func (m *queueMetrics) expired(now time.Time, depth int) {
	if !m.on {
		return
	}
	ctx := context.Background()
	m.drop.Add(ctx, 1, m.dropOpts[queueDropExpired]...)
	m.depth.Add(ctx, -1, m.addOpts...)
	m.gauge.UpdateAt(now, float64(depth))
}

func (m *queueMetrics) dropped(r queueDropReason) {
	if !m.on {
		return
	}
	m.drop.Add(context.Background(), 1, m.dropOpts[r]...)
}

func (m *queueMetrics) unregister() {
	if m.registered != nil {
		// Unregister fails only if the registration is unknown to the
		// meter, which it cannot be; there is nobody to tell.
		_ = m.registered.Unregister()
	}
}
