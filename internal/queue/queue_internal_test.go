package queue

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// queueFIFOBound bounds the length of a lane's FIFO for a capacity: live
// entries, dead ones (left by promotions) and served ones are compacted
// at the next push once they outnumber the live ones (plus 64).
func queueFIFOBound(capacity int) int { return 4*capacity + 260 }

// checkQueueInvariants checks the queue's internal state against itself:
// each lane's live and count, every waiting key queued once in its lane
// (or held back while held), and the FIFOs bounded for maxCap, the largest
// capacity the queue had.
func checkQueueInvariants[K comparable](q *Queue[K], maxCap int) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	var waitingIn [2]int
	for key, w := range q.waiting {
		waitingIn[w.lane]++
		if _, held := q.held[key]; held == w.queued {
			return fmt.Errorf("key %v: queued %v, held %v", key, w.queued, held)
		}
	}
	queued := map[K]Lane{}
	for l := range q.lanes {
		ln := &q.lanes[l]
		live := 0
		for _, e := range ln.fifo[ln.head:] {
			w, ok := q.waiting[e.key]
			if !ok || !w.queued || w.seq != e.seq {
				continue
			}
			if w.lane != Lane(l) {
				return fmt.Errorf("key %v live in lane %d, waits in lane %d", e.key, l, w.lane)
			}
			if _, dup := queued[e.key]; dup {
				return fmt.Errorf("key %v live twice", e.key)
			}
			queued[e.key] = Lane(l)
			live++
		}
		if live != ln.live {
			return fmt.Errorf("lane %d: %d live entries, live says %d", l, live, ln.live)
		}
		if ln.count != waitingIn[l]+ln.reserved {
			return fmt.Errorf("lane %d: count %d, want %d waiting + %d reserved", l, ln.count, waitingIn[l], ln.reserved)
		}
		if ln.head > len(ln.fifo) || len(ln.fifo) > queueFIFOBound(maxCap) {
			return fmt.Errorf("lane %d: fifo of %d entries, head %d, bound %d", l, len(ln.fifo), ln.head, queueFIFOBound(maxCap))
		}
	}
	for key, w := range q.waiting {
		if _, ok := queued[key]; ok != w.queued {
			return fmt.Errorf("key %v: queued %v but live in a fifo: %v", key, w.queued, ok)
		}
	}
	return nil
}

