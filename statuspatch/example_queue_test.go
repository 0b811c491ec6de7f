package statuspatch_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/quietpatch/quietpatch/statuspatch"
)

// examplePatch is a status patch for one object.
type examplePatch struct {
	Object string // "namespace/name"
	Body   string
}

// ExamplePatchQueue shows coalescing and per-key exclusivity: a newer
// patch for an object replaces the one waiting, and an object's next patch
// is not delivered while its previous one is being applied.
func ExamplePatchQueue() {
	q, err := statuspatch.NewPatchQueue(statuspatch.QueueConfig[examplePatch]{
		Capacity: 10,
		Key:      func(p examplePatch) string { return p.Object },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Close()

	_ = q.TrySend(examplePatch{"default/web", `{"status":{"v":1}}`})
	_ = q.TrySend(examplePatch{"default/api", `{"status":{"v":1}}`})
	_ = q.TrySend(examplePatch{"default/web", `{"status":{"v":2}}`}) // replaces v1, keeps its place
	fmt.Println("waiting:", q.Len())

	ctx := context.Background()
	web, _ := q.Receive(ctx)
	fmt.Println("apply", web.Value.Object, web.Value.Body)

	// While default/web is in flight, its next patch waits; default/api
	// goes first.
	_ = q.TrySend(examplePatch{"default/web", `{"status":{"v":3}}`})
	api, _ := q.Receive(ctx)
	fmt.Println("apply", api.Value.Object, api.Value.Body)
	q.Done(api)
	if _, ok, _ := q.TryReceive(); !ok {
		fmt.Println("default/web v3 held back until Done")
	}
	q.Done(web)
	web, _ = q.Receive(ctx)
	fmt.Println("apply", web.Value.Object, web.Value.Body)
	q.Done(web)

	st := q.Stats()
	fmt.Printf("enqueued %d = dequeued %d + superseded %d + depth %d\n", st.Enqueued, st.Dequeued, st.Superseded, st.Depth)
	// Output:
	// waiting: 2
	// apply default/web {"status":{"v":2}}
	// apply default/api {"status":{"v":1}}
	// default/web v3 held back until Done
	// apply default/web {"status":{"v":3}}
	// enqueued 4 = dequeued 3 + superseded 1 + depth 0
}

// ExamplePatchQueue_Reserve shows the producer side of a reconcile pass:
// take a slot before spending work on a patch, and stop the pass with one
// message when the queue is full.
func ExamplePatchQueue_Reserve() {
	q, _ := statuspatch.NewPatchQueue(statuspatch.QueueConfig[examplePatch]{
		Capacity: 2,
		Key:      func(p examplePatch) string { return p.Object },
	})
	defer q.Close()

	objects := []string{"ns/a", "ns/b", "ns/c", "ns/d"}
	for i, obj := range objects {
		permit, err := q.Reserve()
		if errors.Is(err, statuspatch.ErrFull) {
			fmt.Printf("queue full: pass halted at %d of %d, resumes at %s\n", i, len(objects), obj)
			break
		}
		if err != nil { // ErrClosed: shutting down
			return
		}
		if obj == "ns/b" { // status unchanged after all: no patch
			permit.Release()
			continue
		}
		_ = permit.Send(examplePatch{obj, `{"status":{}}`})
	}
	fmt.Println("waiting:", q.Len())
	// Output:
	// queue full: pass halted at 3 of 4, resumes at ns/d
	// waiting: 2
}

// ExamplePatchQueue_Receive shows a consumer loop that drains what is left
// after Close, then stops.
func ExamplePatchQueue_Receive() {
	q, _ := statuspatch.NewPatchQueue(statuspatch.QueueConfig[string]{Capacity: 8})
	for _, p := range []string{"p1", "p2", "p3"} {
		if err := q.Send(context.Background(), p); err != nil {
			fmt.Println(err)
		}
	}
	q.Close()
	fmt.Println("send after close:", q.TrySend("p4"))

	done := make(chan struct{})
	go func() { // the consumer, as a dispatcher worker would run it
		defer close(done)
		for {
			it, err := q.Receive(context.Background())
			if errors.Is(err, statuspatch.ErrClosed) {
				fmt.Println("closed and drained")
				return
			}
			fmt.Println("apply", it.Value)
			q.Done(it)
		}
	}()
	<-done
	// Output:
	// send after close: statuspatch: queue is closed
	// apply p1
	// apply p2
	// apply p3
	// closed and drained
}

// ExampleQueueConfig_maxAge shows MaxAge: a patch that waited longer than
// one reconcile interval is dropped at dequeue, since the next pass
// recomputes it from fresh state anyway.
func ExampleQueueConfig_maxAge() {
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	q, _ := statuspatch.NewPatchQueue(statuspatch.QueueConfig[string]{
		Capacity: 4,
		MaxAge:   10 * time.Second,
		Clock:    clk,
	})
	defer q.Close()

	_ = q.TrySend("old")
	clk.SetTime(clk.Now().Add(8 * time.Second))
	_ = q.TrySend("new")
	clk.SetTime(clk.Now().Add(5 * time.Second)) // "old" waited 13s, "new" 5s

	it, _, _ := q.TryReceive()
	fmt.Println("delivered:", it.Value, "after", clk.Since(it.Enqueued))
	fmt.Println("expired:", q.Stats().DroppedExpired)
	// Output:
	// delivered: new after 5s
	// expired: 1
}
