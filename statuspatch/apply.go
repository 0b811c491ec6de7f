package statuspatch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/quietpatch/quietpatch/internal/base"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// ApplyPatch is a server-side apply of an object's status subresource: the
// status fields one writer owns, as they should be. The API server merges
// them into the object as it is when the request arrives and records the
// writer (the field manager) as their owner; fields of other writers stay
// as they are, and a field this writer owned before and no longer applies
// is removed. There is no precondition and no read-modify-write: two
// writers that own different fields never conflict.
//
// Status must hold only this writer's own fields. For a list of
// conditions, that is only right when the CRD declares the list
// `x-kubernetes-list-type: map` keyed by type (kubebuilder:
// +listType=map, +listMapKey=type): each condition is then a field of its
// own. An atomic list is one field, and applying it takes the whole list
// from the other writers. Package statuspatch/conditions builds
// ApplyPatches of conditions (conditions.Applier).
type ApplyPatch struct {
	// Namespace of the object; "" for cluster-scoped resources.
	Namespace string
	// Name of the object. Required.
	Name string
	// Status is the JSON object of the applied status: only the fields
	// this writer owns. Required.
	Status json.RawMessage
}

// NewApplyPatch builds an [ApplyPatch] of obj's status from the status
// value (anything encoding/json marshals to a JSON object, holding only the
// writer's own fields), taking the namespace and name from obj. A nil obj,
// or a status that does not marshal to a JSON object, is rejected with a
// *quietpatch.ConfigError naming it.
func NewApplyPatch(obj metav1.Object, status any) (ApplyPatch, error) {
	raw, err := marshalStatus(obj, status)
	if err != nil {
		return ApplyPatch{}, err
	}
	return ApplyPatch{Namespace: obj.GetNamespace(), Name: obj.GetName(), Status: raw}, nil
}

// Body returns the request body for an object of kind gvk (JSON, which
// the API server reads as the YAML of application/apply-patch+yaml):
//
//	{"apiVersion":"<group/version>","kind":"<Kind>","metadata":{"name":"<Name>","namespace":"<Namespace>"},"status":<Status>}
//
// It fails with [ErrInvalidPatch] when Name is empty or Status is not a
// JSON object.
func (p ApplyPatch) Body(gvk schema.GroupVersionKind) ([]byte, error) {
	key := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}.String()
	if p.Name == "" {
		return nil, fmt.Errorf("%w: ApplyPatch.Name is empty", ErrInvalidPatch)
	}
	trimmed := bytes.TrimSpace(p.Status)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, fmt.Errorf("%w: ApplyPatch.Status of %s is not a JSON object", ErrInvalidPatch, key)
	}
	type meta struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace,omitempty"`
	}
	b, err := json.Marshal(struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Metadata   meta            `json:"metadata"`
		Status     json.RawMessage `json:"status"`
	}{gvk.GroupVersion().String(), gvk.Kind, meta{p.Name, p.Namespace}, trimmed})
	if err != nil {
		return nil, fmt.Errorf("%w: ApplyPatch.Status of %s: %v", ErrInvalidPatch, key, err)
	}
	return b, nil
}

// ApplyPatcher applies [ApplyPatch]es to the status subresource of
// one resource: one PATCH .../<resource>/<name>/status request with content
// type application/apply-patch+yaml, its field manager and force=true, and
// its context's deadline as the request's timeout parameter
// ([ServerTimeout]), so that the API server abandons a request that
// outlives the claim rather than commit it late. Force is safe because an ApplyPatch
// holds only this writer's own fields: it takes over only a field another
// manager wrote too — the same value written by an earlier version of this
// controller through a merge patch, say —, never another writer's
// condition of a listType=map list. It is safe for concurrent use.
//
// Choose it over [MergePatcher]'s merge patches when several
// controllers write conditions of one status, each its own types, and the
// CRD's conditions are listType=map: no read-modify-write, no 409 Conflict
// when another writer wrote in between, nothing retried. Keep merge patches
// with their resourceVersion precondition for atomic lists (Gateway API's
// status.parents, where each controller owns entries of one list): there
// the precondition is what makes a write computed from an old view fail —
// including a write of an earlier leader that lands after its claim ended.
// An apply has no precondition: such a late write lands, and the object's
// next event has the current leader recompute and re-apply.
type ApplyPatcher struct {
	statusClient
	gvk schema.GroupVersionKind
}

// NewApplyPatcher returns a patcher that applies the status of resource
// gvr, whose objects are of kind kind (the apply body names apiVersion and
// kind), with a client of its own for the API server of cfg. Like
// [NewMergePatcher] it leaves a 429's Retry-After to the dispatcher (no
// client-side retries), and cfg's rate limiter applies as configured: set
// QPS to -1 for none. fieldManager names this writer in managedFields;
// each writer of a status needs its own, the same in every replica of one
// controller. Invalid arguments are rejected with a
// *quietpatch.ConfigError naming them.
func NewApplyPatcher(cfg *rest.Config, gvr schema.GroupVersionResource, kind, fieldManager string) (*ApplyPatcher, error) {
	if kind == "" {
		return nil, &base.ConfigError{Field: "kind", Reason: "must not be empty"}
	}
	c, err := newStatusClient(cfg, gvr, fieldManager)
	if err != nil {
		return nil, err
	}
	return &ApplyPatcher{statusClient: c, gvk: gvr.GroupVersion().WithKind(kind)}, nil
}

// Patch applies p. It returns the client's error unchanged (see package
// statuspatch/outcome); an [ErrInvalidPatch] without sending anything when
// p is malformed; and, without sending anything, an error wrapping
// context.DeadlineExceeded when ctx's deadline leaves no time
// ([ServerTimeout]).
func (a *ApplyPatcher) Patch(ctx context.Context, p ApplyPatch) error {
	body, err := p.Body(a.gvk)
	if err != nil {
		return err
	}
	req, err := a.request(ctx, types.ApplyYAMLPatchType, p.Namespace, p.Name, a.fieldManager)
	if err != nil {
		return fmt.Errorf("statuspatch: apply status of %s/%s %w", p.Namespace, p.Name, err)
	}
	return req.Param("force", "true").Body(body).Do(ctx).Error()
}
