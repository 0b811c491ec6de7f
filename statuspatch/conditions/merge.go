package conditions

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The building blocks: pure functions over lists of conditions, for a
// StatusComputer written by hand and for the conditions inside listed
// entries (Gateway API's status.listeners[].conditions,
// status.parents[].conditions) that Computer does not reach by itself.
// Computer and Applier are made of them.

// Merge returns the list of conditions to write in place of current when
// desired are the conditions this writer computed: the rules every writer
// of a shared list of conditions follows (Gateway API's notes for
// implementors, the API conventions). A type is owned when desired holds
// it or owns reports it; owns, which may be nil, names the types to remove
// when desired no longer holds them (a Degraded that comes and goes).
//
//   - A condition of current whose type is not owned is kept exactly as
//     read, in its place: it is another writer's.
//   - A condition of current of an owned type is replaced, in its place,
//     by the first condition of desired of that type not written yet, or
//     removed when there is none (an owned type desired lacks, or a second
//     condition of the type).
//   - The conditions of desired not written yet are appended, in desired's
//     order.
//
// A condition of desired is written as desired has it (set its
// ObservedGeneration to metadata.generation there) but for its
// LastTransitionTime, which [TransitionTime] gives from current and now.
// Merge changes neither list, returns a new one, never nil (an empty list
// encodes as [], not null), and checks nothing ([Validate]).
func Merge(current, desired []metav1.Condition, owns func(conditionType string) bool, now metav1.Time) []metav1.Condition {
	return merge(current, func(i int) string { return current[i].Type }, desired, owns,
		func(d metav1.Condition) metav1.Condition {
			d.LastTransitionTime = TransitionTime(current, d, now)
			return d
		})
}

// TransitionTime returns the LastTransitionTime for condition c, given the
// conditions current holds: the LastTransitionTime of the first condition
// of current with c's Type and Status and a time the API server stores
// (set, within years 1 to 9999), else now. That is what the API
// conventions ask: the time the condition last changed status. A change of
// Reason, Message or ObservedGeneration alone keeps the time.
//
// now is used as given. The API server stores whole seconds: truncate now
// to seconds for a time that compares equal to the one read back.
func TransitionTime(current []metav1.Condition, c metav1.Condition, now metav1.Time) metav1.Time {
	for i := range current {
		cur := &current[i]
		if cur.Type == c.Type && cur.Status == c.Status && storable(cur.LastTransitionTime) {
			return cur.LastTransitionTime
		}
	}
	return now
}

// Validate reports whether the API server would accept conds as a list of
// conditions (metav1validation.ValidateConditions, the rules of
// metav1.Condition's schema): a valid type, unique in the list; status
// True, False or Unknown; observedGeneration at least 0;
// lastTransitionTime set; a reason of the condition-reason pattern, at
// most 1024 characters; a message of at most 32768. It returns nil or an
// error naming every violation by its path ("conditions[1].reason").
// A list's length is the CRD's to limit (Gateway API: at most 8): check
// it yourself.
func Validate(conds []metav1.Condition) error {
	if errs := metav1validation.ValidateConditions(conds, field.NewPath("conditions")); len(errs) > 0 {
		return fmt.Errorf("conditions: the API server would reject these conditions: %w", errs.ToAggregate())
	}
	return nil
}

// storable reports whether the API server stores t as a lastTransitionTime:
// set, and of a year RFC 3339 can write.
func storable(t metav1.Time) bool {
	if t.IsZero() {
		return false
	}
	y := t.UTC().Year()
	return y >= 1 && y <= 9999
}

// isOwned reports whether a condition of type t is owned: owns reports
// it, or desired holds it.
func isOwned(t string, owns func(string) bool, desired []metav1.Condition) bool {
	if owns != nil && owns(t) {
		return true
	}
	for i := range desired {
		if desired[i].Type == t {
			return true
		}
	}
	return false
}

// merge is [Merge] over a current list of any kind of entry: typeOf
// returns the type of current[i] ("" for an entry without one), write
// the entry that holds desired[k]. Computer uses it for the raw entries
// of an unstructured object, Merge for metav1.Conditions.
func merge[E any](current []E, typeOf func(i int) string, desired []metav1.Condition, owns func(string) bool, write func(metav1.Condition) E) []E {
	out := make([]E, 0, len(current)+len(desired))
	var buf [8]bool
	var written []bool // written[k]: desired[k] is in out
	if len(desired) <= len(buf) {
		written = buf[:len(desired)]
	} else {
		written = make([]bool, len(desired))
	}
	for i := range current {
		t := typeOf(i)
		if !isOwned(t, owns, desired) {
			out = append(out, current[i])
			continue
		}
		for k := range desired {
			if desired[k].Type == t && !written[k] {
				out, written[k] = append(out, write(desired[k])), true
				break
			}
		}
	}
	for k := range desired {
		if !written[k] {
			out = append(out, write(desired[k]))
		}
	}
	return out
}
