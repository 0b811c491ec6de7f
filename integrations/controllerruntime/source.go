package controllerruntime

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/source"
)

// Source is the [statuspatch.Source] [NewSource] returns: the objects of
// one type in a manager's cache, as the cache holds them. List and Get
// return the cache's own objects (no copies), so a StatusComputer must not
// modify them; HasSynced reports whether the cache has synced;
// AddEventHandler registers a handler for the objects' events, which
// quietpatch.New does with the handler that enqueues every change. All
// methods are safe for concurrent use.
//
// A Source is also a quietpatch.Informer, so a Source over another
// resource is what a quietpatch.Dependency on it wants: its cache is
// waited for, its events enqueue the keys the Dependency maps them to,
// and the StatusComputer reads its objects with Get — the cache's own, no
// copy per object and pass, unlike the manager's client.Reader
// (mgr.GetCache().Get deep-copies each object it returns).
type Source[O client.Object] struct {
	objs *source.Cache[O] // List, Get, HasSynced
	add  func(toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error)
}

var _ statuspatch.Source[client.Object] = (*Source[client.Object])(nil)

// NewSource returns a Source over the informer that informers (a manager's
// cache: mgr.GetCache()) keeps for objects of obj's type. It asks the cache
// for that informer (GetInformer: the informer is created if the cache had
// none, and started with the cache), and works with every cache
// controller-runtime builds from cache.Options — cluster-wide, restricted to
// one namespace or several (DefaultNamespaces, ByObject[obj].Namespaces), to
// a label or field selector (DefaultLabelSelector, DefaultFieldSelector,
// ByObject[obj].Label and Field), or both: the Source holds exactly the
// objects the cache holds, as the cache's client.Reader lists them.
//
// Where the cache hands out a client-go SharedIndexInformer (a cache of
// all namespaces or of a selector), List and Get read its indexer. A cache
// restricted to namespaces hands out controller-runtime's multi-namespace
// informer, one informer per namespace behind an Informer that offers no
// store; it does so for cluster-scoped objects too when DefaultNamespaces
// is set. The Source then keeps an index of its own, filled by one event
// handler on that informer: it maps each key to the object the namespace's
// informer stores (a pointer, not a copy: a map entry per object), so List returns the union of the
// namespaces' objects, each once, and Get looks a key up. That handler updates the index before it
// hands the event to the handlers added with AddEventHandler, so a key
// enqueued on an event finds at least the object of that event; HasSynced
// reports true once every namespace's informer has synced and the index
// received their initial lists.
//
// O is the type the informer stores: a pointer to a typed object
// registered in the manager's scheme (&v1.Widget{}), or
// *unstructured.Unstructured with its GroupVersionKind set. Call NewSource
// before the manager starts, or with a ctx that bounds the wait: once the
// cache runs, GetInformer waits for a new informer to sync.
func NewSource[O client.Object](ctx context.Context, informers cache.Informers, obj O) (*Source[O], error) {
	if informers == nil {
		return nil, errors.New("controllerruntime: NewSource: informers (mgr.GetCache()) must not be nil")
	}
	inf, err := informers.GetInformer(ctx, obj)
	if err != nil {
		return nil, fmt.Errorf("controllerruntime: getting the cache's informer for %T: %w", obj, err)
	}
	if sii, ok := inf.(toolscache.SharedIndexInformer); ok {
		return &Source[O]{objs: source.FromIndexer[O](sii.GetIndexer(), sii.HasSynced), add: sii.AddEventHandler}, nil
	}
	m := &mirror{index: toolscache.NewIndexer(toolscache.DeletionHandlingMetaNamespaceKeyFunc, toolscache.Indexers{})}
	reg, err := inf.AddEventHandler(m)
	if err != nil {
		return nil, fmt.Errorf("controllerruntime: registering the Source's handler on the cache's informer for %T: %w", obj, err)
	}
	m.reg = reg
	return &Source[O]{objs: source.FromIndexer[O](m.index, reg.HasSynced), add: m.addHandler}, nil
}

// List returns every object in the cache, in a fresh slice.
func (s *Source[O]) List() ([]O, error) { return s.objs.List() }

// Get returns the object with key, and false if the cache has none.
func (s *Source[O]) Get(key types.NamespacedName) (O, bool, error) { return s.objs.Get(key) }

// HasSynced reports whether the cache has synced, and List holds its
// initial list.
func (s *Source[O]) HasSynced() bool { return s.objs.HasSynced() }

// AddEventHandler registers h for the events of the cache's objects: an
// object added, updated or deleted. When h's OnAdd, OnUpdate or OnDelete
// runs, List and Get already reflect the event. A handler added after the
// cache started first gets an OnAdd for every object it holds.
func (s *Source[O]) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return s.add(h)
}

// mirror is the index of a cache whose informer has no store of its own
// to read: one handler on the informer keeps index (key -> the object the
// informer stores) and then hands each event on to handlers, in the order
// of the informer's deliveries for each key. A multi-namespace informer
// delivers the events of different namespaces from different goroutines:
// the handlers run concurrently for those, never for one key.
type mirror struct {
	index toolscache.Indexer
	reg   toolscache.ResourceEventHandlerRegistration

	// mu is held for reading while an event is applied and handed on,
	// for writing while a handler is added (client-go's SharedInformer
	// blocks its deltas the same way).
	mu       sync.RWMutex
	handlers []toolscache.ResourceEventHandler
}

// The index's key function fails only on an object without metadata, which
// no controller-runtime cache holds: such an event is passed on unapplied.

func (m *mirror) OnAdd(obj any, isInInitialList bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	_ = m.index.Add(obj)
	for _, h := range m.handlers {
		h.OnAdd(obj, isInInitialList)
	}
}

func (m *mirror) OnUpdate(oldObj, newObj any) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	_ = m.index.Update(newObj)
	for _, h := range m.handlers {
		h.OnUpdate(oldObj, newObj)
	}
}

func (m *mirror) OnDelete(obj any) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	_ = m.index.Delete(obj) // a DeletedFinalStateUnknown by its key
	for _, h := range m.handlers {
		h.OnDelete(obj)
	}
}

// addHandler adds h, replaying the objects indexed so far as additions
// (client-go's rule for a handler added late). The registration is the
// mirror's own: it has synced once the mirror, and so h, got the
// informers' initial lists.
func (m *mirror) addHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	if h == nil {
		return nil, errors.New("controllerruntime: Source.AddEventHandler: the handler must not be nil")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, obj := range m.index.List() {
		h.OnAdd(obj, true)
	}
	m.handlers = append(m.handlers, h)
	return m.reg, nil
}

// A Source, like an informer of the manager's cache, is what a
// quietpatch.Dependency needs.
var (
	_ quietpatch.Informer = (*Source[client.Object])(nil)
	_ quietpatch.Informer = (cache.Informer)(nil)
)
