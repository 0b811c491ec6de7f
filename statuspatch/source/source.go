package source

import (
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/quietpatch/quietpatch/statuspatch"
)

// Cache is a [statuspatch.Source] over a client-go Indexer — the cache of a
// SharedIndexInformer — holding objects of type O. List and Get return the
// cache's own objects (no copies); an object of another type in the cache
// is an error. It also reports whether the cache has synced (HasSynced),
// which the quietpatch pipeline waits for, and, when built from an
// informer, gives the pipeline the informer to register its event handler
// with (Informer).
type Cache[O any] struct {
	indexer  cache.Indexer
	synced   func() bool
	informer cache.SharedIndexInformer // nil when built from an Indexer
}

var _ statuspatch.Source[*unstructured.Unstructured] = (*Cache[*unstructured.Unstructured])(nil)

// FromInformer returns a Source over inf's cache. O is the type the informer
// stores: a pointer to a typed object, or *unstructured.Unstructured for a
// dynamic informer.
func FromInformer[O any](inf cache.SharedIndexInformer) *Cache[O] {
	return &Cache[O]{indexer: inf.GetIndexer(), synced: inf.HasSynced, informer: inf}
}

// FromIndexer returns a Source over idx; synced reports whether the cache
// behind it has synced (nil means it always has).
func FromIndexer[O any](idx cache.Indexer, synced func() bool) *Cache[O] {
	if synced == nil {
		synced = func() bool { return true }
	}
	return &Cache[O]{indexer: idx, synced: synced}
}

// List returns every object in the cache, in a fresh slice.
func (c *Cache[O]) List() ([]O, error) {
	items := c.indexer.List()
	out := make([]O, 0, len(items))
	for _, it := range items {
		o, ok := it.(O)
		if !ok {
			return nil, typeError[O](it)
		}
		out = append(out, o)
	}
	return out, nil
}

// Get returns the object with key, and false if the cache has none.
func (c *Cache[O]) Get(key types.NamespacedName) (O, bool, error) {
	var zero O
	it, found, err := c.indexer.GetByKey(cache.NamespacedNameAsObjectName(key).String())
	if err != nil || !found {
		return zero, false, err
	}
	o, ok := it.(O)
	if !ok {
		return zero, false, typeError[O](it)
	}
	return o, true, nil
}

// HasSynced reports whether the cache has synced.
func (c *Cache[O]) HasSynced() bool { return c.synced() }

// Informer returns the informer the Cache was built from, nil for a Cache
// built from an Indexer: quietpatch.New registers its event handler on it.
func (c *Cache[O]) Informer() cache.SharedIndexInformer { return c.informer }

func typeError[O any](it any) error {
	return fmt.Errorf("source: the cache holds a %T, want %v", it, reflect.TypeFor[O]())
}

// Lister is a [statuspatch.Source] over the two calls of a client-go
// lister. Build it with [FromLister].
type Lister[O any] struct {
	list   func(labels.Selector) ([]O, error)
	get    func(namespace, name string) (O, error)
	synced func() bool
}

// FromLister returns a Source over a lister's List and Get: list is the
// lister's List (labels.Everything() is passed), get fetches one object
// (for a namespaced lister, func(ns, name string) (O, error) { return
// l.Widgets(ns).Get(name) }); a NotFound error from get means the object
// is gone. synced reports whether the cache behind the lister has synced
// (nil means it always has).
func FromLister[O any](list func(labels.Selector) ([]O, error), get func(namespace, name string) (O, error), synced func() bool) *Lister[O] {
	if synced == nil {
		synced = func() bool { return true }
	}
	return &Lister[O]{list: list, get: get, synced: synced}
}

// List returns every object; listers return a fresh slice.
func (l *Lister[O]) List() ([]O, error) { return l.list(labels.Everything()) }

// Get returns the object with key, and false if it does not exist.
func (l *Lister[O]) Get(key types.NamespacedName) (O, bool, error) {
	o, err := l.get(key.Namespace, key.Name)
	if apierrors.IsNotFound(err) {
		var zero O
		return zero, false, nil
	}
	return o, err == nil, err
}

// HasSynced reports whether the lister's cache has synced.
func (l *Lister[O]) HasSynced() bool { return l.synced() }

// EnqueueHandler returns an event handler that calls enqueue with the key of
// every object added, updated or deleted (including deletions the informer
// learnt of late, cache.DeletedFinalStateUnknown). Pass it a pipeline's
// Enqueue.
//
// Adds of the informer's initial list (OnAdd with isInInitialList true) are
// not enqueued: a pipeline waits for the cache to sync before it competes
// for the lead, and the pass it makes on gaining it covers every object of
// the list. Enqueued, they would fill the fresh lane ahead of the edits made
// while the first pass converges.
func EnqueueHandler(enqueue func(types.NamespacedName)) cache.ResourceEventHandler {
	on := func(obj any) {
		key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		if err != nil {
			return
		}
		if ns, name, err := cache.SplitMetaNamespaceKey(key); err == nil {
			enqueue(types.NamespacedName{Namespace: ns, Name: name})
		}
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			if !isInInitialList {
				on(obj)
			}
		},
		UpdateFunc: func(_, obj any) { on(obj) },
		DeleteFunc: on,
	}
}

// ToTyped returns a transform for a dynamic informer
// (SharedIndexInformer.SetTransform) that converts each
// *unstructured.Unstructured into a *T — the Go type of the resource — once,
// when the informer stores it, so that a [Cache] of *T serves typed objects
// to a StatusComputer. An object that does not convert is an error, which
// the informer logs; other objects pass unchanged.
func ToTyped[T any]() cache.TransformFunc {
	return func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil
		}
		out := new(T)
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
			return nil, fmt.Errorf("source: converting %s %s/%s to %v: %w", u.GetKind(), u.GetNamespace(), u.GetName(), reflect.TypeFor[T](), err)
		}
		return out, nil
	}
}
