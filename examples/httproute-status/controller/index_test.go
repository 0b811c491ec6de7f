package controller

import (
	"slices"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"
)

func ptr[T any](v T) *T { return &v }

// testRoute builds a route in "apps" with the given parents and backends.
func testRoute(name string, parents []gatewayv1.ParentReference, backends ...gatewayv1.BackendObjectReference) *gatewayv1.HTTPRoute {
	r := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name}}
	r.Spec.ParentRefs = parents
	rule := gatewayv1.HTTPRouteRule{}
	for _, b := range backends {
		rule.BackendRefs = append(rule.BackendRefs, gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{BackendObjectReference: b}})
	}
	r.Spec.Rules = []gatewayv1.HTTPRouteRule{rule}
	return r
}

func TestRouteIndexes(t *testing.T) {
	gwParent := gatewayv1.ParentReference{Name: "gw", Namespace: ptr(gatewayv1.Namespace("infra"))}
	gwParentLocal := gatewayv1.ParentReference{Name: "local-gw"}
	svcParent := gatewayv1.ParentReference{Group: ptr(gatewayv1.Group("")), Kind: ptr(gatewayv1.Kind("Service")), Name: "mesh"}
	otherParent := gatewayv1.ParentReference{Group: ptr(gatewayv1.Group("example.com")), Kind: ptr(gatewayv1.Kind("Thing")), Name: "x"}
	local := gatewayv1.BackendObjectReference{Name: "backend"}
	remote := gatewayv1.BackendObjectReference{Name: "shared", Namespace: ptr(gatewayv1.Namespace("backends"))}
	explicitSameNS := gatewayv1.BackendObjectReference{Name: "same", Namespace: ptr(gatewayv1.Namespace("apps"))}
	bucket := gatewayv1.BackendObjectReference{Name: "b", Group: ptr(gatewayv1.Group("storage.example.com")), Kind: ptr(gatewayv1.Kind("Bucket")),
		Namespace: ptr(gatewayv1.Namespace("elsewhere"))}

	mirrored := testRoute("mirrored", []gatewayv1.ParentReference{gwParent}, local)
	mirrored.Spec.Rules[0].Filters = []gatewayv1.HTTPRouteFilter{{
		Type:          gatewayv1.HTTPRouteFilterRequestMirror,
		RequestMirror: &gatewayv1.HTTPRequestMirrorFilter{BackendRef: gatewayv1.BackendObjectReference{Name: "mirror", Namespace: ptr(gatewayv1.Namespace("mirrors"))}},
	}}
	mirrored.Spec.Rules[0].BackendRefs[0].Filters = []gatewayv1.HTTPRouteFilter{{
		Type:          gatewayv1.HTTPRouteFilterRequestMirror,
		RequestMirror: &gatewayv1.HTTPRequestMirrorFilter{BackendRef: gatewayv1.BackendObjectReference{Name: "shadow"}},
	}}

	tests := []struct {
		name                            string
		route                           *gatewayv1.HTTPRoute
		services, gateways, grantSpaces []string
	}{
		{
			name:     "gateway parent, local backend",
			route:    testRoute("a", []gatewayv1.ParentReference{gwParent}, local),
			services: []string{"apps/backend"}, gateways: []string{"infra/gw"},
		},
		{
			name:     "gateway parent defaults to the route's namespace",
			route:    testRoute("b", []gatewayv1.ParentReference{gwParentLocal}),
			gateways: []string{"apps/local-gw"},
		},
		{
			name:     "mesh parent is a Service",
			route:    testRoute("c", []gatewayv1.ParentReference{svcParent}, local),
			services: []string{"apps/backend", "apps/mesh"},
		},
		{
			name:        "cross-namespace backend needs a grant there",
			route:       testRoute("d", []gatewayv1.ParentReference{gwParent, otherParent}, remote, explicitSameNS, local),
			services:    []string{"apps/backend", "apps/same", "backends/shared"},
			gateways:    []string{"infra/gw"},
			grantSpaces: []string{"backends"},
		},
		{
			name:  "non-Service backends are not indexed",
			route: testRoute("e", nil, bucket),
		},
		{
			name:        "mirror filters of rules and backends",
			route:       mirrored,
			services:    []string{"apps/backend", "apps/shadow", "mirrors/mirror"},
			gateways:    []string{"infra/gw"},
			grantSpaces: []string{"mirrors"},
		},
		{
			name:     "duplicates collapse",
			route:    testRoute("f", []gatewayv1.ParentReference{gwParent, gwParent}, local, local),
			services: []string{"apps/backend"}, gateways: []string{"infra/gw"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, c := range []struct {
				index string
				got   []string
				want  []string
			}{
				{"services", routeServices(tt.route), tt.services},
				{"gateways", routeGateways(tt.route), tt.gateways},
				{"grant namespaces", routeGrantNamespaces(tt.route), tt.grantSpaces},
			} {
				if !slices.Equal(c.got, c.want) {
					t.Errorf("%s = %q, want %q", c.index, c.got, c.want)
				}
			}
		})
	}
}

