package conditions_test

import (
	"encoding/json"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/conditions"
)

// applied decodes the status of a built apply patch, and checks its
// envelope.
func applied(t *testing.T, p statuspatch.ApplyPatch) map[string]any {
	t.Helper()
	body, err := p.Body(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Gadget"})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	if m["apiVersion"] != "example.com/v1" || m["kind"] != "Gadget" ||
		fmt.Sprint(m["metadata"]) != "map[name:g namespace:ns]" {
		t.Errorf("apply body %s: want apiVersion example.com/v1, kind Gadget, metadata name and namespace only", body)
	}
	st, _ := m["status"].(map[string]any)
	return st
}

// TestApplierAppliesOnlyItsOwnConditions: a Gadget holds Ready (ours,
// stale) and Synced (another writer's). The Applier's patch holds Ready
// only, with the object's generation and its lastTransitionTime kept while
// the status is unchanged, and no observedGeneration of the status; Equal
// ignores Synced and status.observedGeneration.
func TestApplierAppliesOnlyItsOwnConditions(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t2)
	status := metav1.ConditionTrue
	a, err := conditions.NewApplier(conditions.Config[*gadget]{
		Conditions: func(*gadget) ([]metav1.Condition, error) { return []metav1.Condition{ready(status, "Fine")}, nil },
		Clock:      clk,
	}, conditions.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ours := ready(metav1.ConditionTrue, "Fine")
	ours.ObservedGeneration, ours.LastTransitionTime = 1, t1
	foreign := metav1.Condition{Type: "Synced", Status: metav1.ConditionFalse, Reason: "Behind", ObservedGeneration: 1, LastTransitionTime: t1}
	g := newGadget(2, foreign, ours) // generation 2: Ready's observedGeneration is stale
	g.Status.ObservedGeneration = 7  // not ours: ignored

	desired, err := a.Desired(g)
	if err != nil {
		t.Fatal(err)
	}
	if a.Equal(a.Current(g), desired) {
		t.Fatal("Equal: Ready observed generation 1, desired 2: want a difference")
	}
	p, err := a.Patch(g, desired)
	if err != nil {
		t.Fatal(err)
	}
	st := applied(t, p)
	if _, ok := st["observedGeneration"]; ok {
		t.Errorf("applied status %v: status.observedGeneration without ApplyOptions.ObservedGeneration", st)
	}
	conds, _ := st["conditions"].([]any)
	if len(conds) != 1 {
		t.Fatalf("applied conditions %v: want Ready only", st["conditions"])
	}
	c := conds[0].(map[string]any)
	if c["type"] != "Ready" || c["status"] != "True" || c["observedGeneration"] != float64(2) || c["lastTransitionTime"] != t1.UTC().Format("2006-01-02T15:04:05Z") {
		t.Errorf("applied Ready %v: want True, observedGeneration 2, lastTransitionTime %s (kept)", c, t1.UTC())
	}

	// Converged: our Ready matches, Synced and status.observedGeneration differ.
	ours.ObservedGeneration = 2
	g = newGadget(2, ours, foreign)
	g.Status.ObservedGeneration = 1
	if desired, _ = a.Desired(g); !a.Equal(a.Current(g), desired) {
		t.Error("Equal: our conditions match, want equal whatever the others' and status.observedGeneration")
	}

	// A change of status: a new lastTransitionTime.
	status = metav1.ConditionFalse
	desired, _ = a.Desired(g)
	p, _ = a.Patch(g, desired)
	c = applied(t, p)["conditions"].([]any)[0].(map[string]any)
	if c["status"] != "False" || c["lastTransitionTime"] != t2.Format("2006-01-02T15:04:05Z") {
		t.Errorf("applied Ready %v: want False since %s", c, t2)
	}
}

// TestApplierObservedGeneration: with ApplyOptions.ObservedGeneration the
// status's observedGeneration is applied and compared.
func TestApplierObservedGeneration(t *testing.T) {
	a, err := conditions.NewApplier(conditions.Config[*gadget]{
		Conditions: func(*gadget) ([]metav1.Condition, error) {
			return []metav1.Condition{ready(metav1.ConditionTrue, "Fine")}, nil
		},
	}, conditions.ApplyOptions{ObservedGeneration: true})
	if err != nil {
		t.Fatal(err)
	}
	c := ready(metav1.ConditionTrue, "Fine")
	c.ObservedGeneration, c.LastTransitionTime = 3, t1
	g := newGadget(3, c)
	g.Status.ObservedGeneration = 2
	desired, _ := a.Desired(g)
	if a.Equal(a.Current(g), desired) {
		t.Error("Equal: status.observedGeneration 2, generation 3: want a difference")
	}
	p, err := a.Patch(g, desired)
	if err != nil {
		t.Fatal(err)
	}
	if st := applied(t, p); st["observedGeneration"] != float64(3) {
		t.Errorf("applied status %v: want observedGeneration 3", st)
	}
}

// TestApplierOwnedTypes: with OwnedTypes, an owned type Conditions no
// longer returns makes the object changed, and the applied status leaves
// it out (the API server removes what a manager stops applying); with no
// owned condition left, the status has no conditions field at all.
func TestApplierOwnedTypes(t *testing.T) {
	a, err := conditions.NewApplier(conditions.Config[*unstructured.Unstructured]{
		Conditions: func(*unstructured.Unstructured) ([]metav1.Condition, error) { return nil, nil },
		OwnedTypes: []string{"Degraded"},
	}, conditions.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Gadget",
		"metadata": map[string]any{"namespace": "ns", "name": "g", "generation": int64(1)},
		"status": map[string]any{"conditions": []any{
			map[string]any{"type": "Degraded", "status": "True", "reason": "Slow", "observedGeneration": int64(1), "lastTransitionTime": "2026-01-01T00:00:00Z"},
			map[string]any{"type": "Synced", "status": "True", "reason": "Ok", "observedGeneration": int64(1), "lastTransitionTime": "2026-01-01T00:00:00Z"},
		}},
	}}
	desired, err := a.Desired(u)
	if err != nil {
		t.Fatal(err)
	}
	if a.Equal(a.Current(u), desired) {
		t.Fatal("Equal: an owned Degraded the computer no longer returns: want a difference")
	}
	p, err := a.Patch(u, desired)
	if err != nil {
		t.Fatal(err)
	}
	if st := applied(t, p); len(st) != 0 {
		t.Errorf("applied status %v: want {} (Degraded given up, Synced not ours)", st)
	}

	// A type outside OwnedTypes is refused, nothing built.
	b, _ := conditions.NewApplier(conditions.Config[*unstructured.Unstructured]{
		Conditions: func(*unstructured.Unstructured) ([]metav1.Condition, error) {
			return []metav1.Condition{{Type: "Synced", Status: metav1.ConditionTrue, Reason: "Ok"}}, nil
		},
		OwnedTypes: []string{"Degraded"},
	}, conditions.ApplyOptions{})
	if _, err := b.Desired(u); err == nil {
		t.Error("Desired: a type outside OwnedTypes, want an error")
	}
	if _, err := b.Patch(u, conditions.Status{Conditions: []metav1.Condition{{Type: "Synced", Status: metav1.ConditionTrue, Reason: "Ok"}}}); err == nil {
		t.Error("Patch: a type outside OwnedTypes, want an error")
	}
}

// TestApplierRejectsInvalidConditions: what the API server would reject
// is not built.
func TestApplierRejectsInvalidConditions(t *testing.T) {
	a, err := conditions.NewApplier(conditions.Config[*gadget]{
		Conditions: func(*gadget) ([]metav1.Condition, error) {
			return []metav1.Condition{{Type: "Ready", Status: "Maybe", Reason: "Fine"}}, nil
		},
	}, conditions.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g := newGadget(1)
	desired, _ := a.Desired(g)
	if _, err := a.Patch(g, desired); err == nil {
		t.Error("Patch of status Maybe: want an error")
	}
	if _, err := conditions.NewApplier(conditions.Config[*gadget]{}, conditions.ApplyOptions{}); err == nil {
		t.Error("NewApplier without Conditions: want an error")
	}
}
