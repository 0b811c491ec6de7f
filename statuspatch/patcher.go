package statuspatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"

	"github.com/quietpatch/quietpatch/internal/base"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// ErrInvalidPatch is returned (wrapped) by a patcher for a patch it refuses
// to send, such as a [MergePatch] without a resourceVersion precondition.
var ErrInvalidPatch = errors.New("statuspatch: invalid patch")

// Patcher applies one patch to the API server. The [Dispatcher] calls it
// with a context whose deadline is min(PatchTimeout, time left on the
// leader's claim), and which carries the [WriteClaim] the call is made
// under ([WriteClaimFrom]). An implementation must:
//
//   - tell the API server the deadline: send the query parameter
//     timeout=d.String() with d, ok := [ServerTimeout](ctx), and send
//     nothing when ok is false (return an error wrapping
//     context.DeadlineExceeded). The server counts d from when it received
//     the request's headers and abandons the request then, answering 504,
//     instead of committing a write that outlived the claim (say, one whose
//     body a paused process sent late). client-go's typed and dynamic
//     clients and controller-runtime's cannot set the parameter: build the
//     request on a rest.Interface, as [NewMergePatcher] does;
//   - return when ctx is done;
//   - return the API server's error as the client returns it (a
//     *k8serrors.StatusError), so that outcome.Of (package
//     statuspatch/outcome) can tell conflicts, not-found, forbidden,
//     fenced, throttling and abandoned calls apart, and a 429's
//     Retry-After reaches the dispatcher;
//   - to be fenced by the API server, name the writer in the field
//     manager: [FencedFieldManager](claim).
//
// Patch may be called from several goroutines at once, never twice at once
// for the same key. A Patcher that also reports the version its write
// produced ([VersionPatcher]) spares the dispatcher the serve of each
// write's own event.
type Patcher[P any] interface {
	// Patch applies patch, returning when done or when ctx ends.
	Patch(ctx context.Context, patch P) error
}

// VersionPatcher is a [Patcher] that also reports the resourceVersion its
// write produced, so that the [Dispatcher] can tell the event of its own
// write — the echo — from every other event ([Dispatcher.Echo]) and skip
// serving it. Report a version only for a write the API server applied to
// the very object the patch was built from (a resourceVersion
// precondition, as [MergePatch] carries): the object at that version is
// then exactly the one the status was computed from, with that status. A
// write without a precondition may have landed on someone else's change,
// whose event the informer can skip after a relist: report "" for it (or
// implement only Patcher), and every event is served as before; report ""
// too when the server does not version its writes (a fake client whose
// answer keeps the precondition's version). [MergePatcher] is a
// VersionPatcher.
type VersionPatcher[P any] interface {
	Patcher[P]
	// PatchVersion applies patch as Patch does, returning the object's
	// resourceVersion after the write ("" if unknown).
	PatchVersion(ctx context.Context, patch P) (resourceVersion string, err error)
}

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
// name and resourceVersion from obj. A nil obj, or a status that does not
// marshal to a JSON object, is rejected with a *quietpatch.ConfigError
// naming it.
func NewMergePatch(obj metav1.Object, status any) (MergePatch, error) {
	raw, err := marshalStatus(obj, status)
	if err != nil {
		return MergePatch{}, err
	}
	return MergePatch{
		Namespace:       obj.GetNamespace(),
		Name:            obj.GetName(),
		ResourceVersion: obj.GetResourceVersion(),
		Status:          raw,
	}, nil
}

