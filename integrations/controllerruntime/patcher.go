package controllerruntime

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/quietpatch/quietpatch/statuspatch"
)

// StatusPatcher applies each statuspatch.MergePatch to the status subresource
// of one resource through a controller-runtime client:
// c.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, body),
// client.FieldOwner(fieldManager)), with the body of
// statuspatch.MergePatch.Body — the status plus the metadata.resourceVersion
// precondition, so that the API server answers 409 Conflict instead of
// applying a patch computed from an object that changed since. It returns
// the client's error unchanged (package statuspatch/outcome tells
// conflicts, not-found, forbidden and throttling apart). It is safe for concurrent
// use.
//
// Throughput: the client's rate limiter is part of every patch's latency.
// See the package documentation, section Clients, before passing the
// manager's own client.
type StatusPatcher struct {
	client       client.Client
	gvk          schema.GroupVersionKind
	unstructured bool
	fieldManager string
}

var _ statuspatch.Patcher[statuspatch.MergePatch] = (*StatusPatcher)(nil)

// NewStatusPatcher returns a patcher for the status of objects of obj's
// type, which must be registered in c's scheme (or be an
// *unstructured.Unstructured with its GroupVersionKind set). fieldManager
// names the writer in managedFields; the API server allows 128 characters
// at most.
func NewStatusPatcher(c client.Client, obj client.Object, fieldManager string) (*StatusPatcher, error) {
	switch {
	case c == nil:
		return nil, errors.New("controllerruntime: NewStatusPatcher: client must not be nil")
	case obj == nil:
		return nil, errors.New("controllerruntime: NewStatusPatcher: obj must not be nil")
	case fieldManager == "":
		return nil, errors.New("controllerruntime: NewStatusPatcher: fieldManager must not be empty")
	case len(fieldManager) > 128:
		return nil, fmt.Errorf("controllerruntime: NewStatusPatcher: fieldManager must be at most 128 characters, got %d", len(fieldManager))
	}
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil {
		return nil, fmt.Errorf("controllerruntime: NewStatusPatcher: the kind of %T: %w", obj, err)
	}
	_, unstruct := obj.(runtime.Unstructured)
	return &StatusPatcher{client: c, gvk: gvk, unstructured: unstruct, fieldManager: fieldManager}, nil
}

// Patch sends p. A malformed p (statuspatch.ErrInvalidPatch) is returned
// without sending anything.
func (s *StatusPatcher) Patch(ctx context.Context, p statuspatch.MergePatch) error {
	body, err := p.Body()
	if err != nil {
		return err
	}
	obj, err := s.newObject()
	if err != nil {
		return err
	}
	obj.SetNamespace(p.Namespace)
	obj.SetName(p.Name)
	// The client decodes the answer into obj, which is then dropped: the
	// informer brings the new status to the cache.
	return s.client.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, body), client.FieldOwner(s.fieldManager))
}

func (s *StatusPatcher) newObject() (client.Object, error) {
	if s.unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(s.gvk)
		return u, nil
	}
	ro, err := s.client.Scheme().New(s.gvk)
	if err != nil {
		return nil, fmt.Errorf("controllerruntime: StatusPatcher: a new %s: %w", s.gvk, err)
	}
	obj, ok := ro.(client.Object)
	if !ok {
		return nil, fmt.Errorf("controllerruntime: StatusPatcher: %T is not a client.Object", ro)
	}
	return obj, nil
}
