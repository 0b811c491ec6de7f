package source_test

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/quietpatch/quietpatch/statuspatch/source"
)

// A Source over a cache, and the handler that turns the cache's events
// into keys to reconcile. quietpatch.New registers that handler itself on
// a Source built from an informer; events of other resources are wired the
// same way to Controller.Enqueue.
func Example() {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	_ = idx.Add(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "a"}})
	src := source.FromIndexer[*corev1.ConfigMap](idx, nil)
	objs, _ := src.List()
	fmt.Println(len(objs), objs[0].Name)

	enqueue := func(k types.NamespacedName) { fmt.Println("reconcile", k) }
	h := source.EnqueueHandler(enqueue)
	h.OnUpdate(nil, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "a"}})
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "demo/b"})
	// Output:
	// 1 a
	// reconcile demo/a
	// reconcile demo/b
}
