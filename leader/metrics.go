package leader

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/internal/telemetry"
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

// instruments count in [base.Counters] and report through observable
// instruments, so the claimer's loop never waits on a metrics SDK.
type instruments struct {
	in                *telemetry.Instruments // nil: no meter
	isLeader, epoch   metric.Int64ObservableGauge
	transitions, reqs metric.Int64ObservableCounter
	moves             base.Counters[string]  // transitions, by direction
	calls             base.Counters[request] // requests
}

func newInstruments(m metric.Meter, namespace, name string) *instruments {
	var reqs []request
	for _, op := range []string{opGet, opCreate, opAcquire, opRenew, opVacate, opWatch} {
		for _, o := range base.Outcomes() {
			reqs = append(reqs, request{op, o})
		}
	}
	i := &instruments{moves: base.NewCounters("acquired", "lost"), calls: base.NewCounters(reqs...),
		in: telemetry.NewInstruments(m, attribute.String(attrNamespace, namespace), attribute.String(attrLease, name))}
	if i.in == nil {
		return i
	}
	i.isLeader = i.in.Gauge(metricIsLeader, "", "1 while this replica holds the lease (claim current on the local clock), else 0.")
	i.epoch = i.in.Gauge(metricEpoch, "", "Epoch (spec.leaseTransitions) of the latest claim this replica observed.")
	i.transitions = i.in.Counter(metricTransitions, "{transition}", "Leadership transitions of this replica, by direction (acquired, lost).")
	i.reqs = i.in.Counter(metricRequests, "{request}", "Lease API requests made by the claimer, by operation and result.")
	return i
}

// observe registers the callback of every instrument; the returned function
// unregisters it. isLeader and epoch are read at each collection.
func (i *instruments) observe(identity string, isLeader func() bool, epoch func() int64) (func(), error) {
	if i.in == nil {
		return func() {}, nil
	}
	sets := map[any]metric.ObserveOption{}
	for _, d := range i.moves.Keys() {
		sets[d] = i.in.Set(attribute.String(attrDirection, d))
	}
	for _, r := range i.calls.Keys() {
		sets[r] = i.in.Set(attribute.String(attrOperation, r.op), attribute.String(attrResult, string(r.result)))
	}
	leaderOpt, leaseOpt := i.in.Set(attribute.String(attrIdentity, identity)), i.in.Set()
	return i.in.Register(func(_ context.Context, o metric.Observer) error {
		v := int64(0)
		if isLeader() {
			v = 1
		}
		o.ObserveInt64(i.isLeader, v, leaderOpt)
		o.ObserveInt64(i.epoch, epoch(), leaseOpt)
		for _, d := range i.moves.Keys() {
			o.ObserveInt64(i.transitions, i.moves.Get(d), sets[d])
		}
		for _, r := range i.calls.Keys() {
			if n := i.calls.Get(r); n > 0 {
				o.ObserveInt64(i.reqs, n, sets[r])
			}
		}
		return nil
	})
}

func (i *instruments) request(op string, err error) { i.calls.Add(request{op, outcome.Of(err)}) }
