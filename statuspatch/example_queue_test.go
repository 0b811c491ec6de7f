package statuspatch_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/quietpatch/quietpatch/statuspatch"
)

// ExamplePatchQueue shows the queue's rules: a key waits once however
// often it is added, fresh keys are served before pass keys, and a key
// added while a worker holds it is served again only after Done.
func ExamplePatchQueue() {
	q, err := statuspatch.NewPatchQueue[string](100)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Close()

	// A periodic pass found two objects changed; then an event changed a
	// third, and one of the first two again.
	_ = q.Add("default/web", statuspatch.LanePass)
	_ = q.Add("default/api", statuspatch.LanePass)
	_ = q.Add("default/db", statuspatch.LaneFresh)
	_ = q.Add("default/api", statuspatch.LaneFresh) // waits already: coalesced, moved to the fresh lane
	fmt.Println("waiting:", q.Stats().Depth)

	ctx := context.Background()
	db, _ := q.Get(ctx)
	api, _ := q.Get(ctx)
	fmt.Println("worker 1:", db)
	fmt.Println("worker 2:", api)

	// default/db changes again while worker 1 holds it: it waits for Done.
	_ = q.Add(db, statuspatch.LaneFresh)
	web, _ := q.Get(ctx)
	fmt.Println("worker 3:", web)
	q.Done(db)
	again, _ := q.Get(ctx)
	fmt.Println("worker 1 again:", again)
	q.Done(api)
	q.Done(web)
	q.Done(again)

	st := q.Stats()
	fmt.Printf("enqueued %d, coalesced %d, dequeued %d, waiting %d\n", st.Enqueued, st.Coalesced, st.Dequeued, st.Depth)
	// Output:
	// waiting: 3
	// worker 1: default/db
	// worker 2: default/api
	// worker 3: default/web
	// worker 1 again: default/db
	// enqueued 5, coalesced 1, dequeued 4, waiting 0
}

// ExamplePatchQueue_Reserve takes a slot before the work that finds the
// key, so a full lane costs no work; a worker's Get frees the slot.
func ExamplePatchQueue_Reserve() {
	q, err := statuspatch.NewPatchQueue[string](1)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Close()

	p, err := q.Reserve(statuspatch.LanePass)
	if err != nil {
		fmt.Println(err)
		return
	}
	key := "default/web" // what the work found
	if err := p.Send(key); err != nil {
		fmt.Println(err)
	}

	// The lane is full: Reserve fails at once, and the drop is counted.
	if _, err := q.Reserve(statuspatch.LanePass); errors.Is(err, statuspatch.ErrFull) {
		fmt.Println(err)
	}
	got, _ := q.Get(context.Background())
	q.Done(got)
	p, err = q.Reserve(statuspatch.LanePass) // Get freed the slot
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("room again once a worker took", got)
	p.Release() // nothing to send after all: the slot goes back

	st := q.Stats()
	fmt.Printf("enqueued %d, dropped full %d, held %d, reserved %d\n", st.Enqueued, st.DroppedFull, st.Held, st.Reserved)
	// Output:
	// statuspatch: queue is full
	// room again once a worker took default/web
	// enqueued 1, dropped full 1, held 0, reserved 0
}

// ExamplePatchQueue_ReserveWait is a producer that waits for room rather
// than drop, at most until its deadline: a worker's Get frees the slot it
// waits for.
func ExamplePatchQueue_ReserveWait() {
	q, err := statuspatch.NewPatchQueue[string](1)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Close()
	_ = q.Add("default/web", statuspatch.LanePass) // the lane is full

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := q.ReserveWait(ctx, statuspatch.LanePass); err != nil {
		fmt.Println("no room within the deadline:", err)
	}

	worker := make(chan string, 1)
	go func() { // a worker takes the key a little later
		time.Sleep(10 * time.Millisecond)
		key, _ := q.Get(context.Background())
		q.Done(key)
		worker <- key
	}()
	p, err := q.ReserveWait(context.Background(), statuspatch.LanePass)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("room once the worker took", <-worker)
	_ = p.Send("default/db")
	st := q.Stats()
	fmt.Printf("waiting %d, dropped full %d\n", st.Depth, st.DroppedFull)
	// Output:
	// no room within the deadline: context deadline exceeded
	// room once the worker took default/web
	// waiting 1, dropped full 1
}

// ExamplePatchQueue_Close shows the worker loop: Get, work, Done, until
// Get returns ErrClosed once the queue is closed and drained.
func ExamplePatchQueue_Close() {
	q, err := statuspatch.NewPatchQueue[string](10)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, key := range []string{"default/a", "default/b", "default/c"} {
		_ = q.Add(key, statuspatch.LaneFresh)
	}
	q.Close()
	fmt.Println(q.Add("default/d", statuspatch.LaneFresh))

	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			key, err := q.Get(context.Background())
			if err != nil {
				fmt.Println("worker stops:", err)
				return
			}
			fmt.Println("patch", key)
			q.Done(key)
		}
	})
	wg.Wait()
	// Output:
	// statuspatch: queue is closed
	// patch default/a
	// patch default/b
	// patch default/c
	// worker stops: statuspatch: queue is closed
}
