package statuspatch

import (
	"fmt"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// StatusComputer is what a controller supplies to a [Reconciler]: how to name
// an object, read its current status, compute its desired status, compare the
// two and build a patch. O is the object type (typically a pointer from an
// informer's lister), S the status type, P the patch type that travels
// through the [PatchQueue] to a [Patcher].
//
// The reconciler calls the methods in this order for each object: Current,
// Desired, Equal, and only when Equal reports false, Key and Patch. An
// unchanged object therefore costs Current + Desired + Equal and nothing
// else: no key is formatted, no patch is built and the library allocates
// nothing.
//
// The reconciler calls a StatusComputer from one goroutine at a time (a pass
// and on-demand reconciles are serialized), so implementations need no
// locking of their own unless they share state with other code. Methods must
// not modify the object: it usually belongs to an informer's cache.
type StatusComputer[O, S, P any] interface {
	// Key names the object. It is used to order objects when a pass resumes
	// after a halted one, to look objects up for on-demand reconciles, and
	// (formatted as "namespace/name") as the queue key of the patch, so a
	// newer patch for the same object replaces a waiting one. It should not
	// allocate: it is also called while sorting.
	Key(obj O) types.NamespacedName
	// Current returns the status the object has now.
	Current(obj O) S
	// Desired computes the status the object should have. An error counts
	// the object as an error for this pass; the pass goes on with the next
	// object.
	Desired(obj O) (S, error)
	// Equal reports whether two statuses are the same for the purpose of
	// patching: it should ignore what the API server or time changes on its
	// own (LastTransitionTime, list order), or the reconciler patches objects
	// every pass. [CmpEqual] builds one from go-cmp options; hot paths should
	// use a typed comparison such as [ConditionsEqual].
	Equal(current, desired S) bool
	// Patch builds the patch that turns the object's current status into
	// desired. It is called only for objects whose status changed, after a
	// queue slot has been reserved. An error counts the object as an error
	// and releases the slot.
	Patch(obj O, desired S) (P, error)
}

// ComputerFuncs adapts plain functions to a [StatusComputer]. Every field must
// be set; [NewReconciler] rejects a ComputerFuncs with a nil field, naming it.
type ComputerFuncs[O, S, P any] struct {
	// KeyFunc implements StatusComputer.Key.
	KeyFunc func(obj O) types.NamespacedName
	// CurrentFunc implements StatusComputer.Current.
	CurrentFunc func(obj O) S
	// DesiredFunc implements StatusComputer.Desired.
	DesiredFunc func(obj O) (S, error)
	// EqualFunc implements StatusComputer.Equal; see [CmpEqual] and
	// [ConditionsEqual].
	EqualFunc func(current, desired S) bool
	// PatchFunc implements StatusComputer.Patch.
	PatchFunc func(obj O, desired S) (P, error)
}

// Key calls f.KeyFunc.
func (f ComputerFuncs[O, S, P]) Key(obj O) types.NamespacedName { return f.KeyFunc(obj) }

// Current calls f.CurrentFunc.
func (f ComputerFuncs[O, S, P]) Current(obj O) S { return f.CurrentFunc(obj) }

// Desired calls f.DesiredFunc.
func (f ComputerFuncs[O, S, P]) Desired(obj O) (S, error) { return f.DesiredFunc(obj) }

// Equal calls f.EqualFunc.
func (f ComputerFuncs[O, S, P]) Equal(current, desired S) bool { return f.EqualFunc(current, desired) }

// Patch calls f.PatchFunc.
func (f ComputerFuncs[O, S, P]) Patch(obj O, desired S) (P, error) { return f.PatchFunc(obj, desired) }

// validate names the first nil field.
func (f ComputerFuncs[O, S, P]) validate() error {
	switch {
	case f.KeyFunc == nil:
		return fmt.Errorf("statuspatch: ComputerFuncs.KeyFunc must be set")
	case f.CurrentFunc == nil:
		return fmt.Errorf("statuspatch: ComputerFuncs.CurrentFunc must be set")
	case f.DesiredFunc == nil:
		return fmt.Errorf("statuspatch: ComputerFuncs.DesiredFunc must be set")
	case f.EqualFunc == nil:
		return fmt.Errorf("statuspatch: ComputerFuncs.EqualFunc must be set")
	case f.PatchFunc == nil:
		return fmt.Errorf("statuspatch: ComputerFuncs.PatchFunc must be set")
	}
	return nil
}

// CmpEqual returns an equality function for statuses of type S built on
// [cmp.Equal] with opts, for use as StatusComputer.Equal. Typical options are
// [IgnoreConditionTransitionTime] and [SortConditions].
//
// Convenience has a price: go-cmp walks values by reflection, evaluates
// its options at every node and allocates as it goes. Comparing two statuses
// of two metav1.Conditions each (BenchmarkCompare, a shared 2-core machine)
// costs about 15–18 µs and 20 allocations with IgnoreConditionTransitionTime,
// and 80–110 µs and 235 allocations with SortConditions as well, against
// 20–30 ns and none for [ConditionsEqual]: some 600 times more, several
// thousand times with SortConditions. Over a pass of 100,000 unchanged
// objects (BenchmarkReconcile) that is about 15 µs per object with CmpEqual
// against about 45 ns with the typed comparison — 1.5 s of CPU per pass
// instead of 5 ms. Use CmpEqual to start with, for statuses compared
// rarely, or in tests; write a typed comparison for the hot path of a
// controller that owns many objects.
//
// Like cmp.Equal, the comparison panics on unexported fields it was not told
// how to handle; the returned function recovers and reports such values as
// not equal, so a misconfigured comparator patches too much rather than
// crashing the reconciler.
func CmpEqual[S any](opts ...cmp.Option) func(current, desired S) bool {
	opts = append([]cmp.Option(nil), opts...)
	return func(current, desired S) (equal bool) {
		defer func() {
			if recover() != nil {
				equal = false
			}
		}()
		return cmp.Equal(current, desired, opts...)
	}
}

// IgnoreConditionTransitionTime is a go-cmp option that ignores
// metav1.Condition.LastTransitionTime: the time a condition last changed is
// carried over from the current status, not part of what decides a patch.
func IgnoreConditionTransitionTime() cmp.Option {
	return cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime")
}

// SortConditions is a go-cmp option that compares []metav1.Condition as
// sets ordered by Type, so two lists holding the same conditions in another
// order are equal. Condition types are unique within a list, as the API
// requires (listMapKey=type).
func SortConditions() cmp.Option {
	return cmpopts.SortSlices(func(a, b metav1.Condition) bool { return a.Type < b.Type })
}

// ConditionsEqual is a typed comparison of two condition lists that ignores
// LastTransitionTime and order (conditions are matched by Type), for use in
// a hot-path StatusComputer.Equal. It does not allocate. Lists in the same
// order are compared in one linear scan; otherwise each condition is looked
// up by Type, which is quadratic but faster than sorting for the handful of
// conditions a status carries.
func ConditionsEqual(a, b []metav1.Condition) bool {
	if len(a) != len(b) {
		return false
	}
	i := 0
	for ; i < len(a); i++ {
		if a[i].Type != b[i].Type {
			break
		}
		if !conditionEqual(&a[i], &b[i]) {
			return false
		}
	}
	// Different order from i on: match the rest by Type among b[start:].
	start := i
	for ; i < len(a); i++ {
		found := false
		for j := start; j < len(b); j++ {
			if b[j].Type == a[i].Type {
				if !conditionEqual(&a[i], &b[j]) {
					return false
				}
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// conditionEqual compares everything but LastTransitionTime.
func conditionEqual(a, b *metav1.Condition) bool {
	return a.Type == b.Type &&
		a.Status == b.Status &&
		a.ObservedGeneration == b.ObservedGeneration &&
		a.Reason == b.Reason &&
		a.Message == b.Message
}

// safeDiff returns cmp.Diff(current, desired, opts...), or a note when go-cmp
// panics on a value it cannot compare.
func safeDiff[S any](current, desired S, opts []cmp.Option) (diff string) {
	defer func() {
		if r := recover(); r != nil {
			diff = fmt.Sprintf("(no diff: %v)", r)
		}
	}()
	return cmp.Diff(current, desired, opts...)
}
