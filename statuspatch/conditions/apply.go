package conditions

import (
	"fmt"
	"maps"
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/statuspatch"
)

// ApplyOptions say what an [Applier] applies besides its conditions. The
// zero value applies the conditions (and Config.Fields) only.
type ApplyOptions struct {
	// ObservedGeneration applies status.observedGeneration too, and makes
	// it part of Equal: for a writer that alone owns it. With several
	// writers of one status, leave it off: each condition's own
	// observedGeneration says which generation it was computed from. A
	// typed O whose status has no ObservedGeneration cannot have it.
	ObservedGeneration bool
}

// Applier is a [statuspatch.StatusComputer] like [Computer] — the same
// Config, the same reading, comparison and validation of conditions —
// whose patch is a server-side apply of the status
// ([statuspatch.ApplyPatch], sent by a statuspatch.ApplyPatcher):
// the applied status holds only the conditions the Applier owns
// (Config.OwnedTypes, or else the types Config.Conditions returns), each
// with observedGeneration (the object's generation unless set) and
// lastTransitionTime ([TransitionTime]: kept from the current condition of
// the same type and status, else the time of the patch); the Fields of
// Config.Fields; and,
// with ApplyOptions.ObservedGeneration, status.observedGeneration. It never
// reads or writes another writer's conditions, and builds no precondition.
//
// Use it for a CRD whose status.conditions is listType=map keyed by type,
// written by several controllers, each its own condition types: every
// writer applies its own conditions under its own field manager, and no
// write conflicts with another's. An owned condition that Config.Conditions
// no longer returns is dropped from the applied status, and the API server
// removes it. On a CRD whose conditions are an atomic list, do not: the
// applied list would replace the whole list (use [Computer]'s merge patch).
// Methods are safe for concurrent use.
type Applier[O metav1.Object] struct {
	c    *Computer[O]
	opts ApplyOptions
}

var _ statuspatch.StatusComputer[*unstructured.Unstructured, Status, statuspatch.ApplyPatch] = (*Applier[*unstructured.Unstructured])(nil)

// NewApplier returns an Applier for objects of type O. cfg and its errors
// are those of [New]; with ApplyOptions.ObservedGeneration, a typed O
// whose status has no ObservedGeneration is a *quietpatch.ConfigError on
// "O" too.
func NewApplier[O metav1.Object](cfg Config[O], opts ApplyOptions) (*Applier[O], error) {
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if opts.ObservedGeneration && !c.hasGeneration() {
		return nil, &base.ConfigError{Field: "O", Reason: fmt.Sprintf(
			"must have a field Status.ObservedGeneration int64 for ApplyOptions.ObservedGeneration, %v has none", reflect.TypeFor[O]())}
	}
	return &Applier[O]{c: c, opts: opts}, nil
}

// Key returns the object's namespace and name.
func (a *Applier[O]) Key(obj O) types.NamespacedName { return a.c.Key(obj) }

// Current reads the object's status.
func (a *Applier[O]) Current(obj O) Status { return a.c.Current(obj) }

// Desired is [Computer.Desired]: the owned conditions, as computed.
func (a *Applier[O]) Desired(obj O) (Status, error) { return a.c.Desired(obj) }

// Equal is [Computer.Equal], with status.observedGeneration compared only
// under ApplyOptions.ObservedGeneration: the owned conditions (each with
// its observedGeneration), and the Fields.
func (a *Applier[O]) Equal(current, desired Status) bool {
	if !a.opts.ObservedGeneration {
		current.ObservedGeneration = desired.ObservedGeneration
	}
	return a.c.Equal(current, desired)
}

// Patch builds the ApplyPatch of the owned conditions (and the Fields,
// and status.observedGeneration under ApplyOptions.ObservedGeneration). It
// fails, building nothing, when a condition is one the API server would
// reject or, with Config.OwnedTypes, is not of an owned type.
func (a *Applier[O]) Patch(obj O, desired Status) (statuspatch.ApplyPatch, error) {
	_, owned, err := a.c.settle(obj, desired)
	if err != nil {
		return statuspatch.ApplyPatch{}, err
	}
	status := make(map[string]any, 2+len(desired.Fields))
	maps.Copy(status, desired.Fields)
	if len(owned) > 0 { // none: the field manager gives up the ones it had
		status["conditions"] = owned
	}
	if a.opts.ObservedGeneration {
		status["observedGeneration"] = desired.ObservedGeneration
	}
	return statuspatch.NewApplyPatch(obj, status)
}
