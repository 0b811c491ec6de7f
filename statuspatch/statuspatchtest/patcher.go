package statuspatchtest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"

	"github.com/quietpatch/quietpatch/statuspatch"
)

// fieldManager names the Patcher's writes in the patch actions it records.
const fieldManager = "statuspatchtest"

// optimisticLockMsg is the API server's message of a 409 on a stale
// resourceVersion.
const optimisticLockMsg = "the object has been modified; please apply your changes to the latest version and try again"

// Patcher applies [statuspatch.MergePatch]es to the objects of one resource
// held by a client-go fake, answering as the API server does: the write
// gets a new resourceVersion, which PatchVersion reports, and a stale
// precondition is answered with 409 Conflict. It is a
// [statuspatch.VersionPatcher] of MergePatches, so a dispatcher that sends
// through it tells the events of its own writes from the others, as it
// does against a real server.
//
// Build it with [NewPatcher]; the zero Patcher has no fake and answers
// every call with an error. It is safe for concurrent use.
type Patcher struct {
	fake clienttesting.FakeClient
	gvr  schema.GroupVersionResource

	mu   sync.Mutex // serializes the check of the precondition and the write
	last uint64     // the last resourceVersion written
}

// NewPatcher returns a Patcher of the status of resource gvr's objects
// held by fake: a typed fake clientset (k8s.io/client-go/kubernetes/fake)
// or a fake dynamic client (k8s.io/client-go/dynamic/fake). Each write is a
// patch action of the status subresource through fake, so fake records it
// (Actions), the reactors a test prepends answer it first (a test injects
// an error there), and informers built on fake see its update event.
func NewPatcher(fake clienttesting.FakeClient, gvr schema.GroupVersionResource) *Patcher {
	return &Patcher{fake: fake, gvr: gvr}
}

// Patch applies p as PatchVersion does.
func (f *Patcher) Patch(ctx context.Context, p statuspatch.MergePatch) error {
	_, err := f.PatchVersion(ctx, p)
	return err
}

// PatchVersion applies p and returns the object's new resourceVersion. It
// answers as the API server does: the error [statuspatch.MergePatch.Body]
// returns for an invalid p; 404 NotFound when the object does not exist;
// 409 Conflict when the object's resourceVersion is not p's precondition;
// ctx.Err() when ctx is done. In each case it writes nothing. Otherwise it
// merges p.Status into the object's status (RFC 7386: objects merge key
// by key, null removes a key, lists are replaced whole), leaves the rest
// of the object as it was, and stores it with a new resourceVersion: a
// number greater than the object's (when it is one) and than every version
// f wrote before. The fake's own writes keep the version they are given:
// a test that changes an object through the fake gives it a new
// resourceVersion itself (see the package documentation).
//
// The precondition is checked, then the patch is sent through the fake,
// under f's lock: a write through another client of the fake in between
// is not seen (the fakes have no compare-and-swap). The version reported
// is the one of the object the fake answered with, "" if it answered with
// none or with p's own (a reactor that answered in place of the write).
func (f *Patcher) PatchVersion(ctx context.Context, p statuspatch.MergePatch) (string, error) {
	if _, err := p.Body(); err != nil {
		return "", err
	}
	if f.fake == nil {
		return "", errors.New("statuspatchtest: Patcher has no fake client (use NewPatcher)")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return "", err
	}
	obj, err := f.fake.Tracker().Get(f.gvr, p.Namespace, p.Name)
	if err != nil {
		return "", err // NotFound, as the server's
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", fmt.Errorf("statuspatchtest: %s %s/%s: %w", f.gvr.Resource, p.Namespace, p.Name, err)
	}
	if m.GetResourceVersion() != p.ResourceVersion {
		return "", apierrors.NewConflict(f.gvr.GroupResource(), p.Name, errors.New(optimisticLockMsg))
	}
	// The fake applies the whole body: with the write's version in place
	// of the precondition's, the merge sets it.
	w := p
	w.ResourceVersion = strconv.FormatUint(f.next(m.GetResourceVersion()), 10)
	body, err := w.Body()
	if err != nil {
		return "", err
	}
	// A cluster-scoped object's action has Namespace "", as the Root constructors make it.
	action := clienttesting.NewPatchSubresourceActionWithOptions(f.gvr, p.Namespace, p.Name, types.MergePatchType, body,
		metav1.PatchOptions{FieldManager: fieldManager}, "status")
	answer, err := f.fake.Invokes(action, nil)
	if err != nil {
		return "", err
	}
	written := ""
	if am, aerr := meta.Accessor(answer); answer != nil && aerr == nil {
		written = am.GetResourceVersion()
	}
	if written == p.ResourceVersion {
		return "", nil
	}
	return written, nil
}

// next returns the resourceVersion of the next write of an object now at
// current, and notes it as the last. Called under f.mu.
func (f *Patcher) next(current string) uint64 {
	if n, err := strconv.ParseUint(current, 10, 64); err == nil && n > f.last {
		f.last = n
	}
	f.last++
	return f.last
}
