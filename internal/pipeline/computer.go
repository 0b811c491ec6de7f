package pipeline

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
)

// ComputerFuncs adapts plain functions to a statuspatch.StatusComputer. Every field must
// be set; NewReconciler rejects a ComputerFuncs with a nil field, naming it.
type ComputerFuncs[O, S, P any] struct {
	// KeyFunc implements StatusComputer.Key.
	KeyFunc func(obj O) types.NamespacedName
	// CurrentFunc implements StatusComputer.Current.
	CurrentFunc func(obj O) S
	// DesiredFunc implements StatusComputer.Desired.
	DesiredFunc func(obj O) (S, error)
	// EqualFunc implements StatusComputer.Equal.
	EqualFunc func(current, desired S) bool
	// PatchFunc implements StatusComputer.Patch.
	PatchFunc func(obj O, desired S) (P, error)
}

// Key calls f.KeyFunc.
func (f ComputerFuncs[O, S, P]) Key(obj O) types.NamespacedName { return f.KeyFunc(obj) }

// Current calls f.CurrentFunc.
func (f ComputerFuncs[O, S, P]) Current(obj O) S { return f.CurrentFunc(obj) }

// Desired calls f.DesiredFunc.
func (f ComputerFuncs[O, S, P]) Desired(obj O) (S, error) { return f.DesiredFunc(obj) }

// Equal calls f.EqualFunc.
func (f ComputerFuncs[O, S, P]) Equal(current, desired S) bool { return f.EqualFunc(current, desired) }

// Patch calls f.PatchFunc.
func (f ComputerFuncs[O, S, P]) Patch(obj O, desired S) (P, error) { return f.PatchFunc(obj, desired) }

// PatcherFunc adapts a function to a statuspatch.Patcher.
type PatcherFunc[P any] func(ctx context.Context, patch P) error

// Patch calls f(ctx, patch).
func (f PatcherFunc[P]) Patch(ctx context.Context, patch P) error { return f(ctx, patch) }

// missing names the first nil field of f, "" if none.
func (f ComputerFuncs[O, S, P]) missing() string {
	switch {
	case f.KeyFunc == nil:
		return "KeyFunc"
	case f.CurrentFunc == nil:
		return "CurrentFunc"
	case f.DesiredFunc == nil:
		return "DesiredFunc"
	case f.EqualFunc == nil:
		return "EqualFunc"
	case f.PatchFunc == nil:
		return "PatchFunc"
	}
	return ""
}

// safeDiff returns cmp.Diff(current, desired, opts...), or a note when go-cmp
// panics on a value it cannot compare.
func safeDiff[S any](current, desired S, opts []cmp.Option) (diff string) {
	defer func() {
		if r := recover(); r != nil {
			diff = fmt.Sprintf("(no diff: %v)", r)
		}
	}()
	// go-cmp puts non-breaking spaces in its output at random, to keep
	// callers from depending on it; in a text log they read as escapes.
	return strings.ReplaceAll(cmp.Diff(current, desired, opts...), "\u00a0", " ")
}
