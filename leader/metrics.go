package leader

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Instrument names and attribute keys; the package documentation has the
// table.
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

func operations() []string { return []string{opGet, opCreate, opAcquire, opRenew, opVacate, opWatch} }

// instruments counts in atomics and reports through observable
// instruments, so the claimer's loop never waits on a metrics SDK.
type instruments struct {
	meter       metric.Meter
	isLeader    metric.Int64ObservableGauge
	epoch       metric.Int64ObservableGauge
	transitions metric.Int64ObservableCounter
	requests    metric.Int64ObservableCounter

	leaderSet   attribute.Set                  // lease + identity
	leaseSet    attribute.Set                  // lease
	transSets   [2]attribute.Set               // acquired, lost
	acquired    atomic.Int64                   // transitions
	lost        atomic.Int64                   //
	reqSets     map[requestKey]*requestCounter // by operation and result; fixed after newInstruments
	requestKeys []requestKey                   // in a fixed order
}

type requestKey struct {
	op     string
	result result
}

type requestCounter struct {
	n   atomic.Int64
	set attribute.Set
}

func newInstruments(m metric.Meter, namespace, name, identity string) (*instruments, error) {
	in := &instruments{meter: m, reqSets: map[requestKey]*requestCounter{}}
	leaseKVs := []attribute.KeyValue{attribute.String(attrNamespace, namespace), attribute.String(attrLease, name)}
	in.leaseSet = attribute.NewSet(leaseKVs...)
	in.leaderSet = attribute.NewSet(append(leaseKVs[:2:2], attribute.String(attrIdentity, identity))...)
	in.transSets[0] = attribute.NewSet(append(leaseKVs[:2:2], attribute.String(attrDirection, "acquired"))...)
	in.transSets[1] = attribute.NewSet(append(leaseKVs[:2:2], attribute.String(attrDirection, "lost"))...)
	for _, op := range operations() {
		for _, o := range results() {
			k := requestKey{op, o}
			in.reqSets[k] = &requestCounter{set: attribute.NewSet(append(leaseKVs[:2:2],
				attribute.String(attrOperation, op), attribute.String(attrResult, string(o)))...)}
			in.requestKeys = append(in.requestKeys, k)
		}
	}
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

// observe registers the callback of every instrument; the returned function
// unregisters it. isLeader and epoch are read at each collection.
func (in *instruments) observe(isLeader func() bool, epoch func() int64) (func(), error) {
	leaderOpt := metric.WithAttributeSet(in.leaderSet)
	leaseOpt := metric.WithAttributeSet(in.leaseSet)
	transOpts := [2]metric.ObserveOption{metric.WithAttributeSet(in.transSets[0]), metric.WithAttributeSet(in.transSets[1])}
	reg, err := in.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		v := int64(0)
		if isLeader() {
			v = 1
		}
		o.ObserveInt64(in.isLeader, v, leaderOpt)
		o.ObserveInt64(in.epoch, epoch(), leaseOpt)
		o.ObserveInt64(in.transitions, in.acquired.Load(), transOpts[0])
		o.ObserveInt64(in.transitions, in.lost.Load(), transOpts[1])
		for _, k := range in.requestKeys {
			c := in.reqSets[k]
			if n := c.n.Load(); n > 0 {
				o.ObserveInt64(in.requests, n, metric.WithAttributeSet(c.set))
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
		in.acquired.Add(1)
	} else {
		in.lost.Add(1)
	}
}

func (in *instruments) request(op string, err error) {
	if c := in.reqSets[requestKey{op, resultOf(err)}]; c != nil {
		c.n.Add(1)
	}
}