// TestRoutesOf: each kind of event maps to the routes it can affect,
// found through the informers' indexes.
func TestRoutesOf(t *testing.T) {
	routes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if err := routes.AddIndexers(routeIndexers()); err != nil {
		t.Fatal(err)
	}
	gateways := cache.NewIndexer(cache.MetaNamespaceKeyFunc, gatewayIndexers())
	gw := func(ns, name, class string) *gatewayv1.Gateway {
		return &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: gatewayv1.GatewaySpec{GatewayClassName: gatewayv1.ObjectName(class)}}
	}
	for _, g := range []*gatewayv1.Gateway{gw("infra", "gw", "ours"), gw("infra", "other", "theirs"), gw("infra", "gw2", "ours")} {
		if err := gateways.Add(g); err != nil {
			t.Fatal(err)
		}
	}
	toGW := gatewayv1.ParentReference{Name: "gw", Namespace: ptr(gatewayv1.Namespace("infra"))}
	toGW2 := gatewayv1.ParentReference{Name: "gw2", Namespace: ptr(gatewayv1.Namespace("infra"))}
	toOther := gatewayv1.ParentReference{Name: "other", Namespace: ptr(gatewayv1.Namespace("infra"))}
	remote := gatewayv1.BackendObjectReference{Name: "shared", Namespace: ptr(gatewayv1.Namespace("backends"))}
	for _, r := range []*gatewayv1.HTTPRoute{
		testRoute("r1", []gatewayv1.ParentReference{toGW}, gatewayv1.BackendObjectReference{Name: "svc"}),
		testRoute("r2", []gatewayv1.ParentReference{toOther}, remote),
		testRoute("r3", []gatewayv1.ParentReference{toGW, toGW2}, remote),
	} {
		if err := routes.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	other := testRoute("r4", nil)
	other.Namespace = "elsewhere"
	if err := routes.Add(other); err != nil {
		t.Fatal(err)
	}

	on := routesOf{routes: routes, gateways: gateways}
	meta := func(ns, name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: ns, Name: name} }
	tests := []struct {
		name string
		keys func(any) []types.NamespacedName
		obj  any
		want []string // sorted, duplicates kept (quietpatch drops them)
	}{
		{"backend Service", on.by(indexService, objectName), &corev1.Service{ObjectMeta: meta("apps", "svc")}, []string{"apps/r1"}},
		{"shared Service", on.by(indexService, objectName), &corev1.Service{ObjectMeta: meta("backends", "shared")}, []string{"apps/r2", "apps/r3"}},
		{"unrelated Service", on.by(indexService, objectName), &corev1.Service{ObjectMeta: meta("apps", "nobody")}, nil},
		{"Gateway", on.by(indexGateway, objectName), gw("infra", "gw", "ours"), []string{"apps/r1", "apps/r3"}},
		{"GatewayClass: the routes of each of its Gateways", on.gatewayClass,
			&gatewayv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "ours"}}, []string{"apps/r1", "apps/r3", "apps/r3"}},
		{"another GatewayClass", on.gatewayClass, &gatewayv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "theirs"}}, []string{"apps/r2"}},
		{"ReferenceGrant v1", on.by(indexGrantNamespace, metav1.Object.GetNamespace), &gatewayv1.ReferenceGrant{ObjectMeta: meta("backends", "grant")}, []string{"apps/r2", "apps/r3"}},
		{"ReferenceGrant v1beta1", on.by(indexGrantNamespace, metav1.Object.GetNamespace), &gatewayv1beta1.ReferenceGrant{ObjectMeta: meta("backends", "grant")}, []string{"apps/r2", "apps/r3"}},
		{"ReferenceGrant elsewhere", on.by(indexGrantNamespace, metav1.Object.GetNamespace), &gatewayv1.ReferenceGrant{ObjectMeta: meta("apps", "grant")}, nil},
		{"Namespace", on.by(cache.NamespaceIndex, metav1.Object.GetName), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}, []string{"apps/r1", "apps/r2", "apps/r3"}},
		{"not an object", on.by(indexGrantNamespace, metav1.Object.GetNamespace), "nope", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, k := range tt.keys(tt.obj) {
				got = append(got, k.String())
			}
			sort.Strings(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("keys %q, want %q", got, tt.want)
			}
		})
	}
}
