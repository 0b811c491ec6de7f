package leader

import (
	"time"

	coordv1 "k8s.io/api/coordination/v1"

	"github.com/quietpatch/quietpatch/internal/leases"
)

// The Lease as the claimer reads it: its epoch, and what makes two
// observations the same (leases.Holder and leases.Duration read the rest).

func transitionsOf(l *coordv1.Lease) int64 {
	if l == nil || l.Spec.LeaseTransitions == nil {
		return 0
	}
	return int64(*l.Spec.LeaseTransitions)
}

// leaseKey is what makes two observations of the Lease the same.
type leaseKey struct {
	resourceVersion string
	holder          string
	renew, acquire  int64
	transitions     int64
	duration        time.Duration
}

func keyOf(l *coordv1.Lease) leaseKey {
	k := leaseKey{
		resourceVersion: l.ResourceVersion,
		holder:          leases.Holder(l),
		transitions:     transitionsOf(l),
		duration:        leases.Duration(l),
	}
	if l.Spec.RenewTime != nil {
		k.renew = l.Spec.RenewTime.UnixNano()
	}
	if l.Spec.AcquireTime != nil {
		k.acquire = l.Spec.AcquireTime.UnixNano()
	}
	return k
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
