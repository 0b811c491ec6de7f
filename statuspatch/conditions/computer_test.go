package conditions_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/conditions"
)

// gadget has the kubebuilder status shape, plus a field of its own.
type gadget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Status            gadgetStatus `json:"status,omitempty"`
}

type gadgetStatus struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	Replicas           int32              `json:"replicas,omitempty"`
}

var (
	t1 = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t2 = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
)

func newGadget(gen int64, conds ...metav1.Condition) *gadget {
	return &gadget{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g", Generation: gen, ResourceVersion: "42"},
		Status:     gadgetStatus{ObservedGeneration: 1, Conditions: conds},
	}
}

func ready(status metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: "Ready", Status: status, Reason: reason}
}

// patchStatus decodes the status of a built merge patch.
func patchStatus(t *testing.T, p statuspatch.MergePatch) map[string]any {
	t.Helper()
	body, err := p.Body()
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Metadata map[string]any `json:"metadata"`
		Status   map[string]any `json:"status"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	if m.Metadata["resourceVersion"] != "42" {
		t.Errorf("precondition %v, want resourceVersion 42", m.Metadata)
	}
	return m.Status
}

func TestComputerTyped(t *testing.T) {
	want := ready(metav1.ConditionTrue, "Fine")
	clk := clocktesting.NewFakePassiveClock(t2)
	c, err := conditions.New(conditions.Config[*gadget]{
		Conditions: func(*gadget) ([]metav1.Condition, error) { return []metav1.Condition{want}, nil },
		Clock:      clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	cur := ready(metav1.ConditionTrue, "Fine")
	cur.ObservedGeneration, cur.LastTransitionTime = 1, t1
	for _, tc := range []struct {
		label   string
		obj     *gadget
		changed bool
		ltt     string // of the patched condition
	}{
		{"up to date", newGadget(1, cur), false, ""},
		{"new generation: the condition's status holds, its time is kept", newGadget(2, cur), true, "2026-01-01T00:00:00Z"},
		{"no status yet", newGadget(1), true, "2026-06-01T12:00:00Z"},
		{"status flipped: a new time", newGadget(1, func() metav1.Condition {
			c := cur
			c.Status, c.Reason = metav1.ConditionFalse, "Broken"
			return c
		}()), true, "2026-06-01T12:00:00Z"},
	} {
		t.Run(tc.label, func(t *testing.T) {
			if k := c.Key(tc.obj); k.Namespace != "ns" || k.Name != "g" {
				t.Errorf("Key = %v", k)
			}
			desired, err := c.Desired(tc.obj)
			if err != nil {
				t.Fatal(err)
			}
			if desired.ObservedGeneration != tc.obj.Generation || desired.Conditions[0].ObservedGeneration != tc.obj.Generation {
				t.Errorf("desired %+v: want observedGeneration %d on the status and the condition", desired, tc.obj.Generation)
			}
			if changed := !c.Equal(c.Current(tc.obj), desired); changed != tc.changed {
				t.Fatalf("changed = %v, want %v", changed, tc.changed)
			}
			if !tc.changed {
				return
			}
			p, err := c.Patch(tc.obj, desired)
			if err != nil {
				t.Fatal(err)
			}
			st := patchStatus(t, p)
			conds := st["conditions"].([]any)
			got := conds[0].(map[string]any)
			if got["lastTransitionTime"] != tc.ltt || got["reason"] != "Fine" || st["observedGeneration"] != float64(tc.obj.Generation) {
				t.Errorf("patched status %v: want lastTransitionTime %s, reason Fine, observedGeneration %d", st, tc.ltt, tc.obj.Generation)
			}
		})
	}
}

// Reading a typed status goes through reflection set up once: an unchanged
// object costs no allocation.
func TestComputerTypedUnchangedDoesNotAllocate(t *testing.T) {
	buf := []metav1.Condition{{}}
	c, err := conditions.New(conditions.Config[*gadget]{
		Conditions: func(*gadget) ([]metav1.Condition, error) {
			buf[0] = ready(metav1.ConditionTrue, "Fine")
			return buf, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	cur := ready(metav1.ConditionTrue, "Fine")
	cur.ObservedGeneration, cur.LastTransitionTime = 1, t1
	g := newGadget(1, cur)
	if n := testing.AllocsPerRun(100, func() {
		d, _ := c.Desired(g)
		if !c.Equal(c.Current(g), d) {
			t.Fatal("changed")
		}
	}); n != 0 {
		t.Errorf("%v allocations per unchanged object", n)
	}
}

func TestComputerUnstructured(t *testing.T) {
	c, err := conditions.New(conditions.Config[*unstructured.Unstructured]{
		Conditions: func(*unstructured.Unstructured) ([]metav1.Condition, error) {
			return []metav1.Condition{ready(metav1.ConditionTrue, "Fine")}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	cur := ready(metav1.ConditionTrue, "Fine")
	cur.ObservedGeneration, cur.LastTransitionTime = 2, t1
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(newGadget(2, cur))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: obj}
	_ = unstructured.SetNestedField(u.Object, int64(2), "status", "observedGeneration")
	d, err := c.Desired(u)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Equal(c.Current(u), d) {
		t.Errorf("an up-to-date unstructured object compares changed: current %+v, desired %+v", c.Current(u), d)
	}
	u.SetGeneration(3)
	d, _ = c.Desired(u)
	if c.Equal(c.Current(u), d) {
		t.Fatal("a new generation compares unchanged")
	}
	p, err := c.Patch(u, d)
	if err != nil {
		t.Fatal(err)
	}
	if st := patchStatus(t, p); st["observedGeneration"] != float64(3) {
		t.Errorf("patched status %v, want observedGeneration 3", st)
	}
}

// An unstructured object whose status has no observedGeneration — a CRD
// without the field, such as Gateway API's, prunes the one a patch sends —
// is compared on its conditions, whose own observedGeneration tells a new
// generation: it is not patched on every pass.
func TestComputerUnstructuredWithoutObservedGeneration(t *testing.T) {
	c, err := conditions.New(conditions.Config[*unstructured.Unstructured]{
		Conditions: func(*unstructured.Unstructured) ([]metav1.Condition, error) {
			return []metav1.Condition{ready(metav1.ConditionTrue, "Fine")}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	cur := ready(metav1.ConditionTrue, "Fine")
	cur.ObservedGeneration, cur.LastTransitionTime = 2, t1
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(newGadget(2, cur))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: obj}
	unstructured.RemoveNestedField(u.Object, "status", "observedGeneration")
	d, err := c.Desired(u)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Equal(c.Current(u), d) {
		t.Errorf("an up-to-date object without status.observedGeneration compares changed: current %+v, desired %+v", c.Current(u), d)
	}
	u.SetGeneration(3)
	if d, _ = c.Desired(u); c.Equal(c.Current(u), d) {
		t.Error("a new generation compares unchanged: the conditions' observedGeneration must tell it")
	}
}

// A condition the API server would reject makes the object an error, with
// no patch built.
func TestComputerRejectsInvalidConditions(t *testing.T) {
	for _, tc := range []struct {
		label string
		conds []metav1.Condition
		want  string
	}{
		{"no reason", []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}}, "reason"},
		{"bad status", []metav1.Condition{{Type: "Ready", Status: "Maybe", Reason: "R"}}, "status"},
		{"bad type", []metav1.Condition{{Type: "not a type!", Status: metav1.ConditionTrue, Reason: "R"}}, "type"},
		{"duplicate type", []metav1.Condition{ready(metav1.ConditionTrue, "A"), ready(metav1.ConditionFalse, "B")}, "Duplicate"},
		{"message too long", []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "R", Message: strings.Repeat("x", 32769)}}, "message"},
	} {
		t.Run(tc.label, func(t *testing.T) {
			c, err := conditions.New(conditions.Config[*gadget]{
				Conditions: func(*gadget) ([]metav1.Condition, error) { return tc.conds, nil },
			})
			if err != nil {
				t.Fatal(err)
			}
			g := newGadget(1)
			d, err := c.Desired(g)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Patch(g, d); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Patch = %v, want an error about %s", err, tc.want)
			}
		})
	}
}

func TestComputerFields(t *testing.T) {
	replicas := int32(3)
	c, err := conditions.New(conditions.Config[*gadget]{
		Conditions: func(*gadget) ([]metav1.Condition, error) {
			return []metav1.Condition{ready(metav1.ConditionTrue, "Fine")}, nil
		},
		Fields: func(*gadget) (map[string]any, error) { return map[string]any{"replicas": replicas}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	cur := ready(metav1.ConditionTrue, "Fine")
	cur.ObservedGeneration = 1
	g := newGadget(1, cur)
	g.Status.Replicas = 3
	d, err := c.Desired(g)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Equal(c.Current(g), d) {
		t.Error("equal replicas compare changed")
	}
	// Two desired statuses (a waiting patch's and a new one) compare too.
	if !c.Equal(d, d) {
		t.Error("a desired status differs from itself")
	}
	replicas = 4
	d, _ = c.Desired(g)
	if c.Equal(c.Current(g), d) {
		t.Fatal("a changed field compares unchanged")
	}
	p, err := c.Patch(g, d)
	if err != nil {
		t.Fatal(err)
	}
	if st := patchStatus(t, p); st["replicas"] != float64(4) {
		t.Errorf("patched status %v, want replicas 4", st)
	}
}

func TestNewRejectsTypesWithoutTheStatusShape(t *testing.T) {
	type noStatus struct{ metav1.ObjectMeta }
	type badConds struct {
		metav1.ObjectMeta
		Status struct {
			ObservedGeneration int64
			Conditions         []string
		}
	}
	type badGen struct {
		metav1.ObjectMeta
		Status struct {
			ObservedGeneration int32
			Conditions         []metav1.Condition
		}
	}
	none := func(any) ([]metav1.Condition, error) { return nil, nil }
	for _, tc := range []struct {
		label   string
		new     func() error
		missing string
	}{
		{"no Status field", func() error {
			_, err := conditions.New(conditions.Config[*noStatus]{Conditions: func(o *noStatus) ([]metav1.Condition, error) { return none(o) }})
			return err
		}, "has no struct field Status"},
		{"Conditions of another type", func() error {
			_, err := conditions.New(conditions.Config[*badConds]{Conditions: func(o *badConds) ([]metav1.Condition, error) { return none(o) }})
			return err
		}, "Status has no field Conditions []metav1.Condition"},
		{"ObservedGeneration of another type", func() error {
			_, err := conditions.New(conditions.Config[*badGen]{Conditions: func(o *badGen) ([]metav1.Condition, error) { return none(o) }})
			return err
		}, "Status.ObservedGeneration is not an int64"},
		{"an Applier of status.observedGeneration without one", func() error {
			_, err := conditions.NewApplier(conditions.Config[*lookalike]{Conditions: func(o *lookalike) ([]metav1.Condition, error) { return none(o) }},
				conditions.ApplyOptions{ObservedGeneration: true})
			return err
		}, "Status.ObservedGeneration int64"},
	} {
		var ce *base.ConfigError
		if err := tc.new(); !errors.As(err, &ce) || ce.Field != "O" || !strings.Contains(ce.Reason, tc.missing) {
			t.Errorf("%s: %v, want a ConfigError on O saying %q", tc.label, err, tc.missing)
		}
	}
	var ce *base.ConfigError
	if _, err := conditions.New(conditions.Config[*gadget]{}); !errors.As(err, &ce) || ce.Field != "Conditions" {
		t.Errorf("no Conditions func: %v", err)
	}
}
