package conditions

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// twoConds returns Accepted and ResolvedRefs conditions, as an HTTPRoute
// parent status carries, with transition time at.
func twoConds(gen int64, at time.Time) []metav1.Condition {
	return []metav1.Condition{
		{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", Message: "Route is accepted", ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(at)},
		{Type: "ResolvedRefs", Status: metav1.ConditionTrue, Reason: "ResolvedRefs", Message: "All references resolved", ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(at)},
	}
}

func TestEqualAndCmpEqual(t *testing.T) {
	at := t0
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
		{"duplicate against a missing one", mod(func(c []metav1.Condition) []metav1.Condition { return []metav1.Condition{c[1], c[0], c[0]} }), false},
		{"empty", nil, false},
	}
	gocmp := CmpEqual[[]metav1.Condition](IgnoreTransitionTime(), SortByType())
	for _, c := range cases {
		if got := Equal(base, c.other); got != c.equal {
			t.Errorf("%s: Equal = %v, want %v", c.label, got, c.equal)
		}
		if got := Equal(c.other, base); got != c.equal {
			t.Errorf("%s: Equal reversed = %v, want %v", c.label, got, c.equal)
		}
		if got := gocmp(base, c.other); got != c.equal {
			t.Errorf("%s: CmpEqual = %v, want %v", c.label, got, c.equal)
		}
	}
	if !Equal(nil, []metav1.Condition{}) {
		t.Errorf("nil and empty lists differ")
	}
}

func TestCmpEqualOptionsMatter(t *testing.T) {
	at := t0
	a, later := twoConds(1, at), twoConds(1, at.Add(time.Minute))
	reordered := []metav1.Condition{a[1], a[0]}
	cases := []struct {
		label string
		opts  []cmp.Option
		b     []metav1.Condition
		equal bool
	}{
		{"no options: time counts", nil, later, false},
		{"ignore transition time", []cmp.Option{IgnoreTransitionTime()}, later, true},
		{"order counts without SortByType", []cmp.Option{IgnoreTransitionTime()}, reordered, false},
		{"SortByType ignores order", []cmp.Option{SortByType()}, reordered, true},
	}
	for _, c := range cases {
		if got := CmpEqual[[]metav1.Condition](c.opts...)(a, c.b); got != c.equal {
			t.Errorf("%s: %v, want %v", c.label, got, c.equal)
		}
	}
}

// A comparison go-cmp cannot make panics: the reconciler turns that into an
// error for the object instead of a patch on every pass.
func TestCmpEqualPanicsOnUnexportedFields(t *testing.T) {
	type opaque struct{ hidden int }
	eq := CmpEqual[opaque]()
	defer func() {
		if recover() == nil {
			t.Error("no panic on a value go-cmp cannot compare")
		}
	}()
	eq(opaque{1}, opaque{1})
}

// BenchmarkEqual measures one comparison of two statuses of two
// conditions each that differ only in LastTransitionTime: the cost that
// every unchanged object pays every pass.
func BenchmarkEqual(b *testing.B) {
	at := t0
	x, y := twoConds(1, at), twoConds(1, at.Add(time.Hour))
	benches := []struct {
		name  string
		equal func(a, b []metav1.Condition) bool
	}{
		{"typed", Equal},
		{"gocmp-ignore-time", CmpEqual[[]metav1.Condition](IgnoreTransitionTime())},
		{"gocmp-ignore-time-sorted", CmpEqual[[]metav1.Condition](IgnoreTransitionTime(), SortByType())},
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

// The case that a first-match lookup gets wrong: [X,Y,Y] and [Y,X,Z].
func TestEqualCountsDuplicates(t *testing.T) {
	x := metav1.Condition{Type: "X", Status: metav1.ConditionTrue, Reason: "R"}
	y := metav1.Condition{Type: "Y", Status: metav1.ConditionTrue, Reason: "R"}
	z := metav1.Condition{Type: "Z", Status: metav1.ConditionTrue, Reason: "R"}
	for _, tc := range []struct {
		label string
		a, b  []metav1.Condition
		want  bool
	}{
		{"[X,Y,Y] vs [Y,X,Z]", []metav1.Condition{x, y, y}, []metav1.Condition{y, x, z}, false},
		{"[X,X] vs [X,Y]", []metav1.Condition{x, x}, []metav1.Condition{x, y}, false},
		{"[X,Y,Y] vs [Y,X,Y]", []metav1.Condition{x, y, y}, []metav1.Condition{y, x, y}, true},
		{"[X,Y,X] vs [X,X,Y]", []metav1.Condition{x, y, x}, []metav1.Condition{x, x, y}, true},
	} {
		if got := Equal(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: Equal = %v, want %v", tc.label, got, tc.want)
		}
		if got := Equal(tc.b, tc.a); got != tc.want {
			t.Errorf("%s reversed: Equal = %v, want %v", tc.label, got, tc.want)
		}
		if got := referenceEqual(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: the reference says %v, want %v", tc.label, got, tc.want)
		}
	}
}

func TestEqualDoesNotAllocate(t *testing.T) {
	a := twoConds(1, t0)
	b := []metav1.Condition{a[1], a[0]}
	if n := testing.AllocsPerRun(100, func() { Equal(a, b) }); n != 0 {
		t.Errorf("%v allocations per comparison", n)
	}
}

// referenceEqual is the slow, obviously right definition: sort copies of
// both lists by every compared field, ignore LastTransitionTime, compare
// element by element.
func referenceEqual(a, b []metav1.Condition) bool {
	norm := func(l []metav1.Condition) []string {
		out := make([]string, len(l))
		for i, c := range l {
			out[i] = fmt.Sprintf("%q/%q/%d/%q/%q", c.Type, c.Status, c.ObservedGeneration, c.Reason, c.Message)
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(norm(a), norm(b))
}

// FuzzEqual checks Equal against referenceEqual on lists built from a small
// alphabet, so that duplicates and near-misses are frequent. Each condition
// takes one byte: type (2 bits), status (1 bit), reason (1 bit),
// generation (1 bit), message (1 bit), transition time (2 bits, ignored).
// The first byte splits the rest into the two lists.
func FuzzEqual(f *testing.F) {
	for _, seed := range []string{
		"\x03\x00\x01\x01\x01\x00\x02", // [X,Y,Y] vs [Y,X,Z]
		"\x02\x00\x00\x00\x01",
		"\x01\x40\x80",
		"\x00",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		n := int(data[0])
		data = data[1:]
		if n > len(data) {
			n = len(data)
		}
		conds := func(bs []byte) []metav1.Condition {
			out := make([]metav1.Condition, len(bs))
			for i, v := range bs {
				out[i] = metav1.Condition{
					Type:               string(rune('W' + v&3)),
					Status:             [2]metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse}[v>>2&1],
					Reason:             [2]string{"A", "B"}[v>>3&1],
					ObservedGeneration: int64(v >> 4 & 1),
					Message:            [2]string{"", "m"}[v>>5&1],
					LastTransitionTime: metav1.NewTime(t0.Add(time.Duration(v>>6) * time.Hour)),
				}
			}
			return out
		}
		a, b := conds(data[:n]), conds(data[n:])
		want := referenceEqual(a, b)
		if got := Equal(a, b); got != want {
			t.Fatalf("Equal(%v, %v) = %v, reference %v", a, b, got, want)
		}
		if got := Equal(b, a); got != want {
			t.Fatalf("Equal(%v, %v) = %v, reference %v (reversed)", b, a, got, want)
		}
	})
}
