package conditions_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quietpatch/quietpatch/statuspatch/conditions"
)

// lookalike has Gateway API's status shape (gatewayv1.Gateway's, in
// brief; the examples module tests the real types): conditions at the top
// level and inside listed entries, and no status.observedGeneration: each
// condition carries its own.
type lookalike struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              lookalikeSpec   `json:"spec"`
	Status            lookalikeStatus `json:"status,omitempty"`
}

type lookalikeSpec struct {
	Listeners []string `json:"listeners"` // their names
}

type lookalikeStatus struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	Listeners  []listenerStatus   `json:"listeners,omitempty"`
}

type listenerStatus struct {
	Name       string             `json:"name"`
	Conditions []metav1.Condition `json:"conditions"`
}

func newLookalike(gen int64, conds ...metav1.Condition) *lookalike {
	return &lookalike{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g", Generation: gen, ResourceVersion: "42"},
		Status:     lookalikeStatus{Conditions: conds},
	}
}

// applyStatus sets o's status fields to those of a merge patch's status,
// as the API server would (status.conditions and listeners are replaced
// whole).
func applyStatus(t *testing.T, o *lookalike, patched map[string]any) {
	t.Helper()
	var cur map[string]any
	b, _ := json.Marshal(o.Status)
	if err := json.Unmarshal(b, &cur); err != nil {
		t.Fatal(err)
	}
	for k, v := range patched {
		cur[k] = v
	}
	b, _ = json.Marshal(cur)
	o.Status = lookalikeStatus{}
	if err := json.Unmarshal(b, &o.Status); err != nil {
		t.Fatal(err)
	}
}

// A status without observedGeneration: the Computer neither compares nor
// writes one; each condition says its generation. Another writer's
// condition stays in place, ours keep their times while their status holds.
func TestComputerWithoutObservedGeneration(t *testing.T) {
	ok := func(typ string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: typ}
	}
	c, err := conditions.New(conditions.Config[*lookalike]{
		Conditions: func(*lookalike) ([]metav1.Condition, error) {
			return []metav1.Condition{ok("Accepted"), ok("Programmed")}, nil
		},
		Clock: clocktesting.NewFakePassiveClock(t2),
	})
	if err != nil {
		t.Fatal(err)
	}
	accepted, programmed := ok("Accepted"), ok("Programmed")
	accepted.ObservedGeneration, accepted.LastTransitionTime = 2, t1
	programmed.ObservedGeneration, programmed.LastTransitionTime = 3, t1
	o := newLookalike(3, accepted, foreignA, programmed) // Accepted computed from generation 2

	desired, err := c.Desired(o)
	if err != nil {
		t.Fatal(err)
	}
	if desired.ObservedGeneration != 0 || desired.Conditions[0].ObservedGeneration != 3 {
		t.Errorf("desired %+v: want no status observedGeneration, conditions of generation 3", desired)
	}
	if c.Equal(c.Current(o), desired) {
		t.Fatal("Equal: Accepted of generation 2, the object at 3: want a difference")
	}
	p, err := c.Patch(o, desired)
	if err != nil {
		t.Fatal(err)
	}
	st := patchStatus(t, p)
	if _, ok := st["observedGeneration"]; ok {
		t.Errorf("patched status %v: an observedGeneration the status does not have", st)
	}
	accepted.ObservedGeneration = 3
	wantPatched(t, p, accepted, foreignA, programmed) // times kept, foreign in place

	applyStatus(t, o, st)
	if desired, _ = c.Desired(o); !c.Equal(c.Current(o), desired) {
		t.Errorf("after the patch, Equal: want no difference; status %+v", o.Status)
	}
	if n := testing.AllocsPerRun(100, func() {
		d, _ := c.Desired(o)
		c.Equal(c.Current(o), d)
	}); n > 1 { // the list Conditions returns
		t.Errorf("%v allocations per unchanged object", n)
	}

	a, err := conditions.NewApplier(conditions.Config[*lookalike]{
		Conditions: func(*lookalike) ([]metav1.Condition, error) { return []metav1.Condition{ok("Accepted")}, nil },
	}, conditions.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := a.Desired(o)
	if !a.Equal(a.Current(o), d) {
		t.Error("Applier.Equal: our Accepted is up to date, want no difference")
	}
	ap, err := a.Patch(o, d)
	if err != nil {
		t.Fatal(err)
	}
	if st := applied(t, ap); st["observedGeneration"] != nil || len(st["conditions"].([]any)) != 1 {
		t.Errorf("applied status %v: want Accepted only, no observedGeneration", st)
	}
}

// Conditions inside listed entries: a listeners[] field computed through
// Config.Fields with Merge, one listener status per listener of the spec.
// An unchanged object compares equal (times carried, so the encodings
// match); a listener's condition of another writer is kept.
func TestComputerListenersThroughFields(t *testing.T) {
	now := metav1.NewTime(t2)
	listeners := func(o *lookalike) (map[string]any, error) {
		out := make([]listenerStatus, 0, len(o.Spec.Listeners))
		for _, name := range o.Spec.Listeners {
			var current []metav1.Condition
			for _, l := range o.Status.Listeners {
				if l.Name == name {
					current = l.Conditions
				}
			}
			status := metav1.ConditionTrue
			if name == "broken" {
				status = metav1.ConditionFalse
			}
			desired := []metav1.Condition{{Type: "Programmed", Status: status, Reason: "Done", ObservedGeneration: o.Generation}}
			conds := conditions.Merge(current, desired, nil, now)
			if err := conditions.Validate(conds); err != nil {
				return nil, err
			}
			out = append(out, listenerStatus{Name: name, Conditions: conds})
		}
		return map[string]any{"listeners": out}, nil
	}
	c, err := conditions.New(conditions.Config[*lookalike]{
		Conditions: func(*lookalike) ([]metav1.Condition, error) {
			return []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted"}}, nil
		},
		Fields: listeners,
		Clock:  clocktesting.NewFakePassiveClock(t2),
	})
	if err != nil {
		t.Fatal(err)
	}
	o := newLookalike(1)
	o.Spec.Listeners = []string{"http", "broken"}
	programmed := metav1.Condition{Type: "Programmed", Status: metav1.ConditionTrue, Reason: "Done", ObservedGeneration: 1, LastTransitionTime: t1}
	o.Status.Listeners = []listenerStatus{
		{Name: "http", Conditions: []metav1.Condition{foreignB, programmed}},
		{Name: "gone", Conditions: []metav1.Condition{programmed}},
	}

	desired, err := c.Desired(o)
	if err != nil {
		t.Fatal(err)
	}
	if c.Equal(c.Current(o), desired) {
		t.Fatal("Equal: the listeners changed, want a difference")
	}
	p, err := c.Patch(o, desired)
	if err != nil {
		t.Fatal(err)
	}
	st := patchStatus(t, p)
	broken := programmed
	broken.Status, broken.LastTransitionTime = metav1.ConditionFalse, now
	want := asJSON(t, []listenerStatus{
		{Name: "http", Conditions: []metav1.Condition{foreignB, programmed}}, // unchanged: its time kept, foreignB in place
		{Name: "broken", Conditions: []metav1.Condition{broken}},
	})
	if diff := cmp.Diff(want, st["listeners"]); diff != "" {
		t.Errorf("patched listeners (-want +got):\n%s", diff)
	}
	applyStatus(t, o, st)
	if desired, _ = c.Desired(o); !c.Equal(c.Current(o), desired) {
		t.Errorf("after the patch, Equal: want no difference; status %+v", o.Status)
	}
}
