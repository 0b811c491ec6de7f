package leader

import (
	"time"

	coordv1 "k8s.io/api/coordination/v1"
)

// The Lease as the claimer reads it: holder, epoch, duration, and what
// makes two observations the same.

func holderOf(l *coordv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func transitionsOf(l *coordv1.Lease) int64 {
	if l == nil || l.Spec.LeaseTransitions == nil {
		return 0
	}
	return int64(*l.Spec.LeaseTransitions)
}

// durationOf returns the Lease's leaseDurationSeconds; a missing or
// non-positive value counts as zero (the claim runs out when observed).
func durationOf(l *coordv1.Lease) time.Duration {
	if l == nil || l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds <= 0 {
		return 0
	}
	return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
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
		holder:          holderOf(l),
		transitions:     transitionsOf(l),
		duration:        durationOf(l),
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

func ptr[T any](v T) *T { return &v }
