package gatewayconditions_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/conditions"
)

var (
	epoch = metav1.NewTime(time.Unix(0, 0))                               // the CRD's default conditions' time
	t1    = metav1.NewTime(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)) // the first patch
	t2    = metav1.NewTime(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)) // a later one
)

func cond[T ~string, R ~string](typ T, status metav1.ConditionStatus, reason R, gen int64, at metav1.Time) metav1.Condition {
	return metav1.Condition{Type: string(typ), Status: status, Reason: string(reason), ObservedGeneration: gen, LastTransitionTime: at}
}

// pending is a condition as the Gateway CRD defaults it.
func pending(typ gatewayv1.GatewayConditionType) metav1.Condition {
	c := cond(typ, metav1.ConditionUnknown, gatewayv1.GatewayReasonPending, 0, epoch)
	c.Message = "Waiting for controller"
	return c
}

// audited is another controller's condition.
var audited = metav1.Condition{Type: "example.com/Audited", Status: metav1.ConditionTrue, Reason: "Passed",
	Message: "policy 7", ObservedGeneration: 1, LastTransitionTime: metav1.NewTime(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))}

// object is what a typed Gateway API object is to these tests.
type object[T any] interface {
	*T
	metav1.Object
}

// patched returns the status of merge patch p, checking that it holds no
// observedGeneration: Gateway API's statuses have none.
func patched(t *testing.T, p statuspatch.MergePatch) map[string]any {
	t.Helper()
	body, err := p.Body()
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Status map[string]any `json:"status"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	if g, ok := m.Status["observedGeneration"]; ok {
		t.Errorf("patch %s: status.observedGeneration %v, which the type has not", body, g)
	}
	return m.Status
}

// apply returns obj after merge patch p, as the API server would apply it
// (RFC 7386, the resourceVersion precondition checked, a new
// resourceVersion).
func apply[T any, O object[T]](t *testing.T, obj O, p statuspatch.MergePatch) O {
	t.Helper()
	if p.ResourceVersion != obj.GetResourceVersion() {
		t.Fatalf("precondition %q, the object is at %q: 409", p.ResourceVersion, obj.GetResourceVersion())
	}
	body, err := p.Body()
	if err != nil {
		t.Fatal(err)
	}
	var target, patch any
	b, _ := json.Marshal(obj)
	if err := json.Unmarshal(b, &target); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(body, &patch); err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(mergePatch(target, patch))
	out := O(new(T))
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	rv, _ := strconv.Atoi(obj.GetResourceVersion())
	out.SetResourceVersion(strconv.Itoa(rv + 1))
	return out
}

// mergePatch is RFC 7386.
func mergePatch(target, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	m, ok := target.(map[string]any)
	if !ok {
		m = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = mergePatch(m[k], v)
		}
	}
	return m
}

// changed reports whether c finds obj's status different from the one it
// computes, as the reconciler asks.
func changed[O metav1.Object](t *testing.T, c *conditions.Computer[O], obj O) bool {
	t.Helper()
	d, err := c.Desired(obj)
	if err != nil {
		t.Fatal(err)
	}
	return !c.Equal(c.Current(obj), d)
}

// patch returns c's patch of obj.
func patch[O metav1.Object](t *testing.T, c *conditions.Computer[O], obj O) statuspatch.MergePatch {
	t.Helper()
	d, err := c.Desired(obj)
	if err != nil {
		t.Fatal(err)
	}
	if d.ObservedGeneration != 0 {
		t.Errorf("desired status.observedGeneration %d, want none", d.ObservedGeneration)
	}
	p, err := c.Patch(obj, d)
	if err != nil {
		t.Fatal(err)
	}
	patched(t, p)
	return p
}

func wantConditions(t *testing.T, got []metav1.Condition, want ...metav1.Condition) {
	t.Helper()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}
}

// A Gateway's top-level conditions through conditions.New: the CRD's
// pending defaults replaced in place, another controller's condition kept
// as read and in place, no status.observedGeneration read, compared or
// written, lastTransitionTime kept while a status holds.
func TestGateway(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t1.Time)
	programmed := metav1.ConditionTrue
	c, err := conditions.New(conditions.Config[*gatewayv1.Gateway]{
		Conditions: func(*gatewayv1.Gateway) ([]metav1.Condition, error) {
			reason := gatewayv1.GatewayReasonProgrammed
			if programmed != metav1.ConditionTrue {
				reason = gatewayv1.GatewayReasonAddressNotAssigned
			}
			return []metav1.Condition{
				cond(gatewayv1.GatewayConditionAccepted, metav1.ConditionTrue, gatewayv1.GatewayReasonAccepted, 0, metav1.Time{}),
				cond(gatewayv1.GatewayConditionProgrammed, programmed, reason, 0, metav1.Time{}),
			}, nil
		},
		Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	gw := &gatewayv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "gw", Generation: 1, ResourceVersion: "10"},
		Spec:       gatewayv1.GatewaySpec{GatewayClassName: "ours"},
		Status: gatewayv1.GatewayStatus{Conditions: []metav1.Condition{
			pending(gatewayv1.GatewayConditionAccepted), audited, pending(gatewayv1.GatewayConditionProgrammed)}},
	}
	if !changed(t, c, gw) {
		t.Fatal("pending conditions: want a difference")
	}
	gw = apply(t, gw, patch(t, c, gw))
	accepted := cond(gatewayv1.GatewayConditionAccepted, metav1.ConditionTrue, gatewayv1.GatewayReasonAccepted, 1, t1)
	wantConditions(t, gw.Status.Conditions,
		accepted, audited, cond(gatewayv1.GatewayConditionProgrammed, metav1.ConditionTrue, gatewayv1.GatewayReasonProgrammed, 1, t1))
	if changed(t, c, gw) {
		t.Fatal("after the patch: want no difference")
	}

	// The other controller's condition changes: none of ours.
	gw.Status.Conditions[1].Status, gw.Status.Conditions[1].LastTransitionTime = metav1.ConditionFalse, t2
	if changed(t, c, gw) {
		t.Error("another controller's condition changed: want no difference")
	}

	// A new generation, later: each condition says it; times kept where
	// the status holds, a new one where it changed.
	clk.SetTime(t2.Time)
	gw.Generation, programmed = 2, metav1.ConditionFalse
	if !changed(t, c, gw) {
		t.Fatal("generation 2: want a difference")
	}
	foreign := gw.Status.Conditions[1]
	gw = apply(t, gw, patch(t, c, gw))
	accepted.ObservedGeneration = 2
	wantConditions(t, gw.Status.Conditions,
		accepted, foreign, cond(gatewayv1.GatewayConditionProgrammed, metav1.ConditionFalse, gatewayv1.GatewayReasonAddressNotAssigned, 2, t2))
	if changed(t, c, gw) {
		t.Error("after the second patch: want no difference")
	}
}

// A GatewayClass: conditions through Config.Conditions, another status
// field (supportedFeatures) through Config.Fields.
func TestGatewayClass(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t1.Time)
	features := []gatewayv1.SupportedFeature{{Name: "Gateway"}, {Name: "HTTPRoute"}}
	c, err := conditions.New(conditions.Config[*gatewayv1.GatewayClass]{
		Conditions: func(*gatewayv1.GatewayClass) ([]metav1.Condition, error) {
			return []metav1.Condition{
				cond(gatewayv1.GatewayClassConditionStatusAccepted, metav1.ConditionTrue, gatewayv1.GatewayClassReasonAccepted, 0, metav1.Time{}),
				cond(gatewayv1.GatewayClassConditionStatusSupportedVersion, metav1.ConditionTrue, gatewayv1.GatewayClassReasonSupportedVersion, 0, metav1.Time{}),
			}, nil
		},
		Fields: func(*gatewayv1.GatewayClass) (map[string]any, error) {
			return map[string]any{"supportedFeatures": features}, nil
		},
		Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	accepted := cond(gatewayv1.GatewayClassConditionStatusAccepted, metav1.ConditionTrue, gatewayv1.GatewayClassReasonAccepted, 3, t1)
	gc := &gatewayv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: "ours", Generation: 3, ResourceVersion: "5"},
		Spec:       gatewayv1.GatewayClassSpec{ControllerName: "example.net/gateway-controller"},
		Status:     gatewayv1.GatewayClassStatus{Conditions: []metav1.Condition{audited, accepted}},
	}
	if !changed(t, c, gc) {
		t.Fatal("no SupportedVersion, no supportedFeatures: want a difference")
	}
	clk.SetTime(t2.Time)
	p := patch(t, c, gc)
	if st := patched(t, p); len(st) != 2 {
		t.Errorf("patched status %v: want conditions and supportedFeatures only", st)
	}
	gc = apply(t, gc, p)
	wantConditions(t, gc.Status.Conditions, audited, accepted,
		cond(gatewayv1.GatewayClassConditionStatusSupportedVersion, metav1.ConditionTrue, gatewayv1.GatewayClassReasonSupportedVersion, 3, t2))
	if !cmp.Equal(gc.Status.SupportedFeatures, features) {
		t.Errorf("supportedFeatures %v, want %v", gc.Status.SupportedFeatures, features)
	}
	if changed(t, c, gc) {
		t.Error("after the patch: want no difference")
	}
	features = features[:1]
	if !changed(t, c, gc) {
		t.Error("a feature less: want a difference")
	}
}

// The Applier serves the Gateway too: its applied status holds our
// conditions only, and no observedGeneration.
func TestGatewayApplier(t *testing.T) {
	a, err := conditions.NewApplier(conditions.Config[*gatewayv1.Gateway]{
		Conditions: func(*gatewayv1.Gateway) ([]metav1.Condition, error) {
			return []metav1.Condition{cond(gatewayv1.GatewayConditionAccepted, metav1.ConditionTrue, gatewayv1.GatewayReasonAccepted, 0, metav1.Time{})}, nil
		},
	}, conditions.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gw := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "gw", Generation: 4},
		Status: gatewayv1.GatewayStatus{Conditions: []metav1.Condition{audited}}}
	d, err := a.Desired(gw)
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Patch(gw, d)
	if err != nil {
		t.Fatal(err)
	}
	body, err := p.Body(gatewayv1.SchemeGroupVersion.WithKind("Gateway"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Status struct {
			ObservedGeneration *int64             `json:"observedGeneration"`
			Conditions         []metav1.Condition `json:"conditions"`
		} `json:"status"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	if m.Status.ObservedGeneration != nil || len(m.Status.Conditions) != 1 || m.Status.Conditions[0].ObservedGeneration != 4 {
		t.Errorf("applied %s: want Accepted of generation 4 only, no status.observedGeneration", body)
	}
	var ce *quietpatch.ConfigError
	if _, err := conditions.NewApplier(conditions.Config[*gatewayv1.Gateway]{
		Conditions: func(*gatewayv1.Gateway) ([]metav1.Condition, error) { return nil, nil },
	}, conditions.ApplyOptions{ObservedGeneration: true}); !errors.As(err, &ce) || ce.Field != "O" {
		t.Errorf("an Applier of status.observedGeneration for a Gateway: %v, want a ConfigError on O", err)
	}
}
