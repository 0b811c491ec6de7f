package statuspatch

import (
	"fmt"
	"strings"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
)

// StatusComputer is what a controller supplies: how to name an object,
// read its current status, compute its desired status, compare the two and
// build a patch. O is the object type (typically a pointer from an
// informer's cache), S the status type, P the patch type a [Patcher] sends.
//
// A pass calls Current, Desired and Equal for every object, and Key for
// those that changed; an unchanged object costs those three calls and
// nothing else. The dispatcher calls Current, Desired and Equal again when
// it serves the key, and Patch only if they still differ. The dispatcher's
// workers call it concurrently — never two at once for one key — and a
// pass may call it for an object a worker is serving: the methods must be
// safe for concurrent use (pure functions of their arguments are). They
// must not modify the object: it belongs to the cache. An error or a panic
// counts the object as an error and the rest go on.
//
// Package statuspatch/conditions builds one for the common status of
// conditions and observedGeneration from one function.
type StatusComputer[O, S, P any] interface {
	// Key names the object: its key in the queue and in Source.Get, and
	// the order of a pass that resumes after a halted one.
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
	// every pass. Package conditions has a typed comparison of condition
	// lists (conditions.Equal) and a go-cmp based one (conditions.CmpEqual,
	// hundreds of times slower: docs/performance.md).
	Equal(current, desired S) bool
	// Patch builds the patch that turns the object's current status into
	// desired, by the worker about to send it. The patch must be one the
	// API server accepts: validate what the CRD would reject here, and
	// return an error instead.
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
	// EqualFunc implements StatusComputer.Equal.
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
		return fmt.Errorf("ComputerFuncs.KeyFunc must be set")
	case f.CurrentFunc == nil:
		return fmt.Errorf("ComputerFuncs.CurrentFunc must be set")
	case f.DesiredFunc == nil:
		return fmt.Errorf("ComputerFuncs.DesiredFunc must be set")
	case f.EqualFunc == nil:
		return fmt.Errorf("ComputerFuncs.EqualFunc must be set")
	case f.PatchFunc == nil:
		return fmt.Errorf("ComputerFuncs.PatchFunc must be set")
	}
	return nil
}

// safeDiff returns cmp.Diff(current, desired, opts...), or a note when go-cmp
// panics on a value it cannot compare.
func safeDiff[S any](current, desired S, opts []cmp.Option) (diff string) {
	defer func() {
		if r := recover(); r != nil {
			diff = fmt.Sprintf("(no diff: %v)", r)
		}
	}()
	// go-cmp puts non-breaking spaces in its output at random, to keep
	// callers from depending on it; in a text log they read as escapes.
	return strings.ReplaceAll(cmp.Diff(current, desired, opts...), "\u00a0", " ")
}
