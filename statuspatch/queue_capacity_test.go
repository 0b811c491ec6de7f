package statuspatch_test

import (
	"context"
	"errors"
	"testing"

	"github.com/quietpatch/quietpatch/statuspatch"
)

func TestQueueSetCapacity(t *testing.T) {
	q, err := statuspatch.NewPatchQueue(statuspatch.QueueConfig[string]{Capacity: 2, Key: queueTestKey})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for _, v := range []string{"a#1", "b#1"} {
		if err := q.TrySend(v); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.TrySend("c#1"); !errors.Is(err, statuspatch.ErrFull) {
		t.Fatalf("TrySend at capacity 2 = %v, want ErrFull", err)
	}
	// Growing wakes a producer blocked in Send.
	sent := make(chan error, 1)
	go func() { sent <- q.Send(context.Background(), "c#1") }()
	queueWaitFor(t, "the producer to block", func() bool { s, _ := statuspatch.QueueWaiters(q); return s == 1 })
	if err := q.SetCapacity(3); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatalf("blocked Send after growing: %v", err)
	}
	// Shrinking below the waiting items removes nothing; producers are
	// refused until enough was received.
	if err := q.SetCapacity(1); err != nil {
		t.Fatal(err)
	}
	if q.Len() != 3 || q.Cap() != 1 {
		t.Fatalf("Len %d Cap %d, want 3 and 1", q.Len(), q.Cap())
	}
	for i := range 2 {
		if err := q.TrySend("d#1"); !errors.Is(err, statuspatch.ErrFull) {
			t.Fatalf("TrySend with %d waiting and capacity 1 = %v, want ErrFull", q.Len(), err)
		}
		it, ok, _ := q.TryReceive()
		if !ok {
			t.Fatalf("receive %d: nothing", i)
		}
		q.Done(it)
	}
	it, _, _ := q.TryReceive()
	q.Done(it)
	if err := q.TrySend("d#1"); err != nil {
		t.Fatalf("TrySend into an empty queue of capacity 1: %v", err)
	}
	for _, n := range []int{0, -1} {
		if err := q.SetCapacity(n); err == nil {
			t.Errorf("SetCapacity(%d) accepted", n)
		}
	}
}
