package conditions_test

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quietpatch/quietpatch/statuspatch/conditions"
)

// Two controllers write one Widget's conditions, Ready and Synced, on a
// CRD whose status.conditions is listType=map keyed by type. The Applier
// of the Ready writer applies Ready only: Synced, the other writer's,
// never makes the Widget differ and is not in the applied status, which a
// statuspatch.ApplyStatusPatcher sends under the writer's field manager.
func ExampleNewApplier() {
	type status struct {
		ObservedGeneration int64              `json:"observedGeneration,omitempty"`
		Conditions         []metav1.Condition `json:"conditions,omitempty"`
	}
	type widget struct {
		metav1.ObjectMeta `json:"metadata"`
		Status            status `json:"status"`
	}
	ready, err := conditions.NewApplier(conditions.Config[*widget]{
		Conditions: func(*widget) ([]metav1.Condition, error) {
			return []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Sized"}}, nil
		},
		OwnedTypes: []string{"Ready"},
		Clock:      clocktesting.NewFakePassiveClock(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)),
	}, conditions.ApplyOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	w := &widget{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "w1", Generation: 3}}
	w.Status.Conditions = []metav1.Condition{{Type: "Synced", Status: metav1.ConditionFalse, Reason: "Behind", ObservedGeneration: 2}}

	desired, _ := ready.Desired(w)
	fmt.Println("changed:", !ready.Equal(ready.Current(w), desired))
	patch, err := ready.Patch(w, desired)
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := patch.Body(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"})
	fmt.Println(string(body))

	// Once Ready is on the Widget, a change of Synced makes no difference.
	w.Status.Conditions = append(w.Status.Conditions, metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Sized", ObservedGeneration: 3})
	w.Status.Conditions[0].Status = metav1.ConditionTrue
	desired, _ = ready.Desired(w)
	fmt.Println("changed:", !ready.Equal(ready.Current(w), desired))
	// Output:
	// changed: true
	// {"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w1","namespace":"demo"},"status":{"conditions":[{"type":"Ready","status":"True","observedGeneration":3,"lastTransitionTime":"2026-12-02T10:00:00Z","reason":"Sized","message":""}]}}
	// changed: false
}
