package statuspatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// ErrInvalidPatch is returned (wrapped) by a patcher for a patch it refuses
// to send, such as a [MergePatch] without a resourceVersion precondition.
var ErrInvalidPatch = errors.New("statuspatch: invalid patch")

// Patcher applies one patch to the API server. The [Dispatcher] calls it with
// a context whose deadline is min(PatchTimeout, time left on the leader's
// claim); an implementation must return when the context is done, and should
// return the API server's error as the client returns it (a
// *k8serrors.StatusError), so that outcome.Of (package statuspatch/outcome)
// can tell conflicts, not-found, forbidden and throttling apart, and a 429's
// Retry-After reaches the dispatcher. Patch may be called from several
// goroutines at once, never twice at once for the same key.
type Patcher[P any] interface {
	// Patch applies patch, returning when done or when ctx ends.
	Patch(ctx context.Context, patch P) error
}

// PatcherFunc adapts a function to a [Patcher].
type PatcherFunc[P any] func(ctx context.Context, patch P) error

// Patch calls f(ctx, patch).
func (f PatcherFunc[P]) Patch(ctx context.Context, patch P) error { return f(ctx, patch) }

// MergePatch is a JSON merge patch of an object's status subresource,
// guarded by a resourceVersion precondition: the API server applies it only
// if the object still has ResourceVersion, and answers 409 Conflict
// otherwise. The precondition makes a patch computed from an old view of the
// object fail instead of overwriting what changed since; the next reconcile
// recomputes from the fresh object.
//
// Status is the JSON of the status as it should be after the merge. Merge
// patch semantics apply (RFC 7386): objects merge key by key, a null removes
// a key, and lists are replaced whole — which is what atomic lists such as
// conditions or HTTPRoute parents need.
type MergePatch struct {
	// Namespace of the object; "" for cluster-scoped resources.
	Namespace string
	// Name of the object. Required.
	Name string
	// ResourceVersion the object must still have. Required.
	ResourceVersion string
	// Status is the JSON object merged into .status. Required.
	Status json.RawMessage
}

// NewMergePatch builds a [MergePatch] of obj's status from the status value
// (anything encoding/json marshals to a JSON object), taking the namespace,
// name and resourceVersion from obj.
func NewMergePatch(obj metav1.Object, status any) (MergePatch, error) {
	raw, err := json.Marshal(status)
	if err != nil {
		return MergePatch{}, fmt.Errorf("statuspatch: marshal status of %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	return MergePatch{
		Namespace:       obj.GetNamespace(),
		Name:            obj.GetName(),
		ResourceVersion: obj.GetResourceVersion(),
		Status:          raw,
	}, nil
}

// Body returns the request body:
//
//	{"metadata":{"resourceVersion":"<ResourceVersion>"},"status":<Status>}
//
// It fails with [ErrInvalidPatch] when Name or ResourceVersion is empty, or
// Status is not a JSON object.
func (p MergePatch) Body() ([]byte, error) {
	if p.Name == "" {
		return nil, fmt.Errorf("%w: MergePatch.Name is empty", ErrInvalidPatch)
	}
	if p.ResourceVersion == "" {
		return nil, fmt.Errorf("%w: MergePatch.ResourceVersion of %s is empty (no precondition)", ErrInvalidPatch, p.key())
	}
	trimmed := bytes.TrimSpace(p.Status)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, fmt.Errorf("%w: MergePatch.Status of %s is not a JSON object", ErrInvalidPatch, p.key())
	}
	var body struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Status json.RawMessage `json:"status"`
	}
	body.Metadata.ResourceVersion = p.ResourceVersion
	body.Status = trimmed
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("%w: MergePatch.Status of %s: %v", ErrInvalidPatch, p.key(), err)
	}
	return b, nil
}

func (p MergePatch) key() string {
	return types.NamespacedName{Namespace: p.Namespace, Name: p.Name}.String()
}

// DynamicStatusPatcher applies [MergePatch]es to the status subresource of
// one resource through client-go's dynamic client: one PATCH
// .../<resource>/<name>/status request with content type
// application/merge-patch+json and the configured field manager. It works for
// any resource with a status subresource, built-in or custom. It is safe for
// concurrent use.
type DynamicStatusPatcher struct {
	client       dynamic.NamespaceableResourceInterface // nil when rest is set
	rest         rest.Interface                         // NewStatusPatcherForConfig
	gvr          schema.GroupVersionResource
	fieldManager string
}

