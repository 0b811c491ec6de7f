package statuspatch

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// twoConds returns Accepted and ResolvedRefs conditions, as an HTTPRoute
// parent status carries, with transition time at.
func twoConds(gen int64, at time.Time) []metav1.Condition {
	return []metav1.Condition{
		{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", Message: "Route is accepted", ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(at)},
		{Type: "ResolvedRefs", Status: metav1.ConditionTrue, Reason: "ResolvedRefs", Message: "All references resolved", ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(at)},
	}
}

func TestConditionsEqualAndCmpEqual(t *testing.T) {
	at := testStart()
	base := twoConds(3, at)
	mod := func(f func(c []metav1.Condition) []metav1.Condition) []metav1.Condition {
		c := twoConds(3, at)
		return f(c)
	}
	cases := []struct {
		label string
		other []metav1.Condition
		equal bool
	}{
		{"identical", twoConds(3, at), true},
		{"other transition time", twoConds(3, at.Add(time.Hour)), true},
		{"other order", mod(func(c []metav1.Condition) []metav1.Condition { return []metav1.Condition{c[1], c[0]} }), true},
		{"other generation", twoConds(4, at), false},
		{"other status", mod(func(c []metav1.Condition) []metav1.Condition { c[1].Status = metav1.ConditionFalse; return c }), false},
		{"other reason", mod(func(c []metav1.Condition) []metav1.Condition { c[0].Reason = "NoMatchingParent"; return c }), false},
		{"other message", mod(func(c []metav1.Condition) []metav1.Condition { c[0].Message = "x"; return c }), false},
		{"one missing", mod(func(c []metav1.Condition) []metav1.Condition { return c[:1] }), false},
		{"same length, other type", mod(func(c []metav1.Condition) []metav1.Condition { c[1].Type = "Programmed"; return c }), false},
		{"duplicate type", mod(func(c []metav1.Condition) []metav1.Condition { c[1] = c[0]; return c }), false},
		{"empty", nil, false},
	}
	gocmp := CmpEqual[[]metav1.Condition](IgnoreConditionTransitionTime(), SortConditions())
	for _, c := range cases {
		if got := ConditionsEqual(base, c.other); got != c.equal {
			t.Errorf("%s: ConditionsEqual = %v, want %v", c.label, got, c.equal)
		}
		if got := ConditionsEqual(c.other, base); got != c.equal {
			t.Errorf("%s: ConditionsEqual reversed = %v, want %v", c.label, got, c.equal)
		}
		if got := gocmp(base, c.other); got != c.equal {
			t.Errorf("%s: CmpEqual = %v, want %v", c.label, got, c.equal)
		}
	}
	if !ConditionsEqual(nil, []metav1.Condition{}) {
		t.Errorf("nil and empty lists differ")
	}
}

func TestCmpEqualOptionsMatter(t *testing.T) {
	at := testStart()
	a, later := twoConds(1, at), twoConds(1, at.Add(time.Minute))
	reordered := []metav1.Condition{a[1], a[0]}
	cases := []struct {
		label string
		opts  []cmp.Option
		b     []metav1.Condition
		equal bool
	}{
		{"no options: time counts", nil, later, false},
		{"ignore transition time", []cmp.Option{IgnoreConditionTransitionTime()}, later, true},
		{"order counts without SortConditions", []cmp.Option{IgnoreConditionTransitionTime()}, reordered, false},
		{"SortConditions ignores order", []cmp.Option{SortConditions()}, reordered, true},
	}
	for _, c := range cases {
		if got := CmpEqual[[]metav1.Condition](c.opts...)(a, c.b); got != c.equal {
			t.Errorf("%s: %v, want %v", c.label, got, c.equal)
		}
	}
}

func TestCmpEqualRecoversFromUnexportedFields(t *testing.T) {
	type opaque struct{ hidden int }
	eq := CmpEqual[opaque]()
	if eq(opaque{1}, opaque{1}) {
		t.Errorf("a comparison go-cmp cannot make reported equal; want not equal (patch rather than crash)")
	}
	if d := safeDiff(opaque{1}, opaque{2}, nil); !strings.Contains(d, "no diff") {
		t.Errorf("safeDiff = %q, want a note instead of a panic", d)
	}
}

func TestComputerFuncs(t *testing.T) {
	f := ComputerFuncs[string, int, string]{
		KeyFunc:     func(o string) types.NamespacedName { return types.NamespacedName{Name: o} },
		CurrentFunc: func(o string) int { return len(o) },
		DesiredFunc: func(o string) (int, error) { return 3, nil },
		EqualFunc:   func(a, b int) bool { return a == b },
		PatchFunc:   func(o string, d int) (string, error) { return o + "!", nil },
	}
	var c StatusComputer[string, int, string] = f
	d, _ := c.Desired("abcd")
	p, _ := c.Patch("abcd", d)
	if c.Key("abcd").Name != "abcd" || c.Current("abcd") != 4 || d != 3 || c.Equal(4, d) || p != "abcd!" {
		t.Errorf("ComputerFuncs does not forward to its functions")
	}
	if err := f.validate(); err != nil {
		t.Errorf("validate complete funcs: %v", err)
	}
	f.PatchFunc = nil
	if err := f.validate(); err == nil || !strings.Contains(err.Error(), "PatchFunc") {
		t.Errorf("validate without PatchFunc = %v", err)
	}
}

// BenchmarkCompare measures one comparison of two statuses of two
// conditions each that differ only in LastTransitionTime: the cost that
// every unchanged object pays every pass.
func BenchmarkCompare(b *testing.B) {
	at := testStart()
	x, y := twoConds(1, at), twoConds(1, at.Add(time.Hour))
	benches := []struct {
		name  string
		equal func(a, b []metav1.Condition) bool
	}{
		{"typed", ConditionsEqual},
		{"gocmp-ignore-time", CmpEqual[[]metav1.Condition](IgnoreConditionTransitionTime())},
		{"gocmp-ignore-time-sorted", CmpEqual[[]metav1.Condition](IgnoreConditionTransitionTime(), SortConditions())},
	}
	for _, bb := range benches {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !bb.equal(x, y) {
					b.Fatal("not equal")
				}
			}
		})
	}
}
