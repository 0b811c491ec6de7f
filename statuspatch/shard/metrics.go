package shard

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// Instruments of a [Coordinator] (docs/metrics.md has the table).
const (
	metricShardsHeld    = "quietpatch.shard.held"
	metricShardsRunning = "quietpatch.shard.running"
	metricShardMembers  = "quietpatch.shard.members"
	metricShardMoves    = "quietpatch.shard.moves"
	metricShardObjects  = "quietpatch.shard.objects"
	metricUnfiltered    = "quietpatch.shard.unfiltered"
)

// Directions of a shard move: the direction attribute of
// quietpatch.shard.moves.
const (
	movedAcquired = "acquired"
	movedGivenUp  = "given_up"
	movedLost     = "lost"
)

var moveDirections = []string{movedAcquired, movedGivenUp, movedLost}

// instruments registers the shard instruments, observed from Stats at each
// collection.
func instruments(m metric.Meter, name, identity string, stats func() Stats) error {
	in := outcome.NewInstruments(m, attribute.String("pipeline", name), attribute.String("identity", identity))
	if in == nil {
		return nil
	}
	held := in.Gauge(metricShardsHeld, "{shard}", "Shards this replica leads (its claim on the shard's Lease is current).")
	running := in.Gauge(metricShardsRunning, "{shard}", "Shards this replica runs an informer and a pipeline for: led, or competed for.")
	members := in.Gauge(metricShardMembers, "{replica}", "Replicas alive in the shard group, as this replica sees their membership Leases.")
	moves := in.Counter(metricShardMoves, "{move}", "Shard moves of this replica, by direction: acquired, given_up (on purpose: rebalance or stop), lost.")
	objects := in.Gauge(metricShardObjects, "{object}", "Objects in the caches of the shards this replica runs.")
	unfiltered := in.Gauge(metricUnfiltered, "", "1 once the API server returned an object outside the shard range asked for (ShardSelector not honoured: filtered client-side), else 0.")
	opt, dirs := in.Set(), map[string]metric.ObserveOption{}
	for _, d := range moveDirections {
		dirs[d] = in.Set(attribute.String("direction", d))
	}
	_, err := in.Register(func(_ context.Context, o metric.Observer) error {
		st := stats()
		o.ObserveInt64(held, int64(len(st.Held)), opt)
		o.ObserveInt64(running, int64(len(st.Running)), opt)
		o.ObserveInt64(members, int64(len(st.Members)), opt)
		o.ObserveInt64(moves, st.Acquired, dirs[movedAcquired])
		o.ObserveInt64(moves, st.GivenUp, dirs[movedGivenUp])
		o.ObserveInt64(moves, st.Lost, dirs[movedLost])
		o.ObserveInt64(objects, st.Objects, opt)
		u := int64(0)
		if st.Unfiltered {
			u = 1
		}
		o.ObserveInt64(unfiltered, u, opt)
		return nil
	})
	return err
}

// trackedMeter is a shard's Meter: every measurement of the shard's parts
// carries the shard attribute (the pipeline attribute stays Config.Name),
// and the callbacks they register are unregistered when the shard stops,
// so a shard run again reports once.
type trackedMeter struct {
	metric.Meter
	shard metric.MeasurementOption
	mu    sync.Mutex
	regs  []metric.Registration
}

func newTrackedMeter(m metric.Meter, i int) *trackedMeter {
	return &trackedMeter{Meter: m, shard: metric.WithAttributes(attribute.Int("shard", i))}
}

func (m *trackedMeter) RegisterCallback(f metric.Callback, insts ...metric.Observable) (metric.Registration, error) {
	r, err := m.Meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		return f(ctx, shardObserver{Observer: o, shard: m.shard})
	}, insts...)
	if err == nil {
		m.mu.Lock()
		m.regs = append(m.regs, r)
		m.mu.Unlock()
	}
	return r, err
}

func (m *trackedMeter) Float64Histogram(name string, opts ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	h, err := m.Meter.Float64Histogram(name, opts...)
	if err != nil {
		return h, err
	}
	return shardHistogram{Float64Histogram: h, shard: m.shard}, nil
}

func (m *trackedMeter) unregister() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.regs {
		_ = r.Unregister()
	}
	m.regs = nil
}

// shardObserver adds the shard attribute to every observation.
type shardObserver struct {
	metric.Observer
	shard metric.MeasurementOption
}

func (o shardObserver) ObserveFloat64(obs metric.Float64Observable, v float64, opts ...metric.ObserveOption) {
	o.Observer.ObserveFloat64(obs, v, append(opts[:len(opts):len(opts)], o.shard)...)
}

func (o shardObserver) ObserveInt64(obs metric.Int64Observable, v int64, opts ...metric.ObserveOption) {
	o.Observer.ObserveInt64(obs, v, append(opts[:len(opts):len(opts)], o.shard)...)
}

// shardHistogram adds the shard attribute to every recording.
type shardHistogram struct {
	metric.Float64Histogram
	shard metric.MeasurementOption
}

func (h shardHistogram) Record(ctx context.Context, v float64, opts ...metric.RecordOption) {
	h.Float64Histogram.Record(ctx, v, append(opts[:len(opts):len(opts)], h.shard)...)
}
