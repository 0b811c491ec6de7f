package shard

import (
	"sync"

	"k8s.io/apimachinery/pkg/watch"
)

// filterWatch passes on the events of in that keep accepts. Unlike
// watch.Filter's, its goroutine ends when Stop is called even if an event
// waits to be passed on that the consumer no longer reads (a reflector
// stops reading before it calls Stop): watch.Filter's blocks on it forever.
type filterWatch struct {
	in   watch.Interface
	out  chan watch.Event
	stop chan struct{}
	once sync.Once
}

func newFilterWatch(in watch.Interface, keep func(watch.Event) bool) *filterWatch {
	w := &filterWatch{in: in, out: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(w.out)
		for e := range in.ResultChan() {
			if !keep(e) {
				continue
			}
			select {
			case w.out <- e:
			case <-w.stop:
				return
			}
		}
	}()
	return w
}

// ResultChan returns the events kept.
func (w *filterWatch) ResultChan() <-chan watch.Event { return w.out }

// Stop stops the watch underneath and the goroutine passing its events on.
func (w *filterWatch) Stop() {
	w.once.Do(func() { close(w.stop) })
	w.in.Stop()
}
