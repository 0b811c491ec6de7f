package gatewayconditions_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch/statuspatch/conditions"
)

// maxListenerConditions is the CRD's limit on a listener's conditions.
const maxListenerConditions = 8

// ownsListenerCondition names the listener condition types this
// controller writes. Conflicted is set only while a conflict lasts: owning
// it removes it when the conflict is gone.
func ownsListenerCondition(t string) bool {
	switch gatewayv1.ListenerConditionType(t) {
	case gatewayv1.ListenerConditionAccepted, gatewayv1.ListenerConditionProgrammed,
		gatewayv1.ListenerConditionResolvedRefs, gatewayv1.ListenerConditionConflicted:
		return true
	}
	return false
}

// listenerConditions computes a listener's conditions: a protocol
// conflict with another listener on its port makes it Conflicted and not
// Programmed.
func listenerConditions(gw *gatewayv1.Gateway, l *gatewayv1.Listener) []metav1.Condition {
	gen := gw.Generation
	conflict := false
	for i := range gw.Spec.Listeners {
		o := &gw.Spec.Listeners[i]
		conflict = conflict || o.Name != l.Name && o.Port == l.Port && o.Protocol != l.Protocol
	}
	out := []metav1.Condition{
		cond(gatewayv1.ListenerConditionAccepted, metav1.ConditionTrue, gatewayv1.ListenerReasonAccepted, gen, metav1.Time{}),
		cond(gatewayv1.ListenerConditionProgrammed, metav1.ConditionTrue, gatewayv1.ListenerReasonProgrammed, gen, metav1.Time{}),
		cond(gatewayv1.ListenerConditionResolvedRefs, metav1.ConditionTrue, gatewayv1.ListenerReasonResolvedRefs, gen, metav1.Time{}),
	}
	if conflict {
		out[1] = cond(gatewayv1.ListenerConditionProgrammed, metav1.ConditionFalse, gatewayv1.ListenerReasonInvalid, gen, metav1.Time{})
		out = append(out, cond(gatewayv1.ListenerConditionConflicted, metav1.ConditionTrue, gatewayv1.ListenerReasonProtocolConflict, gen, metav1.Time{}))
	}
	return out
}

// listenerStatuses is a Config.Fields that computes status.listeners: one
// entry per listener of the spec, in its order, whose conditions are the
// entry's current ones with ours merged in (conditions.Merge), checked as
// the CRD would (conditions.Validate, at most 8). An entry of a listener
// no longer in the spec is dropped (listeners is a map keyed by name, and
// the Gateway's controller its only writer).
func listenerStatuses(clk clock.PassiveClock) func(*gatewayv1.Gateway) (map[string]any, error) {
	return func(gw *gatewayv1.Gateway) (map[string]any, error) {
		now := metav1.NewTime(clk.Now().Truncate(time.Second))
		out := make([]gatewayv1.ListenerStatus, 0, len(gw.Spec.Listeners))
		for i := range gw.Spec.Listeners {
			l := &gw.Spec.Listeners[i]
			var current []metav1.Condition
			for j := range gw.Status.Listeners {
				if gw.Status.Listeners[j].Name == l.Name {
					current = gw.Status.Listeners[j].Conditions
				}
			}
			conds := conditions.Merge(current, listenerConditions(gw, l), ownsListenerCondition, now)
			if err := conditions.Validate(conds); err != nil {
				return nil, fmt.Errorf("listeners[%d]: %w", i, err)
			}
			if len(conds) > maxListenerConditions {
				return nil, fmt.Errorf("listeners[%d]: %d conditions, the CRD allows %d", i, len(conds), maxListenerConditions)
			}
			out = append(out, gatewayv1.ListenerStatus{
				Name:           l.Name,
				SupportedKinds: []gatewayv1.RouteGroupKind{{Group: ptr(gatewayv1.Group(gatewayv1.GroupName)), Kind: "HTTPRoute"}},
				Conditions:     conds,
			})
		}
		return map[string]any{"listeners": out}, nil
	}
}

func ptr[T any](v T) *T { return &v }

func listener(name string, port gatewayv1.PortNumber, protocol gatewayv1.ProtocolType) gatewayv1.Listener {
	return gatewayv1.Listener{Name: gatewayv1.SectionName(name), Port: port, Protocol: protocol}
}

