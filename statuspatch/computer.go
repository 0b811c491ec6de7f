package statuspatch

import (
	"k8s.io/apimachinery/pkg/types"
)

// Source gives the pipeline the objects, typically an informer's cache
// (package statuspatch/source builds one).
type Source[O any] interface {
	// List returns every object in a slice the caller may reorder.
	List() ([]O, error)
	// Get returns the object with key, and false if there is none.
	Get(key types.NamespacedName) (obj O, found bool, err error)
}

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
