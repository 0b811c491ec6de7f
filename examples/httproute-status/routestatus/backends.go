package routestatus

import (
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// backendPath locates a backend reference in the route spec, for messages.
type backendPath struct {
	rule    int
	backend int // -1: a filter of the rule itself
	filter  int // -1: the backendRef itself
}

func (p backendPath) String() string { return string(p.appendTo(nil)) }

func (p backendPath) appendTo(b []byte) []byte {
	b = append(b, "spec.rules["...)
	b = strconv.AppendInt(b, int64(p.rule), 10)
	if p.backend < 0 {
		b = append(b, "].filters["...)
		b = strconv.AppendInt(b, int64(p.filter), 10)
		return append(b, "].requestMirror.backendRef"...)
	}
	b = append(b, "].backendRefs["...)
	b = strconv.AppendInt(b, int64(p.backend), 10)
	if p.filter < 0 {
		return append(b, ']')
	}
	b = append(b, "].filters["...)
	b = strconv.AppendInt(b, int64(p.filter), 10)
	return append(b, "].requestMirror.backendRef"...)
}

// backendCheck accumulates the outcome of checking backend references: the
// first failure decides the reason.
type backendCheck struct {
	failures int
	first    backendPath
	reason   gatewayv1.RouteConditionReason
	ref      *gatewayv1.BackendObjectReference
	ns       string
}

// resolvedRefs computes the ResolvedRefs condition of the route once.
func (ev *evaluation) resolvedRefs() verdict {
	if ev.refsDone {
		return ev.refs
	}
	ev.refsDone = true
	var bc backendCheck
	rules := ev.route.Spec.Rules
	for ri := range rules {
		rule := &rules[ri]
		for bi := range rule.BackendRefs {
			b := &rule.BackendRefs[bi]
			ev.checkBackend(&bc, &b.BackendObjectReference, backendPath{rule: ri, backend: bi, filter: -1})
			for fi := range b.Filters {
				if m := mirrorRef(&b.Filters[fi]); m != nil {
					ev.checkBackend(&bc, m, backendPath{rule: ri, backend: bi, filter: fi})
				}
			}
		}
		for fi := range rule.Filters {
			if m := mirrorRef(&rule.Filters[fi]); m != nil {
				ev.checkBackend(&bc, m, backendPath{rule: ri, backend: -1, filter: fi})
			}
		}
	}
	if bc.failures == 0 {
		ev.refs = verdict{status: metav1.ConditionTrue, reason: gatewayv1.RouteReasonResolvedRefs,
			msg: text("All references resolved.")}
		return ev.refs
	}
	ev.refs = verdict{status: metav1.ConditionFalse, reason: bc.reason, msg: bc.message(ev.route.Namespace)}
	return ev.refs
}

func mirrorRef(f *gatewayv1.HTTPRouteFilter) *gatewayv1.BackendObjectReference {
	if f.Type == gatewayv1.HTTPRouteFilterRequestMirror && f.RequestMirror != nil {
		return &f.RequestMirror.BackendRef
	}
	return nil
}

// checkBackend checks one reference: kind, then permission, then existence
// (existence is not probed across namespaces without permission).
func (ev *evaluation) checkBackend(bc *backendCheck, ref *gatewayv1.BackendObjectReference, at backendPath) {
	var reason gatewayv1.RouteConditionReason
	ns := ev.route.Namespace
	if ref.Namespace != nil && *ref.Namespace != "" {
		ns = string(*ref.Namespace)
	}
	switch {
	case deref(ref.Group) != "" || (ref.Kind != nil && *ref.Kind != kindService):
		reason = gatewayv1.RouteReasonInvalidKind
	case ns != ev.route.Namespace && !ev.granted(ns, string(ref.Name)):
		reason = gatewayv1.RouteReasonRefNotPermitted
	default:
		if svc, ok := ev.lk.Service(ns, string(ref.Name)); ok && svc != nil {
			return
		}
		reason = gatewayv1.RouteReasonBackendNotFound
	}
	bc.failures++
	if bc.failures == 1 {
		bc.first, bc.reason, bc.ref, bc.ns = at, reason, ref, ns
	}
}

// message is the ResolvedRefs message of a failed check: where the first
// failure is, what it is, and how many more there are.
func (bc *backendCheck) message(routeNamespace string) message {
	m := message{kind: msgBackend, reason: bc.reason, n1: bc.first.rule, n2: bc.first.backend, n3: bc.first.filter,
		n4: bc.failures - 1, s1: bc.ns, s2: string(bc.ref.Name), s3: routeNamespace}
	if bc.reason == gatewayv1.RouteReasonInvalidKind {
		m.s1, m.s2 = kindService, string(deref(bc.ref.Group))
		if bc.ref.Kind != nil {
			m.s1 = string(*bc.ref.Kind)
		}
	}
	return m
}

// granted reports whether a ReferenceGrant in namespace ns allows HTTPRoutes
// in the route's namespace to refer to the Service name.
func (ev *evaluation) granted(ns, name string) bool {
	for _, g := range ev.lk.ReferenceGrants(ns) {
		if g == nil || (g.Namespace != "" && g.Namespace != ns) {
			continue
		}
		from := false
		for i := range g.Spec.From {
			f := &g.Spec.From[i]
			if f.Group == gatewayv1.GroupName && f.Kind == kindHTTPRoute && string(f.Namespace) == ev.route.Namespace {
				from = true
				break
			}
		}
		if !from {
			continue
		}
		for i := range g.Spec.To {
			t := &g.Spec.To[i]
			if t.Group == "" && t.Kind == kindService && (t.Name == nil || *t.Name == "" || string(*t.Name) == name) {
				return true
			}
		}
	}
	return false
}