// marshalStatus returns the JSON of status for a patch of obj; a nil obj,
// or a status that does not marshal to a JSON object, is a
// *quietpatch.ConfigError.
func marshalStatus(obj metav1.Object, status any) (json.RawMessage, error) {
	if obj == nil || reflect.ValueOf(obj).Kind() == reflect.Pointer && reflect.ValueOf(obj).IsNil() {
		return nil, &base.ConfigError{Field: "obj", Reason: "must not be nil"}
	}
	raw, err := json.Marshal(status)
	if err != nil {
		return nil, &base.ConfigError{Field: "status", Reason: fmt.Sprintf("of %s/%s does not marshal to JSON: %v", obj.GetNamespace(), obj.GetName(), err)}
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return nil, &base.ConfigError{Field: "status", Reason: fmt.Sprintf("of %s/%s must marshal to a JSON object, got %.40s", obj.GetNamespace(), obj.GetName(), t)}
	}
	return raw, nil
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
		objectVersion
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

// MergePatcher applies [MergePatch]es to the status subresource of
// one resource, any resource with a status subresource, built-in or
// custom: one PATCH .../<resource>/<name>/status request with content type
// application/merge-patch+json, the configured field manager, and the
// call's deadline as the timeout parameter ([ServerTimeout]). It leaves a
// 429's Retry-After to the [Dispatcher]: client-go would retry a throttled
// request by itself (up to 10 times, sleeping Retry-After in the calling
// goroutine) while the other calls go on; without retries, the dispatcher
// sees the 429 and holds every call back for the window. Build it with
// [NewMergePatcher]; [MergePatcher.WithFence]
// names the writer in each write instead. It is safe for concurrent use.
type MergePatcher struct {
	statusClient
	fence *fenceCheck // nil: not fenced
}

// NewMergePatcher returns a patcher for the status of resource gvr that
// talks to the API server described by cfg with a client of its own.
// fieldManager names the writer in managedFields; make it descriptive,
// e.g. "example.com/route-status-controller". The API server limits it to
// [maxFieldManager] characters.
//
// cfg is copied. Its rate limiter applies as configured: set QPS to -1 to
// turn client-side limiting off for status patches, as the dispatcher's
// in-flight limit adapts to the server (package quietpatch, "The status
// client"). Invalid arguments are rejected with a *quietpatch.ConfigError
// naming them.
func NewMergePatcher(cfg *rest.Config, gvr schema.GroupVersionResource, fieldManager string) (*MergePatcher, error) {
	c, err := newStatusClient(cfg, gvr, fieldManager)
	if err != nil {
		return nil, err
	}
	return &MergePatcher{statusClient: c}, nil
}

// newStatusClient checks a patcher's arguments and returns a status client
// of its own for cfg.
func newStatusClient(cfg *rest.Config, gvr schema.GroupVersionResource, fieldManager string) (statusClient, error) {
	bad := func(field, reason string) (statusClient, error) {
		return statusClient{}, &base.ConfigError{Field: field, Reason: reason}
	}
	switch {
	case cfg == nil:
		return bad("cfg", "must not be nil")
	case gvr.Resource == "" || gvr.Version == "":
		return bad("gvr", fmt.Sprintf("needs a version and a resource, got %q", gvr.String()))
	case fieldManager == "":
		return bad("fieldManager", "must not be empty")
	case len(fieldManager) > maxFieldManager:
		return bad("fieldManager", fmt.Sprintf("must be at most %d characters, got %d", maxFieldManager, len(fieldManager)))
	}
	rc, err := rest.UnversionedRESTClientFor(dynamic.ConfigFor(rest.CopyConfig(cfg)))
	if err != nil {
		return bad("cfg", "cannot build a client: "+err.Error())
	}
	return statusClient{rc, gvr, fieldManager}, nil
}

// WithFence returns a copy of d whose writes name their writer: the field
// manager of every write is [FencedFieldManager] of the call's
// [WriteClaim], instead of d's own, so that a ValidatingAdmissionPolicy
// whose param is the Lease (the HTTPRoute example's deploy/fence) can deny
// a write of a replica that no longer holds it. quietpatch.New and
// NewSharded reject, naming the field, a Lease and identity that make the
// field manager too long. Each process is then a field manager of its own
// on the objects it writes; the API server keeps managedFields bounded (an
// update manager whose fields a later update took loses its entry, and
// beyond 10 update managers the oldest merge into "ancient-changes").
//
// Self-check: after the first write under each Lease, the copy sends one
// dry-run PATCH (dryRun=All, body {}) that names another identity; when
// the API server does not deny it as fenced, logger receives one warning
// naming the Lease and what to install (nil logger: slog.Default()). The
// writes go on either way: the fence is the server's.
func (d *MergePatcher) WithFence(logger *slog.Logger) *MergePatcher {
	if logger == nil {
		logger = slog.Default()
	}
	c := *d
	c.fence = &fenceCheck{log: logger, leases: map[string]bool{}}
	return &c
}

// Fenced reports whether d names the writer in each write's field manager
// ([MergePatcher.WithFence]): quietpatch.New then rejects a Lease and
// identity that make [FencedFieldManager] too long.
func (d *MergePatcher) Fenced() bool { return d.fence != nil }

// Patch sends p. It returns the client's error unchanged (see package
// statuspatch/outcome); an [ErrInvalidPatch] without sending anything when
// p is malformed, or when d is fenced and ctx carries no usable
// [WriteClaim]; an error wrapping context.DeadlineExceeded, without
// sending anything, when ctx leaves no time ([ServerTimeout]).
func (d *MergePatcher) Patch(ctx context.Context, p MergePatch) error {
	_, err := d.PatchVersion(ctx, p)
	return err
}

// PatchVersion is Patch, returning also the resourceVersion of the object
// the API server answered with: the write's, since p's precondition made
// the server apply it to the object p was built from. It returns "" when
// that is p's own ResourceVersion: a server that does not version writes,
// as client-go's fake object trackers, could give someone else's write
// the same version.
func (d *MergePatcher) PatchVersion(ctx context.Context, p MergePatch) (string, error) {
	body, err := p.Body()
	if err != nil {
		return "", err
	}
	fm := d.fieldManager
	w, _ := WriteClaimFrom(ctx)
	if d.fence != nil {
		if fm, err = FencedFieldManager(w); err != nil {
			return "", fmt.Errorf("%w: %s: %w", ErrInvalidPatch, p.key(), err)
		}
	}
	raw, err := d.send(ctx, p.Namespace, p.Name, body, fm, false)
	if d.fence != nil {
		d.fence.check(ctx, d, p, w, err)
	}
	if err != nil {
		return "", err
	}
	if rv := resourceVersionOf(raw); rv != p.ResourceVersion {
		return rv, nil
	}
	return "", nil // a server that does not version its writes (client-go's fakes): no echo can be told
}

// objectVersion is the resourceVersion in an object's JSON.
type objectVersion struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
}

// resourceVersionOf returns the resourceVersion of the object whose JSON is
// raw, "" if there is none.
func resourceVersionOf(raw []byte) string {
	var obj objectVersion
	if json.Unmarshal(raw, &obj) != nil {
		return ""
	}
	return obj.Metadata.ResourceVersion
}

// send makes one PATCH of the status of namespace/name and returns the
// answer's body.
func (d *MergePatcher) send(ctx context.Context, namespace, name string, body []byte, fieldManager string, dryRun bool) ([]byte, error) {
	req, err := d.request(ctx, types.MergePatchType, namespace, name, fieldManager)
	if err != nil {
		return nil, fmt.Errorf("statuspatch: patch of %s/%s %w", namespace, name, err)
	}
	if dryRun {
		req = req.Param("dryRun", metav1.DryRunAll)
	}
	res := req.Body(body).Do(ctx)
	if err := res.Error(); err != nil { // the API server's Status, as the clients return it
		return nil, err
	}
	raw, _ := res.Raw()
	return raw, nil
}
