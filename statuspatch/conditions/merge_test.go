package conditions_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quietpatch/quietpatch/statuspatch/conditions"
)

// Tables of the building blocks: Merge, TransitionTime, Validate.

var (
	mt0 = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))  // a current condition's time
	mt1 = metav1.NewTime(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC))  // another one's
	now = metav1.NewTime(time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)) // the time of the merge
)

// c returns a condition of type typ with status True (or False with a
// "!" before the type), reason R, generation 1 and time at.
func c(typ string, at metav1.Time) metav1.Condition {
	status := metav1.ConditionTrue
	if t, ok := strings.CutPrefix(typ, "!"); ok {
		typ, status = t, metav1.ConditionFalse
	}
	return metav1.Condition{Type: typ, Status: status, Reason: "R", ObservedGeneration: 1, LastTransitionTime: at}
}

func with(cond metav1.Condition, edit func(*metav1.Condition)) metav1.Condition {
	edit(&cond)
	return cond
}

func ownsOf(types ...string) func(string) bool {
	return func(t string) bool { return slices.Contains(types, t) }
}

func TestMerge(t *testing.T) {
	// Foreign conditions: another writer's, with their own generation and
	// times (a zero one too: kept as read, not mended).
	fx := with(c("example.com/X", mt1), func(c *metav1.Condition) { c.ObservedGeneration = 9 })
	fy := with(c("!Audited", metav1.Time{}), func(c *metav1.Condition) { c.Message = "as read" })
	fz := c("Zeta", mt0)
	for _, tc := range []struct {
		label            string
		current, desired []metav1.Condition
		owns             func(string) bool
		want             []metav1.Condition
	}{
		{label: "both nil: empty, not nil", want: []metav1.Condition{}},
		{label: "both empty", current: []metav1.Condition{}, desired: []metav1.Condition{}, want: []metav1.Condition{}},
		{label: "nothing desired, owns nil: current kept as read",
			current: []metav1.Condition{fx, fy}, want: []metav1.Condition{fx, fy}},
		{label: "nothing current: desired appended, at now",
			desired: []metav1.Condition{c("B", metav1.Time{}), c("A", metav1.Time{})},
			want:    []metav1.Condition{c("B", now), c("A", now)}},
		{label: "unchanged: times kept",
			current: []metav1.Condition{c("A", mt0), c("B", mt1)}, desired: []metav1.Condition{c("A", metav1.Time{}), c("B", metav1.Time{})},
			want: []metav1.Condition{c("A", mt0), c("B", mt1)}},
		{label: "foreign interleaved: kept in place, owned replaced in place, in current's order",
			current: []metav1.Condition{fx, c("A", mt0), fy, c("B", mt0), fz},
			desired: []metav1.Condition{c("!B", metav1.Time{}), c("A", metav1.Time{})},
			want:    []metav1.Condition{fx, c("A", mt0), fy, c("!B", now), fz}},
		{label: "a new owned type appended after the foreign ones",
			current: []metav1.Condition{fx, c("A", mt0)}, desired: []metav1.Condition{c("A", metav1.Time{}), c("C", metav1.Time{})},
			want: []metav1.Condition{fx, c("A", mt0), c("C", now)}},
		{label: "reason, message, generation change: the time kept, the rest desired's",
			current: []metav1.Condition{c("A", mt0)},
			desired: []metav1.Condition{with(c("A", mt1), func(c *metav1.Condition) { c.Reason, c.Message, c.ObservedGeneration = "S", "m", 2 })},
			want:    []metav1.Condition{with(c("A", mt0), func(c *metav1.Condition) { c.Reason, c.Message, c.ObservedGeneration = "S", "m", 2 })}},
		{label: "an owned type no longer desired: removed; the foreign one kept",
			current: []metav1.Condition{c("A", mt0), c("Degraded", mt0), fx}, desired: []metav1.Condition{c("A", metav1.Time{})},
			owns: ownsOf("A", "Degraded"), want: []metav1.Condition{c("A", mt0), fx}},
		{label: "without owns, a type no longer desired is foreign: kept",
			current: []metav1.Condition{c("A", mt0), c("Degraded", mt0)}, desired: []metav1.Condition{c("A", metav1.Time{})},
			want: []metav1.Condition{c("A", mt0), c("Degraded", mt0)}},
		{label: "owns and nothing desired: every owned one removed",
			current: []metav1.Condition{c("A", mt0), fx, c("B", mt0)}, owns: ownsOf("A", "B"),
			want: []metav1.Condition{fx}},
		{label: "owns reports none of desired's types: desired's are owned all the same",
			current: []metav1.Condition{c("!A", mt0), fx}, desired: []metav1.Condition{c("A", metav1.Time{})}, owns: ownsOf("Other"),
			want: []metav1.Condition{c("A", now), fx}},
		{label: "a duplicate of an owned type: written once, where the first was",
			current: []metav1.Condition{c("!A", mt1), fx, c("A", mt0)}, desired: []metav1.Condition{c("A", metav1.Time{})},
			want: []metav1.Condition{c("A", mt0), fx}},
		{label: "duplicates of an owned type, not desired: all removed",
			current: []metav1.Condition{c("D", mt0), fx, c("D", mt1)}, owns: ownsOf("D"),
			want: []metav1.Condition{fx}},
		{label: "a type desired twice: each written once, the second where the second was",
			current: []metav1.Condition{c("A", mt0), fx, c("A", mt1)},
			desired: []metav1.Condition{with(c("A", metav1.Time{}), func(c *metav1.Condition) { c.Message = "1" }), with(c("!A", metav1.Time{}), func(c *metav1.Condition) { c.Message = "2" })},
			want:    []metav1.Condition{with(c("A", mt0), func(c *metav1.Condition) { c.Message = "1" }), fx, with(c("!A", now), func(c *metav1.Condition) { c.Message = "2" })}},
		{label: "a type desired twice, once current: the second appended",
			current: []metav1.Condition{c("A", mt0)}, desired: []metav1.Condition{c("A", metav1.Time{}), c("A", metav1.Time{})},
			want: []metav1.Condition{c("A", mt0), c("A", mt0)}},
		{label: "a foreign type twice: both kept",
			current: []metav1.Condition{fx, fx}, desired: []metav1.Condition{c("A", metav1.Time{})},
			want: []metav1.Condition{fx, fx, c("A", now)}},
	} {
		t.Run(tc.label, func(t *testing.T) {
			current, desired := slices.Clone(tc.current), slices.Clone(tc.desired)
			got := conditions.Merge(current, desired, tc.owns, now)
			if got == nil {
				t.Error("Merge returned nil")
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Merge (-want +got):\n%s", diff)
			}
			if !slices.EqualFunc(current, tc.current, condEqual) || !slices.EqualFunc(desired, tc.desired, condEqual) {
				t.Error("Merge modified its arguments")
			}
			if len(got) > 0 && len(current) > 0 && &got[0] == &current[0] {
				t.Error("Merge returned current's array")
			}
		})
	}
}

