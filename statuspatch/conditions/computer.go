package conditions

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/clock"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/statuspatch"
)

// Status is the status the [Computer] reads, computes and patches:
// status.conditions, status.observedGeneration when the object's status
// has it, and optionally further fields the controller owns.
type Status struct {
	// ObservedGeneration is status.observedGeneration: the
	// metadata.generation the status was computed from. Zero, and neither
	// compared nor written, for a typed object whose status has no such
	// field (Gateway API's).
	ObservedGeneration int64
	// Conditions is status.conditions. In a status from [Computer.Desired]
	// it holds only the conditions the Computer owns, as computed; the
	// others are added by [Computer.Patch] as it reads them.
	Conditions []metav1.Condition
	// Fields are further status fields by JSON name (Config.Fields),
	// compared and patched by their JSON encoding. Nil in a current status:
	// the current values are read from the object when compared.
	Fields map[string]any

	obj     any  // the object a current status was read from; nil otherwise
	desired bool // made by Desired: Conditions are the owned ones only
	noGen   bool // read from an unstructured status without observedGeneration
}

// Config configures a [Computer]. Conditions is required.
type Config[O any] struct {
	// Conditions computes the conditions the object should have: Type,
	// Status, Reason and Message. ObservedGeneration, when zero, is set to
	// the object's metadata.generation; LastTransitionTime is set by the
	// Computer (kept from the current condition of the same Type and
	// Status, else the time of the patch). An error counts the object as
	// not reconciled for this pass. Without OwnedTypes, the types returned
	// for an object are the types the Computer owns on it, this time:
	// conditions of other types are left as they are, including a type
	// this function returned before and no longer does. Required.
	Conditions func(obj O) ([]metav1.Condition, error)
	// OwnedTypes, if not empty, declares the condition types the Computer
	// owns on every object. Conditions must return types within it (another
	// type is an error for that object, and no patch is built); an owned
	// type it does not return is removed from the object. Conditions of
	// other types are left as they are. Set it when a type comes and goes
	// (a Degraded condition present only while degraded): without it, a
	// condition the function stops returning is kept forever. Each must be
	// a valid condition type. Optional.
	OwnedTypes []string
	// Fields, if set, computes further status fields the controller owns,
	// by JSON name ("replicas", …), as values encoding/json marshals. They
	// are compared with the object's current values by their JSON
	// encoding, which costs an encoding of each field per object and
	// pass, and patched with the rest. Names "conditions" and
	// "observedGeneration" are rejected. Conditions inside listed entries
	// (a Gateway's status.listeners[]) are such fields: compute each
	// entry's with [Merge] from its current ones, so that an unchanged
	// entry encodes as it is. Optional.
	Fields func(obj O) (map[string]any, error)
	// Clock gives the LastTransitionTime of changed conditions. Default the
	// real clock.
	Clock clock.PassiveClock
}

// Computer is a [statuspatch.StatusComputer] for objects whose status
// holds conditions at its top level: the common shape of custom resources
// (kubebuilder's), and Gateway API's (Gateway, GatewayClass), where each
// condition says which generation it was computed from and the status has
// no observedGeneration of its own:
//
//	status:
//	  observedGeneration: <metadata.generation>   # if the type has it
//	  conditions: [ {type, status, observedGeneration, lastTransitionTime, reason, message}, … ]
//
// The user supplies only the function from an object to its conditions
// (Config.Conditions); the Computer reads the current status, compares
// ([Equal]: order and LastTransitionTime ignored, plus observedGeneration),
// keeps LastTransitionTime where a condition's status did not change
// ([TransitionTime]), validates the conditions as the API server would
// ([Validate]: a condition the CRD would reject makes the object an error,
// not a rejected write), and builds a [statuspatch.MergePatch] with a
// resourceVersion precondition. Conditions nested in listed entries
// (Gateway listeners[]) are further fields (Config.Fields), computed with
// [Merge].
//
// It writes only the condition types it owns (Config.OwnedTypes, or else
// the types Config.Conditions returns): other conditions are left as read,
// in their place, and never make an object changed. The package doc says
// exactly what that means, and why the resourceVersion precondition makes
// it safe against a concurrent writer (409 Conflict, then a recompute).
//
// O is either *unstructured.Unstructured (for CRDs without Go types; the
// status is read from the object's map, which allocates per object, and
// its status.observedGeneration is read, compared and written) or a
// pointer to a struct with a field Status holding a field Conditions
// []metav1.Condition and, optionally, a field ObservedGeneration int64:
// kubebuilder's shape, *gatewayv1.Gateway, *gatewayv1.GatewayClass.
// Without ObservedGeneration, status.observedGeneration is neither read,
// compared nor written. Typed objects are read through reflection set up
// once by [New]: reading a status allocates nothing, and an unchanged
// object costs little beyond Config.Conditions (docs/performance.md).
type Computer[O metav1.Object] struct {
	cfg      Config[O]
	owned    []string          // Config.OwnedTypes; nil: the types Conditions returns
	owns     func(string) bool // in owned; nil without OwnedTypes (for Merge)
	clk      clock.PassiveClock
	unstruct bool
	status   int            // index of the Status field (typed)
	conds    int            // index of Status.Conditions
	gen      int            // index of Status.ObservedGeneration; -1: none
	byJSON   map[string]int // Status fields by JSON name (typed)
}

