// Package conditions is what most status controllers need on top of
// package statuspatch: statuses made of metav1.Conditions.
//
//   - [Equal] compares two condition lists the way a status patcher must —
//     ignoring order and LastTransitionTime — without allocating, for a
//     hot-path StatusComputer.Equal. [CmpEqual] with [IgnoreTransitionTime]
//     and [SortByType] does the same through go-cmp, at a thousand times the
//     cost: convenient in tests and for statuses compared rarely.
//   - [Computer] is a complete statuspatch.StatusComputer for the common
//     custom-resource status, status.observedGeneration plus
//     status.conditions: the user writes only the function from an object
//     to its conditions. It works for typed objects (kubebuilder's shape)
//     and for *unstructured.Unstructured.
//
// What Equal compares: Type, Status, ObservedGeneration, Reason and Message
// of every condition, as a multiset — each distinct condition must occur as
// often in one list as in the other. LastTransitionTime and the order of
// the list are ignored: the first is carried over from the current status
// when a condition's status did not change, the second is not meaningful
// (conditions are a map keyed by Type).
package conditions
