package routestatus

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1listers "k8s.io/client-go/listers/core/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1listers "sigs.k8s.io/gateway-api/pkg/client/listers/apis/v1"
	gatewayv1beta1listers "sigs.k8s.io/gateway-api/pkg/client/listers/apis/v1beta1"
)

// Listers is a Lookup over informer listers (read-only views of informer
// caches: no API calls). Each field is optional: a nil lister finds nothing.
// What a missing lister means:
//
//   - Services: every backend is BackendNotFound and every mesh parent
//     NoMatchingParent;
//   - Namespaces: listeners with allowedRoutes.namespaces.from Selector allow
//     nothing;
//   - Gateways or GatewayClasses: no Gateway parent is handled;
//   - ReferenceGrantsV1 and ReferenceGrantsV1beta1: no cross-namespace backend
//     is permitted. ReferenceGrantsV1 is used when set, else
//     ReferenceGrantsV1beta1, for clusters whose CRDs predate the v1 version.
//
// A Listers value is safe for concurrent use when its listers are (informer
// listers are). Objects returned by listers are shared with the cache; Compute
// never modifies them.
type Listers struct {
	// Services serves Service (backends and mesh parents).
	Services corev1listers.ServiceLister
	// Namespaces serves Namespace (labels for allowedRoutes selectors).
	Namespaces corev1listers.NamespaceLister
	// Gateways serves Gateway (Gateway parents).
	Gateways gatewayv1listers.GatewayLister
	// GatewayClasses serves GatewayClass (which controller owns a Gateway).
	GatewayClasses gatewayv1listers.GatewayClassLister
	// ReferenceGrantsV1 serves ReferenceGrant from the v1 API version.
	ReferenceGrantsV1 gatewayv1listers.ReferenceGrantLister
	// ReferenceGrantsV1beta1 serves ReferenceGrant from the v1beta1 API
	// version; used only when ReferenceGrantsV1 is nil.
	ReferenceGrantsV1beta1 gatewayv1beta1listers.ReferenceGrantLister
}

var _ Lookup = Listers{}

// Service implements Lookup.
func (l Listers) Service(namespace, name string) (*corev1.Service, bool) {
	if l.Services == nil {
		return nil, false
	}
	o, err := l.Services.Services(namespace).Get(name)
	return o, err == nil && o != nil
}

// Gateway implements Lookup.
func (l Listers) Gateway(namespace, name string) (*gatewayv1.Gateway, bool) {
	if l.Gateways == nil {
		return nil, false
	}
	o, err := l.Gateways.Gateways(namespace).Get(name)
	return o, err == nil && o != nil
}

// GatewayClass implements Lookup.
func (l Listers) GatewayClass(name string) (*gatewayv1.GatewayClass, bool) {
	if l.GatewayClasses == nil {
		return nil, false
	}
	o, err := l.GatewayClasses.Get(name)
	return o, err == nil && o != nil
}

// Namespace implements Lookup.
func (l Listers) Namespace(name string) (*corev1.Namespace, bool) {
	if l.Namespaces == nil {
		return nil, false
	}
	o, err := l.Namespaces.Get(name)
	return o, err == nil && o != nil
}

// ReferenceGrants implements Lookup. It allocates the returned slice.
func (l Listers) ReferenceGrants(namespace string) []*gatewayv1.ReferenceGrant {
	switch {
	case l.ReferenceGrantsV1 != nil:
		gs, err := l.ReferenceGrantsV1.ReferenceGrants(namespace).List(labels.Everything())
		if err != nil {
			return nil
		}
		return gs
	case l.ReferenceGrantsV1beta1 != nil:
		gs, err := l.ReferenceGrantsV1beta1.ReferenceGrants(namespace).List(labels.Everything())
		if err != nil {
			return nil
		}
		out := make([]*gatewayv1.ReferenceGrant, len(gs))
		for i, g := range gs {
			out[i] = (*gatewayv1.ReferenceGrant)(g)
		}
		return out
	}
	return nil
}
