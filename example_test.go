package quietpatch_test

import (
	"context"
	"fmt"
	"time"

	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch/conditions"
	"github.com/quietpatch/quietpatch/statuspatch/source"
	"github.com/quietpatch/quietpatch/statuspatch/statuspatchtest"
)

// Widget is a custom resource of one's own, example.com/v1 — the Go type
// kubebuilder generates: a spec, and a status of conditions and
// observedGeneration.
type Widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              WidgetSpec   `json:"spec,omitempty"`
	Status            WidgetStatus `json:"status,omitempty"`
}

// WidgetSpec is the Widget's spec.
type WidgetSpec struct {
	Size int `json:"size"`
}

// WidgetStatus is the Widget's status.
type WidgetStatus struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

// The whole wiring of a status controller for a custom resource: a cache of
// Widgets, a cache of the policy they are checked against (a ConfigMap, a
// Dependency), the one function that says what their conditions should be,
// and one call. Run waits for the cache, competes for the Lease, reconciles
// every interval and on every change, patches only what changed, and stops
// in the safe order. The clients here are client-go's fakes, and the
// patcher is statuspatchtest's (package statuspatch/statuspatchtest): it
// writes into the fake dynamic client and answers as the API server does,
// new resourceVersion and 409 included. A controller passes real clients,
// and builds the patcher with statuspatch.NewMergePatcher.
func Example() {
	gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	widget := func(name string, size int64) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"namespace": "demo", "name": name, "generation": int64(1), "resourceVersion": "1"},
			"spec":     map[string]any{"size": size},
		}}
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{gvr: "WidgetList"}, widget("small", 3), widget("huge", 300))
	kube := fake.NewClientset(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "widget-policy"},
		Data:       map[string]string{"maxSize": "100"},
	})

	// A cache of Widgets, converted to the Go type once as they arrive.
	informers := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	inf := informers.ForResource(gvr).Informer()
	if err := inf.SetTransform(source.ToTyped[Widget]()); err != nil {
		fmt.Println(err)
		return
	}

	// The policy: a cache of the ConfigMap the conditions read. Declared
	// as a Dependency below, Run waits for it, and each of its changes
	// reconciles every Widget.
	policyInformers := kubeinformers.NewSharedInformerFactoryWithOptions(kube, 0, kubeinformers.WithNamespace("demo"))
	policies := policyInformers.Core().V1().ConfigMaps()
	policy := policies.Informer()

	// The status: one Ready condition from the spec and the policy.
	computer, err := conditions.New(conditions.Config[*Widget]{
		Conditions: func(w *Widget) ([]metav1.Condition, error) {
			cm, err := policies.Lister().ConfigMaps("demo").Get("widget-policy")
			if err != nil {
				return nil, err
			}
			maxSize, err := strconv.Atoi(cm.Data["maxSize"])
			if err != nil {
				return nil, fmt.Errorf("widget-policy maxSize: %w", err)
			}
			if w.Spec.Size > maxSize {
				return []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "TooLarge",
					Message: fmt.Sprintf("size %d is above %d", w.Spec.Size, maxSize)}}, nil
			}
			return []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Sized", Message: "ok"}}, nil
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	patcher := statuspatchtest.NewPatcher(dyn, gvr)

	// One call: the Lease, the queue, the reconciler, the dispatcher.
	ctrl, err := quietpatch.New(source.FromInformer[*Widget](inf), computer, patcher, quietpatch.Config{
		Name:         "widgets",
		Leases:       kube.CoordinationV1(),
		Lease:        leader.Config{Namespace: "demo", Name: "widget-status"},
		Dependencies: []quietpatch.Dependency{{Informer: policy}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx, cancel := context.WithCancel(context.Background())
	informers.Start(ctx.Done())
	policyInformers.Start(ctx.Done())
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(ctx) }()

	// Wait (here: poll) until both Widgets have their status.
	ready := func(name string) string {
		u, err := dyn.Resource(gvr).Namespace("demo").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return ""
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		if len(conds) != 1 {
			return ""
		}
		c := conds[0].(map[string]any)
		return fmt.Sprintf("%s: Ready=%s (%s)", name, c["status"], c["reason"])
	}
	waitFor := func(ok func() bool) {
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !ok(); {
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor(func() bool { return ready("small") != "" && ready("huge") != "" })
	fmt.Println(ready("small"))
	fmt.Println(ready("huge"))

	// A change of the policy reconciles the Widgets: huge is now allowed.
	if _, err := kube.CoreV1().ConfigMaps("demo").Update(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "widget-policy"},
		Data:       map[string]string{"maxSize": "500"},
	}, metav1.UpdateOptions{}); err != nil {
		fmt.Println(err)
	}
	waitFor(func() bool { return ready("huge") == "huge: Ready=True (Sized)" })
	fmt.Println(ready("huge"))

	cancel()
	fmt.Println("Run:", <-done)
	st := ctrl.Stats()
	fmt.Println("patches ok:", st.Dispatcher.Patches["ok"])
	// A test waits for the informers' goroutines (goleak); a process need
	// not, and must not without a bound (see Stop order).
	informers.Shutdown()
	policyInformers.Shutdown()
	// Output:
	// small: Ready=True (Sized)
	// huge: Ready=False (TooLarge)
	// huge: Ready=True (Sized)
	// Run: <nil>
	// patches ok: 3
}