func condEqual(a, b metav1.Condition) bool { return a == b }

// Merge allocates the list it returns, and nothing else: the few
// conditions of a status or of a listed entry need no map.
func TestMergeAllocatesOnlyItsResult(t *testing.T) {
	current := []metav1.Condition{c("example.com/X", mt1), c("A", mt0), c("B", mt0)}
	desired := []metav1.Condition{c("A", metav1.Time{}), c("!B", metav1.Time{})}
	owns := ownsOf("A", "B", "C")
	if n := testing.AllocsPerRun(100, func() { conditions.Merge(current, desired, owns, now) }); n != 1 {
		t.Errorf("%v allocations per Merge, want 1", n)
	}
}

func TestTransitionTime(t *testing.T) {
	for _, tc := range []struct {
		label   string
		current []metav1.Condition
		c       metav1.Condition
		want    metav1.Time
	}{
		{"no current condition: now", nil, c("A", metav1.Time{}), now},
		{"same type and status: kept", []metav1.Condition{c("B", mt1), c("A", mt0)}, c("A", metav1.Time{}), mt0},
		{"the status changed: now", []metav1.Condition{c("!A", mt0)}, c("A", metav1.Time{}), now},
		{"same status, another type: now", []metav1.Condition{c("B", mt0)}, c("A", metav1.Time{}), now},
		{"only reason, message and generation changed: kept", []metav1.Condition{c("A", mt0)},
			with(c("A", metav1.Time{}), func(c *metav1.Condition) { c.Reason, c.Message, c.ObservedGeneration = "S", "m", 7 }), mt0},
		{"c's own time does not count", []metav1.Condition{c("!A", mt0)}, c("A", mt1), now},
		{"the current time is zero: now", []metav1.Condition{c("A", metav1.Time{})}, c("A", metav1.Time{}), now},
		{"the current time is beyond year 9999: now", []metav1.Condition{c("A", metav1.NewTime(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)))}, c("A", metav1.Time{}), now},
		{"the Unix epoch is a time (Gateway API's defaults)", []metav1.Condition{c("A", metav1.NewTime(time.Unix(0, 0)))}, c("A", metav1.Time{}), metav1.NewTime(time.Unix(0, 0))},
		{"a type twice: the first of c's status", []metav1.Condition{c("!A", mt0), c("A", mt1)}, c("A", metav1.Time{}), mt1},
	} {
		if got := conditions.TransitionTime(tc.current, tc.c, now); !got.Equal(&tc.want) {
			t.Errorf("%s: TransitionTime = %v, want %v", tc.label, got, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := c("Ready", mt0)
	for _, tc := range []struct {
		label string
		conds []metav1.Condition
		want  string // in the error; "" for none
	}{
		{"nil", nil, ""},
		{"empty", []metav1.Condition{}, ""},
		{"valid", []metav1.Condition{ok, c("example.com/Other", mt0)}, ""},
		{"a duplicate type", []metav1.Condition{ok, c("example.com/Other", mt0), ok}, "conditions[2]: Duplicate value"},
		{"no type", []metav1.Condition{with(ok, func(c *metav1.Condition) { c.Type = "" })}, "conditions[0].type"},
		{"a type that is no label name", []metav1.Condition{with(ok, func(c *metav1.Condition) { c.Type = "not a type!" })}, "conditions[0].type"},
		{"status Maybe", []metav1.Condition{ok, with(ok, func(c *metav1.Condition) { c.Type, c.Status = "B", "Maybe" })}, "conditions[1].status"},
		{"no reason", []metav1.Condition{with(ok, func(c *metav1.Condition) { c.Reason = "" })}, "conditions[0].reason"},
		{"a reason against the pattern", []metav1.Condition{with(ok, func(c *metav1.Condition) { c.Reason = "not a reason" })}, "conditions[0].reason"},
		{"a negative generation", []metav1.Condition{with(ok, func(c *metav1.Condition) { c.ObservedGeneration = -1 })}, "conditions[0].observedGeneration"},
		{"no time", []metav1.Condition{with(ok, func(c *metav1.Condition) { c.LastTransitionTime = metav1.Time{} })}, "conditions[0].lastTransitionTime"},
		{"a message too long", []metav1.Condition{with(ok, func(c *metav1.Condition) { c.Message = strings.Repeat("x", 32769) })}, "conditions[0].message"},
	} {
		err := conditions.Validate(tc.conds)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: Validate = %v, want nil", tc.label, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: Validate = %v, want an error naming %s", tc.label, err, tc.want)
		}
	}
}
