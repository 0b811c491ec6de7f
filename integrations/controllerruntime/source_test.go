package controllerruntime_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	qpcr "github.com/quietpatch/quietpatch/integrations/controllerruntime"
	examplev1 "github.com/quietpatch/quietpatch/integrations/controllerruntime/examples/widget/api/v1"
)

// fakeInformers hands out one informer, like a cache restricted to
// namespaces hands out its multi-namespace informer: a cache.Informer that
// is no client-go SharedIndexInformer.
type fakeInformers struct {
	cache.Informers // nil: NewSource calls GetInformer only
	inf             cache.Informer
}

func (f fakeInformers) GetInformer(context.Context, client.Object, ...cache.InformerGetOption) (cache.Informer, error) {
	return f.inf, nil
}

// fakeInformer records the one handler registered on it, which the test
// then calls as an informer would.
type fakeInformer struct {
	cache.Informer // nil: NewSource calls AddEventHandler only
	h              toolscache.ResourceEventHandler
	synced         atomic.Bool
}

func (f *fakeInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	if f.h != nil {
		return nil, fmt.Errorf("a second handler on the informer")
	}
	f.h = h
	return fakeRegistration{f}, nil
}

type fakeRegistration struct{ f *fakeInformer }

func (r fakeRegistration) HasSynced() bool                          { return r.f.synced.Load() }
func (r fakeRegistration) HasSyncedChecker() toolscache.DoneChecker { return nil }

func widget(ns, name, rv string) *examplev1.Widget {
	return &examplev1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv}}
}

// On an informer without a store (a multi-namespace informer), the Source
// indexes the objects the informer's handler gets — those very objects,
// each key once — and hands each event on only after applying it: a
// handler's Get finds the event's object. A handler added late first gets
// every object as an addition.
func TestSourceIndex(t *testing.T) {
	a1, a1v2, b1, b2 := widget("a", "w-1", "1"), widget("a", "w-1", "2"), widget("b", "w-1", "3"), widget("b", "w-2", "4")
	cluster := widget("", "c-1", "5")
	type event struct {
		op       string // add, update, delete
		obj      any    // the object; for delete, possibly a DeletedFinalStateUnknown
		key      types.NamespacedName
		want     *examplev1.Widget // what Get finds when the event is handed on; nil: nothing
		listWant []*examplev1.Widget
	}
	key := func(w *examplev1.Widget) types.NamespacedName { return client.ObjectKeyFromObject(w) }
	events := []event{
		{"add", a1, key(a1), a1, []*examplev1.Widget{a1}},
		{"add", b1, key(b1), b1, []*examplev1.Widget{a1, b1}},
		{"add", b2, key(b2), b2, []*examplev1.Widget{a1, b1, b2}},
		{"add", cluster, key(cluster), cluster, []*examplev1.Widget{cluster, a1, b1, b2}},
		// The same key from an update: replaced, not listed twice.
		{"update", a1v2, key(a1), a1v2, []*examplev1.Widget{cluster, a1v2, b1, b2}},
		{"delete", b1, key(b1), nil, []*examplev1.Widget{cluster, a1v2, b2}},
		{"delete", toolscache.DeletedFinalStateUnknown{Key: "b/w-2", Obj: b2}, key(b2), nil, []*examplev1.Widget{cluster, a1v2}},
		// A deletion of what the index never had changes nothing.
		{"delete", widget("c", "w-9", "6"), types.NamespacedName{Namespace: "c", Name: "w-9"}, nil, []*examplev1.Widget{cluster, a1v2}},
	}

	inf := &fakeInformer{}
	src, err := qpcr.NewSource(context.Background(), fakeInformers{inf: inf}, &examplev1.Widget{})
	if err != nil {
		t.Fatal(err)
	}
	if inf.h == nil {
		t.Fatal("NewSource registered no handler on the informer")
	}
	var handed []string
	var current *event
	check := func(op string, obj any) {
		if current == nil {
			return
		}
		got, found, err := src.Get(current.key)
		if err != nil {
			t.Errorf("%s %s: Get: %v", op, current.key, err)
		}
		if (current.want == nil && found) || (current.want != nil && got != current.want) {
			t.Errorf("%s %s handed on while Get finds %v (found %v), want %v", op, current.key, got, found, current.want)
		}
		if obj != current.obj {
			t.Errorf("%s %s: the handler got %v, want the informer's %v", op, current.key, obj, current.obj)
		}
		handed = append(handed, op+" "+current.key.String())
	}
	reg, err := src.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { check("add", obj) },
		UpdateFunc: func(_, obj any) { check("update", obj) },
		DeleteFunc: func(obj any) { check("delete", obj) },
	})
	if err != nil {
		t.Fatal(err)
	}

	var want []string
	for i := range events {
		ev := &events[i]
		current = ev
		switch ev.op {
		case "add":
			inf.h.OnAdd(ev.obj, true)
		case "update":
			old, _, _ := src.Get(ev.key)
			inf.h.OnUpdate(old, ev.obj)
		case "delete":
			inf.h.OnDelete(ev.obj)
		}
		want = append(want, ev.op+" "+ev.key.String())
		objs, err := src.List()
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(objs, func(x, y *examplev1.Widget) int { return compareKeys(key(x), key(y)) })
		if !slices.Equal(objs, ev.listWant) {
			t.Errorf("after %s %s: List = %v, want %v", ev.op, ev.key, names(objs), names(ev.listWant))
		}
	}
	current = nil
	if !slices.Equal(handed, want) {
		t.Errorf("handed on %q, want %q", handed, want)
	}

	if src.HasSynced() || reg.HasSynced() {
		t.Error("HasSynced before the informer synced")
	}
	inf.synced.Store(true)
	if !src.HasSynced() || !reg.HasSynced() {
		t.Error("not HasSynced after the informer synced")
	}

	var replayed []*examplev1.Widget
	if _, err := src.AddEventHandler(toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if !initial {
				t.Errorf("replayed %v with isInInitialList false", obj)
			}
			replayed = append(replayed, obj.(*examplev1.Widget))
		},
	}); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(replayed, func(x, y *examplev1.Widget) int { return compareKeys(key(x), key(y)) })
	if last := events[len(events)-1].listWant; !slices.Equal(replayed, last) {
		t.Errorf("a handler added late got %v, want %v", names(replayed), names(last))
	}
}

func names(ws []*examplev1.Widget) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = fmt.Sprintf("%s@%s", client.ObjectKeyFromObject(w), w.ResourceVersion)
	}
	return out
}