// A Gateway's listeners[] conditions through Config.Fields and the
// building blocks: ours replaced in place with their times kept while
// their status holds, another controller's condition kept as read and in
// place, Conflicted removed once the conflict is gone, an unchanged
// Gateway unchanged.
func TestGatewayListeners(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t1.Time)
	c, err := conditions.New(conditions.Config[*gatewayv1.Gateway]{
		Conditions: func(gw *gatewayv1.Gateway) ([]metav1.Condition, error) {
			return []metav1.Condition{cond(gatewayv1.GatewayConditionAccepted, metav1.ConditionTrue, gatewayv1.GatewayReasonAccepted, 0, metav1.Time{})}, nil
		},
		Fields: listenerStatuses(clk),
		Clock:  clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	accepted := cond(gatewayv1.ListenerConditionAccepted, metav1.ConditionTrue, gatewayv1.ListenerReasonAccepted, 1, epoch)
	gw := &gatewayv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "gw", Generation: 2, ResourceVersion: "10"},
		Spec: gatewayv1.GatewaySpec{GatewayClassName: "ours", Listeners: []gatewayv1.Listener{
			listener("http", 80, gatewayv1.HTTPProtocolType),
			listener("https", 443, gatewayv1.HTTPSProtocolType),
			listener("raw", 80, gatewayv1.TCPProtocolType), // conflicts with http
		}},
		Status: gatewayv1.GatewayStatus{Listeners: []gatewayv1.ListenerStatus{
			{Name: "gone", Conditions: []metav1.Condition{accepted}},
			{Name: "http", Conditions: []metav1.Condition{accepted, audited,
				cond(gatewayv1.ListenerConditionProgrammed, metav1.ConditionTrue, gatewayv1.ListenerReasonProgrammed, 1, epoch)}},
		}},
	}
	if !changed(t, c, gw) {
		t.Fatal("listeners to compute: want a difference")
	}
	gw = apply(t, gw, patch(t, c, gw))

	conflicted := []metav1.Condition{
		cond(gatewayv1.ListenerConditionAccepted, metav1.ConditionTrue, gatewayv1.ListenerReasonAccepted, 2, t1),
		cond(gatewayv1.ListenerConditionProgrammed, metav1.ConditionFalse, gatewayv1.ListenerReasonInvalid, 2, t1),
		cond(gatewayv1.ListenerConditionResolvedRefs, metav1.ConditionTrue, gatewayv1.ListenerReasonResolvedRefs, 2, t1),
		cond(gatewayv1.ListenerConditionConflicted, metav1.ConditionTrue, gatewayv1.ListenerReasonProtocolConflict, 2, t1),
	}
	fine := []metav1.Condition{conflicted[0], cond(gatewayv1.ListenerConditionProgrammed, metav1.ConditionTrue, gatewayv1.ListenerReasonProgrammed, 2, t1), conflicted[2]}
	httpAccepted := accepted // its status held: the Unix epoch kept
	httpAccepted.ObservedGeneration = 2
	want := map[gatewayv1.SectionName][]metav1.Condition{
		"http":  {httpAccepted, audited, conflicted[1], conflicted[2], conflicted[3]},
		"https": fine,
		"raw":   conflicted,
	}
	wantListeners(t, gw, []gatewayv1.SectionName{"http", "https", "raw"}, want)
	if changed(t, c, gw) {
		t.Fatal("after the patch: want no difference")
	}

	// The conflicting listener goes: http's Conflicted is removed,
	// Programmed turns True (a new time), Accepted keeps its time, the
	// other controller's condition stays in its place.
	clk.SetTime(t2.Time)
	gw.Generation, gw.Spec.Listeners = 3, gw.Spec.Listeners[:2]
	if !changed(t, c, gw) {
		t.Fatal("a listener less: want a difference")
	}
	gw = apply(t, gw, patch(t, c, gw))
	regen := func(cs ...metav1.Condition) []metav1.Condition {
		out := make([]metav1.Condition, len(cs))
		for i, c := range cs {
			if ownsListenerCondition(c.Type) {
				c.ObservedGeneration = 3
			}
			out[i] = c
		}
		return out
	}
	want = map[gatewayv1.SectionName][]metav1.Condition{
		"http":  regen(httpAccepted, audited, cond(gatewayv1.ListenerConditionProgrammed, metav1.ConditionTrue, gatewayv1.ListenerReasonProgrammed, 3, t2), conflicted[2]),
		"https": regen(fine...),
	}
	wantListeners(t, gw, []gatewayv1.SectionName{"http", "https"}, want)
	if changed(t, c, gw) {
		t.Fatal("after the second patch: want no difference")
	}
}

func wantListeners(t *testing.T, gw *gatewayv1.Gateway, names []gatewayv1.SectionName, want map[gatewayv1.SectionName][]metav1.Condition) {
	t.Helper()
	var got []gatewayv1.SectionName
	for _, l := range gw.Status.Listeners {
		got = append(got, l.Name)
		if diff := cmp.Diff(want[l.Name], l.Conditions); diff != "" {
			t.Errorf("listener %s: conditions (-want +got):\n%s", l.Name, diff)
		}
	}
	if !cmp.Equal(got, names) {
		t.Errorf("listeners %v, want %v", got, names)
	}
}
