package conditions

import (
	"maps"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/quietpatch/quietpatch/statuspatch"
)

// Patch builds the merge patch of status.conditions, the Fields and, when
// the status has one, status.observedGeneration, with the object's
// resourceVersion as precondition. The conditions are those of obj as it
// is now, with desired's merged in as [Merge] does: the foreign ones
// exactly as read and in their order, the owned ones replaced in place by
// desired's (LastTransitionTime from [TransitionTime]), the owned ones
// desired lacks removed (duplicates of an owned type too), desired's new
// ones appended. It fails, sending nothing, when a desired condition is
// one the API server would reject ([Validate]) or, with Config.OwnedTypes,
// is not of an owned type. Foreign conditions are not validated: they are
// the other writers' and already on the server.
func (c *Computer[O]) Patch(obj O, desired Status) (statuspatch.MergePatch, error) {
	current, owned, err := c.settle(obj, desired)
	if err != nil {
		return statuspatch.MergePatch{}, err
	}
	status := make(map[string]any, 2+len(desired.Fields))
	maps.Copy(status, desired.Fields)
	if c.hasGeneration() {
		status["observedGeneration"] = desired.ObservedGeneration
	}
	status["conditions"] = c.merge(obj, current, owned)
	return statuspatch.NewMergePatch(obj, status)
}

// settle returns obj's current status and the owned conditions to write:
// desired's, each with its [TransitionTime] from the current conditions.
// It fails when a condition is not of an owned type (with
// Config.OwnedTypes) or is one the API server would reject.
func (c *Computer[O]) settle(obj O, desired Status) (Status, []metav1.Condition, error) {
	if err := c.checkOwned(desired.Conditions); err != nil {
		return Status{}, nil, err
	}
	current := c.Current(obj)
	now := metav1.NewTime(c.clk.Now().Truncate(time.Second))
	owned := make([]metav1.Condition, len(desired.Conditions))
	for i, d := range desired.Conditions {
		d.LastTransitionTime = TransitionTime(current.Conditions, d, now)
		owned[i] = d
	}
	if err := Validate(owned); err != nil {
		return Status{}, nil, err
	}
	return current, owned, nil
}

// merge returns the list of conditions to write, [Merge]'s: of a typed
// object, over its conditions; of an unstructured one, over the raw
// entries of its status.conditions, which it keeps as read (malformed
// ones too: they have no owned type).
func (c *Computer[O]) merge(obj O, current Status, owned []metav1.Condition) any {
	same := func(d metav1.Condition) metav1.Condition { return d } // times set by settle
	if !c.unstruct {
		return merge(current.Conditions, func(i int) string { return current.Conditions[i].Type }, owned, c.owns, same)
	}
	var raw []any
	if u := any(obj).(*unstructured.Unstructured); u != nil {
		st, _ := u.Object["status"].(map[string]any)
		raw, _ = st["conditions"].([]any)
	}
	typeOf := func(i int) string {
		m, _ := raw[i].(map[string]any)
		t, _ := m["type"].(string)
		return t
	}
	return merge(raw, typeOf, owned, c.owns, func(d metav1.Condition) any { return d })
}

// currentUnstructured reads status.observedGeneration and status.conditions
// from u's map. Entries that are not objects are skipped: they have no
// owned Type, and Patch carries them back as read. An entry of an owned
// Type with fields of the wrong kind reads as a condition that differs from
// any desired one, so the object gets patched.
func currentUnstructured(u *unstructured.Unstructured) Status {
	s := Status{obj: u}
	if u == nil {
		return s
	}
	st, _ := u.Object["status"].(map[string]any)
	switch g := st["observedGeneration"].(type) {
	case int64:
		s.ObservedGeneration = g
	case float64:
		s.ObservedGeneration = int64(g)
	case nil:
		s.noGen = true
	}
	list, _ := st["conditions"].([]any)
	if len(list) == 0 {
		return s
	}
	s.Conditions = make([]metav1.Condition, 0, len(list))
	for _, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			continue
		}
		var cond metav1.Condition
		cond.Type, _ = m["type"].(string)
		st, _ := m["status"].(string)
		cond.Status = metav1.ConditionStatus(st)
		cond.Reason, _ = m["reason"].(string)
		cond.Message, _ = m["message"].(string)
		switch g := m["observedGeneration"].(type) {
		case int64:
			cond.ObservedGeneration = g
		case float64:
			cond.ObservedGeneration = int64(g)
		}
		if ts, ok := m["lastTransitionTime"].(string); ok {
			if t, err := time.Parse(time.RFC3339, ts); err == nil {
				cond.LastTransitionTime = metav1.NewTime(t)
			}
		}
		s.Conditions = append(s.Conditions, cond)
	}
	return s
}
