package shard

import (
	"context"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// ListWatch returns a ListerWatcher for the objects of r: every list and
// watch it makes carries r's selector in ListOptions.ShardSelector, and
// whatever comes back outside r — the server did not honour the selector —
// is dropped, so an informer on it holds exactly r's objects either way.
// Bookmarks and errors pass through.
//
// unfiltered, if not nil, is called once, the first time an object outside
// r comes back: the server filtered nothing, and the shard's cache costs a
// full list and watch of the resource (transfer and decoding, not memory).
// Whether the server filters is told from what it returns, not from the
// list's shardInfo, which not every resource's list carries.
//
// Its IsWatchListSemanticsUnSupported passes on lw's answer, so the
// reflector streams the initial list when it can.
func ListWatch(lw cache.ListerWatcher, r Range, unfiltered func()) cache.ListerWatcher {
	f := &filtered{lw: cache.ToListerWatcherWithContext(lw), r: r, unfiltered: unfiltered}
	flw := &cache.ListWatch{ListWithContextFunc: f.ListWithContext, WatchFuncWithContext: f.WatchWithContext}
	return cache.ToListWatcherWithWatchListSemantics(flw, lw)
}

type filtered struct {
	lw         cache.ListerWatcherWithContext
	r          Range
	unfiltered func()
	told       atomic.Bool
}

func (f *filtered) options(o metav1.ListOptions) metav1.ListOptions {
	o.ShardSelector = f.r.Selector()
	return o
}

// keep reports whether obj belongs to the range, and tells once when not.
func (f *filtered) keep(obj runtime.Object) bool {
	m, err := meta.Accessor(obj)
	if err != nil {
		return true // not an object of the resource: let the reflector judge
	}
	if f.r.Contains(m.GetUID()) {
		return true
	}
	if f.told.CompareAndSwap(false, true) && f.unfiltered != nil {
		f.unfiltered()
	}
	return false
}

// ListWithContext lists r and drops the objects outside it.
func (f *filtered) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	list, err := f.lw.ListWithContext(ctx, f.options(o))
	if err != nil {
		return list, err
	}
	items, err := meta.ExtractListWithAlloc(list)
	if err != nil {
		return nil, err
	}
	kept := items[:0]
	for _, it := range items {
		if f.keep(it) {
			kept = append(kept, it)
		}
	}
	if len(kept) == len(items) {
		return list, nil
	}
	if err := meta.SetList(list, kept); err != nil {
		return nil, err
	}
	return list, nil
}

// WatchWithContext watches r and drops the events of objects outside it.
func (f *filtered) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	w, err := f.lw.WatchWithContext(ctx, f.options(o))
	if err != nil {
		return nil, err
	}
	fw := &filteredWatch{w: w, out: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(fw.out)
		for e := range w.ResultChan() {
			switch e.Type {
			case watch.Added, watch.Modified, watch.Deleted:
				if !f.keep(e.Object) {
					continue
				}
			}
			select {
			case fw.out <- e:
			case <-fw.stop: // nobody reads any more
				return
			}
		}
	}()
	return fw, nil
}

// filteredWatch passes on the events its goroutine keeps. Unlike
// watch.Filter's, the goroutine ends when the watch is stopped with an
// event still to hand over: a stopped informer does not read it.
type filteredWatch struct {
	w    watch.Interface
	out  chan watch.Event
	stop chan struct{}
	once sync.Once
}

func (fw *filteredWatch) ResultChan() <-chan watch.Event { return fw.out }

func (fw *filteredWatch) Stop() {
	fw.once.Do(func() {
		close(fw.stop)
		fw.w.Stop()
	})
}
