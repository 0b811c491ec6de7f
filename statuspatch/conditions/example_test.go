package conditions_test

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quietpatch/quietpatch/statuspatch/conditions"
)

// A typed comparison of conditions ignores what changes on its own
// (LastTransitionTime) and list order, without allocating. CmpEqual gives
// the same answers through go-cmp at a thousand times the cost.
func ExampleEqual() {
	t1 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t2 := metav1.NewTime(t1.Add(time.Hour))
	current := []metav1.Condition{
		{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", LastTransitionTime: t1},
		{Type: "ResolvedRefs", Status: metav1.ConditionTrue, Reason: "ResolvedRefs", LastTransitionTime: t1},
	}
	desired := []metav1.Condition{
		{Type: "ResolvedRefs", Status: metav1.ConditionTrue, Reason: "ResolvedRefs", LastTransitionTime: t2},
		{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", LastTransitionTime: t2},
	}
	gocmp := conditions.CmpEqual[[]metav1.Condition](conditions.IgnoreTransitionTime(), conditions.SortByType())
	fmt.Println(conditions.Equal(current, desired), gocmp(current, desired))

	desired[0].Status = metav1.ConditionFalse
	desired[0].Reason = "BackendNotFound"
	fmt.Println(conditions.Equal(current, desired), gocmp(current, desired))
	// Output:
	// true true
	// false false
}

// The conditions of one entry of a list — a Gateway listener's, a route
// parent's — computed by hand from the building blocks: this controller
// owns Accepted, Programmed and Conflicted (set only while there is a
// conflict); another one wrote example.com/Inspected. Merge keeps that one
// as read and in place, replaces ours in place (Accepted keeps its time:
// its status holds), removes Conflicted, appends Programmed; Validate
// checks the result as the API server will.
func ExampleMerge() {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	now := metav1.NewTime(time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC))
	current := []metav1.Condition{
		{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", ObservedGeneration: 1, LastTransitionTime: t0},
		{Type: "example.com/Inspected", Status: metav1.ConditionTrue, Reason: "Passed", ObservedGeneration: 1, LastTransitionTime: t0},
		{Type: "Conflicted", Status: metav1.ConditionTrue, Reason: "HostnameConflict", ObservedGeneration: 1, LastTransitionTime: t0},
	}
	desired := []metav1.Condition{ // computed from generation 2
		{Type: "Programmed", Status: metav1.ConditionTrue, Reason: "Programmed", ObservedGeneration: 2},
		{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", ObservedGeneration: 2},
	}
	ours := func(t string) bool { return t == "Accepted" || t == "Programmed" || t == "Conflicted" }

	merged := conditions.Merge(current, desired, ours, now)
	if err := conditions.Validate(merged); err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range merged {
		fmt.Println(c.Type, c.Status, c.ObservedGeneration, c.LastTransitionTime.UTC().Format(time.DateOnly))
	}
	// Output:
	// Accepted True 2 2026-01-01
	// example.com/Inspected True 1 2026-01-01
	// Programmed True 2 2026-12-05
}

// A StatusComputer for a status of conditions and observedGeneration: the
// function from an object to its conditions is all there is to write. The
// patch keeps the transition time of a condition whose status holds.
func ExampleNew() {
	type readySpec struct{ Size int }
	type status struct {
		ObservedGeneration int64              `json:"observedGeneration,omitempty"`
		Conditions         []metav1.Condition `json:"conditions,omitempty"`
	}
	type widget struct {
		metav1.ObjectMeta `json:"metadata"`
		Spec              readySpec `json:"spec"`
		Status            status    `json:"status"`
	}
	c, err := conditions.New(conditions.Config[*widget]{
		Conditions: func(w *widget) ([]metav1.Condition, error) {
			if w.Spec.Size > 100 {
				return []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "TooLarge"}}, nil
			}
			return []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Sized"}}, nil
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	w := &widget{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "w", Generation: 2, ResourceVersion: "7"}, Spec: readySpec{Size: 3}}
	w.Status.ObservedGeneration = 1
	w.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Sized",
		ObservedGeneration: 1, LastTransitionTime: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}}

	desired, _ := c.Desired(w)
	fmt.Println("changed:", !c.Equal(c.Current(w), desired))
	p, _ := c.Patch(w, desired)
	body, _ := p.Body()
	fmt.Println(string(body))
	// Output:
	// changed: true
	// {"metadata":{"resourceVersion":"7"},"status":{"conditions":[{"type":"Ready","status":"True","observedGeneration":2,"lastTransitionTime":"2026-01-01T00:00:00Z","reason":"Sized","message":""}],"observedGeneration":2}}
}

// With OwnedTypes, a condition type that comes and goes (Degraded) is
// removed when the function stops returning it. A condition another writer
// set (Audited) is not the Computer's: it goes back as read, in its place,
// with its own transition time and generation.
func ExampleConfig_ownedTypes() {
	type status struct {
		ObservedGeneration int64              `json:"observedGeneration,omitempty"`
		Conditions         []metav1.Condition `json:"conditions,omitempty"`
	}
	type widget struct {
		metav1.ObjectMeta `json:"metadata"`
		Status            status `json:"status"`
	}
	c, err := conditions.New(conditions.Config[*widget]{
		OwnedTypes: []string{"Ready", "Degraded"},
		Conditions: func(w *widget) ([]metav1.Condition, error) {
			return []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Recovered"}}, nil
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	w := &widget{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "w", Generation: 2, ResourceVersion: "7"}}
	w.Status.ObservedGeneration = 2
	w.Status.Conditions = []metav1.Condition{
		{Type: "Audited", Status: metav1.ConditionTrue, Reason: "Passed", ObservedGeneration: 1, LastTransitionTime: t0},
		{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Recovered", ObservedGeneration: 2, LastTransitionTime: t0},
		{Type: "Degraded", Status: metav1.ConditionTrue, Reason: "Slow", ObservedGeneration: 2, LastTransitionTime: t0},
	}

	desired, _ := c.Desired(w)
	fmt.Println("changed:", !c.Equal(c.Current(w), desired))
	p, _ := c.Patch(w, desired)
	body, _ := p.Body()
	fmt.Println(string(body))

	// Another writer flipping its own condition changes nothing of ours.
	w.Status.Conditions = w.Status.Conditions[:2]
	w.Status.Conditions[0].Status, w.Status.Conditions[0].Reason = metav1.ConditionFalse, "Failed"
	fmt.Println("changed:", !c.Equal(c.Current(w), desired))
	// Output:
	// changed: true
	// {"metadata":{"resourceVersion":"7"},"status":{"conditions":[{"type":"Audited","status":"True","observedGeneration":1,"lastTransitionTime":"2026-01-01T00:00:00Z","reason":"Passed","message":""},{"type":"Ready","status":"True","observedGeneration":2,"lastTransitionTime":"2026-01-01T00:00:00Z","reason":"Recovered","message":""}],"observedGeneration":2}}
	// changed: false
}
