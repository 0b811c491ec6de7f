package pipeline

import (
	"errors"
	"strings"
	"testing"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/internal/queue"
	"github.com/quietpatch/quietpatch/statuspatch"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

type tFuncs = ComputerFuncs[*tObj, []metav1.Condition, tPayload]

// completeFuncs returns a ComputerFuncs with every field set.
func completeFuncs() tFuncs {
	c := &tComputer{}
	return tFuncs{KeyFunc: c.Key, CurrentFunc: c.Current, DesiredFunc: c.Desired, EqualFunc: c.Equal, PatchFunc: c.Patch}
}

func TestComputerFuncsForwards(t *testing.T) {
	f := ComputerFuncs[string, int, string]{
		KeyFunc:     func(o string) types.NamespacedName { return types.NamespacedName{Name: o} },
		CurrentFunc: func(o string) int { return len(o) },
		DesiredFunc: func(o string) (int, error) { return 3, nil },
		EqualFunc:   func(a, b int) bool { return a == b },
		PatchFunc:   func(o string, d int) (string, error) { return o + "!", nil },
	}
	var c statuspatch.StatusComputer[string, int, string] = f
	d, _ := c.Desired("abcd")
	p, _ := c.Patch("abcd", d)
	if c.Key("abcd").Name != "abcd" || c.Current("abcd") != 4 || d != 3 || c.Equal(4, d) || p != "abcd!" {
		t.Errorf("ComputerFuncs does not forward to its functions")
	}
}

// NewReconciler and NewDispatcher reject a ComputerFuncs with a nil field,
// naming it, as a value or behind a pointer.
func TestComputerFuncsValidation(t *testing.T) {
	q := queue.New[types.NamespacedName](1, nil)
	defer q.Close()
	for _, tc := range []struct {
		field string // "" means complete
		unset func(*tFuncs)
	}{
		{"", func(*tFuncs) {}},
		{"KeyFunc", func(f *tFuncs) { f.KeyFunc = nil }},
		{"CurrentFunc", func(f *tFuncs) { f.CurrentFunc = nil }},
		{"DesiredFunc", func(f *tFuncs) { f.DesiredFunc = nil }},
		{"EqualFunc", func(f *tFuncs) { f.EqualFunc = nil }},
		{"PatchFunc", func(f *tFuncs) { f.PatchFunc = nil }},
	} {
		f := completeFuncs()
		tc.unset(&f)
		for _, comp := range []struct {
			label string
			c     statuspatch.StatusComputer[*tObj, []metav1.Condition, tPayload]
		}{{"value", f}, {"pointer", &f}} {
			label := "complete"
			if tc.field != "" {
				label = "without " + tc.field
			}
			t.Run(label+", "+comp.label, func(t *testing.T) {
				_, rerr := NewReconciler(&fakeSource{}, comp.c, q, newFakeObserver("me"), Options{}, nil)
				_, derr := NewDispatcher(q, &fakeSource{}, comp.c, &recordingPatcher{}, newFakeObserver("me"), Options{}, nil)
				for part, err := range map[string]error{"NewReconciler": rerr, "NewDispatcher": derr} {
					if tc.field == "" {
						if err != nil {
							t.Errorf("%s: %v, want nil", part, err)
						}
						continue
					}
					var ce *base.ConfigError
					if !errors.As(err, &ce) || ce.Field != "Computer" || !strings.Contains(ce.Reason, "ComputerFuncs."+tc.field) ||
						!errors.Is(err, base.ErrInvalidConfig) {
						t.Errorf("%s: %v, want a *base.ConfigError for Computer naming ComputerFuncs.%s", part, err, tc.field)
					}
				}
			})
		}
	}
	t.Run("nil pointer", func(t *testing.T) {
		var ce *base.ConfigError
		if _, err := NewReconciler(&fakeSource{}, (*tFuncs)(nil), q, newFakeObserver("me"), Options{}, nil); !errors.As(err, &ce) || ce.Field != "Computer" {
			t.Errorf("NewReconciler with a nil *ComputerFuncs: %v, want a *base.ConfigError for Computer", err)
		}
	})
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
