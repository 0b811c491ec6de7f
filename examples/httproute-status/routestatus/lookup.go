package routestatus

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"
)

// Lookup is the read-only view of the cluster that Compute consults for the
// objects a route refers to. It is deliberately shaped like informer listers,
// so that an adapter over client-go/gateway-api listers is a few lines, and
// like a map, so that tests can use a Snapshot.
//
// Implementations must not return objects that callers may not read
// concurrently; Compute never modifies what a Lookup returns. A method that
// returns (nil, true) is treated as "not found".
type Lookup interface {
	// Service returns the core/v1 Service namespace/name.
	Service(namespace, name string) (*corev1.Service, bool)
	// Gateway returns the Gateway namespace/name.
	Gateway(namespace, name string) (*gatewayv1.Gateway, bool)
	// GatewayClass returns the cluster-scoped GatewayClass name.
	GatewayClass(name string) (*gatewayv1.GatewayClass, bool)
	// Namespace returns the Namespace name (its labels are matched by
	// allowedRoutes.namespaces.selector).
	Namespace(name string) (*corev1.Namespace, bool)
	// ReferenceGrants returns the ReferenceGrants in namespace, in any order.
	//
	// Gateway API v1.6.3 serves ReferenceGrant both as v1 and as v1beta1
	// (the storage version) in the standard channel; the Go type
	// v1beta1.ReferenceGrant is defined as v1.ReferenceGrant, so an adapter
	// over a v1beta1 lister converts each item with
	// (*gatewayv1.ReferenceGrant)(item), without copying.
	ReferenceGrants(namespace string) []*gatewayv1.ReferenceGrant
}

// Snapshot is a map-backed Lookup: a fixed picture of the objects a set of
// routes refers to, for tests, fuzzing, benchmarks and demos.
//
// The zero value and a nil *Snapshot are empty and usable. A Snapshot is not
// safe for concurrent use while it is being filled with Add; once filled it may
// be read from any number of goroutines. It stores the pointers it is given:
// do not modify an object after adding it.
type Snapshot struct {
	services   map[types.NamespacedName]*corev1.Service
	gateways   map[types.NamespacedName]*gatewayv1.Gateway
	classes    map[string]*gatewayv1.GatewayClass
	namespaces map[string]*corev1.Namespace
	grants     map[string][]*gatewayv1.ReferenceGrant
}

var _ Lookup = (*Snapshot)(nil)

// NewSnapshot returns a Snapshot holding objs; see Add for the types accepted.
func NewSnapshot(objs ...runtime.Object) (*Snapshot, error) {
	s := &Snapshot{}
	for i, o := range objs {
		if err := s.Add(o); err != nil {
			return nil, fmt.Errorf("objs[%d]: %w", i, err)
		}
	}
	return s, nil
}

// Add stores obj, replacing an object of the same kind, namespace and name
// (ReferenceGrants are appended, not replaced). It accepts *corev1.Service,
// *corev1.Namespace, *gatewayv1.Gateway, *gatewayv1.GatewayClass,
// *gatewayv1.ReferenceGrant and *gatewayv1beta1.ReferenceGrant; anything else
// (including a nil pointer) yields an error wrapping ErrUnsupportedObject.
func (s *Snapshot) Add(obj runtime.Object) error {
	switch o := obj.(type) {
	case *corev1.Service:
		if o != nil {
			if s.services == nil {
				s.services = make(map[types.NamespacedName]*corev1.Service)
			}
			s.services[types.NamespacedName{Namespace: o.Namespace, Name: o.Name}] = o
			return nil
		}
	case *corev1.Namespace:
		if o != nil {
			if s.namespaces == nil {
				s.namespaces = make(map[string]*corev1.Namespace)
			}
			s.namespaces[o.Name] = o
			return nil
		}
	case *gatewayv1.Gateway:
		if o != nil {
			if s.gateways == nil {
				s.gateways = make(map[types.NamespacedName]*gatewayv1.Gateway)
			}
			s.gateways[types.NamespacedName{Namespace: o.Namespace, Name: o.Name}] = o
			return nil
		}
	case *gatewayv1.GatewayClass:
		if o != nil {
			if s.classes == nil {
				s.classes = make(map[string]*gatewayv1.GatewayClass)
			}
			s.classes[o.Name] = o
			return nil
		}
	case *gatewayv1.ReferenceGrant:
		if o != nil {
			s.addGrant(o)
			return nil
		}
	case *gatewayv1beta1.ReferenceGrant:
		if o != nil {
			s.addGrant((*gatewayv1.ReferenceGrant)(o))
			return nil
		}
	}
	return fmt.Errorf("%w: %T", ErrUnsupportedObject, obj)
}

func (s *Snapshot) addGrant(g *gatewayv1.ReferenceGrant) {
	if s.grants == nil {
		s.grants = make(map[string][]*gatewayv1.ReferenceGrant)
	}
	s.grants[g.Namespace] = append(s.grants[g.Namespace], g)
}

// Service implements Lookup.
func (s *Snapshot) Service(namespace, name string) (*corev1.Service, bool) {
	if s == nil {
		return nil, false
	}
	o, ok := s.services[types.NamespacedName{Namespace: namespace, Name: name}]
	return o, ok
}

// Gateway implements Lookup.
func (s *Snapshot) Gateway(namespace, name string) (*gatewayv1.Gateway, bool) {
	if s == nil {
		return nil, false
	}
	o, ok := s.gateways[types.NamespacedName{Namespace: namespace, Name: name}]
	return o, ok
}

// GatewayClass implements Lookup.
func (s *Snapshot) GatewayClass(name string) (*gatewayv1.GatewayClass, bool) {
	if s == nil {
		return nil, false
	}
	o, ok := s.classes[name]
	return o, ok
}

// Namespace implements Lookup.
func (s *Snapshot) Namespace(name string) (*corev1.Namespace, bool) {
	if s == nil {
		return nil, false
	}
	o, ok := s.namespaces[name]
	return o, ok
}

// ReferenceGrants implements Lookup. The returned slice is shared: callers
// must not modify it.
func (s *Snapshot) ReferenceGrants(namespace string) []*gatewayv1.ReferenceGrant {
	if s == nil {
		return nil
	}
	return s.grants[namespace]
}