var _ statuspatch.StatusComputer[*unstructured.Unstructured, Status, statuspatch.MergePatch] = (*Computer[*unstructured.Unstructured])(nil)

// New returns a Computer for objects of type O, or a *quietpatch.ConfigError:
// on Conditions when it is nil, on OwnedTypes when it holds an invalid
// condition type, on "O" when O has not the status shape described on
// [Computer] (the Reason says what is missing).
func New[O metav1.Object](cfg Config[O]) (*Computer[O], error) {
	if cfg.Conditions == nil {
		return nil, &base.ConfigError{Field: "Conditions", Reason: "must be set"}
	}
	for i, t := range cfg.OwnedTypes {
		if errs := metav1validation.ValidateLabelName(t, field.NewPath("OwnedTypes").Index(i)); t == "" || len(errs) > 0 {
			return nil, &base.ConfigError{Field: "OwnedTypes",
				Reason: fmt.Sprintf("must hold valid condition types, got %q at index %d", t, i)}
		}
	}
	c := &Computer[O]{cfg: cfg, clk: cmp.Or[clock.PassiveClock](cfg.Clock, clock.RealClock{})}
	if len(cfg.OwnedTypes) > 0 { // empty: the types Conditions returns, as nil
		c.owned = slices.Clone(cfg.OwnedTypes)
	}
	if c.owned != nil {
		c.owns = func(t string) bool { return slices.Contains(c.owned, t) }
	}
	var zero O
	if _, ok := any(zero).(*unstructured.Unstructured); ok {
		c.unstruct = true
		return c, nil
	}
	t := reflect.TypeFor[O]()
	badType := func(format string, args ...any) error {
		return &base.ConfigError{Field: "O", Reason: "must be *unstructured.Unstructured or a pointer to a struct whose field Status " +
			"holds Conditions []metav1.Condition (and optionally ObservedGeneration int64): " + fmt.Sprintf(format, args...)}
	}
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, badType("%v is not a pointer to a struct", t)
	}
	st, ok := t.Elem().FieldByName("Status")
	if !ok || len(st.Index) != 1 || st.Type.Kind() != reflect.Struct {
		return nil, badType("%v has no struct field Status", t.Elem())
	}
	c.status = st.Index[0]
	cf, ok := st.Type.FieldByName("Conditions")
	if !ok || len(cf.Index) != 1 || cf.Type != reflect.TypeFor[[]metav1.Condition]() {
		return nil, badType("%v.Status has no field Conditions []metav1.Condition", t.Elem())
	}
	c.conds = cf.Index[0]
	c.gen = -1
	if gf, ok := st.Type.FieldByName("ObservedGeneration"); ok {
		if len(gf.Index) != 1 || gf.Type.Kind() != reflect.Int64 {
			return nil, badType("%v.Status.ObservedGeneration is not an int64", t.Elem())
		}
		c.gen = gf.Index[0]
	}
	c.byJSON = map[string]int{}
	for i := range st.Type.NumField() {
		f := st.Type.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		if f.IsExported() && name != "-" {
			c.byJSON[name] = i
		}
	}
	return c, nil
}

// Key returns the object's namespace and name.
func (c *Computer[O]) Key(obj O) types.NamespacedName {
	return types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
}

// Current reads the object's status.
func (c *Computer[O]) Current(obj O) Status {
	if c.unstruct {
		return currentUnstructured(any(obj).(*unstructured.Unstructured))
	}
	v := reflect.ValueOf(obj)
	if v.IsNil() {
		return Status{}
	}
	st := v.Elem().Field(c.status)
	s := Status{
		Conditions: *(st.Field(c.conds).Addr().Interface().(*[]metav1.Condition)),
		obj:        obj,
	}
	if c.gen >= 0 {
		s.ObservedGeneration = st.Field(c.gen).Int()
	}
	return s
}

