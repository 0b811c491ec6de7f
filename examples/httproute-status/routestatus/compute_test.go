package routestatus

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"
)

// world returns the objects most cases share: our class "ours" and a foreign
// class "theirs"; Gateway infra/gw of class ours with listeners "http" (80,
// from All), "same" (8080, from Same), "sel" (8081, from Selector
// team=blue), "tls" (443, HTTPS, *.example.com, from All); Gateway
// infra/foreign of class theirs; namespaces apps (team=blue) and infra;
// Services apps/backend, apps/mesh, other/remote.
func world() []runtime.Object {
	same := listener("same", 8080)
	same.AllowedRoutes.Namespaces.From = ptr(gatewayv1.NamespacesFromSame)
	sel := listener("sel", 8081)
	sel.AllowedRoutes.Namespaces.From = ptr(gatewayv1.NamespacesFromSelector)
	sel.AllowedRoutes.Namespaces.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "blue"}}
	tls := listener("tls", 443)
	tls.Protocol = gatewayv1.HTTPSProtocolType
	tls.Hostname = ptr(gatewayv1.Hostname("*.example.com"))
	return []runtime.Object{
		gatewayClass("ours", testController),
		gatewayClass("theirs", otherController),
		gateway(infraNS, "gw", "ours", listener("http", 80), same, sel, tls),
		gateway(infraNS, "foreign", "theirs", listener("http", 80)),
		namespace(routeNS, map[string]string{"team": "blue"}),
		namespace(infraNS, nil),
		service(routeNS, "backend"),
		service(routeNS, "mesh"),
		service("other", "remote"),
	}
}

func with(objs []runtime.Object, more ...runtime.Object) []runtime.Object {
	return append(append([]runtime.Object(nil), objs...), more...)
}

