package conditions

import (
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Equal reports whether two condition lists hold the same conditions,
// ignoring their order and LastTransitionTime: whether there is a one-to-one
// pairing of a's conditions with b's in which paired conditions have equal
// Type, Status, ObservedGeneration, Reason and Message. Duplicates count:
// [X, Y, Y] and [Y, X, Z] are not equal, nor are [X, X] and [X]. It is
// meant for a hot-path StatusComputer.Equal, and allocates nothing.
//
// Lists in the same order cost one linear scan. Otherwise each remaining condition's multiplicity is
// counted in both lists, which is quadratic but faster than sorting for the
// handful of conditions a status carries (the API allows at most a few
// dozen).
func Equal(a, b []metav1.Condition) bool {
	if len(a) != len(b) {
		return false
	}
	i := 0
	for i < len(a) && same(&a[i], &b[i]) {
		i++
	}
	if i == len(a) {
		return true
	}
	// From i on, the lists differ in order or content: they are equal
	// exactly when every condition occurs as often in a[i:] as in b[i:].
	a, b = a[i:], b[i:]
	for k := range a {
		// Count each distinct condition once, at its first occurrence.
		seen := false
		for j := range k {
			if same(&a[j], &a[k]) {
				seen = true
				break
			}
		}
		if seen {
			continue
		}
		na, nb := 0, 0
		for j := range a {
			if same(&a[j], &a[k]) {
				na++
			}
			if same(&b[j], &a[k]) {
				nb++
			}
		}
		if na != nb {
			return false
		}
	}
	return true
}

// same compares everything but LastTransitionTime.
func same(a, b *metav1.Condition) bool {
	return a.Type == b.Type &&
		a.Status == b.Status &&
		a.ObservedGeneration == b.ObservedGeneration &&
		a.Reason == b.Reason &&
		a.Message == b.Message
}

// CmpEqual returns an equality function for statuses of type S built on
// [cmp.Equal] with opts, for a StatusComputer.Equal written in a few
// words. Typical options are [IgnoreTransitionTime] and [SortByType].
//
// Convenience has a price: go-cmp walks values by reflection, evaluates its
// options at every node and allocates as it goes. BenchmarkEqual compares
// it with [Equal] on the same statuses; docs/performance.md has the
// figures: hundreds of times the CPU and tens of allocations per
// comparison, against none. Use CmpEqual to
// start with, for statuses compared rarely, or in tests; write a typed
// comparison for the hot path of a controller that owns many objects.
//
// Like cmp.Equal, the returned function panics on unexported fields it was
// not told how to handle. A reconciler counts such a panic as an error for
// that object (and logs it), rather than patching on every pass.
func CmpEqual[S any](opts ...cmp.Option) func(current, desired S) bool {
	opts = append([]cmp.Option(nil), opts...)
	return func(current, desired S) bool {
		return cmp.Equal(current, desired, opts...)
	}
}

// IgnoreTransitionTime is a go-cmp option that ignores
// metav1.Condition.LastTransitionTime: the time a condition last changed is
// carried over from the current status, not part of what decides a patch.
func IgnoreTransitionTime() cmp.Option {
	return cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime")
}

// SortByType is a go-cmp option that compares []metav1.Condition ordered by
// Type (then Status, Reason, Message), so two lists holding the same
// conditions in another order are equal.
func SortByType() cmp.Option {
	return cmpopts.SortSlices(func(a, b metav1.Condition) bool {
		switch {
		case a.Type != b.Type:
			return a.Type < b.Type
		case a.Status != b.Status:
			return a.Status < b.Status
		case a.Reason != b.Reason:
			return a.Reason < b.Reason
		}
		return a.Message < b.Message
	})
}