// hasGeneration reports whether the status has an observedGeneration.
func (c *Computer[O]) hasGeneration() bool { return c.unstruct || c.gen >= 0 }

// Desired calls Config.Conditions (and Config.Fields) and completes the
// result with the object's generation: each condition's ObservedGeneration
// when zero, and the status's when it has one. Its Conditions are the
// owned ones only. It fails when Config.OwnedTypes is set and a
// condition's type is not in it.
func (c *Computer[O]) Desired(obj O) (Status, error) {
	conds, err := c.cfg.Conditions(obj)
	if err != nil {
		return Status{}, err
	}
	if err := c.checkOwned(conds); err != nil {
		return Status{}, err
	}
	gen := obj.GetGeneration()
	for i := range conds {
		if conds[i].ObservedGeneration == 0 {
			conds[i].ObservedGeneration = gen
		}
	}
	s := Status{Conditions: conds, desired: true}
	if c.hasGeneration() {
		s.ObservedGeneration = gen
	}
	if c.cfg.Fields != nil {
		if s.Fields, err = c.cfg.Fields(obj); err != nil {
			return Status{}, err
		}
		for k := range s.Fields {
			if k == "conditions" || k == "observedGeneration" {
				return Status{}, fmt.Errorf("conditions: Config.Fields returned %q, which the Computer owns itself", k)
			}
		}
	}
	return s, nil
}

// checkOwned fails when OwnedTypes is set and a condition is not of an
// owned type.
func (c *Computer[O]) checkOwned(conds []metav1.Condition) error {
	if c.owned == nil {
		return nil
	}
	for i := range conds {
		if !slices.Contains(c.owned, conds[i].Type) {
			return fmt.Errorf("conditions: Config.Conditions returned type %q, not in Config.OwnedTypes %q", conds[i].Type, c.owned)
		}
	}
	return nil
}

// Equal reports whether a and b have the same observedGeneration (zero
// both for a typed status without one; not compared for an unstructured
// object whose status has none, as a CRD without the field leaves it:
// each condition's own observedGeneration tells), the same owned conditions ([Equal]:
// order and LastTransitionTime ignored) and the same values of b's Fields. A current status (from [Computer.Current])
// compared with a desired one (from [Computer.Desired]) is compared on the
// owned conditions only: foreign conditions never make a difference. Two
// desired statuses, or two current ones, compare all their conditions.
func (c *Computer[O]) Equal(a, b Status) bool {
	if a.ObservedGeneration != b.ObservedGeneration && !a.noGen && !b.noGen {
		return false
	}
	cur, des := a.Conditions, b.Conditions
	if a.desired {
		cur, des = des, cur
	}
	if a.desired == b.desired && !Equal(cur, des) || a.desired != b.desired && !c.equalOwned(cur, des) {
		return false
	}
	if len(b.Fields) == 0 && len(a.Fields) == 0 {
		return true
	}
	for k, v := range b.Fields {
		cur, ok := c.field(a, k)
		if !ok || !jsonEqual(cur, v) {
			return false
		}
	}
	return a.obj != nil || len(a.Fields) == len(b.Fields)
}

// field returns the value of status field name in s: from s.Fields, or
// read from the object s was read from.
func (c *Computer[O]) field(s Status, name string) (any, bool) {
	if s.obj == nil {
		v, ok := s.Fields[name]
		return v, ok
	}
	if c.unstruct {
		st, _ := s.obj.(*unstructured.Unstructured).Object["status"].(map[string]any)
		v, ok := st[name]
		return v, ok
	}
	i, ok := c.byJSON[name]
	if !ok {
		return nil, false
	}
	return reflect.ValueOf(s.obj).Elem().Field(c.status).Field(i).Interface(), true
}

// equalOwned is [Equal] of the owned conditions of cur and desired. It
// allocates nothing.
func (c *Computer[O]) equalOwned(cur, desired []metav1.Condition) bool {
	if Equal(cur, desired) {
		return true // the usual case: no foreign condition, nothing changed
	}
	n := 0
	for i := range cur {
		if isOwned(cur[i].Type, c.owns, desired) {
			n++
		}
	}
	if n != len(desired) {
		return false
	}
	// Both sides hold n owned conditions: they are the same multiset when
	// each condition of desired occurs as often in cur (where any condition
	// of its Type is owned) as in desired.
	for k := range desired {
		na, nb := 0, 0
		for j := range desired {
			if same(&desired[j], &desired[k]) {
				na++
			}
		}
		for j := range cur {
			if same(&cur[j], &desired[k]) {
				nb++
			}
		}
		if na != nb {
			return false
		}
	}
	return true
}

func jsonEqual(a, b any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}
