package statuspatchtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/statuspatchtest"
)

var widgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

// widget is a namespaced custom resource at resourceVersion rv, with a
// status the patches merge into.
func widget(name, rv string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"namespace": "demo", "name": name, "resourceVersion": rv,
			"generation": int64(3), "labels": map[string]any{"team": "a"}},
		"spec":   map[string]any{"size": int64(7)},
		"status": map[string]any{"observedGeneration": int64(2), "phase": "Pending", "owners": []any{"x", "y"}},
	}}
}

func newDynamic(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{widgets: "WidgetList"}, objs...)
}

func get(t *testing.T, dyn *dynamicfake.FakeDynamicClient, name string) *unstructured.Unstructured {
	t.Helper()
	u, err := dyn.Resource(widgets).Namespace("demo").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func patch(name, rv, status string) statuspatch.MergePatch {
	return statuspatch.MergePatch{Namespace: "demo", Name: name, ResourceVersion: rv, Status: json.RawMessage(status)}
}

// patchActions counts the patch actions the fake recorded.
func patchActions(f clienttesting.FakeClient) int {
	n := 0
	for _, a := range f.(interface{ Actions() []clienttesting.Action }).Actions() {
		if a.GetVerb() == "patch" {
			n++
		}
	}
	return n
}

var _ statuspatch.VersionPatcher[statuspatch.MergePatch] = (*statuspatchtest.Patcher)(nil)

// A write merges the status (RFC 7386), leaves the rest of the object as
// it was, gives it a new resourceVersion and reports it; the next patch,
// built from the written object, is applied after it.
func TestPatchVersionWritesAndReportsANewVersion(t *testing.T) {
	dyn := newDynamic(widget("w", "5"))
	p := statuspatchtest.NewPatcher(dyn, widgets)
	before := get(t, dyn, "w")

	rv, err := p.PatchVersion(context.Background(), patch("w", "5", `{"observedGeneration":3,"phase":null,"owners":["z"],"ready":{"since":"now"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if rv != "6" {
		t.Errorf("PatchVersion reported %q, want 6", rv)
	}
	after := get(t, dyn, "w")
	if got := after.GetResourceVersion(); got != rv {
		t.Errorf("the object has resourceVersion %q, the patcher reported %q", got, rv)
	}
	wantStatus := map[string]any{"observedGeneration": int64(3), "owners": []any{"z"}, "ready": map[string]any{"since": "now"}}
	if diff := cmp.Diff(wantStatus, after.Object["status"]); diff != "" {
		t.Errorf("status after the merge (-want +got):\n%s", diff)
	}
	before.SetResourceVersion(rv)
	delete(before.Object, "status")
	delete(after.Object, "status")
	if diff := cmp.Diff(before.Object, after.Object); diff != "" {
		t.Errorf("the patch changed more than the status and the resourceVersion (-before +after):\n%s", diff)
	}

	if err := p.Patch(context.Background(), patch("w", rv, `{"phase":"Ready"}`)); err != nil {
		t.Fatalf("a patch built from the written object: %v", err)
	}
	if got := get(t, dyn, "w").GetResourceVersion(); got != "7" {
		t.Errorf("after the second write the object has resourceVersion %q, want 7", got)
	}
	if n := patchActions(dyn); n != 2 {
		t.Errorf("the fake recorded %d patch actions, want 2", n)
	}
}

// The versions never repeat and are above the numeric version of each
// object written, whatever order the objects come in.
func TestVersionsNeverRepeat(t *testing.T) {
	dyn := newDynamic(widget("high", "100"), widget("low", "1"), widget("word", "abc"))
	p := statuspatchtest.NewPatcher(dyn, widgets)
	var got []string
	for _, w := range []struct{ name, rv string }{{"low", "1"}, {"high", "100"}, {"word", "abc"}, {"low", "2"}} {
		rv, err := p.PatchVersion(context.Background(), patch(w.name, w.rv, `{"phase":"Ready"}`))
		if err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
		got = append(got, rv)
	}
	if diff := cmp.Diff([]string{"2", "101", "102", "103"}, got); diff != "" {
		t.Errorf("versions written (-want +got):\n%s", diff)
	}
}

// The answers of the API server, each writing nothing: 409 on a stale
// precondition, 404 for a missing object, the context's error, the
// patch's own validation error.
func TestPatchVersionWritesNothingWhenTheServerWouldNot(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		patch statuspatch.MergePatch
		is    func(error) bool
	}{
		{"stale precondition", context.Background(), patch("w", "4", `{"phase":"Ready"}`), apierrors.IsConflict},
		{"missing object", context.Background(), patch("gone", "5", `{"phase":"Ready"}`), apierrors.IsNotFound},
		{"wrong namespace", context.Background(), statuspatch.MergePatch{Namespace: "other", Name: "w", ResourceVersion: "5", Status: json.RawMessage(`{}`)}, apierrors.IsNotFound},
		{"context cancelled", cancelled, patch("w", "5", `{"phase":"Ready"}`), func(err error) bool { return errors.Is(err, context.Canceled) }},
		{"deadline passed", expired, patch("w", "5", `{"phase":"Ready"}`), func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }},
		{"no precondition", context.Background(), patch("w", "", `{"phase":"Ready"}`), func(err error) bool { return errors.Is(err, statuspatch.ErrInvalidPatch) }},
		{"status not an object", context.Background(), patch("w", "5", `["Ready"]`), func(err error) bool { return errors.Is(err, statuspatch.ErrInvalidPatch) }},
		{"status not JSON", context.Background(), patch("w", "5", `{"phase":`), func(err error) bool { return errors.Is(err, statuspatch.ErrInvalidPatch) }},
		{"no name", context.Background(), patch("", "5", `{}`), func(err error) bool { return errors.Is(err, statuspatch.ErrInvalidPatch) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dyn := newDynamic(widget("w", "5"))
			before := get(t, dyn, "w")
			p := statuspatchtest.NewPatcher(dyn, widgets)
			rv, err := p.PatchVersion(tc.ctx, tc.patch)
			if !tc.is(err) {
				t.Errorf("PatchVersion = %q, %v: not the expected error", rv, err)
			}
			if rv != "" {
				t.Errorf("PatchVersion reported version %q with its error", rv)
			}
			if _, bodyErr := tc.patch.Body(); bodyErr != nil && (err == nil || err.Error() != bodyErr.Error()) {
				t.Errorf("PatchVersion = %v, want Body's error %v", err, bodyErr)
			}
			if diff := cmp.Diff(before.Object, get(t, dyn, "w").Object); diff != "" {
				t.Errorf("the object changed (-before +after):\n%s", diff)
			}
			if n := patchActions(dyn); n != 0 {
				t.Errorf("the fake recorded %d patch actions, want none", n)
			}
		})
	}
}

// The 409 is the API server's: a *StatusError with its reason and message.
func TestConflictIsTheServers(t *testing.T) {
	dyn := newDynamic(widget("w", "5"))
	err := statuspatchtest.NewPatcher(dyn, widgets).Patch(context.Background(), patch("w", "4", `{}`))
	var se *apierrors.StatusError
	if !errors.As(err, &se) || se.ErrStatus.Reason != metav1.StatusReasonConflict || se.ErrStatus.Code != 409 {
		t.Fatalf("Patch = %#v, want a *StatusError with reason Conflict and code 409", err)
	}
	want := `Operation cannot be fulfilled on widgets.example.com "w": the object has been modified; please apply your changes to the latest version and try again`
	if err.Error() != want {
		t.Errorf("Patch = %q, want %q", err, want)
	}
}

// A typed fake clientset, with a namespaced (Pod) and a cluster-scoped
// (Namespace) resource: the Go types come back with the merged status.
func TestTypedClientsetNamespacedAndClusterScoped(t *testing.T) {
	kube := fake.NewClientset(
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "p", ResourceVersion: "10"},
			Status: corev1.PodStatus{Phase: corev1.PodPending, Message: "waiting"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo", ResourceVersion: "3"}},
	)
	ctx := context.Background()

	pods := statuspatchtest.NewPatcher(kube, corev1.SchemeGroupVersion.WithResource("pods"))
	rv, err := pods.PatchVersion(ctx, statuspatch.MergePatch{Namespace: "demo", Name: "p", ResourceVersion: "10",
		Status: json.RawMessage(`{"phase":"Running","message":null}`)})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := kube.CoreV1().Pods("demo").Get(ctx, "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rv != "11" || pod.ResourceVersion != rv || pod.Status.Phase != corev1.PodRunning || pod.Status.Message != "" {
		t.Errorf("reported %q; the pod has resourceVersion %q, phase %q, message %q; want 11, 11, Running, \"\"",
			rv, pod.ResourceVersion, pod.Status.Phase, pod.Status.Message)
	}

	namespaces := statuspatchtest.NewPatcher(kube, corev1.SchemeGroupVersion.WithResource("namespaces"))
	rv, err = namespaces.PatchVersion(ctx, statuspatch.MergePatch{Name: "demo", ResourceVersion: "3",
		Status: json.RawMessage(`{"phase":"Terminating"}`)})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := kube.CoreV1().Namespaces().Get(ctx, "demo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rv != "4" || ns.ResourceVersion != rv || ns.Status.Phase != corev1.NamespaceTerminating {
		t.Errorf("reported %q; the namespace has resourceVersion %q, phase %q; want 4, 4, Terminating", rv, ns.ResourceVersion, ns.Status.Phase)
	}
	if _, err := namespaces.PatchVersion(ctx, statuspatch.MergePatch{Name: "demo", ResourceVersion: "3", Status: json.RawMessage(`{}`)}); !apierrors.IsConflict(err) {
		t.Errorf("a cluster-scoped patch at the old version = %v, want a conflict", err)
	}
	if _, err := namespaces.PatchVersion(ctx, statuspatch.MergePatch{Name: "nope", ResourceVersion: "1", Status: json.RawMessage(`{}`)}); !apierrors.IsNotFound(err) {
		t.Errorf("a patch of a missing cluster-scoped object = %v, want not found", err)
	}
}

// A cluster-scoped custom resource in a fake dynamic client.
func TestDynamicClusterScoped(t *testing.T) {
	clusters := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "clusterwidgets"}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{clusters: "ClusterWidgetList"},
		&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.com/v1", "kind": "ClusterWidget",
			"metadata": map[string]any{"name": "c", "resourceVersion": "1"},
		}})
	rv, err := statuspatchtest.NewPatcher(dyn, clusters).PatchVersion(context.Background(),
		statuspatch.MergePatch{Name: "c", ResourceVersion: "1", Status: json.RawMessage(`{"ready":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	u, err := dyn.Resource(clusters).Get(context.Background(), "c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ready, _, _ := unstructured.NestedBool(u.Object, "status", "ready"); rv != "2" || u.GetResourceVersion() != rv || !ready {
		t.Errorf("reported %q; the object has resourceVersion %q and status %v; want 2, 2, ready", rv, u.GetResourceVersion(), u.Object["status"])
	}
}

// An informer on the same fake receives the write's update event, with
// the object at the version PatchVersion reported — what the dispatcher
// recognises as its own write's echo.
func TestInformerSeesTheWriteAtTheReportedVersion(t *testing.T) {
	dyn := newDynamic(widget("w", "5"))
	factory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	inf := factory.ForResource(widgets).Informer()
	updates := make(chan *unstructured.Unstructured, 10)
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { updates <- obj.(*unstructured.Unstructured) },
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer factory.Shutdown()
	defer cancel()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("the informer did not sync")
	}

	rv, err := statuspatchtest.NewPatcher(dyn, widgets).PatchVersion(ctx, patch("w", "5", `{"phase":"Ready"}`))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case u := <-updates:
		if phase, _, _ := unstructured.NestedString(u.Object, "status", "phase"); u.GetResourceVersion() != rv || phase != "Ready" {
			t.Errorf("update event at resourceVersion %q with phase %q; want %q, Ready", u.GetResourceVersion(), phase, rv)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no update event")
	}
}

// Concurrent patches with one precondition: one wins, the others are
// answered 409, as etcd's compare-and-swap answers them; concurrent
// patches of different objects all land, at distinct versions.
func TestConcurrentPatches(t *testing.T) {
	const n = 16
	objs := []runtime.Object{widget("shared", "1")}
	for i := range n {
		objs = append(objs, widget(fmt.Sprint("w", i), "1"))
	}
	dyn := newDynamic(objs...)
	p := statuspatchtest.NewPatcher(dyn, widgets)

	var wg sync.WaitGroup
	shared := make([]error, n)
	versions := make([]string, n)
	own := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, shared[i] = p.PatchVersion(context.Background(), patch("shared", "1", fmt.Sprintf(`{"by":%d}`, i)))
		})
		wg.Go(func() {
			versions[i], own[i] = p.PatchVersion(context.Background(), patch(fmt.Sprint("w", i), "1", `{"phase":"Ready"}`))
		})
	}
	wg.Wait()

	won := 0
	for i, err := range shared {
		switch {
		case err == nil:
			won++
		case !apierrors.IsConflict(err):
			t.Errorf("patch %d of the shared object: %v, want nil or a conflict", i, err)
		}
	}
	if won != 1 {
		t.Errorf("%d patches with the same precondition were applied, want 1", won)
	}
	seen := map[string]bool{}
	for i, err := range own {
		if err != nil {
			t.Errorf("patch of w%d: %v", i, err)
		}
		if seen[versions[i]] {
			t.Errorf("version %q reported twice", versions[i])
		}
		seen[versions[i]] = true
	}
}

// A reactor the test prepends answers in place of the write: an injected
// error comes back as it is, and nothing is written.
func TestReactorInjectsAnError(t *testing.T) {
	dyn := newDynamic(widget("w", "5"))
	once := sync.Once{}
	dyn.PrependReactor("patch", "widgets", func(clienttesting.Action) (bool, runtime.Object, error) {
		handled := false
		once.Do(func() { handled = true })
		return handled, nil, apierrors.NewTooManyRequests("slow down", 2)
	})
	p := statuspatchtest.NewPatcher(dyn, widgets)
	if err := p.Patch(context.Background(), patch("w", "5", `{"phase":"Ready"}`)); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("Patch = %v, want the injected 429", err)
	}
	if got := get(t, dyn, "w").GetResourceVersion(); got != "5" {
		t.Errorf("the object is at resourceVersion %q after the injected error, want 5", got)
	}
	rv, err := p.PatchVersion(context.Background(), patch("w", "5", `{"phase":"Ready"}`))
	if err != nil || rv == "" || rv == "5" {
		t.Errorf("the next call = %q, %v; want a new version, nil", rv, err)
	}
}

// The zero Patcher answers with an error, and does not panic.
func TestZeroPatcher(t *testing.T) {
	var p statuspatchtest.Patcher
	if err := p.Patch(context.Background(), patch("w", "5", `{}`)); err == nil {
		t.Error("the zero Patcher's Patch returned nil")
	}
}
