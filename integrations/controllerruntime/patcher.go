package controllerruntime

import (
	"errors"
	"fmt"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	"github.com/quietpatch/quietpatch/statuspatch"
)

// NewStatusPatcher returns a patcher for the status of objects of obj's
// type — a typed object registered in c's scheme, or an
// *unstructured.Unstructured with its GroupVersionKind set —, over the
// cluster c of a manager (a manager.Manager is a cluster.Cluster): the
// resource found through c.GetRESTMapper(), requests sent with a REST
// client made from c.GetConfig() over c.GetHTTPClient(), the manager's
// connections, under the configuration's rate limit. It is
// statuspatch.DynamicStatusPatcher: one merge patch of the status
// subresource with the metadata.resourceVersion precondition, so that the
// API server answers 409 Conflict instead of applying a patch computed from
// an object that changed since; the call's deadline as the timeout
// parameter, which the API server enforces; no retry of a 429 (the
// dispatcher honours its Retry-After); WithFence names the writer. It is
// safe for concurrent use.
//
// controller-runtime's client.Client cannot carry the timeout parameter
// (its PatchOptions have none), so the patcher is built on a REST client,
// not on mgr.GetClient(). fieldManager names the writer in managedFields;
// the API server allows 128 characters at most. Throughput: the
// configuration's rate limiter is part of every patch's latency; see the
// package documentation, section Clients.
func NewStatusPatcher(c cluster.Cluster, obj client.Object, fieldManager string) (*statuspatch.DynamicStatusPatcher, error) {
	switch {
	case c == nil:
		return nil, errors.New("controllerruntime: NewStatusPatcher: the cluster must not be nil")
	case obj == nil:
		return nil, errors.New("controllerruntime: NewStatusPatcher: obj must not be nil")
	}
	gvk, err := apiutil.GVKForObject(obj, c.GetScheme())
	if err != nil {
		return nil, fmt.Errorf("controllerruntime: NewStatusPatcher: the kind of %T: %w", obj, err)
	}
	mapping, err := c.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("controllerruntime: NewStatusPatcher: the resource of %s: %w", gvk, err)
	}
	rc, err := rest.UnversionedRESTClientForConfigAndClient(dynamic.ConfigFor(rest.CopyConfig(c.GetConfig())), c.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("controllerruntime: NewStatusPatcher: the REST client: %w", err)
	}
	p, err := statuspatch.NewStatusPatcher(rc, mapping.Resource, fieldManager)
	if err != nil {
		return nil, fmt.Errorf("controllerruntime: NewStatusPatcher: %w", err)
	}
	return p, nil
}
