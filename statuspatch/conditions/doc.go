// Package conditions is what most status controllers need on top of
// package statuspatch: statuses made of metav1.Conditions.
//
//   - [Equal] compares two condition lists the way a status patcher must —
//     ignoring order and LastTransitionTime — without allocating, for a
//     hot-path StatusComputer.Equal. [CmpEqual] with [IgnoreTransitionTime]
//     and [SortByType] does the same through go-cmp, at a thousand times the
//     cost: convenient in tests and for statuses compared rarely.
//   - [Computer] is a complete statuspatch.StatusComputer for a status with
//     conditions at its top level: the user writes only the function from
//     an object to its conditions. It serves two shapes: the common
//     custom-resource status, status.observedGeneration plus
//     status.conditions (kubebuilder's), and Gateway API's, with
//     status.conditions only, each condition carrying its own
//     observedGeneration (Gateway, GatewayClass): a typed status without a
//     field ObservedGeneration has none read, compared or written. It works
//     for typed objects and for *unstructured.Unstructured (whose
//     status.observedGeneration it always writes). Further status fields,
//     such as the conditions inside Gateway's status.listeners[], are
//     computed through Config.Fields with the building blocks below.
//   - [Applier] is the same for a server-side apply of the status
//     (statuspatch.ApplyPatch): its patch holds only the conditions it owns.
//     Choose it when the CRD's status.conditions is listType=map keyed by
//     type and several controllers write it, each its own types: no
//     read-modify-write, no 409. Keep the Computer's merge patch for atomic
//     lists and when the resourceVersion precondition must fail a late write.
//   - [Merge], [TransitionTime] and [Validate] are the building blocks the
//     Computer and the Applier are made of, pure functions over
//     []metav1.Condition, for a StatusComputer written by hand and for
//     conditions inside listed entries: Merge keeps other writers'
//     conditions as read and in place, replaces ours in place, removes
//     ours no longer computed, appends new ones; TransitionTime keeps a
//     condition's lastTransitionTime while its status holds; Validate
//     checks conditions as the API server would.
//
// Which conditions a Computer writes: the types it owns, and no others. It
// owns the types listed in Config.OwnedTypes, or, without that list, the
// types Config.Conditions returns for the object on that call. A condition
// of any other type (another controller's, or one the user's own reconciler
// sets) is foreign: it never makes the object differ, so a foreign writer
// changing its condition causes no patch; and a patch carries it exactly as
// read from the object the patch is built from, in its place, with its own
// lastTransitionTime and observedGeneration. With OwnedTypes, the function
// must return types within the list (another type is an error for that
// object, never a patch) and an owned type it does not return is removed.
// Without OwnedTypes, a type the function stops returning can no longer be
// told from a foreign one, and is kept: declare OwnedTypes for conditions
// that come and go. A JSON merge patch replaces status.conditions whole;
// the resourceVersion precondition is what keeps a foreign condition
// written after our read: our patch then fails with 409 Conflict, and the
// next reconcile recomputes from the fresh object.
//
// What Equal compares: Type, Status, ObservedGeneration, Reason and Message
// of every condition, as a multiset — each distinct condition must occur as
// often in one list as in the other. LastTransitionTime and the order of
// the list are ignored: the first is carried over from the current status
// when a condition's status did not change, the second is not meaningful
// (conditions are a map keyed by Type).
package conditions
