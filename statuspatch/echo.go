package statuspatch

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// echoes remembers, by key, the resourceVersion of the dispatcher's last
// write of the object, until the next event of that object: the event of
// the write itself (its echo) needs no serve. Entries live from a write to
// the object's next event, so there are at most as many as objects.
type echoes struct {
	mu sync.Mutex
	rv map[types.NamespacedName]string
}

// wrote records that our write left the object with key at rv.
func (e *echoes) wrote(key types.NamespacedName, rv string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.rv == nil {
		e.rv = map[types.NamespacedName]string{}
	}
	e.rv[key] = rv
}

// take forgets our last write of key and reports whether it left the
// object at rv (rv "" never matches).
func (e *echoes) take(key types.NamespacedName, rv string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	last, ok := e.rv[key]
	if ok {
		delete(e.rv, key)
	}
	return ok && rv != "" && last == rv
}

// Echo reports whether an update event of the object with key, which now
// has resourceVersion, is the echo of the dispatcher's own last write of
// it, as its [VersionPatcher] reported the write's version: then the
// object is exactly the one the status was computed from, with that
// status, and the event needs no reconcile. Echoes are counted
// (DispatcherStats.Echoes, quietpatch.dispatch.echoes). Every call forgets
// the write, so that only the write's own event matches; a deletion calls
// it with "" (never an echo) to forget. Someone else's write always has
// another resourceVersion; a change of what the status is computed from
// (a dependency) enqueues the key by its own event. quietpatch.New's event
// handler calls it; call it from your own update handler before
// enqueueing, and skip the echoes.
func (d *Dispatcher[O, S, P]) Echo(key types.NamespacedName, resourceVersion string) bool {
	if !d.echoes.take(key, resourceVersion) {
		return false
	}
	d.echoed.Add(1)
	return true
}
