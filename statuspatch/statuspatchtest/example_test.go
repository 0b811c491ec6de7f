package statuspatchtest_test

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/statuspatchtest"
)

// GadgetStatus is the status a controller computes for a Gadget, a custom
// resource.
type GadgetStatus struct {
	Ready  bool   `json:"ready"`
	Reason string `json:"reason"`
}

// gadgetStatus is the status computer under test: a Gadget is ready when
// its size is at most 100.
func gadgetStatus(u *unstructured.Unstructured) GadgetStatus {
	size, _, _ := unstructured.NestedInt64(u.Object, "spec", "size")
	if size > 100 {
		return GadgetStatus{Ready: false, Reason: "TooLarge"}
	}
	return GadgetStatus{Ready: true, Reason: "Sized"}
}

// A unit test of a status computer through the Patcher: the patch it
// leads to is written into the fake dynamic client, the status read back,
// and a patch built from the object as it was before the write is
// answered 409 Conflict, as the API server answers it.
func Example() {
	gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{gvr: "GadgetList"},
		&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.com/v1", "kind": "Gadget",
			// The API server gives every object a resourceVersion; in a
			// fake the test does.
			"metadata": map[string]any{"namespace": "demo", "name": "huge", "resourceVersion": "1"},
			"spec":     map[string]any{"size": int64(300)},
		}})
	patcher := statuspatchtest.NewPatcher(dyn, gvr)
	gadgets := dyn.Resource(gvr).Namespace("demo")
	ctx := context.Background()

	huge, err := gadgets.Get(ctx, "huge", metav1.GetOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	patch, err := statuspatch.NewMergePatch(huge, gadgetStatus(huge))
	if err != nil {
		fmt.Println(err)
		return
	}
	rv, err := patcher.PatchVersion(ctx, patch)
	fmt.Println("written at resourceVersion", rv, err)

	huge, err = gadgets.Get(ctx, "huge", metav1.GetOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("status:", huge.Object["status"], "at resourceVersion", huge.GetResourceVersion())

	// The same patch again: its precondition is the version before the
	// write.
	_, err = patcher.PatchVersion(ctx, patch)
	fmt.Println("conflict:", apierrors.IsConflict(err))
	// Output:
	// written at resourceVersion 2 <nil>
	// status: map[ready:false reason:TooLarge] at resourceVersion 2
	// conflict: true
}
