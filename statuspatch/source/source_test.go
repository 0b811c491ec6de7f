package source_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/quietpatch/quietpatch/statuspatch/source"
)

func cm(ns, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

func TestIndexer(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, o := range []any{cm("a", "x"), cm("b", "y")} {
		if err := idx.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	s := source.FromIndexer[*corev1.ConfigMap](idx, nil)
	objs, err := s.List()
	if err != nil || len(objs) != 2 {
		t.Fatalf("List = %v, %v", objs, err)
	}
	got, found, err := s.Get(types.NamespacedName{Namespace: "b", Name: "y"})
	if err != nil || !found || got.Name != "y" {
		t.Errorf("Get b/y = %v %v %v", got, found, err)
	}
	if _, found, _ := s.Get(types.NamespacedName{Namespace: "b", Name: "nope"}); found {
		t.Error("Get of a missing key found something")
	}
	if !s.HasSynced() {
		t.Error("nil synced means synced")
	}
	if s.Informer() != nil {
		t.Error("an Indexer source has an informer")
	}
	// An object of another type is an error, not a panic.
	if err := idx.Add(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "c", Name: "z"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(); err == nil || !strings.Contains(err.Error(), "Secret") {
		t.Errorf("List with a Secret in the cache = %v, want an error naming it", err)
	}
}

func TestFromLister(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	_ = idx.Add(cm("a", "x"))
	l := listersv1.NewConfigMapLister(idx)
	s := source.FromLister(l.List, func(ns, name string) (*corev1.ConfigMap, error) { return l.ConfigMaps(ns).Get(name) }, nil)
	if objs, err := s.List(); err != nil || len(objs) != 1 {
		t.Fatalf("List = %v, %v", objs, err)
	}
	if o, found, err := s.Get(types.NamespacedName{Namespace: "a", Name: "x"}); err != nil || !found || o.Name != "x" {
		t.Errorf("Get = %v %v %v", o, found, err)
	}
	if _, found, err := s.Get(types.NamespacedName{Namespace: "a", Name: "gone"}); err != nil || found {
		t.Errorf("Get of a missing object = %v, %v; want not found and no error", found, err)
	}
	boom := source.FromLister(func(labels.Selector) ([]*corev1.ConfigMap, error) { return nil, nil },
		func(string, string) (*corev1.ConfigMap, error) {
			return nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "x", nil)
		}, func() bool { return false })
	if _, _, err := boom.Get(types.NamespacedName{Name: "x"}); !apierrors.IsForbidden(err) {
		t.Errorf("Get passes other errors on: got %v", err)
	}
	if boom.HasSynced() {
		t.Error("HasSynced ignores the synced function")
	}
}

func TestEnqueueHandler(t *testing.T) {
	var got []string
	h := source.EnqueueHandler(func(k types.NamespacedName) { got = append(got, k.String()) })
	h.OnAdd(cm("a", "x"), false)
	h.OnUpdate(cm("a", "x"), cm("a", "x"))
	h.OnDelete(cm("a", "y"))
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "b/z", Obj: nil})
	h.OnAdd(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cluster-scoped"}}, false)
	// The initial list: the pass made on gaining the lead covers it.
	h.OnAdd(cm("a", "initial"), true)
	want := []string{"a/x", "a/x", "a/y", "b/z", "/cluster-scoped"}
	if !slices.Equal(got, want) {
		t.Errorf("enqueued %v, want %v", got, want)
	}
}

func TestToTyped(t *testing.T) {
	transform := source.ToTyped[corev1.ConfigMap]()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"namespace": "a", "name": "x"},
		"data":     map[string]any{"k": "v"},
	}}
	out, err := transform(u)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := out.(*corev1.ConfigMap)
	if !ok || c.Name != "x" || c.Data["k"] != "v" {
		t.Errorf("transformed %#v", out)
	}
	// Not unstructured: passed on unchanged (the informer also transforms
	// tombstones).
	d := cache.DeletedFinalStateUnknown{Key: "a/x"}
	if out, err := transform(d); err != nil || out != any(d) {
		t.Errorf("transform of a tombstone = %v, %v", out, err)
	}
	bad := &unstructured.Unstructured{Object: map[string]any{"kind": "ConfigMap", "data": "not a map",
		"metadata": map[string]any{"namespace": "a", "name": "bad"}}}
	if _, err := transform(bad); err == nil || !strings.Contains(err.Error(), "a/bad") {
		t.Errorf("a malformed object: %v, want an error naming it", err)
	}
}
