package shard

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// The filter's goroutine ends at Stop even when an event waits for a
// consumer that no longer reads, as a reflector's after it stopped
// (watch.Filter's leaks then; goleak in TestMain would see it).
func TestFilterWatchStopsWithAnEventUnread(t *testing.T) {
	in := watch.NewFakeWithChanSize(1, false)
	w := newFilterWatch(in, func(watch.Event) bool { return true })
	in.Add(&metav1.PartialObjectMetadata{}) // buffered: the goroutine takes it and waits to pass it on
	w.Stop()
	w.Stop() // twice is fine
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-w.ResultChan():
			if !ok {
				return // the goroutine ended
			}
		case <-deadline:
			t.Fatal("the filter's result channel was not closed after Stop")
		}
	}
}
