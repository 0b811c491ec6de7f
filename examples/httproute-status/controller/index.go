package controller

import (
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Index names on the HTTPRoute and Gateway informers. An informer event on
// an object a route refers to enqueues exactly the routes the index names
// for it (routesOf):
//
//	event on            enqueues the routes                                       through
//	HTTPRoute           itself (the pipeline's own handler)                       —
//	Service ns/n        with a backendRef (or mirror) or a Service parentRef ns/n indexService
//	Gateway ns/n        with a Gateway parentRef ns/n                             indexGateway
//	GatewayClass c      with a parentRef to a Gateway of class c                  indexGatewayClass, then indexGateway
//	ReferenceGrant in ns with a backendRef into ns from another namespace         indexGrantNamespace
//	Namespace ns        in ns (allowedRoutes selectors match its labels)          cache.NamespaceIndex
const (
	indexService        = "quietpatch.io/service"
	indexGateway        = "quietpatch.io/gateway"
	indexGrantNamespace = "quietpatch.io/grant-namespace"
	indexGatewayClass   = "quietpatch.io/gateway-class"
)

// routeIndexers are the indexers added to the HTTPRoute informer (which
// has cache.NamespaceIndex already).
func routeIndexers() cache.Indexers {
	return cache.Indexers{
		indexService:        indexRoute(routeServices),
		indexGateway:        indexRoute(routeGateways),
		indexGrantNamespace: indexRoute(routeGrantNamespaces),
	}
}

// gatewayIndexers are the indexers of the Gateway informer.
func gatewayIndexers() cache.Indexers {
	return cache.Indexers{
		indexGatewayClass: func(obj any) ([]string, error) {
			gw, ok := obj.(*gatewayv1.Gateway)
			if !ok {
				return nil, fmt.Errorf("controller: gateway index: unexpected %T", obj)
			}
			return []string{string(gw.Spec.GatewayClassName)}, nil
		},
	}
}

func indexRoute(f func(*gatewayv1.HTTPRoute) []string) cache.IndexFunc {
	return func(obj any) ([]string, error) {
		r, ok := obj.(*gatewayv1.HTTPRoute)
		if !ok {
			return nil, fmt.Errorf("controller: route index: unexpected %T", obj)
		}
		return f(r), nil
	}
}

// nsName formats "namespace/name", the index value of a namespaced object.
func nsName(ns, name string) string { return ns + "/" + name }

// forEachBackend calls f with every backend reference of r: the backendRefs
// of its rules and the backendRef of every RequestMirror filter (of rules
// and of backendRefs) — the references Compute resolves.
func forEachBackend(r *gatewayv1.HTTPRoute, f func(*gatewayv1.BackendObjectReference)) {
	mirror := func(fl *gatewayv1.HTTPRouteFilter) {
		if fl.Type == gatewayv1.HTTPRouteFilterRequestMirror && fl.RequestMirror != nil {
			f(&fl.RequestMirror.BackendRef)
		}
	}
	for ri := range r.Spec.Rules {
		rule := &r.Spec.Rules[ri]
		for bi := range rule.BackendRefs {
			b := &rule.BackendRefs[bi]
			f(&b.BackendObjectReference)
			for fi := range b.Filters {
				mirror(&b.Filters[fi])
			}
		}
		for fi := range rule.Filters {
			mirror(&rule.Filters[fi])
		}
	}
}

// isServiceBackend reports whether ref designates a core Service (group "",
// kind Service after defaulting).
func isServiceBackend(ref *gatewayv1.BackendObjectReference) bool {
	return (ref.Group == nil || *ref.Group == "") && (ref.Kind == nil || *ref.Kind == "Service")
}

func backendNamespace(r *gatewayv1.HTTPRoute, ref *gatewayv1.BackendObjectReference) string {
	if ref.Namespace != nil && *ref.Namespace != "" {
		return string(*ref.Namespace)
	}
	return r.Namespace
}

func parentNamespace(r *gatewayv1.HTTPRoute, ref *gatewayv1.ParentReference) string {
	if ref.Namespace != nil && *ref.Namespace != "" {
		return string(*ref.Namespace)
	}
	return r.Namespace
}

// parentGroupKind returns the group and kind of ref after CRD defaulting.
func parentGroupKind(ref *gatewayv1.ParentReference) (string, string) {
	group, kind := gatewayv1.GroupName, "Gateway"
	if ref.Group != nil {
		group = string(*ref.Group)
	}
	if ref.Kind != nil {
		kind = string(*ref.Kind)
	}
	return group, kind
}

// routeServices: "ns/name" of every Service the route refers to, as a
// backend or as a (mesh) parent.
func routeServices(r *gatewayv1.HTTPRoute) []string {
	var out []string
	forEachBackend(r, func(ref *gatewayv1.BackendObjectReference) {
		if isServiceBackend(ref) {
			out = append(out, nsName(backendNamespace(r, ref), string(ref.Name)))
		}
	})
	for i := range r.Spec.ParentRefs {
		ref := &r.Spec.ParentRefs[i]
		if g, k := parentGroupKind(ref); g == "" && k == "Service" {
			out = append(out, nsName(parentNamespace(r, ref), string(ref.Name)))
		}
	}
	return dedup(out)
}

// routeGateways: "ns/name" of every Gateway parent of the route.
func routeGateways(r *gatewayv1.HTTPRoute) []string {
	var out []string
	for i := range r.Spec.ParentRefs {
		ref := &r.Spec.ParentRefs[i]
		if g, k := parentGroupKind(ref); g == gatewayv1.GroupName && k == "Gateway" {
			out = append(out, nsName(parentNamespace(r, ref), string(ref.Name)))
		}
	}
	return dedup(out)
}

// routeGrantNamespaces: the namespaces, other than the route's own, of its
// Service backends — where a ReferenceGrant decides whether it may refer
// to them.
func routeGrantNamespaces(r *gatewayv1.HTTPRoute) []string {
	var out []string
	forEachBackend(r, func(ref *gatewayv1.BackendObjectReference) {
		if ns := backendNamespace(r, ref); ns != r.Namespace && isServiceBackend(ref) {
			out = append(out, ns)
		}
	})
	return dedup(out)
}

func dedup(s []string) []string {
	if len(s) < 2 {
		return s
	}
	slices.Sort(s)
	return slices.Compact(s)
}

// routesOf finds, through the informers' indexes, the routes an event of
// a dependency can affect: the Keys of the pipeline's Dependencies
// (quietpatch calls them with the object before and after an update,
// tombstones unwrapped, and drops the duplicates).
type routesOf struct{ routes, gateways cache.Indexer }

// by returns the Keys of a dependency whose object o affects the routes
// the route index maps value(o) to.
func (r routesOf) by(index string, value func(metav1.Object) string) func(any) []types.NamespacedName {
	return func(obj any) []types.NamespacedName {
		m, ok := obj.(metav1.Object)
		if !ok {
			return nil
		}
		objs, _ := r.routes.ByIndex(index, value(m)) // an unknown index: a programming error the tests catch
		keys := make([]types.NamespacedName, 0, len(objs))
		for _, o := range objs {
			if rt, ok := o.(*gatewayv1.HTTPRoute); ok {
				keys = append(keys, types.NamespacedName{Namespace: rt.Namespace, Name: rt.Name})
			}
		}
		return keys
	}
}

// gatewayClass is the Keys of GatewayClasses: the routes of every Gateway
// of the class.
func (r routesOf) gatewayClass(obj any) []types.NamespacedName {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil
	}
	gws, _ := r.gateways.ByIndex(indexGatewayClass, m.GetName())
	var keys []types.NamespacedName
	for _, gw := range gws {
		keys = append(keys, r.by(indexGateway, objectName)(gw)...)
	}
	return keys
}

// objectName is the index value of a namespaced object: "namespace/name".
func objectName(m metav1.Object) string { return nsName(m.GetNamespace(), m.GetName()) }