func TestComputeConditions(t *testing.T) {
	headless := service(routeNS, "headless")
	headless.Spec.ClusterIP = corev1.ClusterIPNone
	external := service(routeNS, "external")
	external.Spec.Type = corev1.ServiceTypeExternalName
	external.Spec.ClusterIP = ""
	selNoMatch := namespace(routeNS, map[string]string{"team": "red"})
	tcp := listener("tcp", 9000)
	tcp.Protocol = gatewayv1.TCPProtocolType
	grpcOnly := listener("grpc", 9001)
	grpcOnly.AllowedRoutes.Kinds = []gatewayv1.RouteGroupKind{{Kind: "GRPCRoute"}}
	httpKind := listener("httpkind", 9002)
	httpKind.AllowedRoutes.Kinds = []gatewayv1.RouteGroupKind{{Kind: "GRPCRoute"}, {Kind: "HTTPRoute"}}
	kinds := gateway(infraNS, "kinds", "ours", tcp, grpcOnly, httpKind)
	empty := gateway(infraNS, "empty", "ours")
	unknownKind := backend("", "bucket")
	unknownKind.Group = ptr(gatewayv1.Group("storage.example.com"))
	unknownKind.Kind = ptr(gatewayv1.Kind("Bucket"))
	explicitService := backend("", "backend")
	explicitService.Group = ptr(gatewayv1.Group(""))
	explicitService.Kind = ptr(gatewayv1.Kind("Service"))
	withPort := func(r gatewayv1.ParentReference, p int32) gatewayv1.ParentReference {
		r.Port = ptr(p)
		return r
	}
	mirror := func(ns, name string) gatewayv1.HTTPRouteFilter {
		b := backend(ns, name)
		return gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterRequestMirror,
			RequestMirror: &gatewayv1.HTTPRequestMirrorFilter{BackendRef: b.BackendObjectReference}}
	}
	withRuleMirror := func(r *gatewayv1.HTTPRoute, ns, name string) *gatewayv1.HTTPRoute {
		r.Spec.Rules[0].Filters = append(r.Spec.Rules[0].Filters, mirror(ns, name))
		return r
	}
	withBackendMirror := func(r *gatewayv1.HTTPRoute, ns, name string) *gatewayv1.HTTPRoute {
		r.Spec.Rules[0].BackendRefs[0].Filters = append(r.Spec.Rules[0].BackendRefs[0].Filters, mirror(ns, name))
		return r
	}
	withHostnames := func(r *gatewayv1.HTTPRoute, hs ...gatewayv1.Hostname) *gatewayv1.HTTPRoute {
		r.Spec.Hostnames = hs
		return r
	}
	gw := func(section string) []gatewayv1.ParentReference {
		return []gatewayv1.ParentReference{gatewayRef(infraNS, "gw", section)}
	}
	svcParent := func(name string) []gatewayv1.ParentReference {
		return []gatewayv1.ParentReference{serviceRef("", name)}
	}
	ok := backend("", "backend")

	tests := []struct {
		label    string
		route    *gatewayv1.HTTPRoute
		objs     []runtime.Object
		mesh     bool
		noEntry  bool
		accepted gatewayv1.RouteConditionReason
		resolved gatewayv1.RouteConditionReason
		msg      string // substring of the message of the failing condition
	}{
		{label: "gateway parent, all listeners", route: route(gw(""), ok), objs: world(),
			accepted: "Accepted", resolved: "ResolvedRefs"},
		{label: "gateway parent by sectionName", route: route(gw("http"), ok), objs: world(),
			accepted: "Accepted", resolved: "ResolvedRefs"},
		{label: "gateway parent by port", route: route([]gatewayv1.ParentReference{withPort(gatewayRef(infraNS, "gw", ""), 80)}, ok), objs: world(),
			accepted: "Accepted", resolved: "ResolvedRefs"},
		{label: "gateway parent by sectionName and port", route: route([]gatewayv1.ParentReference{withPort(gatewayRef(infraNS, "gw", "http"), 80)}, ok), objs: world(),
			accepted: "Accepted", resolved: "ResolvedRefs"},
		{label: "no backends resolves trivially", route: route(gw("http")), objs: world(),
			accepted: "Accepted", resolved: "ResolvedRefs"},
		{label: "explicit group \"\" kind Service backend", route: route(gw("http"), explicitService), objs: world(),
			accepted: "Accepted", resolved: "ResolvedRefs"},
		{label: "valid Service parent (mesh)", route: route(svcParent("mesh"), ok), objs: world(), mesh: true,
			accepted: "Accepted", resolved: "ResolvedRefs"},
		{label: "valid Service parent by port name", route: route([]gatewayv1.ParentReference{func() gatewayv1.ParentReference {
			r := serviceRef(routeNS, "mesh")
			r.SectionName = ptr(gatewayv1.SectionName("http"))
			return r
		}()}, ok), objs: world(), mesh: true, accepted: "Accepted", resolved: "ResolvedRefs"},
		{label: "Service parent with unknown port name", route: route([]gatewayv1.ParentReference{func() gatewayv1.ParentReference {
			r := serviceRef(routeNS, "mesh")
			r.SectionName = ptr(gatewayv1.SectionName("grpc"))
			return r
		}()}, ok), objs: world(), mesh: true, accepted: "NoMatchingParent", resolved: "ResolvedRefs", msg: `no port named "grpc"`},
		{label: "Service parent with unknown port number", route: route([]gatewayv1.ParentReference{withPort(serviceRef("", "mesh"), 81)}, ok),
			objs: world(), mesh: true, accepted: "NoMatchingParent", resolved: "ResolvedRefs", msg: "no port with port 81"},
		{label: "missing Service parent", route: route(svcParent("nope"), ok), objs: world(), mesh: true,
			accepted: "NoMatchingParent", resolved: "ResolvedRefs", msg: "apps/nope not found"},
		{label: "headless Service parent", route: route(svcParent("headless"), ok), objs: with(world(), headless), mesh: true,
			accepted: "NoMatchingParent", resolved: "ResolvedRefs", msg: "headless"},
		{label: "ExternalName Service parent", route: route(svcParent("external"), ok), objs: with(world(), external), mesh: true,
			accepted: "NoMatchingParent", resolved: "ResolvedRefs", msg: "ExternalName"},
		{label: "Service parent without mesh gets no entry", route: route(svcParent("mesh"), ok), objs: world(), noEntry: true},
		{label: "missing backend", route: route(gw("http"), backend("", "nope")), objs: world(),
			accepted: "Accepted", resolved: "BackendNotFound", msg: "spec.rules[0].backendRefs[0]: Service apps/nope not found"},
		{label: "missing backend behind a mesh parent", route: route(svcParent("mesh"), backend("", "nope")), objs: world(), mesh: true,
			accepted: "Accepted", resolved: "BackendNotFound"},
		{label: "unknown backend kind", route: route(gw("http"), unknownKind), objs: world(),
			accepted: "Accepted", resolved: "InvalidKind", msg: `"Bucket" in group "storage.example.com"`},
		{label: "first failure decides, others counted", route: route(gw("http"), ok, unknownKind, backend("", "nope")), objs: world(),
			accepted: "Accepted", resolved: "InvalidKind", msg: "backendRefs[1]: unsupported backend kind \"Bucket\" in group \"storage.example.com\"; only Services (group \"\") are supported. (1 more unresolved references)"},
		{label: "missing rule mirror backend", route: withRuleMirror(route(gw("http"), ok), "", "shadow"), objs: world(),
			accepted: "Accepted", resolved: "BackendNotFound", msg: "spec.rules[0].filters[0].requestMirror.backendRef"},
		{label: "missing backendRef mirror backend", route: withBackendMirror(route(gw("http"), ok), "", "shadow"), objs: world(),
			accepted: "Accepted", resolved: "BackendNotFound", msg: "spec.rules[0].backendRefs[0].filters[0].requestMirror.backendRef"},
		{label: "cross-namespace backend without ReferenceGrant", route: route(gw("http"), backend("other", "remote")), objs: world(),
			accepted: "Accepted", resolved: "RefNotPermitted", msg: "other/remote"},
		{label: "cross-namespace backend with ReferenceGrant to all Services", route: route(gw("http"), backend("other", "remote")),
			objs: with(world(), grant("other", routeNS, "")), accepted: "Accepted", resolved: "ResolvedRefs"},
		{label: "cross-namespace backend with ReferenceGrant to that name", route: route(gw("http"), backend("other", "remote")),
			objs: with(world(), grant("other", routeNS, "remote")), accepted: "Accepted", resolved: "ResolvedRefs"},
		{label: "cross-namespace backend with v1beta1 ReferenceGrant", route: route(gw("http"), backend("other", "remote")),
			objs: with(world(), (*gatewayv1beta1.ReferenceGrant)(grant("other", routeNS, ""))), accepted: "Accepted", resolved: "ResolvedRefs"},
		{label: "ReferenceGrant to another name", route: route(gw("http"), backend("other", "remote")),
			objs: with(world(), grant("other", routeNS, "elsewhere")), accepted: "Accepted", resolved: "RefNotPermitted"},
		{label: "ReferenceGrant from another namespace", route: route(gw("http"), backend("other", "remote")),
			objs: with(world(), grant("other", "elsewhere", "")), accepted: "Accepted", resolved: "RefNotPermitted"},
		{label: "ReferenceGrant in the route's namespace does not count", route: route(gw("http"), backend("other", "remote")),
			objs: with(world(), grant(routeNS, routeNS, "")), accepted: "Accepted", resolved: "RefNotPermitted"},
		{label: "cross-namespace missing backend with ReferenceGrant", route: route(gw("http"), backend("other", "nope")),
			objs: with(world(), grant("other", routeNS, "")), accepted: "Accepted", resolved: "BackendNotFound"},
		{label: "sectionName mismatch", route: route(gw("nope"), ok), objs: world(),
			accepted: "NoMatchingParent", resolved: "ResolvedRefs", msg: `no listener named "nope"`},
		{label: "port mismatch", route: route([]gatewayv1.ParentReference{withPort(gatewayRef(infraNS, "gw", ""), 9999)}, ok), objs: world(),
			accepted: "NoMatchingParent", resolved: "ResolvedRefs", msg: "no listener with port 9999"},
		{label: "sectionName matches, port does not", route: route([]gatewayv1.ParentReference{withPort(gatewayRef(infraNS, "gw", "http"), 8080)}, ok), objs: world(),
			accepted: "NoMatchingParent", resolved: "ResolvedRefs", msg: `no listener named "http" with port 8080`},
		{label: "gateway without listeners", route: route([]gatewayv1.ParentReference{gatewayRef(infraNS, "empty", "")}, ok), objs: with(world(), empty),
			accepted: "NoMatchingParent", resolved: "ResolvedRefs", msg: "no listeners"},
		{label: "namespaces from Same, route elsewhere", route: route(gw("same"), ok), objs: world(),
			accepted: "NotAllowedByListeners", resolved: "ResolvedRefs", msg: `from namespace "apps"`},
		{label: "namespaces from Same, route in the Gateway's namespace", route: func() *gatewayv1.HTTPRoute {
			r := route(gw("same"))
			r.Namespace = infraNS
			return r
		}(), objs: world(), accepted: "Accepted", resolved: "ResolvedRefs"},
		{label: "namespaces from All", route: route(gw("http"), ok), objs: world(),
			accepted: "Accepted", resolved: "ResolvedRefs"},
		{label: "namespaces from Selector, labels match", route: route(gw("sel"), ok), objs: world(),
			accepted: "Accepted", resolved: "ResolvedRefs"},
		{label: "namespaces from Selector, labels do not match", route: route(gw("sel"), ok), objs: with(world(), selNoMatch),
			accepted: "NotAllowedByListeners", resolved: "ResolvedRefs"},
		{label: "namespaces from Selector, namespace unknown", route: func() *gatewayv1.HTTPRoute {
			r := route(gw("sel"))
			r.Namespace = "ghost"
			return r
		}(), objs: world(), accepted: "NotAllowedByListeners", resolved: "ResolvedRefs"},
		{label: "no allowedRoutes defaults to Same", route: route(gw("http")), objs: with(world(),
			gateway(infraNS, "gw", "ours", gatewayv1.Listener{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType})),
			accepted: "NotAllowedByListeners", resolved: "ResolvedRefs"},
		{label: "TCP listener does not take HTTPRoutes", route: route([]gatewayv1.ParentReference{gatewayRef(infraNS, "kinds", "tcp")}), objs: with(world(), kinds),
			accepted: "NotAllowedByListeners", resolved: "ResolvedRefs", msg: "1 of 1 do not accept HTTPRoutes"},
		{label: "allowedRoutes.kinds without HTTPRoute", route: route([]gatewayv1.ParentReference{gatewayRef(infraNS, "kinds", "grpc")}), objs: with(world(), kinds),
			accepted: "NotAllowedByListeners", resolved: "ResolvedRefs"},
		{label: "allowedRoutes.kinds with HTTPRoute", route: route([]gatewayv1.ParentReference{gatewayRef(infraNS, "kinds", "httpkind")}), objs: with(world(), kinds),
			accepted: "Accepted", resolved: "ResolvedRefs"},
		{label: "one allowing listener of several is enough", route: route([]gatewayv1.ParentReference{gatewayRef(infraNS, "kinds", "")}), objs: with(world(), kinds),
			accepted: "Accepted", resolved: "ResolvedRefs"},
		{label: "hostname mismatch", route: withHostnames(route(gw("tls"), ok), "app.example.net"), objs: world(),
			accepted: "NoMatchingListenerHostname", resolved: "ResolvedRefs"},
		{label: "hostname match", route: withHostnames(route(gw("tls"), ok), "app.example.net", "app.example.com"), objs: world(),
			accepted: "Accepted", resolved: "ResolvedRefs"},
		{label: "hostname mismatch on one listener, another listener without hostname", route: withHostnames(route(gw(""), ok), "app.example.net"), objs: world(),
			accepted: "Accepted", resolved: "ResolvedRefs"},
		{label: "not allowed wins over hostname", route: withHostnames(route(gw("same"), ok), "app.example.net"), objs: world(),
			accepted: "NotAllowedByListeners", resolved: "ResolvedRefs"},
		{label: "both conditions failing", route: route(gw("nope"), backend("", "nope")), objs: world(),
			accepted: "NoMatchingParent", resolved: "BackendNotFound"},
		{label: "gateway of another class gets no entry", route: route([]gatewayv1.ParentReference{gatewayRef(infraNS, "foreign", "")}, ok), objs: world(), noEntry: true},
		{label: "missing gateway gets no entry", route: route([]gatewayv1.ParentReference{gatewayRef(infraNS, "nope", "")}, ok), objs: world(), noEntry: true},
		{label: "gateway in the route's namespace by default", route: route([]gatewayv1.ParentReference{gatewayRef("", "gw", "")}, ok), objs: world(), noEntry: true},
		{label: "gateway with missing class gets no entry", route: route([]gatewayv1.ParentReference{gatewayRef(infraNS, "lost", "")}, ok),
			objs: with(world(), gateway(infraNS, "lost", "nope", listener("http", 80))), noEntry: true},
		{label: "other parent kind gets no entry", route: route([]gatewayv1.ParentReference{{
			Group: ptr(gatewayv1.Group("example.com")), Kind: ptr(gatewayv1.Kind("Mesh")), Name: "m"}}, ok), objs: world(), mesh: true, noEntry: true},
		{label: "parentRef invalid in status gets no entry", route: route([]gatewayv1.ParentReference{func() gatewayv1.ParentReference {
			r := gatewayRef(infraNS, "gw", "")
			r.SectionName = ptr(gatewayv1.SectionName("Not_A_DNS_Name"))
			return r
		}()}, ok), objs: world(), noEntry: true},
		{label: "nil lookup", route: route(gw("")), noEntry: true},
	}
	for _, tt := range tests {
		t.Run(tt.label, func(t *testing.T) {
			var lk Lookup
			if tt.objs != nil {
				lk = snapshot(t, tt.objs...)
			}
			before := tt.route.DeepCopy()
			got := newComputer(t, tt.mesh).Compute(tt.route, lk, t0)
			if !reflect.DeepEqual(before, tt.route) {
				t.Fatal("Compute modified its route argument")
			}
			if err := Validate(got); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			mine := own(got)
			if tt.noEntry {
				if len(got.Parents) != 0 {
					t.Fatalf("want no entry, got %+v", got.Parents)
				}
				return
			}
			if len(mine) != 1 {
				t.Fatalf("want 1 entry of ours, got %d: %+v", len(mine), got.Parents)
			}
			if !reflect.DeepEqual(mine[0].ParentRef, tt.route.Spec.ParentRefs[0]) {
				t.Errorf("parentRef = %+v, want a copy of the spec's %+v", mine[0].ParentRef, tt.route.Spec.ParentRefs[0])
			}
			for _, c := range []struct {
				typ    gatewayv1.RouteConditionType
				reason gatewayv1.RouteConditionReason
				ok     gatewayv1.RouteConditionReason
			}{
				{gatewayv1.RouteConditionAccepted, tt.accepted, gatewayv1.RouteReasonAccepted},
				{gatewayv1.RouteConditionResolvedRefs, tt.resolved, gatewayv1.RouteReasonResolvedRefs},
			} {
				got := cond(mine[0], c.typ)
				if got == nil {
					t.Fatalf("no %s condition in %+v", c.typ, mine[0].Conditions)
				}
				wantStatus := metav1.ConditionFalse
				if c.reason == c.ok {
					wantStatus = metav1.ConditionTrue
				}
				if got.Reason != string(c.reason) || got.Status != wantStatus {
					t.Errorf("%s = %s/%s (%q), want %s/%s", c.typ, got.Status, got.Reason, got.Message, wantStatus, c.reason)
				}
				if got.Message == "" {
					t.Errorf("%s has an empty message", c.typ)
				}
				if tt.msg != "" && got.Status == metav1.ConditionFalse && !strings.Contains(got.Message, tt.msg) {
					t.Errorf("%s message %q does not contain %q", c.typ, got.Message, tt.msg)
				}
			}
		})
	}
}

