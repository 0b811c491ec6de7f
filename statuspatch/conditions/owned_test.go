package conditions_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/conditions"
)

// Tests of what a Computer owns: the condition types it writes, while the
// others (a second writer's) are kept as read and never make a patch.

func cond(typ string, status metav1.ConditionStatus, reason string, gen int64, at metav1.Time) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, ObservedGeneration: gen, LastTransitionTime: at}
}

var (
	// Ours, up to date on a gadget of generation 1.
	readyOK = cond("Ready", metav1.ConditionTrue, "Fine", 1, t1)
	// A second writer's conditions, with their own generation and time.
	foreignA = cond("example.com/Scheduled", metav1.ConditionTrue, "Placed", 7, metav1.NewTime(t1.Add(-3600e9)))
	foreignB = cond("Audited", metav1.ConditionFalse, "Pending", 5, metav1.NewTime(t1.Add(60e9)))
)

// subject is one Computer under test, typed or unstructured, bound to one
// object built from a gadget.
type subject struct {
	label   string
	current func() conditions.Status
	desired func() (conditions.Status, error)
	equal   func(a, b conditions.Status) bool
	patch   func(d conditions.Status) (statuspatch.MergePatch, error)
}

// subjects returns a typed and an unstructured Computer, configured with
// owned and conds, on g (and on g converted to unstructured). edit, if set,
// edits the unstructured object's map after conversion.
func subjects(t *testing.T, owned []string, conds func() []metav1.Condition, g *gadget, edit func(map[string]any)) []subject {
	t.Helper()
	clk := clocktesting.NewFakePassiveClock(t2)
	typed, err := conditions.New(conditions.Config[*gadget]{
		Conditions: func(*gadget) ([]metav1.Condition, error) { return conds(), nil },
		OwnedTypes: owned,
		Clock:      clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	un, err := conditions.New(conditions.Config[*unstructured.Unstructured]{
		Conditions: func(*unstructured.Unstructured) ([]metav1.Condition, error) { return conds(), nil },
		OwnedTypes: owned,
		Clock:      clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(g)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(m)
	}
	u := &unstructured.Unstructured{Object: m}
	return []subject{
		{"typed", func() conditions.Status { return typed.Current(g) }, func() (conditions.Status, error) { return typed.Desired(g) }, typed.Equal,
			func(d conditions.Status) (statuspatch.MergePatch, error) { return typed.Patch(g, d) }},
		{"unstructured", func() conditions.Status { return un.Current(u) }, func() (conditions.Status, error) { return un.Desired(u) }, un.Equal,
			func(d conditions.Status) (statuspatch.MergePatch, error) { return un.Patch(u, d) }},
	}
}

// asJSON returns v as encoding/json decodes its encoding into an any: the
// form in which two encodings of one condition compare equal.
func asJSON(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// wantPatched checks the conditions of patch p against want, compared as
// JSON values, in order.
func wantPatched(t *testing.T, p statuspatch.MergePatch, want ...any) {
	t.Helper()
	got := patchStatus(t, p)["conditions"]
	if diff := cmp.Diff(asJSON(t, want), got); diff != "" {
		t.Errorf("patched conditions (-want +got):\n%s", diff)
	}
}

// changedNow returns c with the LastTransitionTime of a condition that
// changes now: the fake clock's time.
func changedNow(c metav1.Condition) metav1.Condition {
	c.LastTransitionTime = metav1.NewTime(t2)
	return c
}

func withMessage(c metav1.Condition, msg string) metav1.Condition {
	c.Message = msg
	return c
}

func TestComputerKeepsASecondWritersConditions(t *testing.T) {
	readyBroken := cond("Ready", metav1.ConditionFalse, "Broken", 1, metav1.Time{})
	for _, tc := range []struct {
		label   string
		current []metav1.Condition
		returns []metav1.Condition
		want    []any
	}{
		{"ours between two foreign: replaced in place, theirs kept with order and times",
			[]metav1.Condition{foreignA, readyOK, foreignB}, []metav1.Condition{readyBroken},
			[]any{foreignA, changedNow(readyBroken), foreignB}},
		{"ours not there yet: appended after theirs",
			[]metav1.Condition{foreignB, foreignA}, []metav1.Condition{readyBroken},
			[]any{foreignB, foreignA, changedNow(readyBroken)}},
		{"our status holds, our message changes: our time kept, theirs untouched",
			[]metav1.Condition{readyOK, foreignA}, []metav1.Condition{withMessage(readyOK, "3 of 3")},
			[]any{withMessage(readyOK, "3 of 3"), foreignA}},
		{"without OwnedTypes, a type no longer returned is kept",
			[]metav1.Condition{readyOK, cond("Degraded", metav1.ConditionTrue, "Slow", 1, t1)}, []metav1.Condition{readyBroken},
			[]any{changedNow(readyBroken), cond("Degraded", metav1.ConditionTrue, "Slow", 1, t1)}},
	} {
		for _, s := range subjects(t, nil, func() []metav1.Condition { return append([]metav1.Condition(nil), tc.returns...) }, newGadget(1, tc.current...), nil) {
			t.Run(tc.label+"/"+s.label, func(t *testing.T) {
				d, err := s.desired()
				if err != nil {
					t.Fatal(err)
				}
				if s.equal(s.current(), d) {
					t.Fatal("a changed condition of ours compares unchanged")
				}
				p, err := s.patch(d)
				if err != nil {
					t.Fatal(err)
				}
				wantPatched(t, p, tc.want...)
			})
		}
	}
}

// A foreign entry of an unstructured object goes back byte for byte as
// read: fields metav1.Condition lacks, a missing message, a fractional time.
func TestComputerUnstructuredKeepsForeignEntriesAsRead(t *testing.T) {
	odd := map[string]any{
		"type": "Audited", "status": "True", "reason": "Done",
		"lastTransitionTime": "2026-01-01T00:00:00.123456Z", "extension": map[string]any{"by": "auditor"},
	}
	c, err := conditions.New(conditions.Config[*unstructured.Unstructured]{
		Conditions: func(*unstructured.Unstructured) ([]metav1.Condition, error) {
			return []metav1.Condition{cond("Ready", metav1.ConditionFalse, "Broken", 0, metav1.Time{})}, nil
		},
		Clock: clocktesting.NewFakePassiveClock(t2),
	})
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"namespace": "ns", "name": "g", "generation": int64(1), "resourceVersion": "42"},
		"status": map[string]any{"observedGeneration": int64(1), "conditions": []any{
			odd,
			map[string]any{"type": "Ready", "status": "True", "reason": "Fine", "observedGeneration": int64(1), "lastTransitionTime": "2026-01-01T00:00:00Z"},
		}},
	}}
	d, err := c.Desired(u)
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Patch(u, d)
	if err != nil {
		t.Fatal(err)
	}
	wantPatched(t, p, odd, changedNow(cond("Ready", metav1.ConditionFalse, "Broken", 1, metav1.Time{})))
}

// A second writer changing its conditions between two reads of the object
// never makes ours differ: Equal reports no change, so the reconciler
// builds no patch.
func TestComputerEqualIgnoresForeignDifferences(t *testing.T) {
	flipped := foreignA
	flipped.Status, flipped.Reason, flipped.LastTransitionTime = metav1.ConditionFalse, "Evicted", metav1.NewTime(t2)
	for _, tc := range []struct {
		label   string
		owned   []string
		current []metav1.Condition
		equal   bool
	}{
		{"no foreign condition", nil, []metav1.Condition{readyOK}, true},
		{"a foreign condition appeared", nil, []metav1.Condition{readyOK, foreignA}, true},
		{"a foreign condition appeared before ours", nil, []metav1.Condition{foreignA, readyOK}, true},
		{"a foreign condition changed status and time", nil, []metav1.Condition{flipped, readyOK}, true},
		{"two foreign, reordered", nil, []metav1.Condition{foreignB, readyOK, foreignA}, true},
		{"with OwnedTypes, a foreign condition appeared", []string{"Ready", "Degraded"}, []metav1.Condition{foreignB, readyOK}, true},
		{"control: ours differs among foreign ones", nil, []metav1.Condition{foreignA, cond("Ready", metav1.ConditionFalse, "Broken", 1, t1), foreignB}, false},
		{"control: ours missing among foreign ones", nil, []metav1.Condition{foreignA, foreignB}, false},
		{"control: ours twice among foreign ones", nil, []metav1.Condition{readyOK, foreignA, readyOK}, false},
	} {
		returns := func() []metav1.Condition {
			return []metav1.Condition{cond("Ready", metav1.ConditionTrue, "Fine", 0, metav1.Time{})}
		}
		for _, s := range subjects(t, tc.owned, returns, newGadget(1, tc.current...), nil) {
			t.Run(tc.label+"/"+s.label, func(t *testing.T) {
				d, err := s.desired()
				if err != nil {
					t.Fatal(err)
				}
				if got := s.equal(s.current(), d); got != tc.equal {
					t.Errorf("Equal(current, desired) = %v, want %v", got, tc.equal)
				}
				if got := s.equal(d, s.current()); got != tc.equal {
					t.Errorf("Equal(desired, current) = %v, want %v", got, tc.equal)
				}
				// A waiting patch's desired status and a new one compare
				// all their conditions: one more owned condition differs.
				if d2, _ := s.desired(); !s.equal(d, d2) {
					t.Error("two desired statuses of the same object differ")
				}
				more := d
				more.Conditions = append(slices.Clone(d.Conditions), cond("Degraded", metav1.ConditionTrue, "Slow", 1, metav1.Time{}))
				if s.equal(d, more) || s.equal(more, d) {
					t.Error("desired statuses with and without Degraded compare equal")
				}
			})
		}
	}
}

// An unchanged object with a second writer's condition costs no
// allocation either.
func TestComputerTypedUnchangedWithForeignDoesNotAllocate(t *testing.T) {
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
	g := newGadget(1, foreignA, readyOK, foreignB)
	if n := testing.AllocsPerRun(100, func() {
		d, _ := c.Desired(g)
		if !c.Equal(c.Current(g), d) {
			t.Fatal("changed")
		}
	}); n != 0 {
		t.Errorf("%v allocations per unchanged object", n)
	}
}

func TestComputerOwnedTypes(t *testing.T) {
	owned := []string{"Ready", "Degraded"}
	degraded := cond("Degraded", metav1.ConditionTrue, "Slow", 1, t1)
	for _, tc := range []struct {
		label   string
		current []metav1.Condition
		returns []metav1.Condition
		changed bool
		want    []any // patched conditions, when changed
	}{
		{"an owned type not returned is removed, the foreign one kept",
			[]metav1.Condition{readyOK, degraded, foreignA}, []metav1.Condition{readyOK},
			true, []any{readyOK, foreignA}},
		{"the last owned condition removed",
			[]metav1.Condition{foreignA, degraded}, nil,
			true, []any{foreignA}},
		{"an owned type returned again is appended",
			[]metav1.Condition{readyOK, foreignA}, []metav1.Condition{readyOK, degraded},
			true, []any{readyOK, foreignA, changedNow(degraded)}},
		{"up to date among foreign ones",
			[]metav1.Condition{foreignB, readyOK, foreignA}, []metav1.Condition{readyOK},
			false, nil},
	} {
		returns := func() []metav1.Condition { return append([]metav1.Condition(nil), tc.returns...) }
		for _, s := range subjects(t, owned, returns, newGadget(1, tc.current...), nil) {
			t.Run(tc.label+"/"+s.label, func(t *testing.T) {
				d, err := s.desired()
				if err != nil {
					t.Fatal(err)
				}
				if changed := !s.equal(s.current(), d); changed != tc.changed {
					t.Fatalf("changed = %v, want %v", changed, tc.changed)
				}
				if !tc.changed {
					return
				}
				p, err := s.patch(d)
				if err != nil {
					t.Fatal(err)
				}
				wantPatched(t, p, tc.want...)
			})
		}
	}
}

// A type outside OwnedTypes is an error for the object, and no patch.
func TestComputerOwnedTypesRejectsOtherTypes(t *testing.T) {
	for _, tc := range []struct {
		label   string
		owned   []string
		returns []metav1.Condition
	}{
		{"one type outside", []string{"Ready"}, []metav1.Condition{ready(metav1.ConditionTrue, "Fine"), cond("Audited", metav1.ConditionTrue, "Done", 0, metav1.Time{})}},
		{"only a type outside", []string{"Ready", "Degraded"}, []metav1.Condition{cond("Audited", metav1.ConditionTrue, "Done", 0, metav1.Time{})}},
		{"case counts", []string{"Ready"}, []metav1.Condition{cond("ready", metav1.ConditionTrue, "Fine", 0, metav1.Time{})}},
	} {
		returns := func() []metav1.Condition { return append([]metav1.Condition(nil), tc.returns...) }
		for _, s := range subjects(t, tc.owned, returns, newGadget(1, readyOK), nil) {
			t.Run(tc.label+"/"+s.label, func(t *testing.T) {
				if _, err := s.desired(); err == nil || !strings.Contains(err.Error(), "OwnedTypes") {
					t.Errorf("Desired = %v, want an error naming OwnedTypes", err)
				}
				// Patch refuses such conditions too, however they came.
				if _, err := s.patch(conditions.Status{ObservedGeneration: 1, Conditions: returns()}); err == nil {
					t.Error("Patch of a type outside OwnedTypes built a patch")
				}
			})
		}
	}
	for _, bad := range [][]string{{""}, {"Ready", "not a type!"}} {
		var ce *base.ConfigError
		_, err := conditions.New(conditions.Config[*gadget]{
			Conditions: func(*gadget) ([]metav1.Condition, error) { return nil, nil },
			OwnedTypes: bad,
		})
		if !errors.As(err, &ce) || ce.Field != "OwnedTypes" {
			t.Errorf("OwnedTypes %q: New = %v, want a ConfigError on OwnedTypes", bad, err)
		}
	}
}

// An empty OwnedTypes is no list: the types Conditions returns are owned.
func TestComputerEmptyOwnedTypesIsNone(t *testing.T) {
	c, err := conditions.New(conditions.Config[*gadget]{
		Conditions: func(*gadget) ([]metav1.Condition, error) {
			return []metav1.Condition{ready(metav1.ConditionTrue, "Fine")}, nil
		},
		OwnedTypes: []string{},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Desired(newGadget(1, readyOK)); err != nil {
		t.Errorf("Desired with an empty OwnedTypes: %v, want the types returned owned", err)
	}
}

// Duplicates and malformed entries never panic: foreign ones go back as
// read, owned ones are written once, invalid desired conditions are an
// error.
func TestComputerOddInput(t *testing.T) {
	readyFalse := cond("Ready", metav1.ConditionFalse, "Broken", 1, t1)
	for _, tc := range []struct {
		label   string
		owned   []string
		current []metav1.Condition
		edit    func(map[string]any) // of the unstructured object only
		returns []metav1.Condition
		typed   []any  // patched conditions of the typed object
		un      []any  // of the unstructured one, if they differ
		err     string // instead of a patch
	}{
		{label: "a foreign type twice: both kept",
			current: []metav1.Condition{foreignA, foreignA, readyFalse}, returns: []metav1.Condition{readyOK},
			typed: []any{foreignA, foreignA, changedNow(readyOK)}},
		{label: "an owned type twice: written once, where the first was",
			current: []metav1.Condition{foreignA, readyFalse, foreignB, readyOK}, returns: []metav1.Condition{readyOK},
			typed: []any{foreignA, readyOK, foreignB}},
		{label: "an owned type twice, with OwnedTypes and not returned: both removed", owned: []string{"Ready"},
			current: []metav1.Condition{readyOK, foreignA, readyOK}, returns: nil,
			typed: []any{foreignA}},
		{label: "the function returns a type twice: an error",
			current: []metav1.Condition{foreignA}, returns: []metav1.Condition{readyOK, readyFalse},
			err: "Duplicate"},
		{label: "the function returns a condition without a type: an error",
			current: []metav1.Condition{foreignA}, returns: []metav1.Condition{{Status: metav1.ConditionTrue, Reason: "R"}},
			err: "type"},
		{label: "unstructured: malformed entries kept as read",
			current: []metav1.Condition{foreignA},
			edit: func(m map[string]any) {
				st := m["status"].(map[string]any)
				st["conditions"] = append(st["conditions"].([]any), "junk", nil, int64(3),
					map[string]any{"status": "True"}, map[string]any{"type": int64(5)})
			},
			returns: []metav1.Condition{readyOK},
			typed:   []any{foreignA, changedNow(readyOK)},
			un:      []any{foreignA, "junk", nil, 3, map[string]any{"status": "True"}, map[string]any{"type": 5}, changedNow(readyOK)}},
		{label: "unstructured: an owned entry with fields of the wrong kind is replaced",
			current: []metav1.Condition{foreignA},
			edit: func(m map[string]any) {
				st := m["status"].(map[string]any)
				st["conditions"] = append(st["conditions"].([]any), map[string]any{"type": "Ready", "status": true, "lastTransitionTime": 12})
			},
			returns: []metav1.Condition{readyOK},
			typed:   []any{foreignA, changedNow(readyOK)}},
		{label: "unstructured: conditions not a list",
			edit:    func(m map[string]any) { m["status"] = map[string]any{"conditions": "nope"} },
			returns: []metav1.Condition{readyOK},
			typed:   []any{changedNow(readyOK)}},
		{label: "unstructured: status not an object",
			current: []metav1.Condition{foreignA},
			edit:    func(m map[string]any) { m["status"] = []any{"nope"} },
			returns: []metav1.Condition{readyOK},
			typed:   []any{foreignA, changedNow(readyOK)},
			un:      []any{changedNow(readyOK)}},
	} {
		returns := func() []metav1.Condition { return append([]metav1.Condition(nil), tc.returns...) }
		for _, s := range subjects(t, tc.owned, returns, newGadget(1, tc.current...), tc.edit) {
			t.Run(tc.label+"/"+s.label, func(t *testing.T) {
				d, err := s.desired()
				if err != nil {
					t.Fatal(err)
				}
				cur := s.current()
				if s.equal(cur, d) {
					t.Fatal("compares unchanged")
				}
				s.equal(d, cur)
				p, err := s.patch(d)
				if tc.err != "" {
					if err == nil || !strings.Contains(err.Error(), tc.err) {
						t.Errorf("Patch = %v, want an error about %s", err, tc.err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				want := tc.typed
				if s.label == "unstructured" && tc.un != nil {
					want = tc.un
				}
				wantPatched(t, p, want...)
			})
		}
	}
}
