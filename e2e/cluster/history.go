package cluster

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// Version is one version of an object as a History recorded it.
type Version struct {
	Namespace, Name string
	// ResourceVersion is the object's metadata.resourceVersion as a
	// number: etcd's revision at the write, global across all objects of
	// the control plane, so versions of different objects (a Lease and a
	// route, say) are ordered by comparing it.
	ResourceVersion uint64
	// Object is the object as the list or watch delivered it.
	Object *unstructured.Unstructured
	// Initial marks versions from the initial list: they were written
	// before the recording began.
	Initial bool
	// Deleted marks the final version of a deleted object.
	Deleted bool
	// Received is when the list or watch delivered it (the local clock).
	Received time.Time
}

// Into converts the version's object into a typed object, e.g. a
// *coordinationv1.Lease.
func (v Version) Into(obj any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(v.Object.UnstructuredContent(), obj)
}

// History records every version of the objects of one resource that a list
// and watch select, from the list onwards, in the order etcd wrote them: a
// watch from the list's resourceVersion misses nothing, and is resumed from
// the last version seen if it ends. Create one with ControlPlane.Record;
// Stop it when done. Its methods are safe for concurrent use.
type History struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	versions []Version
	err      error // why the recording ended early
	changed  chan struct{}
}

// Record lists the objects of resource gvr in namespace ("" for all) that
// opts selects (label and field selectors; the resourceVersion is the
// History's own) as the admin, then watches them from the list's
// resourceVersion and records every version until ctx ends or Stop is
// called.
func (cp *ControlPlane) Record(ctx context.Context, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) (*History, error) {
	dc, err := dynamic.NewForConfig(cp.AdminConfig())
	if err != nil {
		return nil, fmt.Errorf("cluster: dynamic client: %w", err)
	}
	res := dc.Resource(gvr).Namespace(namespace)
	opts.ResourceVersion, opts.ResourceVersionMatch, opts.Watch = "", "", false
	list, err := res.List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("cluster: listing %s: %w", gvr.Resource, err)
	}
	h := &History{done: make(chan struct{}), changed: make(chan struct{})}
	now := time.Now()
	for i := range list.Items {
		if err := h.add(&list.Items[i], true, false, now); err != nil {
			return nil, err
		}
	}
	ctx, h.cancel = context.WithCancel(ctx)
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, list.GetResourceVersion(), &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector, o.FieldSelector = opts.LabelSelector, opts.FieldSelector
			return res.Watch(ctx, o)
		},
	})
	if err != nil {
		h.cancel()
		return nil, fmt.Errorf("cluster: watching %s: %w", gvr.Resource, err)
	}
	go func() {
		defer close(h.done)
		defer rw.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-rw.ResultChan():
				if !ok {
					h.fail(fmt.Errorf("cluster: the watch of %s ended", gvr.Resource))
					return
				}
				var err error
				switch ev.Type {
				case watch.Added, watch.Modified, watch.Deleted:
					u, ok := ev.Object.(*unstructured.Unstructured)
					if !ok {
						err = fmt.Errorf("cluster: watch of %s delivered a %T", gvr.Resource, ev.Object)
						break
					}
					err = h.add(u, false, ev.Type == watch.Deleted, time.Now())
				case watch.Error:
					err = fmt.Errorf("cluster: watch of %s: %v", gvr.Resource, ev.Object)
				}
				if err != nil {
					h.fail(err)
					return
				}
			}
		}
	}()
	return h, nil
}

func (h *History) add(u *unstructured.Unstructured, initial, deleted bool, at time.Time) error {
	rv, err := strconv.ParseUint(u.GetResourceVersion(), 10, 64)
	if err != nil {
		return fmt.Errorf("cluster: resourceVersion %q of %s/%s is not a number: %w", u.GetResourceVersion(), u.GetNamespace(), u.GetName(), err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.versions = append(h.versions, Version{
		Namespace: u.GetNamespace(), Name: u.GetName(), ResourceVersion: rv,
		Object: u, Initial: initial, Deleted: deleted, Received: at,
	})
	close(h.changed)
	h.changed = make(chan struct{})
	return nil
}

func (h *History) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.err = err
	close(h.changed)
	h.changed = make(chan struct{})
}

// Stop ends the recording and waits until it has ended. Idempotent.
func (h *History) Stop() {
	h.cancel()
	<-h.done
}

// Err returns why the recording ended before Stop, or nil.
func (h *History) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// Versions returns every version recorded so far: the initial list (in
// the list's order), then what the watch delivered, in resourceVersion
// order.
func (h *History) Versions() []Version {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.versions)
}

// WaitFor waits until the History has recorded a version whose
// resourceVersion is rv or later — so every earlier write to the objects
// it watches is recorded too (writes before the list as the list's state)
// — and returns the versions recorded by then.
// It fails when ctx ends or the recording ended early.
func (h *History) WaitFor(ctx context.Context, rv uint64) ([]Version, error) {
	for {
		h.mu.Lock()
		vs, err, changed := h.versions, h.err, h.changed
		reached := len(vs) > 0 && slices.ContainsFunc(vs, func(v Version) bool { return v.ResourceVersion >= rv })
		h.mu.Unlock()
		if reached {
			return slices.Clone(vs), nil
		}
		if err != nil {
			return nil, err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("cluster: resourceVersion %d not recorded (%d versions so far): %w", rv, len(vs), ctx.Err())
		}
	}
}

// StatusChanges returns the versions recorded by the watch whose .status
// differs from the version of the same object before it: the status
// writes that landed, in the order they landed. A version that changed
// only metadata or spec is left out, and so is the initial list.
func StatusChanges(versions []Version) []Version {
	last := map[[2]string]any{}
	var out []Version
	for _, v := range versions {
		k := [2]string{v.Namespace, v.Name}
		st := v.Object.Object["status"]
		prev, seen := last[k]
		last[k] = st
		// An object first seen now was created: that is no status write.
		if v.Initial || v.Deleted || !seen || reflect.DeepEqual(prev, st) {
			continue
		}
		out = append(out, v)
	}
	return out
}
