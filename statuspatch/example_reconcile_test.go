package statuspatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/conditions"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// exampleWidget is an in-memory object: a generation and a Ready condition.
type exampleWidget struct {
	Namespace, Name, ResourceVersion string
	Generation                       int64
	Conditions                       []metav1.Condition
}

// exampleWidgets is an in-memory statuspatch.Source, standing in for an
// informer's lister.
type exampleWidgets map[types.NamespacedName]*exampleWidget

func (w exampleWidgets) List() ([]*exampleWidget, error) {
	out := make([]*exampleWidget, 0, len(w))
	for _, o := range w {
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b *exampleWidget) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (w exampleWidgets) Get(key types.NamespacedName) (*exampleWidget, bool, error) {
	o, ok := w[key]
	return o, ok, nil
}

// exampleLeader always holds the lease, under epoch 1. A controller uses the
// leader package's claimer instead.
type exampleLeader struct{}

func (exampleLeader) Identity() string { return "replica-a" }
func (exampleLeader) Current() leader.Claim {
	return leader.Claim{Holder: "replica-a", Expiry: time.Now().Add(time.Minute), Epoch: 1}
}
func (exampleLeader) Subscribe() (<-chan leader.Claim, func()) { return nil, func() {} }

// widgetStatus is the JSON of a widget's status.
type widgetStatus struct {
	Conditions []metav1.Condition `json:"conditions"`
}

// The whole flow on one pass: the reconciler compares desired and current
// status, queues merge patches for what changed only, and the dispatcher
// applies them. Here the queue is closed after the pass so that the
// dispatcher drains it and returns; a controller runs both until shutdown.
func ExampleReconciler() {
	at := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ready := func(gen int64) metav1.Condition {
		return metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Reconciled",
			ObservedGeneration: gen, LastTransitionTime: at}
	}
	source := exampleWidgets{
		{Namespace: "demo", Name: "a"}: {Namespace: "demo", Name: "a", ResourceVersion: "11", Generation: 2,
			Conditions: []metav1.Condition{ready(1)}}, // stale: observed generation 1
		{Namespace: "demo", Name: "b"}: {Namespace: "demo", Name: "b", ResourceVersion: "12", Generation: 1,
			Conditions: []metav1.Condition{ready(1)}}, // up to date
		{Namespace: "demo", Name: "c"}: {Namespace: "demo", Name: "c", ResourceVersion: "13", Generation: 1}, // no status yet
	}

	computer := statuspatch.ComputerFuncs[*exampleWidget, []metav1.Condition, statuspatch.MergePatch]{
		KeyFunc: func(w *exampleWidget) types.NamespacedName {
			return types.NamespacedName{Namespace: w.Namespace, Name: w.Name}
		},
		CurrentFunc: func(w *exampleWidget) []metav1.Condition { return w.Conditions },
		DesiredFunc: func(w *exampleWidget) ([]metav1.Condition, error) {
			c := ready(w.Generation)
			// Keep the transition time when the condition's status holds.
			if i := slices.IndexFunc(w.Conditions, func(c metav1.Condition) bool { return c.Type == "Ready" }); i < 0 {
				c.LastTransitionTime = metav1.NewTime(at.Add(time.Hour))
			}
			return []metav1.Condition{c}, nil
		},
		EqualFunc: conditions.Equal, // typed: ignores transition time and order
		PatchFunc: func(w *exampleWidget, desired []metav1.Condition) (statuspatch.MergePatch, error) {
			status, err := json.Marshal(widgetStatus{Conditions: desired})
			return statuspatch.MergePatch{Namespace: w.Namespace, Name: w.Name,
				ResourceVersion: w.ResourceVersion, Status: status}, err
		},
	}

	queue, err := statuspatch.NewPatchQueue(statuspatch.QueueConfig[statuspatch.Patch[statuspatch.MergePatch]]{
		// One patch in flight at ≈144 patches/s fills a 10 s interval.
		Capacity: statuspatch.SuggestCapacity(10*time.Second, time.Second/144, 0, 1),
		Key:      statuspatch.PatchKey[statuspatch.MergePatch],
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	reconciler, err := statuspatch.NewReconciler(statuspatch.ReconcilerConfig[*exampleWidget, []metav1.Condition, statuspatch.MergePatch]{
		Source: source, Computer: computer, Queue: queue, Leader: exampleLeader{},
		Interval: 10 * time.Second,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	dispatcher, err := statuspatch.NewDispatcher(statuspatch.DispatcherConfig[statuspatch.MergePatch]{
		Queue: queue, Leader: exampleLeader{}, PatchTimeout: 5 * time.Second,
		// A real controller uses statuspatch.NewDynamicStatusPatcher.
		Patcher: statuspatch.PatcherFunc[statuspatch.MergePatch](func(ctx context.Context, p statuspatch.MergePatch) error {
			body, err := p.Body()
			fmt.Printf("PATCH %s/%s/status %s\n", p.Namespace, p.Name, body)
			return err
		}),
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx := context.Background()
	res, err := reconciler.ReconcileAll(ctx)
	fmt.Printf("pass: %d objects, %d unchanged, %d patches queued, err=%v\n", res.Objects, res.Unchanged, res.Changed, err)
	queue.Close()
	if err := dispatcher.Run(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// pass: 3 objects, 1 unchanged, 2 patches queued, err=<nil>
	// PATCH demo/a/status {"metadata":{"resourceVersion":"11"},"status":{"conditions":[{"type":"Ready","status":"True","observedGeneration":2,"lastTransitionTime":"2026-01-01T00:00:00Z","reason":"Reconciled","message":""}]}}
	// PATCH demo/c/status {"metadata":{"resourceVersion":"13"},"status":{"conditions":[{"type":"Ready","status":"True","observedGeneration":1,"lastTransitionTime":"2026-01-01T01:00:00Z","reason":"Reconciled","message":""}]}}
}

// Capacity and interval go together: the queue should hold what the API
// server absorbs in one interval, and the client's rate limiter is part of
// the per-patch latency.
func ExampleSuggestCapacity() {
	interval := 10 * time.Second
	// Measured: one patch in flight ≈ 144 patches/s, client limiter off.
	fmt.Println(statuspatch.SuggestCapacity(interval, time.Second/144, 0, 1))
	// The same server behind client-go's default limiter (QPS 5).
	fmt.Println(statuspatch.SuggestCapacity(interval, time.Second/144, 5, 1))
	// Four in flight ≈ 265 patches/s in total: per-patch latency 4/265 s.
	fmt.Println(statuspatch.SuggestCapacity(interval, 4*time.Second/265, 0, 4))
	// Output:
	// 1440
	// 50
	// 2650
}

// The ready patcher sends a JSON merge patch of the status subresource with
// a resourceVersion precondition and a field manager. Here it talks to
// client-go's fake dynamic client.
func ExampleDynamicStatusPatcher() {
	gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	widget := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"namespace": "demo", "name": "a", "resourceVersion": "7"},
	}}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{gvr: "WidgetList"}, widget)

	patcher, err := statuspatch.NewDynamicStatusPatcher(client, gvr, "example.com/widget-status")
	if err != nil {
		fmt.Println(err)
		return
	}
	err = patcher.Patch(context.Background(), statuspatch.MergePatch{
		Namespace: "demo", Name: "a", ResourceVersion: "7", Status: json.RawMessage(`{"phase":"Ready"}`),
	})
	fmt.Println("patch:", outcome.Of(err))
	for _, a := range client.Actions() {
		fmt.Println(a.GetVerb(), a.GetResource().Resource, a.GetSubresource())
	}
	got, _ := client.Resource(gvr).Namespace("demo").Get(context.Background(), "a", metav1.GetOptions{})
	phase, _, _ := unstructured.NestedString(got.Object, "status", "phase")
	fmt.Println("status.phase:", phase)

	// Without a resourceVersion there is no precondition: nothing is sent.
	err = patcher.Patch(context.Background(), statuspatch.MergePatch{Namespace: "demo", Name: "a", Status: json.RawMessage(`{}`)})
	fmt.Println(errors.Is(err, statuspatch.ErrInvalidPatch))
	// Output:
	// patch: ok
	// patch widgets status
	// status.phase: Ready
	// true
}
