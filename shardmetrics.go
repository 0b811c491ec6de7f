package quietpatch

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Instruments of a [Sharded] (the package documentation has the table).
const (
	metricShardsHeld    = "quietpatch.shard.held"
	metricShardsRunning = "quietpatch.shard.running"
	metricShardMembers  = "quietpatch.shard.members"
	metricShardMoves    = "quietpatch.shard.moves"
	metricShardObjects  = "quietpatch.shard.objects"
	metricUnfiltered    = "quietpatch.shard.unfiltered"
)

// shardInstruments are observed from Stats at each collection.
type shardInstruments struct{}

func (shardInstruments) init(m metric.Meter, name, identity string, stats func() ShardedStats) error {
	if m == nil {
		return nil
	}
	bad := func(err error) error {
		return &ConfigError{Field: "Meter", Reason: "cannot create the shard instruments: " + err.Error()}
	}
	held, err := m.Int64ObservableGauge(metricShardsHeld, metric.WithUnit("{shard}"),
		metric.WithDescription("Shards this replica leads (its claim on the shard's Lease is current)."))
	if err != nil {
		return bad(err)
	}
	running, err := m.Int64ObservableGauge(metricShardsRunning, metric.WithUnit("{shard}"),
		metric.WithDescription("Shards this replica runs an informer and a pipeline for: led, or competed for."))
	if err != nil {
		return bad(err)
	}
	members, err := m.Int64ObservableGauge(metricShardMembers, metric.WithUnit("{replica}"),
		metric.WithDescription("Replicas alive in the shard group, as this replica sees their membership Leases."))
	if err != nil {
		return bad(err)
	}
	moves, err := m.Int64ObservableCounter(metricShardMoves, metric.WithUnit("{move}"),
		metric.WithDescription("Shard moves of this replica, by direction: acquired, given_up (on purpose: rebalance or stop), lost."))
	if err != nil {
		return bad(err)
	}
	objects, err := m.Int64ObservableGauge(metricShardObjects, metric.WithUnit("{object}"),
		metric.WithDescription("Objects in the caches of the shards this replica runs."))
	if err != nil {
		return bad(err)
	}
	unfiltered, err := m.Int64ObservableGauge(metricUnfiltered,
		metric.WithDescription("1 once the API server returned an object outside the shard range asked for (ShardSelector not honoured: filtered client-side), else 0."))
	if err != nil {
		return bad(err)
	}
	base := []attribute.KeyValue{attribute.String("pipeline", name), attribute.String("identity", identity)}
	opt := metric.WithAttributeSet(attribute.NewSet(base...))
	dir := func(d string) metric.ObserveOption {
		return metric.WithAttributeSet(attribute.NewSet(append(base[:2:2], attribute.String("direction", d))...))
	}
	acq, gave, lost := dir("acquired"), dir("given_up"), dir("lost")
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := stats()
		o.ObserveInt64(held, int64(len(st.Held)), opt)
		o.ObserveInt64(running, int64(len(st.Running)), opt)
		o.ObserveInt64(members, int64(len(st.Members)), opt)
		o.ObserveInt64(moves, st.Acquired, acq)
		o.ObserveInt64(moves, st.GivenUp, gave)
		o.ObserveInt64(moves, st.Lost, lost)
		o.ObserveInt64(objects, st.Objects, opt)
		u := int64(0)
		if st.Unfiltered {
			u = 1
		}
		o.ObserveInt64(unfiltered, u, opt)
		return nil
	}, held, running, members, moves, objects, unfiltered)
	if err != nil {
		return bad(err)
	}
	return nil
}
