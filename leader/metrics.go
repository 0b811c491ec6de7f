package leader

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// Instrument names and attribute keys; docs/metrics.md has the table.
const (
	metricIsLeader    = "quietpatch.leader.is_leader"
	metricEpoch       = "quietpatch.leader.epoch"
	metricTransitions = "quietpatch.leader.transitions"
	metricRequests    = "quietpatch.leader.requests"

	attrNamespace = "k8s.namespace.name"
	attrLease     = "k8s.lease.name"
	attrIdentity  = "identity"
	attrDirection = "direction"
	attrOperation = "operation"
	attrResult    = "result"
)

// Request operations (the "operation" attribute of the requests counter).
const (
	opGet     = "get"
	opCreate  = "create"
	opAcquire = "acquire"
	opRenew   = "renew"
	opVacate  = "vacate"
	opWatch   = "watch"
)

// request is one (operation, result) pair of the requests counter.
type request struct {
	op     string
	result outcome.Outcome
}

// instruments count in [outcome.Counters] and report through observable
// instruments, so the claimer's loop never waits on a metrics SDK.
type instruments struct {
	meter       metric.Meter
	isLeader    metric.Int64ObservableGauge
	epoch       metric.Int64ObservableGauge
	transitions metric.Int64ObservableCounter
	requests    metric.Int64ObservableCounter

	lease, leader attribute.Set
	moves         outcome.Counters[string]  // transitions, by direction
	calls         outcome.Counters[request] // requests
}

func newInstruments(m metric.Meter, namespace, name, identity string) (*instruments, error) {
	var reqs []request
	for _, op := range []string{opGet, opCreate, opAcquire, opRenew, opVacate, opWatch} {
		for _, o := range outcome.All() {
			reqs = append(reqs, request{op, o})
		}
	}
	in := &instruments{meter: m, moves: outcome.NewCounters("acquired", "lost"), calls: outcome.NewCounters(reqs...)}
	in.lease = attribute.NewSet(attribute.String(attrNamespace, namespace), attribute.String(attrLease, name))
	in.leader = in.with(attribute.String(attrIdentity, identity))
	var err error
	if in.isLeader, err = m.Int64ObservableGauge(metricIsLeader,
		metric.WithDescription("1 while this replica holds the lease (claim current on the local clock), else 0.")); err != nil {
		return nil, err
	}
	if in.epoch, err = m.Int64ObservableGauge(metricEpoch,
		metric.WithDescription("Epoch (spec.leaseTransitions) of the latest claim this replica observed.")); err != nil {
		return nil, err
	}
	if in.transitions, err = m.Int64ObservableCounter(metricTransitions,
		metric.WithDescription("Leadership transitions of this replica, by direction (acquired, lost)."),
		metric.WithUnit("{transition}")); err != nil {
		return nil, err
	}
	if in.requests, err = m.Int64ObservableCounter(metricRequests,
		metric.WithDescription("Lease API requests made by the claimer, by operation and result."),
		metric.WithUnit("{request}")); err != nil {
		return nil, err
	}
	return in, nil
}

// with returns the lease's attributes plus kv.
func (in *instruments) with(kv ...attribute.KeyValue) attribute.Set {
	return attribute.NewSet(append(in.lease.ToSlice(), kv...)...)
}

// observe registers the callback of every instrument; the returned function
// unregisters it. isLeader and epoch are read at each collection.
func (in *instruments) observe(isLeader func() bool, epoch func() int64) (func(), error) {
	sets := map[any]metric.ObserveOption{}
	for _, d := range in.moves.Keys() {
		sets[d] = metric.WithAttributeSet(in.with(attribute.String(attrDirection, d)))
	}
	for _, r := range in.calls.Keys() {
		sets[r] = metric.WithAttributeSet(in.with(attribute.String(attrOperation, r.op), attribute.String(attrResult, string(r.result))))
	}
	leaderOpt, leaseOpt := metric.WithAttributeSet(in.leader), metric.WithAttributeSet(in.lease)
	reg, err := in.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		v := int64(0)
		if isLeader() {
			v = 1
		}
		o.ObserveInt64(in.isLeader, v, leaderOpt)
		o.ObserveInt64(in.epoch, epoch(), leaseOpt)
		for _, d := range in.moves.Keys() {
			o.ObserveInt64(in.transitions, in.moves.Get(d), sets[d])
		}
		for _, r := range in.calls.Keys() {
			if n := in.calls.Get(r); n > 0 {
				o.ObserveInt64(in.requests, n, sets[r])
			}
		}
		return nil
	}, in.isLeader, in.epoch, in.transitions, in.requests)
	if err != nil {
		return nil, err
	}
	return func() { _ = reg.Unregister() }, nil
}

func (in *instruments) transition(acquired bool) {
	if acquired {
		in.moves.Add("acquired")
	} else {
		in.moves.Add("lost")
	}
}

func (in *instruments) request(op string, err error) { in.calls.Add(request{op, outcome.Of(err)}) }
