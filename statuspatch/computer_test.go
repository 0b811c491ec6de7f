package statuspatch

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

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

func TestSafeDiff(t *testing.T) {
	type opaque struct{ hidden int }
	if d := safeDiff(opaque{1}, opaque{2}, nil); !strings.Contains(d, "no diff") {
		t.Errorf("safeDiff = %q, want a note instead of a panic", d)
	}
	a := []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Ok"}}
	b := []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Broken"}}
	for range 20 { // go-cmp picks its spaces at random
		d := safeDiff(a, b, nil)
		if strings.Contains(d, "\u00a0") || !strings.Contains(d, "Broken") {
			t.Fatalf("diff %q: want plain spaces and the change", d)
		}
	}
}
