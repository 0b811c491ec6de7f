package controllerruntime

import (
	"context"
	"errors"
	"fmt"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/statuspatch/source"
)

// ErrNoIndexer is wrapped by the error [NewSource] (and [Add]) returns when
// the manager's cache hands out an informer without a client-go indexer
// behind it — a cache restricted to several namespaces
// (cache.Options.DefaultNamespaces with more than one entry) does.
var ErrNoIndexer = errors.New("controllerruntime: the cache's informer has no indexer")

// NewSource returns a statuspatch Source over the informer that informers
// (a manager's cache: mgr.GetCache()) keeps for objects of obj's type. It
// asks the cache for that informer (GetInformer: the informer is created if
// the cache had none, and started with the cache), and returns a
// source.Cache over the client-go SharedIndexInformer behind it. List and
// Get hand out the informer's own objects — no deep copy, unlike the
// cache's client.Reader — so the StatusComputer must not modify them; the
// quietpatch pipeline waits for HasSynced and registers its event handler
// on the informer.
//
// O is the type the informer stores: a pointer to a typed object
// registered in the manager's scheme (&v1.Widget{}), or
// *unstructured.Unstructured with its GroupVersionKind set. Call NewSource
// before the manager starts, or with a ctx that bounds the wait: once the
// cache runs, GetInformer waits for a new informer to sync.
func NewSource[O client.Object](ctx context.Context, informers cache.Informers, obj O) (*source.Cache[O], error) {
	if informers == nil {
		return nil, errors.New("controllerruntime: NewSource: informers (mgr.GetCache()) must not be nil")
	}
	inf, err := informers.GetInformer(ctx, obj)
	if err != nil {
		return nil, fmt.Errorf("controllerruntime: getting the cache's informer for %T: %w", obj, err)
	}
	sii, ok := inf.(toolscache.SharedIndexInformer)
	if !ok {
		return nil, fmt.Errorf("%w: for %T the cache gave a %T, which is not a client-go SharedIndexInformer (a cache of several namespaces?); watch one namespace or all of them, or build a Source of your own", ErrNoIndexer, obj, inf)
	}
	return source.Informer[O](sii), nil
}

// An informer of the manager's cache is what a quietpatch.Dependency needs.
var _ quietpatch.Informer = (cache.Informer)(nil)
