package controllerruntime

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	"github.com/quietpatch/quietpatch/statuspatch"
)

// NewStatusPatcher returns a patcher for the status of objects of obj's
// type — a typed object registered in c's scheme, or an
// *unstructured.Unstructured with its GroupVersionKind set —, over the
// cluster c of a manager (a manager.Manager is a cluster.Cluster): the
// resource found through c.GetRESTMapper(), requests sent by a client of
// the patcher's own made from c.GetConfig() — its own connections, not
// c.GetHTTPClient()'s —, under the configuration's rate limit. It is
// statuspatch.MergePatcher (statuspatch.NewMergePatcher): one merge patch
// of the status subresource with the metadata.resourceVersion
// precondition, so that the API server answers 409 Conflict instead of
// applying a patch computed from an object that changed since; the call's
// deadline as the timeout parameter, which the API server enforces; no
// retry of a 429 (the dispatcher honours its Retry-After); WithFence names
// the writer. It is safe for concurrent use.
//
// controller-runtime's client.Client cannot carry the timeout parameter
// (its PatchOptions have none), so the patcher is built on a REST client,
// not on mgr.GetClient(). fieldManager names the writer in managedFields;
// the API server allows 128 characters at most. Throughput: the
// configuration's rate limiter is part of every patch's latency; see the
// package documentation, section Clients.
func NewStatusPatcher(c cluster.Cluster, obj client.Object, fieldManager string) (*statuspatch.MergePatcher, error) {
	switch {
	case c == nil:
		return nil, errors.New("controllerruntime: NewStatusPatcher: the cluster must not be nil")
	case obj == nil:
		return nil, errors.New("controllerruntime: NewStatusPatcher: obj must not be nil")
	}
	gvr, err := resourceOf(c, obj)
	if err != nil {
		return nil, fmt.Errorf("controllerruntime: NewStatusPatcher: %w", err)
	}
	p, err := statuspatch.NewMergePatcher(c.GetConfig(), gvr, fieldManager)
	if err != nil {
		return nil, fmt.Errorf("controllerruntime: NewStatusPatcher: %w", err)
	}
	return p, nil
}

// resourceOf returns the resource of obj's type: its kind from c's
// scheme, the resource from c's REST mapper.
func resourceOf(c cluster.Cluster, obj client.Object) (schema.GroupVersionResource, error) {
	gvk, err := apiutil.GVKForObject(obj, c.GetScheme())
	if err != nil {
		return schema.GroupVersionResource{}, fmt.Errorf("the kind of %T: %w", obj, err)
	}
	mapping, err := c.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return schema.GroupVersionResource{}, fmt.Errorf("the resource of %s: %w", gvk, err)
	}
	return mapping.Resource, nil
}
