package statuspatch

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// echoes tells the events of the dispatcher's own writes from the others.
// While a call for a key is in flight, the key's events are held (their
// versions noted); when it ends, those at the version the write produced
// are its echo, and any other makes the key enqueued again. After the call,
// the version is remembered until the object's next event. Entries live
// from a call to the object's next event: at most one per object.
type echoes struct {
	mu     sync.Mutex
	rv     map[types.NamespacedName]string    // our last write's version, until the next event
	flying map[types.NamespacedName]*[]string // calls in flight: the versions of the events held
}

// begin notes a call for key about to be sent.
func (e *echoes) begin(key types.NamespacedName) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.flying == nil {
		e.flying, e.rv = map[types.NamespacedName]*[]string{}, map[types.NamespacedName]string{}
	}
	delete(e.rv, key)
	e.flying[key] = new([]string)
}

// end notes that the call for key ended, leaving the object at rv ("" if
// it failed or the version is unknown). It returns the events held that
// were its echo, and whether another was held (the key must be served).
func (e *echoes) end(key types.NamespacedName, rv string) (echoed int64, other bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	held := e.flying[key]
	delete(e.flying, key)
	for _, v := range *held {
		if rv != "" && v == rv {
			echoed++
		} else {
			other = true
		}
	}
	if rv != "" && echoed == 0 {
		e.rv[key] = rv // its event is still to come
	}
	return echoed, other
}

// event notes an event of key's object at rv ("" for a deletion): whether
// it is our last write's echo, or held while a call is in flight — either
// way it needs no enqueue now.
func (e *echoes) event(key types.NamespacedName, rv string) (echo, held bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if h, ok := e.flying[key]; ok && rv != "" {
		*h = append(*h, rv)
		return false, true
	}
	last, ok := e.rv[key]
	if ok {
		delete(e.rv, key)
	}
	return ok && rv != "" && last == rv, false
}

// Echo reports whether an update event of the object with key, which now
// has resourceVersion, needs no reconcile because it is the echo of the
// dispatcher's own write, as its [VersionPatcher] reported the write's
// version: the object is then exactly the one the status was computed
// from, with that status. An event that comes while a call for key is in
// flight is held (Echo reports true): when the call ends it is counted as
// the echo if it has the write's version, and the dispatcher enqueues the
// key (fresh lane) otherwise. Echoes are counted (DispatcherStats.Echoes,
// quietpatch.dispatch.echoes). Every call forgets the write, so that only
// the write's own event matches; a deletion calls it with "" (never an
// echo) to forget. Someone else's write always has another
// resourceVersion; a change of what the status is computed from (a
// dependency) enqueues the key by its own event. With a Patcher that does
// not report versions it always reports false. quietpatch.New's event
// handler calls it; call it from your own update handler before
// enqueueing, and skip the keys it reports.
func (d *Dispatcher[O, S, P]) Echo(key types.NamespacedName, resourceVersion string) bool {
	echo, held := d.echoes.event(key, resourceVersion)
	if echo {
		d.echoed.Add(1)
	}
	return echo || held
}
