package statuspatch

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// roomSignal's channel closes once enough slots are free, whatever frees
// them, and never before.
func TestQueueRoomSignal(t *testing.T) {
	isClosed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	full := func(t *testing.T) *PatchQueue[string] {
		t.Helper()
		q, err := NewPatchQueue(QueueConfig[string]{Capacity: 4, Key: func(s string) string { return s }})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{"a", "b", "c", "d"} {
			if err := q.TrySend(v); err != nil {
				t.Fatal(err)
			}
		}
		return q
	}
	receive := func(t *testing.T, q *PatchQueue[string]) {
		t.Helper()
		it, ok, err := q.TryReceive()
		if !ok || err != nil {
			t.Fatalf("TryReceive = %v, %v", ok, err)
		}
		q.Done(it)
	}

	t.Run("at once when there is room", func(t *testing.T) {
		q, _ := NewPatchQueue(QueueConfig[string]{Capacity: 4})
		if !isClosed(q.roomSignal(4)) {
			t.Error("an empty queue: the signal is not closed at once")
		}
	})
	t.Run("when receives free enough slots", func(t *testing.T) {
		q := full(t)
		room := q.roomSignal(2)
		receive(t, q)
		if isClosed(room) {
			t.Fatal("closed with 1 slot free, want 2")
		}
		receive(t, q)
		if !isClosed(room) {
			t.Fatal("not closed with 2 slots free")
		}
	})
	t.Run("when a permit is released", func(t *testing.T) {
		q := full(t)
		receive(t, q)
		p, err := q.Reserve()
		if err != nil {
			t.Fatal(err)
		}
		room := q.roomSignal(1)
		if isClosed(room) {
			t.Fatal("closed while the free slot is reserved")
		}
		p.Release()
		if !isClosed(room) {
			t.Fatal("not closed once the permit was released")
		}
	})
	t.Run("when items expire", func(t *testing.T) {
		clk := clocktesting.NewFakePassiveClock(testStart())
		q, err := NewPatchQueue(QueueConfig[string]{Capacity: 2, Key: func(s string) string { return s }, MaxAge: time.Second, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		_ = q.TrySend("a")
		_ = q.TrySend("b")
		room := q.roomSignal(2)
		clk.SetTime(testStart().Add(2 * time.Second))
		if _, ok, _ := q.TryReceive(); ok {
			t.Fatal("received an expired item")
		}
		if !isClosed(room) {
			t.Fatal("not closed once the expired items were dropped")
		}
	})
	t.Run("when the capacity grows", func(t *testing.T) {
		q := full(t)
		room := q.roomSignal(2) // half the queue
		if err := q.SetCapacity(6); err != nil {
			t.Fatal(err)
		}
		if isClosed(room) {
			t.Fatal("closed with 2 of 6 slots free, want half the queue (3)")
		}
		if err := q.SetCapacity(8); err != nil {
			t.Fatal(err)
		}
		if !isClosed(room) {
			t.Fatal("not closed with 4 of 8 slots free")
		}
	})
	// The reconciler waits for half the queue; when the capacity shrinks
	// meanwhile (it follows the drain rate), it still waits for half, not
	// for more slots than the queue has left to free.
	t.Run("when the capacity shrinks", func(t *testing.T) {
		q := full(t)
		room := q.roomSignal(2) // half the queue
		if err := q.SetCapacity(2); err != nil {
			t.Fatal(err)
		}
		receive(t, q)
		receive(t, q)
		if isClosed(room) {
			t.Fatal("closed with 2 waiting in a queue of 2")
		}
		receive(t, q)
		if !isClosed(room) {
			t.Fatal("not closed with 1 of 2 slots free")
		}
	})
	t.Run("when the queue closes", func(t *testing.T) {
		q := full(t)
		room := q.roomSignal(1)
		q.Close()
		if !isClosed(room) {
			t.Fatal("not closed by Close")
		}
	})
	t.Run("a new signal replaces the previous one", func(t *testing.T) {
		q := full(t)
		first := q.roomSignal(1)
		second := q.roomSignal(3)
		if !isClosed(first) {
			t.Error("the replaced signal is not closed")
		}
		receive(t, q)
		if isClosed(second) {
			t.Error("closed with 1 slot free, want 3")
		}
	})
}