// TestQueueFIFOBounded runs 100,000 cycles of each pattern on a few keys
// and checks that the lanes' FIFOs stay small: served entries and the dead
// ones promotions leave behind are reclaimed.
func TestQueueFIFOBounded(t *testing.T) {
	const cycles = 100_000
	keys := []string{"a", "b", "c", "d"}
	for _, tc := range []struct {
		label string
		cycle func(t *testing.T, q *Queue[string], k string)
	}{{
		label: "add pass, add fresh (promotion), get, done",
		cycle: func(t *testing.T, q *Queue[string], k string) {
			mustAdd(t, q, k, LanePass)
			mustAdd(t, q, k, LaneFresh)
			mustGetDone(t, q)
		},
	}, {
		label: "promotions while a pass backlog waits",
		cycle: func(t *testing.T, q *Queue[string], k string) {
			mustAdd(t, q, "backlog-"+k, LanePass) // waits for good: coalesces after the first cycle
			mustAdd(t, q, k, LanePass)
			mustAdd(t, q, k, LaneFresh)
			mustGetDone(t, q)
		},
	}, {
		label: "add fresh, get, done",
		cycle: func(t *testing.T, q *Queue[string], k string) {
			mustAdd(t, q, k, LaneFresh)
			mustGetDone(t, q)
		},
	}, {
		label: "add pass, get, add while held in both lanes, done, get, done",
		cycle: func(t *testing.T, q *Queue[string], k string) {
			mustAdd(t, q, k, LanePass)
			key, err := q.Get(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			mustAdd(t, q, key, LanePass)
			mustAdd(t, q, key, LaneFresh)
			q.Done(key)
			mustGetDone(t, q)
		},
	}} {
		t.Run(tc.label, func(t *testing.T) {
			q := New[string](16, nil)
			defer q.Close()
			longest := 0
			for i := range cycles {
				tc.cycle(t, q, keys[i%len(keys)])
				q.mu.Lock()
				longest = max(longest, len(q.lanes[LaneFresh].fifo), len(q.lanes[LanePass].fifo))
				q.mu.Unlock()
			}
			if err := checkQueueInvariants(q, q.Cap()); err != nil {
				t.Fatal(err)
			}
			q.mu.Lock()
			capFresh, capPass := cap(q.lanes[LaneFresh].fifo), cap(q.lanes[LanePass].fifo)
			q.mu.Unlock()
			t.Logf("longest fifo %d entries; capacity of the fifos: fresh %d, pass %d", longest, capFresh, capPass)
			if bound := queueFIFOBound(len(keys)); longest > bound || capFresh > 2*bound || capPass > 2*bound {
				t.Errorf("after %d cycles: longest fifo %d, capacities %d and %d; want at most %d (capacity %d)",
					cycles, longest, capFresh, capPass, bound, 2*bound)
			}
		})
	}
}

func mustAdd(t *testing.T, q *Queue[string], key string, l Lane) {
	t.Helper()
	if err := q.Add(key, l); err != nil {
		t.Fatalf("Add(%q, %d): %v", key, l, err)
	}
}

func mustGetDone(t *testing.T, q *Queue[string]) {
	t.Helper()
	key, err := q.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	q.Done(key)
}

// TestQueueOtherLaneValues: a Lane value other than the two constants is
// the pass lane, never a panic.
func TestQueueOtherLaneValues(t *testing.T) {
	q := New[string](1, nil)
	if err := q.Add("a", Lane(7)); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Reserve(Lane(200)); err != ErrFull {
		t.Fatalf("Reserve on a full pass lane through Lane(200) = %v, want ErrFull", err)
	}
	select {
	case <-roomOf(q.Room(Lane(9), 1)):
		t.Fatal("Room of a full lane is closed")
	default:
	}
	if s := q.Stats(); s.Depth != 1 || s.Fresh != 0 {
		t.Fatalf("Stats = %+v, want the key in the pass lane", s)
	}
}

// roomOf is Room's channel, for tests that wait until they get it.
func roomOf(ch <-chan struct{}, _ func()) <-chan struct{} { return ch }

// ReserveWait waits for a slot: it gets the one Done frees, fails with
// ctx's error — counted as dropped, full — when ctx ends first, and with
// ErrClosed once the queue is closed; a waiter that gives up leaves no
// waiter behind.
func TestReserveWait(t *testing.T) {
	q := New[string](1, nil)
	if err := q.Add("a", LanePass); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := q.ReserveWait(ctx, LanePass); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ReserveWait on a full lane until the deadline: %v", err)
	}
	if st := q.Stats(); st.DroppedFull != 1 || len(q.rooms) != 0 {
		t.Fatalf("after the timeout: %d dropped full, %d rooms waited for; want 1 and 0", st.DroppedFull, len(q.rooms))
	}
	got := make(chan error, 1)
	go func() {
		p, err := q.ReserveWait(context.Background(), LanePass)
		if err == nil {
			err = p.Send("b")
		}
		got <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		q.mu.Lock()
		waiting := len(q.rooms)
		q.mu.Unlock()
		if waiting == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("ReserveWait does not wait")
		}
	}
	k, err := q.Get(context.Background())
	if err != nil || k != "a" {
		t.Fatalf("Get = %q, %v", k, err)
	}
	if err := <-got; err != nil {
		t.Fatalf("ReserveWait once a slot is free: %v", err)
	}
	if st := q.Stats(); st.Depth != 1 || st.DroppedFull != 1 {
		t.Errorf("after the wait: depth %d, dropped full %d; want 1, 1", st.Depth, st.DroppedFull)
	}
	q.Close()
	if _, err := q.ReserveWait(context.Background(), LanePass); !errors.Is(err, ErrClosed) {
		t.Errorf("ReserveWait on a closed queue: %v", err)
	}
}