// NewDynamicStatusPatcher returns a patcher for the status of resource gvr.
// fieldManager names the writer in managedFields (PatchOptions.FieldManager);
// make it descriptive, e.g. "example.com/route-status-controller". The API
// server limits it to 128 characters.
func NewDynamicStatusPatcher(client dynamic.Interface, gvr schema.GroupVersionResource, fieldManager string) (*DynamicStatusPatcher, error) {
	switch {
	case client == nil:
		return nil, errors.New("statuspatch: NewDynamicStatusPatcher: client must not be nil")
	case gvr.Resource == "" || gvr.Version == "":
		return nil, fmt.Errorf("statuspatch: NewDynamicStatusPatcher: gvr needs a version and a resource, got %q", gvr.String())
	case fieldManager == "":
		return nil, errors.New("statuspatch: NewDynamicStatusPatcher: fieldManager must not be empty")
	case len(fieldManager) > 128:
		return nil, fmt.Errorf("statuspatch: NewDynamicStatusPatcher: fieldManager must be at most 128 characters, got %d", len(fieldManager))
	}
	return &DynamicStatusPatcher{client: client.Resource(gvr), gvr: gvr, fieldManager: fieldManager}, nil
}

// NewStatusPatcherForConfig returns a patcher for the status of resource
// gvr that talks to the API server described by cfg with a client of its
// own, and leaves a 429's Retry-After to the [Dispatcher]: client-go
// retries a throttled request by itself (up to 10 times, sleeping
// Retry-After in the calling goroutine) while the other calls go on; with
// retries off, the dispatcher sees the 429 and holds every call back for
// the window. It is the patcher to use with the adaptive in-flight limit.
//
// cfg is copied. Its rate limiter applies as configured: set QPS to -1 to
// turn client-side limiting off for status patches (see [Dispatcher]).
// fieldManager is as for [NewDynamicStatusPatcher].
func NewStatusPatcherForConfig(cfg *rest.Config, gvr schema.GroupVersionResource, fieldManager string) (*DynamicStatusPatcher, error) {
	switch {
	case cfg == nil:
		return nil, errors.New("statuspatch: NewStatusPatcherForConfig: cfg must not be nil")
	case gvr.Resource == "" || gvr.Version == "":
		return nil, fmt.Errorf("statuspatch: NewStatusPatcherForConfig: gvr needs a version and a resource, got %q", gvr.String())
	case fieldManager == "":
		return nil, errors.New("statuspatch: NewStatusPatcherForConfig: fieldManager must not be empty")
	case len(fieldManager) > 128:
		return nil, fmt.Errorf("statuspatch: NewStatusPatcherForConfig: fieldManager must be at most 128 characters, got %d", len(fieldManager))
	}
	rc, err := rest.UnversionedRESTClientFor(dynamic.ConfigFor(rest.CopyConfig(cfg)))
	if err != nil {
		return nil, fmt.Errorf("statuspatch: NewStatusPatcherForConfig: %w", err)
	}
	return &DynamicStatusPatcher{rest: rc, gvr: gvr, fieldManager: fieldManager}, nil
}

// Patch sends p. It returns the client's error unchanged (see package statuspatch/outcome),
// or an [ErrInvalidPatch] without sending anything when p is malformed.
func (d *DynamicStatusPatcher) Patch(ctx context.Context, p MergePatch) error {
	body, err := p.Body()
	if err != nil {
		return err
	}
	if d.rest == nil {
		_, err = d.client.Namespace(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, body,
			metav1.PatchOptions{FieldManager: d.fieldManager}, "status")
		return err
	}
	path := []string{"/apis", d.gvr.Group, d.gvr.Version}
	if d.gvr.Group == "" {
		path = []string{"/api", d.gvr.Version}
	}
	if p.Namespace != "" {
		path = append(path, "namespaces", p.Namespace)
	}
	path = append(path, d.gvr.Resource, p.Name, "status")
	return d.rest.Patch(types.MergePatchType).AbsPath(path...).
		Param("fieldManager", d.fieldManager).MaxRetries(0).
		Body(body).Do(ctx).Error()
}
