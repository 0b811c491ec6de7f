package routestatus

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

const (
	testController  = gatewayv1.GatewayController("example.net/quietpatch")
	otherController = gatewayv1.GatewayController("example.org/other")
	routeNS         = "apps"
	infraNS         = "infra"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func ptr[T any](v T) *T { return &v }

func newComputer(t testing.TB, mesh bool) *Computer {
	t.Helper()
	c, err := NewComputer(Options{ControllerName: testController, Mesh: mesh})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func snapshot(t testing.TB, objs ...runtime.Object) *Snapshot {
	t.Helper()
	s, err := NewSnapshot(objs...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// gatewayRef is a parentRef as the API server defaults it.
func gatewayRef(ns, name, section string) gatewayv1.ParentReference {
	r := gatewayv1.ParentReference{
		Group: ptr(gatewayv1.Group(gatewayv1.GroupName)),
		Kind:  ptr(gatewayv1.Kind("Gateway")),
		Name:  gatewayv1.ObjectName(name),
	}
	if ns != "" {
		r.Namespace = ptr(gatewayv1.Namespace(ns))
	}
	if section != "" {
		r.SectionName = ptr(gatewayv1.SectionName(section))
	}
	return r
}

func serviceRef(ns, name string) gatewayv1.ParentReference {
	r := gatewayv1.ParentReference{
		Group: ptr(gatewayv1.Group("")),
		Kind:  ptr(gatewayv1.Kind("Service")),
		Name:  gatewayv1.ObjectName(name),
	}
	if ns != "" {
		r.Namespace = ptr(gatewayv1.Namespace(ns))
	}
	return r
}

func backend(ns, name string) gatewayv1.HTTPBackendRef {
	b := gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{
		Name: gatewayv1.ObjectName(name),
		Port: ptr(gatewayv1.PortNumber(80)),
	}}}
	if ns != "" {
		b.Namespace = ptr(gatewayv1.Namespace(ns))
	}
	return b
}

func route(parents []gatewayv1.ParentReference, backends ...gatewayv1.HTTPBackendRef) *gatewayv1.HTTPRoute {
	r := &gatewayv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: routeNS, Name: "r", Generation: 3, ResourceVersion: "42"},
	}
	r.Spec.ParentRefs = parents
	if len(backends) > 0 {
		r.Spec.Rules = []gatewayv1.HTTPRouteRule{{BackendRefs: backends}}
	}
	return r
}

func gatewayClass(name string, controller gatewayv1.GatewayController) *gatewayv1.GatewayClass {
	return &gatewayv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       gatewayv1.GatewayClassSpec{ControllerName: controller},
	}
}

func gateway(ns, name, class string, listeners ...gatewayv1.Listener) *gatewayv1.Gateway {
	return &gatewayv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       gatewayv1.GatewaySpec{GatewayClassName: gatewayv1.ObjectName(class), Listeners: listeners},
	}
}

// listener returns an HTTP listener allowing routes from all namespaces.
func listener(name string, port int32) gatewayv1.Listener {
	return gatewayv1.Listener{
		Name:     gatewayv1.SectionName(name),
		Port:     port,
		Protocol: gatewayv1.HTTPProtocolType,
		AllowedRoutes: &gatewayv1.AllowedRoutes{Namespaces: &gatewayv1.RouteNamespaces{
			From: ptr(gatewayv1.NamespacesFromAll),
		}},
	}
}

func service(ns, name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:      corev1.ServiceTypeClusterIP,
			ClusterIP: "10.0.0.1",
			Ports:     []corev1.ServicePort{{Name: "http", Port: 80}},
		},
	}
}

func namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// grant allows HTTPRoutes in fromNS to refer to Services in ns (all of them
// when name is "").
func grant(ns, fromNS, name string) *gatewayv1.ReferenceGrant {
	g := &gatewayv1.ReferenceGrant{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "allow-" + fromNS},
		Spec: gatewayv1.ReferenceGrantSpec{
			From: []gatewayv1.ReferenceGrantFrom{{Group: gatewayv1.GroupName, Kind: "HTTPRoute", Namespace: gatewayv1.Namespace(fromNS)}},
			To:   []gatewayv1.ReferenceGrantTo{{Group: "", Kind: "Service"}},
		},
	}
	if name != "" {
		g.Spec.To[0].Name = ptr(gatewayv1.ObjectName(name))
	}
	return g
}

// entry is a parent status entry with Accepted and ResolvedRefs conditions.
func entry(ref gatewayv1.ParentReference, controller gatewayv1.GatewayController, acc, rr gatewayv1.RouteConditionReason, gen int64, ltt time.Time) gatewayv1.RouteParentStatus {
	st := func(r gatewayv1.RouteConditionReason) metav1.ConditionStatus {
		if r == gatewayv1.RouteReasonAccepted || r == gatewayv1.RouteReasonResolvedRefs {
			return metav1.ConditionTrue
		}
		return metav1.ConditionFalse
	}
	return gatewayv1.RouteParentStatus{
		ParentRef:      ref,
		ControllerName: controller,
		Conditions: []metav1.Condition{
			{Type: "Accepted", Status: st(acc), Reason: string(acc), Message: "m", ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(ltt)},
			{Type: "ResolvedRefs", Status: st(rr), Reason: string(rr), Message: "m", ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(ltt)},
		},
	}
}

// own returns the entries of status written by testController.
func own(status gatewayv1.HTTPRouteStatus) []gatewayv1.RouteParentStatus {
	var out []gatewayv1.RouteParentStatus
	for _, p := range status.Parents {
		if p.ControllerName == testController {
			out = append(out, p)
		}
	}
	return out
}

func cond(p gatewayv1.RouteParentStatus, typ gatewayv1.RouteConditionType) *metav1.Condition {
	for i := range p.Conditions {
		if p.Conditions[i].Type == string(typ) {
			return &p.Conditions[i]
		}
	}
	return nil
}