func TestNewComputer(t *testing.T) {
	tests := []struct {
		label string
		name  gatewayv1.GatewayController
		ok    bool
	}{
		{"domain and path", "example.net/gateway-controller", true},
		{"nested path", "gateway.example.net/a/b_c~d", true},
		{"empty", "", false},
		{"no path", "example.net", false},
		{"empty path", "example.net/", false},
		{"upper-case domain", "Example.net/x", false},
		{"space in path", "example.net/a b", false},
		{"too long", gatewayv1.GatewayController("example.net/" + strings.Repeat("a", 250)), false},
	}
	for _, tt := range tests {
		t.Run(tt.label, func(t *testing.T) {
			c, err := NewComputer(Options{ControllerName: tt.name})
			if tt.ok {
				if err != nil || c == nil || c.Options().ControllerName != tt.name {
					t.Fatalf("NewComputer(%q) = %v, %v; want success", tt.name, c, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), "Options.ControllerName") {
				t.Fatalf("NewComputer(%q) error = %v, want ErrInvalidOptions naming Options.ControllerName", tt.name, err)
			}
		})
	}
}

func TestComputeZeroComputerCopiesStatus(t *testing.T) {
	r := route([]gatewayv1.ParentReference{gatewayRef(infraNS, "gw", "")})
	r.Status.Parents = []gatewayv1.RouteParentStatus{entry(gatewayRef(infraNS, "gw", ""), otherController, "Accepted", "ResolvedRefs", 1, t0)}
	for _, c := range []*Computer{nil, {}} {
		got := c.Compute(r, nil, t0)
		if !reflect.DeepEqual(got.Parents, r.Status.Parents) {
			t.Fatalf("got %+v, want a copy of the current status", got.Parents)
		}
		got.Parents[0].Conditions[0].Reason = "Changed"
		if r.Status.Parents[0].Conditions[0].Reason == "Changed" {
			t.Fatal("result aliases the route's status")
		}
	}
	if got := newComputer(t, true).Compute(nil, nil, t0); got.Parents == nil || len(got.Parents) != 0 {
		t.Fatalf("Compute(nil route) = %#v, want an empty non-nil list", got.Parents)
	}
}

func TestComputeOwnership(t *testing.T) {
	gwA := gatewayRef(infraNS, "gw", "http")
	gwB := gatewayRef(infraNS, "gw", "sel")
	gwGone := gatewayRef(infraNS, "gw", "same")
	foreign1 := entry(gatewayRef(infraNS, "foreign", ""), otherController, "Accepted", "ResolvedRefs", 1, t0)
	foreign2 := entry(gwA, "example.org/third", "NoMatchingParent", "ResolvedRefs", 1, t0)
	old := t0.Add(-time.Hour)

	r := route([]gatewayv1.ParentReference{gwB, gatewayRef(infraNS, "foreign", ""), gwA}, backend("", "backend"))
	r.Status.Parents = []gatewayv1.RouteParentStatus{
		foreign1,
		entry(gwGone, testController, "Accepted", "ResolvedRefs", 1, old), // left the spec: pruned
		entry(gwA, testController, "NoMatchingParent", "ResolvedRefs", 1, old),
		foreign2,
		entry(gwA, testController, "Accepted", "ResolvedRefs", 1, old),                                // duplicate: pruned
		entry(gatewayRef(infraNS, "foreign", ""), testController, "Accepted", "ResolvedRefs", 1, old), // not ours to handle: pruned
	}
	got := newComputer(t, false).Compute(r, snapshot(t, world()...), t0)
	if err := Validate(got); err != nil {
		t.Fatal(err)
	}
	type row struct {
		controller gatewayv1.GatewayController
		ref        gatewayv1.ParentReference
	}
	var rows []row
	for _, p := range got.Parents {
		rows = append(rows, row{p.ControllerName, p.ParentRef})
	}
	want := []row{
		{otherController, foreign1.ParentRef},
		{testController, gwA}, // updated in place
		{"example.org/third", gwA},
		{testController, gwB}, // new, appended
	}
	if !reflect.DeepEqual(rows, want) {
		t.Fatalf("parents (controller, parentRef) =\n%+v\nwant\n%+v", rows, want)
	}
	if !reflect.DeepEqual(got.Parents[0], foreign1) || !reflect.DeepEqual(got.Parents[2], foreign2) {
		t.Fatal("foreign entries were modified")
	}
	if c := cond(got.Parents[1], gatewayv1.RouteConditionAccepted); c.Reason != "Accepted" || !c.LastTransitionTime.Time.Equal(t0) {
		t.Fatalf("updated Accepted = %+v, want Accepted with a new lastTransitionTime", c)
	}
	if c := cond(got.Parents[1], gatewayv1.RouteConditionResolvedRefs); !c.LastTransitionTime.Time.Equal(old) {
		t.Fatalf("unchanged ResolvedRefs lastTransitionTime = %v, want %v kept", c.LastTransitionTime, old)
	}
}

func TestComputeParentRefCopiedExactly(t *testing.T) {
	tests := []struct {
		label string
		ref   gatewayv1.ParentReference
	}{
		{"as defaulted by the server", gatewayRef(infraNS, "gw", "http")},
		{"group and kind omitted", gatewayv1.ParentReference{Namespace: ptr(gatewayv1.Namespace(infraNS)), Name: "gw"}},
		{"with port", func() gatewayv1.ParentReference {
			r := gatewayRef(infraNS, "gw", "")
			r.Port = ptr(int32(80))
			return r
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.label, func(t *testing.T) {
			r := route([]gatewayv1.ParentReference{tt.ref})
			got := own(newComputer(t, false).Compute(r, snapshot(t, world()...), t0))
			if len(got) != 1 || !reflect.DeepEqual(got[0].ParentRef, tt.ref) {
				t.Fatalf("got %+v, want one entry with parentRef %+v", got, tt.ref)
			}
			if got[0].ParentRef.Namespace == r.Spec.ParentRefs[0].Namespace {
				t.Fatal("entry's parentRef shares pointers with the spec")
			}
		})
	}
	t.Run("existing entry in another form is rewritten in place", func(t *testing.T) {
		spec := gatewayRef(infraNS, "gw", "")
		stored := gatewayv1.ParentReference{Namespace: ptr(gatewayv1.Namespace(infraNS)), Name: "gw"} // group/kind omitted
		r := route([]gatewayv1.ParentReference{spec})
		r.Status.Parents = []gatewayv1.RouteParentStatus{
			entry(stored, testController, "Accepted", "ResolvedRefs", 3, t0),
			entry(spec, otherController, "Accepted", "ResolvedRefs", 3, t0),
		}
		got := newComputer(t, false).Compute(r, snapshot(t, world()...), t0)
		if len(got.Parents) != 2 || got.Parents[0].ControllerName != testController || !reflect.DeepEqual(got.Parents[0].ParentRef, spec) {
			t.Fatalf("got %+v, want our entry first with the spec's parentRef", got.Parents)
		}
	})
}

func TestComputeParentLimit(t *testing.T) {
	foreign := func(n int) []gatewayv1.RouteParentStatus {
		var out []gatewayv1.RouteParentStatus
		for i := range n {
			out = append(out, entry(gatewayRef(infraNS, fmt.Sprintf("f%d", i), ""), otherController, "Accepted", "ResolvedRefs", 1, t0))
		}
		return out
	}
	// Five handled refs: one per listener of infra/gw, plus a mesh Service.
	refs := []gatewayv1.ParentReference{
		gatewayRef(infraNS, "gw", "http"),
		gatewayRef(infraNS, "gw", "same"),
		gatewayRef(infraNS, "gw", "sel"),
		gatewayRef(infraNS, "gw", "tls"),
		serviceRef("", "mesh"),
	}
	tests := []struct {
		label    string
		existing []gatewayv1.RouteParentStatus
		want     []gatewayv1.ParentReference // our entries, in order
		total    int
	}{
		{label: "room for all", existing: foreign(3), want: refs, total: 8},
		{label: "room for two: first two in spec order", existing: foreign(30), want: refs[:2], total: 32},
		{label: "full of foreign entries", existing: foreign(32), want: nil, total: 32},
		{
			label:    "existing entries of ours keep their place, new ones fill what is left",
			existing: append(foreign(30), entry(refs[4], testController, "Accepted", "ResolvedRefs", 3, t0)),
			want:     []gatewayv1.ParentReference{refs[4], refs[0]},
			total:    32,
		},
		{
			label:    "over-full input (server would not allow): ours dropped from the end, foreign kept",
			existing: append(append(foreign(31), entry(refs[0], testController, "Accepted", "ResolvedRefs", 3, t0)), foreign(2)...),
			want:     nil,
			total:    33,
		},
	}
	for _, tt := range tests {
		t.Run(tt.label, func(t *testing.T) {
			r := route(refs)
			r.Status.Parents = tt.existing
			got := newComputer(t, true).Compute(r, snapshot(t, world()...), t0)
			if len(got.Parents) != tt.total {
				t.Fatalf("len(parents) = %d, want %d", len(got.Parents), tt.total)
			}
			var mine []gatewayv1.ParentReference
			for _, p := range own(got) {
				mine = append(mine, p.ParentRef)
			}
			if !reflect.DeepEqual(mine, tt.want) {
				t.Fatalf("our parentRefs = %+v, want %+v", mine, tt.want)
			}
			var foreignGot []gatewayv1.RouteParentStatus
			for _, p := range got.Parents {
				if p.ControllerName != testController {
					foreignGot = append(foreignGot, p)
				}
			}
			var foreignWant []gatewayv1.RouteParentStatus
			for _, p := range tt.existing {
				if p.ControllerName != testController {
					foreignWant = append(foreignWant, p)
				}
			}
			if !reflect.DeepEqual(foreignGot, foreignWant) {
				t.Fatal("foreign entries were dropped, changed or reordered")
			}
		})
	}
}

func TestComputeObservedGeneration(t *testing.T) {
	for _, tt := range []struct {
		label string
		gen   int64
		want  int64
	}{
		{"generation 1", 1, 1},
		{"generation 7", 7, 7},
		{"negative generation written as 0", -4, 0},
	} {
		t.Run(tt.label, func(t *testing.T) {
			r := route([]gatewayv1.ParentReference{gatewayRef(infraNS, "gw", "")})
			r.Generation = tt.gen
			r.Status.Parents = []gatewayv1.RouteParentStatus{entry(r.Spec.ParentRefs[0], testController, "Accepted", "ResolvedRefs", 1, t0)}
			got := own(newComputer(t, false).Compute(r, snapshot(t, world()...), t0))
			for _, c := range got[0].Conditions {
				if c.ObservedGeneration != tt.want {
					t.Errorf("%s observedGeneration = %d, want %d", c.Type, c.ObservedGeneration, tt.want)
				}
			}
		})
	}
}

func TestComputeLastTransitionTime(t *testing.T) {
	prevTime := t0.Add(-24 * time.Hour)
	now := t0.Add(1500 * time.Millisecond)
	nowStored := t0.Add(time.Second) // truncated to seconds, as the server stores it
	tests := []struct {
		label         string
		prevAccepted  gatewayv1.RouteConditionReason
		prevResolved  gatewayv1.RouteConditionReason
		route         *gatewayv1.HTTPRoute
		wantAccepted  time.Time
		wantResolved  time.Time
		noPrevEntries bool
	}{
		{label: "unchanged: both kept", prevAccepted: "Accepted", prevResolved: "ResolvedRefs",
			route:        route([]gatewayv1.ParentReference{gatewayRef(infraNS, "gw", "")}, backend("", "backend")),
			wantAccepted: prevTime, wantResolved: prevTime},
		{label: "Accepted True→False: updated; ResolvedRefs kept", prevAccepted: "Accepted", prevResolved: "ResolvedRefs",
			route:        route([]gatewayv1.ParentReference{gatewayRef(infraNS, "gw", "nope")}, backend("", "backend")),
			wantAccepted: nowStored, wantResolved: prevTime},
		{label: "reason changes, status does not: kept", prevAccepted: "NotAllowedByListeners", prevResolved: "RefNotPermitted",
			route:        route([]gatewayv1.ParentReference{gatewayRef(infraNS, "gw", "nope")}, backend("", "nope")),
			wantAccepted: prevTime, wantResolved: prevTime},
		{label: "ResolvedRefs False→True: updated", prevAccepted: "Accepted", prevResolved: "BackendNotFound",
			route:        route([]gatewayv1.ParentReference{gatewayRef(infraNS, "gw", "")}, backend("", "backend")),
			wantAccepted: prevTime, wantResolved: nowStored},
		{label: "new entry: now", noPrevEntries: true,
			route:        route([]gatewayv1.ParentReference{gatewayRef(infraNS, "gw", "")}, backend("", "backend")),
			wantAccepted: nowStored, wantResolved: nowStored},
	}
	for _, tt := range tests {
		t.Run(tt.label, func(t *testing.T) {
			if !tt.noPrevEntries {
				tt.route.Status.Parents = []gatewayv1.RouteParentStatus{
					entry(tt.route.Spec.ParentRefs[0], testController, tt.prevAccepted, tt.prevResolved, 1, prevTime)}
			}
			got := own(newComputer(t, false).Compute(tt.route, snapshot(t, world()...), now))
			if len(got) != 1 {
				t.Fatalf("want 1 entry, got %+v", got)
			}
			if a := cond(got[0], gatewayv1.RouteConditionAccepted).LastTransitionTime.Time; !a.Equal(tt.wantAccepted) {
				t.Errorf("Accepted lastTransitionTime = %v, want %v", a, tt.wantAccepted)
			}
			if r := cond(got[0], gatewayv1.RouteConditionResolvedRefs).LastTransitionTime.Time; !r.Equal(tt.wantResolved) {
				t.Errorf("ResolvedRefs lastTransitionTime = %v, want %v", r, tt.wantResolved)
			}
		})
	}
}

func TestComputeConditionsOfOtherTypes(t *testing.T) {
	ref := gatewayRef(infraNS, "gw", "")
	other := func(typ string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: "Because", Message: "x", LastTransitionTime: metav1.NewTime(t0)}
	}
	ours := entry(ref, testController, "Accepted", "ResolvedRefs", 1, t0).Conditions
	bad := other("Bad")
	bad.Reason = "not a reason!"
	dup := other("Accepted")
	dup.Reason = "Duplicate"
	prev := gatewayv1.RouteParentStatus{ParentRef: ref, ControllerName: testController, Conditions: []metav1.Condition{
		other("example.com/First"),
		ours[1], // ResolvedRefs
		other("Second"),
		bad,     // the CRD would reject it: dropped
		ours[0], // Accepted
		dup,     // second Accepted: dropped
		other("Third"), other("Fourth"), other("Fifth"), other("Sixth"),
		other("Seventh"), // beyond MaxConditions: dropped
	}}
	r := route([]gatewayv1.ParentReference{ref}, backend("", "backend"))
	r.Status.Parents = []gatewayv1.RouteParentStatus{prev}
	got := own(newComputer(t, false).Compute(r, snapshot(t, world()...), t0))
	var types []string
	for _, c := range got[0].Conditions {
		types = append(types, c.Type)
	}
	want := []string{"example.com/First", "ResolvedRefs", "Second", "Accepted", "Third", "Fourth", "Fifth", "Sixth"}
	if !reflect.DeepEqual(types, want) {
		t.Fatalf("condition types = %v, want %v (others kept in place, invalid dropped, capped at %d)", types, want, MaxConditions)
	}
}

func TestSnapshot(t *testing.T) {
	s := snapshot(t, world()...)
	if _, ok := s.Service(routeNS, "backend"); !ok {
		t.Error("Service not found")
	}
	if _, ok := s.Gateway(infraNS, "gw"); !ok {
		t.Error("Gateway not found")
	}
	if _, ok := s.GatewayClass("ours"); !ok {
		t.Error("GatewayClass not found")
	}
	if _, ok := s.Namespace(routeNS); !ok {
		t.Error("Namespace not found")
	}
	var nilSnap *Snapshot
	if _, ok := nilSnap.Service("a", "b"); ok || nilSnap.ReferenceGrants("a") != nil {
		t.Error("nil Snapshot is not empty")
	}
	for _, obj := range []runtime.Object{&corev1.Pod{}, (*corev1.Service)(nil), nil} {
		if _, err := NewSnapshot(obj); !errors.Is(err, ErrUnsupportedObject) {
			t.Errorf("NewSnapshot(%T) error = %v, want ErrUnsupportedObject", obj, err)
		}
	}
}
