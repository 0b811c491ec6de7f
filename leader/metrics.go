package leader

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Instrument names and attribute keys; the package documentation has the
// table. They are part of the package's stable surface.
const (
	metricIsLeader    = "quietpatch.leader.is_leader"
	metricTransitions = "quietpatch.leader.transitions"
	metricRequests    = "quietpatch.leader.requests"

	attrNamespace = "k8s.namespace.name"
	attrLease     = "k8s.lease.name"
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

type instruments struct {
	meter       metric.Meter
	isLeader    metric.Int64ObservableGauge
	transitions metric.Int64Counter
	requests    metric.Int64Counter
	lease       attribute.Set // namespace and name of the Lease
	leaseAttrs  []attribute.KeyValue
}

func newInstruments(m metric.Meter, namespace, name string) (*instruments, error) {
	in := &instruments{meter: m}
	in.leaseAttrs = []attribute.KeyValue{
		attribute.String(attrNamespace, namespace),
		attribute.String(attrLease, name),
	}
	in.lease = attribute.NewSet(in.leaseAttrs...)
	var err error
	in.isLeader, err = m.Int64ObservableGauge(metricIsLeader,
		metric.WithDescription("1 while this replica holds the lease (claim current on the local clock), else 0."),
		metric.WithUnit("1"))
	if err != nil {
		return nil, err
	}
	in.transitions, err = m.Int64Counter(metricTransitions,
		metric.WithDescription("Leadership transitions of this replica, by direction (acquired, lost)."),
		metric.WithUnit("{transition}"))
	if err != nil {
		return nil, err
	}
	in.requests, err = m.Int64Counter(metricRequests,
		metric.WithDescription("Lease API requests made by the claimer, by operation and result."),
		metric.WithUnit("{request}"))
	if err != nil {
		return nil, err
	}
	return in, nil
}

// observeIsLeader registers the is-leader callback; the returned function
// unregisters it.
func (in *instruments) observeIsLeader(isLeader func() bool) (func(), error) {
	reg, err := in.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		v := int64(0)
		if isLeader() {
			v = 1
		}
		o.ObserveInt64(in.isLeader, v, metric.WithAttributeSet(in.lease))
		return nil
	}, in.isLeader)
	if err != nil {
		return nil, err
	}
	return func() { _ = reg.Unregister() }, nil
}

func (in *instruments) transition(direction string) {
	in.transitions.Add(context.Background(), 1, metric.WithAttributes(
		append(in.leaseAttrs[:len(in.leaseAttrs):len(in.leaseAttrs)], attribute.String(attrDirection, direction))...))
}

func (in *instruments) request(op string, err error) {
	in.requests.Add(context.Background(), 1, metric.WithAttributes(
		append(in.leaseAttrs[:len(in.leaseAttrs):len(in.leaseAttrs)],
			attribute.String(attrOperation, op), attribute.String(attrResult, classify(err)))...))
}
