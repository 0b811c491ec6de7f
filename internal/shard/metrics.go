package shard

import (
	"context"

	"github.com/quietpatch/quietpatch/internal/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
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

// register registers the shard instruments, observed from Stats at each
// collection, and returns the function that unregisters them.
func register(m metric.Meter, name, identity string, stats func() Stats) (unregister func(), err error) {
	in := telemetry.NewInstruments(m, attribute.String("pipeline", name), attribute.String("identity", identity))
	if in == nil {
		return func() {}, nil
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
	return in.Register(func(_ context.Context, o metric.Observer) error {
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
}
