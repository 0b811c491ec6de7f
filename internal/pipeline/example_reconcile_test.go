package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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

// exampleLeader always holds the lease, under epoch 1. A controller uses
// package leader's Claimer instead (quietpatch.New builds one).
type exampleLeader struct{}

func (exampleLeader) Identity() string { return "replica-a" }
func (exampleLeader) Current() leader.Claim {
	return leader.Claim{Holder: "replica-a", Expiry: time.Now().Add(time.Minute), Epoch: 1}
}

// Subscribe sends the claim once; the channel is closed when the
// subscription is cancelled, as the Claimer does.
func (l exampleLeader) Subscribe() (<-chan leader.Claim, func()) {
	ch := make(chan leader.Claim, 1)
	ch <- l.Current()
	var once sync.Once
	return ch, func() { once.Do(func() { close(ch) }) }
}

// widgetStatus is the JSON of a widget's status.
type widgetStatus struct {
	Conditions []metav1.Condition `json:"conditions"`
}

// The three parts on one pass: the reconciler compares desired and current
// status and queues the keys of what changed; the dispatcher builds each
// patch when it serves the key — from the object as the Source has it
// then — and sends it. Here the queue is closed after the pass so that the
// dispatcher drains it and returns; a controller runs Reconciler.Run and
// Dispatcher.Run until shutdown, or lets quietpatch.New do it all.
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

	computer := ComputerFuncs[*exampleWidget, []metav1.Condition, statuspatch.MergePatch]{
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
	// A real controller uses statuspatch.NewMergePatcher.
	patcher := PatcherFunc[statuspatch.MergePatch](func(ctx context.Context, p statuspatch.MergePatch) error {
		body, err := p.Body()
		fmt.Printf("PATCH %s/%s/status %s\n", p.Namespace, p.Name, body)
		return err
	})

	// One Options for the three parts. One call in flight makes the
	// output's order fixed; the default (0) adapts to the server.
	opts := Options{Name: "widgets", Capacity: 1000, Interval: 10 * time.Second, Workers: 1}
	queue, err := newQueue(opts)
	if err != nil {
		fmt.Println(err)
		return
	}
	reconciler, err := NewReconciler(source, computer, queue, exampleLeader{}, opts, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	dispatcher, err := NewDispatcher(queue, source, computer, patcher, exampleLeader{}, opts, nil)
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx := context.Background()
	res, err := reconciler.ReconcileAll(ctx)
	fmt.Printf("pass: %d objects, %d unchanged, %d keys queued, err=%v\n", res.Objects, res.Unchanged, res.Changed, err)
	// a changes again before its key is served: its patch carries the
	// newer generation and resourceVersion.
	source[types.NamespacedName{Namespace: "demo", Name: "a"}] = &exampleWidget{Namespace: "demo", Name: "a",
		ResourceVersion: "14", Generation: 3, Conditions: []metav1.Condition{ready(1)}}
	queue.Close()
	if err := dispatcher.Run(ctx); err != nil {
		fmt.Println(err)
	}
	fmt.Println("patches ok:", dispatcher.Stats().Patches[outcome.OK])
	// Output:
	// pass: 3 objects, 1 unchanged, 2 keys queued, err=<nil>
	// PATCH demo/a/status {"metadata":{"resourceVersion":"14"},"status":{"conditions":[{"type":"Ready","status":"True","observedGeneration":3,"lastTransitionTime":"2026-01-01T00:00:00Z","reason":"Reconciled","message":""}]}}
	// PATCH demo/c/status {"metadata":{"resourceVersion":"13"},"status":{"conditions":[{"type":"Ready","status":"True","observedGeneration":1,"lastTransitionTime":"2026-01-01T01:00:00Z","reason":"Reconciled","message":""}]}}
	// patches ok: 2
}
