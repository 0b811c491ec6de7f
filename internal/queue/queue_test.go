package queue_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quietpatch/quietpatch/internal/queue"
)

const (
	fresh = queue.LaneFresh
	pass  = queue.LanePass
)

// t0 is the time of the fake clocks.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// newTestQueue returns a bare queue (no clock) of string keys with
// capacity c per lane, closed at the end of the test.
func newTestQueue(t testing.TB, c int) *queue.Queue[string] {
	t.Helper()
	return newClockedQueue(t, c, nil)
}

// newClockedQueue is newTestQueue with a clock (nil: none).
func newClockedQueue(t testing.TB, c int, clk clock.PassiveClock) *queue.Queue[string] {
	t.Helper()
	q := queue.New[string](c, clk)
	t.Cleanup(q.Close)
	return q
}

// cancelledCtx is done already: Get with it never blocks.
func cancelledCtx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// queueStep is one step of a rule table:
//
//	add     Add(key, lane): expect err
//	addnew  AddNew(key, lane): expect err
//	reserve Reserve(lane) into permit label: expect err
//	send    permits[label].Send(key) (the zero Permit if label is unknown): expect err
//	release permits[label].Release()
//	get     Get(a cancelled ctx): expect key, or err (context.Canceled when
//	        nothing is ready, ErrClosed when closed and drained)
//	done    Done(key)
//	close   Close()
//	cap     SetCapacity(n)
type queueStep struct {
	op    string
	key   string
	lane  queue.Lane
	label string
	n     int
	err   error
}

func (s queueStep) String() string {
	lane := map[queue.Lane]string{fresh: "fresh", pass: "pass"}[s.lane]
	switch s.op {
	case "add", "addnew":
		return fmt.Sprintf("%s(%s, %s)", s.op, s.key, lane)
	case "reserve":
		return fmt.Sprintf("reserve(%s, %s)", s.label, lane)
	case "send":
		return fmt.Sprintf("send(%s, %s)", s.label, s.key)
	case "release":
		return fmt.Sprintf("release(%s)", s.label)
	case "get", "done":
		return fmt.Sprintf("%s(%s)", s.op, s.key)
	case "cap":
		return fmt.Sprintf("cap(%d)", s.n)
	}
	return s.op
}

func qAdd(key string, l queue.Lane, err error) queueStep {
	return queueStep{op: "add", key: key, lane: l, err: err}
}
func qAddNew(key string, l queue.Lane, err error) queueStep {
	return queueStep{op: "addnew", key: key, lane: l, err: err}
}
func qReserve(label string, l queue.Lane, err error) queueStep {
	return queueStep{op: "reserve", label: label, lane: l, err: err}
}
func qSend(label, key string, err error) queueStep {
	return queueStep{op: "send", label: label, key: key, err: err}
}
func qRelease(label string) queueStep  { return queueStep{op: "release", label: label} }
func qGet(key string) queueStep        { return queueStep{op: "get", key: key} }
func qGetErr(err error) queueStep      { return queueStep{op: "get", err: err} }
func qDone(key string) queueStep       { return queueStep{op: "done", key: key} }
func qClose() queueStep                { return queueStep{op: "close"} }
func qCap(n int) queueStep             { return queueStep{op: "cap", n: n} }
func qGets(keys ...string) []queueStep { return qMap(qGet, keys...) }
func qAdds(l queue.Lane, keys ...string) []queueStep {
	return qMap(func(k string) queueStep { return qAdd(k, l, nil) }, keys...)
}

func qMap(f func(string) queueStep, keys ...string) []queueStep {
	steps := make([]queueStep, len(keys))
	for i, k := range keys {
		steps[i] = f(k)
	}
	return steps
}

// qSeq numbers keys: qSeq("f", 1, 3) is f1, f2, f3.
func qSeq(prefix string, from, to int) []string {
	var keys []string
	for i := from; i <= to; i++ {
		keys = append(keys, prefix+strconv.Itoa(i))
	}
	return keys
}

// steps flattens steps and step lists.
func steps(parts ...any) []queueStep {
	var all []queueStep
	for _, p := range parts {
		switch p := p.(type) {
		case queueStep:
			all = append(all, p)
		case []queueStep:
			all = append(all, p...)
		default:
			panic(fmt.Sprintf("steps: %T", p))
		}
	}
	return all
}

// queueRunner applies steps to a queue, keeping the permits by label.
type queueRunner struct {
	q       *queue.Queue[string]
	permits map[string]queue.Permit[string]
}

func newQueueRunner(t *testing.T, capacity int) *queueRunner {
	return newClockedRunner(t, capacity, nil)
}

func newClockedRunner(t *testing.T, capacity int, clk clock.PassiveClock) *queueRunner {
	return &queueRunner{q: newClockedQueue(t, capacity, clk), permits: map[string]queue.Permit[string]{}}
}

// run applies steps, failing at the first step whose result differs from
// what it expects.
func (r *queueRunner) run(t *testing.T, steps []queueStep) {
	t.Helper()
	q, permits := r.q, r.permits
	for i, s := range steps {
		var err error
		switch s.op {
		case "add":
			err = q.Add(s.key, s.lane)
		case "addnew":
			err = q.AddNew(s.key, s.lane)
		case "reserve":
			var p queue.Permit[string]
			p, err = q.Reserve(s.lane)
			if err == nil {
				permits[s.label] = p
			}
		case "send":
			err = permits[s.label].Send(s.key)
		case "release":
			permits[s.label].Release()
		case "get":
			var key string
			key, err = q.Get(cancelledCtx())
			if s.key != "" && key != s.key {
				t.Fatalf("step %d %v: got key %q (err %v)", i, s, key, err)
			}
			if s.key == "" && s.err == nil {
				t.Fatalf("step %d: bad step, get without key or error", i)
			}
		case "done":
			q.Done(s.key)
		case "close":
			q.Close()
		case "cap":
			q.SetCapacity(s.n)
		default:
			t.Fatalf("step %d: unknown op %q", i, s.op)
		}
		if !errors.Is(err, s.err) || (err == nil) != (s.err == nil) {
			t.Fatalf("step %d %v: error %v, want %v", i, s, err, s.err)
		}
	}
}

// TestQueueRules runs one table per rule of the PatchQueue documentation
// and checks the Stats at the end of each, on a bare queue and on one with
// a clock (which stamps keys and keeps the depth's Peak-EWMA, and must
// change nothing else). statuspatch's tests check that the facade rejects
// a capacity below 1.
func TestQueueRules(t *testing.T) {
	full, closed, none := queue.ErrFull, queue.ErrClosed, context.Canceled
	for _, tc := range []struct {
		label    string
		capacity int
		steps    []queueStep
		want     queue.Stats
	}{{
		label: "bound: Add fails with ErrFull at capacity, counted", capacity: 2,
		steps: steps(qAdd("a", fresh, nil), qAdd("b", fresh, nil), qAdd("c", fresh, full),
			qAdd("c", fresh, full)),
		want: queue.Stats{Enqueued: 2, DroppedFull: 2, Depth: 2, Fresh: 2},
	}, {
		label: "bound: each lane has its own capacity", capacity: 1,
		steps: steps(qAdd("a", fresh, nil), qAdd("b", pass, nil), qAdd("c", pass, full), qAdd("c", fresh, full)),
		want:  queue.Stats{Enqueued: 2, DroppedFull: 2, Depth: 2, Fresh: 1},
	}, {
		label: "bound: reservations take slots; Reserve fails with ErrFull at capacity", capacity: 2,
		steps: steps(qReserve("p", fresh, nil), qAdd("a", fresh, nil), qReserve("q", fresh, full),
			qAdd("b", fresh, full), qReserve("r", pass, nil)),
		want: queue.Stats{Enqueued: 1, DroppedFull: 2, Depth: 1, Fresh: 1, Reserved: 2},
	}, {
		label: "bound: a waiting key coalesces even at a full lane", capacity: 1,
		steps: steps(qAdd("a", fresh, nil), qAdd("b", fresh, full), qAdd("a", fresh, nil), qAdd("a", pass, nil)),
		want:  queue.Stats{Enqueued: 3, Coalesced: 2, DroppedFull: 1, Depth: 1, Fresh: 1},
	}, {
		label: "bound: a delivered key gives its slot back", capacity: 1,
		steps: steps(qAdd("a", fresh, nil), qAdd("b", fresh, full), qGet("a"), qAdd("b", fresh, nil)),
		want:  queue.Stats{Enqueued: 2, Dequeued: 1, DroppedFull: 1, Depth: 1, Fresh: 1, Held: 1},
	}, {
		label: "bound: a key added while held takes a slot", capacity: 1,
		steps: steps(qAdd("a", fresh, nil), qGet("a"), qAdd("a", fresh, nil), qAdd("b", fresh, full)),
		want:  queue.Stats{Enqueued: 2, Dequeued: 1, DroppedFull: 1, Depth: 1, Fresh: 1, Held: 1},
	}, {
		label: "permit: Send adds the key in the reserved slot", capacity: 1,
		steps: steps(qReserve("p", pass, nil), qAdd("a", pass, full), qSend("p", "b", nil),
			qAdd("a", pass, full), qGet("b")),
		want: queue.Stats{Enqueued: 1, Dequeued: 1, DroppedFull: 2, Held: 1},
	}, {
		label: "permit: a second Send is ErrClosed and harmless, not counted", capacity: 2,
		steps: steps(qReserve("p", fresh, nil), qSend("p", "a", nil), qSend("p", "b", closed),
			qRelease("p"), qAdd("c", fresh, nil), qAdd("d", fresh, full)),
		want: queue.Stats{Enqueued: 2, DroppedFull: 1, Depth: 2, Fresh: 2},
	}, {
		label: "permit: a second Release frees nothing more", capacity: 1,
		steps: steps(qReserve("p", fresh, nil), qRelease("p"), qRelease("p"), qReserve("q", fresh, nil),
			qAdd("a", fresh, full), qRelease("p"), qAdd("a", fresh, full), qSend("p", "a", closed)),
		want: queue.Stats{DroppedFull: 2, Reserved: 1},
	}, {
		label: "permit: Send of a waiting key coalesces and gives the slot back", capacity: 2,
		steps: steps(qAdd("a", fresh, nil), qReserve("p", fresh, nil), qSend("p", "a", nil),
			qAdd("b", fresh, nil), qAdd("c", fresh, full), qGets("a", "b")),
		want: queue.Stats{Enqueued: 3, Coalesced: 1, Dequeued: 2, DroppedFull: 1, Held: 2},
	}, {
		label: "permit: Send after Close is ErrClosed, counted; the slot is freed", capacity: 1,
		steps: steps(qReserve("p", fresh, nil), qReserve("q", pass, nil), qClose(), qSend("p", "a", closed),
			qRelease("q"), qSend("q", "a", closed), qGetErr(closed)),
		want: queue.Stats{DroppedClosed: 1},
	}, {
		label: "permit: the zero Permit sends nothing", capacity: 1,
		steps: steps(qSend("nothing", "a", closed), qRelease("nothing"), qAdd("a", fresh, nil)),
		want:  queue.Stats{Enqueued: 1, Depth: 1, Fresh: 1},
	}, {
		label: "coalescing: a waiting key is added again without a slot, keeping its place", capacity: 2,
		steps: steps(qAdds(fresh, "a", "b", "a", "a", "b"), qGets("a", "b"), qGetErr(none)),
		want:  queue.Stats{Enqueued: 5, Coalesced: 3, Dequeued: 2, Held: 2},
	}, {
		label: "exclusivity: a held key is not delivered again until Done", capacity: 4,
		steps: steps(qAdd("a", fresh, nil), qGet("a"), qAdd("a", fresh, nil), qGetErr(none),
			qAdd("b", fresh, nil), qGet("b"), qGetErr(none), qDone("a"), qGet("a"), qGetErr(none)),
		want: queue.Stats{Enqueued: 3, Dequeued: 3, Held: 2},
	}, {
		label: "exclusivity: added many times while held, delivered once after Done", capacity: 1,
		steps: steps(qAdd("a", pass, nil), qGet("a"), qAdds(pass, "a", "a", "a"), qGetErr(none),
			qDone("a"), qGet("a"), qDone("a"), qGetErr(none)),
		want: queue.Stats{Enqueued: 4, Coalesced: 2, Dequeued: 2},
	}, {
		label: "exclusivity: a key added while held joins the end of its lane at Done", capacity: 4,
		steps: steps(qAdd("a", fresh, nil), qGet("a"), qAdd("a", fresh, nil), qAdd("b", fresh, nil),
			qDone("a"), qAdd("c", fresh, nil), qGets("b", "a", "c")),
		want: queue.Stats{Enqueued: 4, Dequeued: 4, Held: 3},
	}, {
		label: "exclusivity: Done of a key not held is harmless", capacity: 2,
		steps: steps(qDone("x"), qAdd("a", fresh, nil), qDone("a"), qDone("a"), qGet("a"), qGetErr(none), qDone("a"), qDone("a")),
		want:  queue.Stats{Enqueued: 1, Dequeued: 1},
	}, {
		label: "lanes: fresh keys before pass keys", capacity: 4,
		steps: steps(qAdds(pass, "p1", "p2"), qAdds(fresh, "f1", "f2"), qGets("f1", "f2", "p1", "p2")),
		want:  queue.Stats{Enqueued: 4, Dequeued: 4, Held: 4},
	}, {
		label: "lanes: at most 8 fresh keys in a row while pass keys wait", capacity: 20,
		steps: steps(qAdds(pass, "p1", "p2"), qAdds(fresh, qSeq("f", 1, 18)...),
			qGets(qSeq("f", 1, 8)...), qGet("p1"), qGets(qSeq("f", 9, 16)...), qGet("p2"), qGets("f17", "f18")),
		want: queue.Stats{Enqueued: 20, Dequeued: 20, Held: 20},
	}, {
		label: "lanes: fresh keys served while no pass key waits do not count", capacity: 20,
		steps: steps(qAdds(fresh, qSeq("f", 1, 12)...), qGets("f1", "f2", "f3"), qAdd("p", pass, nil),
			qGets(qSeq("f", 4, 11)...), qGet("p"), qGet("f12")),
		want: queue.Stats{Enqueued: 13, Dequeued: 13, Held: 13},
	}, {
		label: "lanes: a pass key served resets the burst", capacity: 20,
		steps: steps(qAdds(pass, "p1"), qAdds(fresh, qSeq("f", 1, 18)...), qGets(qSeq("f", 1, 8)...), qGet("p1"),
			qAdd("p2", pass, nil), qGets(qSeq("f", 9, 16)...), qGet("p2"), qGets("f17", "f18")),
		want: queue.Stats{Enqueued: 20, Dequeued: 20, Held: 20},
	}, {
		label: "promotion: a waiting pass key added fresh moves to the fresh lane and frees its pass slot", capacity: 1,
		steps: steps(qAdd("a", pass, nil), qAdd("b", pass, full), qAdd("a", fresh, nil), qAdd("b", pass, nil),
			qAdd("c", fresh, full), qGets("a", "b")),
		want: queue.Stats{Enqueued: 3, Coalesced: 1, Dequeued: 2, DroppedFull: 2, Held: 2},
	}, {
		label: "promotion: the moved key is served with the fresh keys, at the end of their lane", capacity: 4,
		steps: steps(qAdds(pass, "p1", "p2"), qAdd("f1", fresh, nil), qAdd("p2", fresh, nil), qAdd("f2", fresh, nil),
			qGets("f1", "p2", "f2", "p1")),
		want: queue.Stats{Enqueued: 5, Coalesced: 1, Dequeued: 4, Held: 4},
	}, {
		label: "promotion: no move while the fresh lane is full", capacity: 1,
		steps: steps(qAdd("f", fresh, nil), qAdd("a", pass, nil), qAdd("a", fresh, nil), qAdd("b", pass, full),
			qGets("f", "a")),
		want: queue.Stats{Enqueued: 3, Coalesced: 1, Dequeued: 2, DroppedFull: 1, Held: 2},
	}, {
		label: "promotion: a reservation counts against the fresh lane", capacity: 1,
		steps: steps(qReserve("p", fresh, nil), qAdd("a", pass, nil), qAdd("a", fresh, nil), qAdd("b", pass, full)),
		want:  queue.Stats{Enqueued: 2, Coalesced: 1, DroppedFull: 1, Depth: 1, Reserved: 1},
	}, {
		label: "promotion: through a fresh permit", capacity: 1,
		steps: steps(qAdd("a", pass, nil), qReserve("p", fresh, nil), qSend("p", "a", nil), qAdd("b", pass, nil)),
		want:  queue.Stats{Enqueued: 3, Coalesced: 1, Depth: 2, Fresh: 1},
	}, {
		label: "promotion: a key held back (added while held) moves too, served fresh after Done", capacity: 4,
		steps: steps(qAdd("p", pass, nil), qAdd("a", fresh, nil), qGet("a"), qAdd("a", pass, nil), qAdd("a", fresh, nil),
			qDone("a"), qGets("a", "p")),
		want: queue.Stats{Enqueued: 4, Coalesced: 1, Dequeued: 3, Held: 2},
	}, {
		label: "promotion: a fresh key added to the pass lane stays fresh", capacity: 1,
		steps: steps(qAdd("a", fresh, nil), qAdd("a", pass, nil), qAdd("b", pass, nil)),
		want:  queue.Stats{Enqueued: 3, Coalesced: 1, Depth: 2, Fresh: 1},
	}, {
		label: "AddNew: a waiting key is left where it is, uncounted, even at a full lane", capacity: 1,
		steps: steps(qAdd("a", pass, nil), qAddNew("a", pass, nil), qAddNew("a", fresh, nil), qAdd("b", pass, full),
			qAddNew("c", fresh, nil), qGets("c", "a")),
		want: queue.Stats{Enqueued: 2, Dequeued: 2, DroppedFull: 1, Held: 2},
	}, {
		label: "AddNew: a new key is added as by Add, refused at a full lane", capacity: 1,
		steps: steps(qAddNew("a", fresh, nil), qAddNew("b", fresh, full), qAddNew("b", pass, nil)),
		want:  queue.Stats{Enqueued: 2, DroppedFull: 1, Depth: 2, Fresh: 1},
	}, {
		label: "AddNew: a key held is added, served again after Done", capacity: 1,
		steps: steps(qAdd("a", pass, nil), qGet("a"), qAddNew("a", pass, nil), qAddNew("a", pass, nil), qGetErr(none),
			qDone("a"), qGet("a")),
		want: queue.Stats{Enqueued: 2, Dequeued: 2, Held: 1},
	}, {
		label: "AddNew: after Close a waiting key is refused, counted", capacity: 2,
		steps: steps(qAdd("a", fresh, nil), qClose(), qAddNew("a", fresh, closed), qAddNew("b", pass, closed)),
		want:  queue.Stats{Enqueued: 1, DroppedClosed: 2, Depth: 1, Fresh: 1},
	}, {
		label: "close: producers are refused, counted", capacity: 2,
		steps: steps(qClose(), qAdd("a", fresh, closed), qAdd("b", pass, closed), qReserve("p", fresh, closed),
			qSend("p", "a", closed), qGetErr(closed)),
		want: queue.Stats{DroppedClosed: 3},
	}, {
		label: "close: a waiting key added again is refused, not coalesced", capacity: 2,
		steps: steps(qAdd("a", fresh, nil), qClose(), qAdd("a", fresh, closed)),
		want:  queue.Stats{Enqueued: 1, DroppedClosed: 1, Depth: 1, Fresh: 1},
	}, {
		label: "close: consumers drain, in lane order, then ErrClosed", capacity: 2,
		steps: steps(qAdd("p", pass, nil), qAdd("f", fresh, nil), qClose(), qGets("f", "p"), qGetErr(closed), qGetErr(closed)),
		want:  queue.Stats{Enqueued: 2, Dequeued: 2, Held: 2},
	}, {
		label: "close: a key added while held is drained after Done", capacity: 2,
		steps: steps(qAdd("a", fresh, nil), qGet("a"), qAdd("a", fresh, nil), qClose(), qGetErr(none),
			qDone("a"), qGet("a"), qGetErr(closed)),
		want: queue.Stats{Enqueued: 2, Dequeued: 2, Held: 1},
	}, {
		label: "close: twice is harmless", capacity: 1,
		steps: steps(qAdd("a", fresh, nil), qClose(), qClose(), qGet("a"), qGetErr(closed)),
		want:  queue.Stats{Enqueued: 1, Dequeued: 1, Held: 1},
	}, {
		label: "capacity: a shrink keeps the keys waiting and refuses new ones", capacity: 3,
		steps: steps(qAdds(fresh, "a", "b", "c"), qCap(1), qAdd("d", fresh, full), qAdd("a", fresh, nil),
			qGets("a", "b"), qAdd("d", fresh, full), qGet("c"), qAdd("d", fresh, nil), qAdd("e", fresh, full)),
		want: queue.Stats{Enqueued: 5, Coalesced: 1, Dequeued: 3, DroppedFull: 3, Depth: 1, Fresh: 1, Held: 3},
	}, {
		label: "capacity: a growth admits more at once", capacity: 1,
		steps: steps(qAdd("a", pass, nil), qAdd("b", pass, full), qCap(2), qAdd("b", pass, nil), qAdd("c", pass, full)),
		want:  queue.Stats{Enqueued: 2, DroppedFull: 2, Depth: 2},
	}, {
		label: "stats: Depth counts keys held back, Fresh those of the fresh lane", capacity: 4,
		steps: steps(qAdd("a", fresh, nil), qAdd("b", pass, nil), qGets("a", "b"), qAdd("a", fresh, nil), qAdd("b", pass, nil),
			qAdd("c", fresh, nil), qReserve("p", pass, nil), qReserve("q", fresh, nil)),
		want: queue.Stats{Enqueued: 5, Dequeued: 2, Depth: 3, Fresh: 2, Held: 2, Reserved: 2},
	}} {
		t.Run(tc.label, func(t *testing.T) {
			t.Run("bare", func(t *testing.T) {
				r := newQueueRunner(t, tc.capacity)
				r.run(t, tc.steps)
				if d := cmp.Diff(tc.want, r.q.Stats()); d != "" {
					t.Errorf("Stats (-want +got):\n%s", d)
				}
			})
			t.Run("clock", func(t *testing.T) {
				r := newClockedRunner(t, tc.capacity, clocktesting.NewFakePassiveClock(t0))
				r.run(t, tc.steps)
				if d := cmp.Diff(tc.want, r.q.Stats(), cmpopts.IgnoreFields(queue.Stats{}, "DepthPeak")); d != "" {
					t.Errorf("Stats (-want +got):\n%s", d)
				}
			})
		})
	}
}

// TestQueueStarvationBound feeds a continuous stream of fresh keys, one
// added per delivery, and checks that every pass key is served within 9
// deliveries of the previous one (or of the start).
func TestQueueStarvationBound(t *testing.T) {
	q := newTestQueue(t, 64)
	const passKeys = 20
	for _, k := range qSeq("p", 1, passKeys) {
		if err := q.Add(k, pass); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range qSeq("f", 1, 16) { // a backlog of fresh keys
		if err := q.Add(k, fresh); err != nil {
			t.Fatal(err)
		}
	}
	last, served, freshN := 0, 0, 16
	for i := 1; served < passKeys; i++ {
		freshN++
		if err := q.Add("f"+strconv.Itoa(freshN), fresh); err != nil {
			t.Fatal(err)
		}
		key, err := q.Get(cancelledCtx())
		if err != nil {
			t.Fatal(err)
		}
		q.Done(key)
		if key[0] != 'p' {
			if i-last >= 9 {
				t.Fatalf("delivery %d: %d fresh keys in a row while pass keys wait", i, i-last)
			}
			continue
		}
		served++
		if want := "p" + strconv.Itoa(served); key != want {
			t.Fatalf("delivery %d: pass key %s, want %s (FIFO)", i, key, want)
		}
		if i-last != 9 {
			t.Errorf("delivery %d: pass key %s served %d deliveries after the previous, want 9 (8 fresh first)", i, key, i-last)
		}
		last = i
	}
}

// TestQueueRoom checks when Room's channel is closed: once the lane has
// the free slots asked for, after whichever operation frees them, or when
// the queue closes.
func TestQueueRoom(t *testing.T) {
	for _, tc := range []struct {
		label  string
		before []queueStep // builds the state; the lane has fewer free slots than asked
		lane   queue.Lane
		free   int
		after  []queueStep // frees enough, or closes
		noWake []queueStep // steps that must not close it, run before after
	}{{
		label: "Get frees a slot", lane: fresh, free: 1,
		before: qAdds(fresh, "a", "b"), noWake: steps(qAdd("a", fresh, nil), qAdd("x", pass, nil)), after: qGets("a"),
	}, {
		label: "Get of the other lane does not count", lane: pass, free: 2,
		before: steps(qAdds(pass, "a", "b"), qAdd("f", fresh, nil)), noWake: qGets("f", "a"), after: qGets("b"),
	}, {
		label: "Done frees nothing, Get does", lane: fresh, free: 2,
		before: steps(qAdds(fresh, "a", "b"), qGet("a"), qAdd("a", fresh, nil)), noWake: steps(qGet("b"), qDone("a")),
		after: qGets("a"),
	}, {
		label: "Release frees a slot", lane: pass, free: 1,
		before: steps(qReserve("p", pass, nil), qAdd("a", pass, nil)), after: steps(qRelease("p")),
	}, {
		label: "a Send that coalesces gives its slot back", lane: fresh, free: 1,
		before: steps(qAdd("a", fresh, nil), qReserve("p", fresh, nil)), after: steps(qSend("p", "a", nil)),
	}, {
		label: "a promotion frees the pass slot", lane: pass, free: 1,
		before: qAdds(pass, "a", "b"), noWake: steps(qAdd("b", pass, nil)), after: steps(qAdd("a", fresh, nil)),
	}, {
		label: "SetCapacity grows the lane", lane: fresh, free: 2,
		before: qAdds(fresh, "a", "b"), noWake: steps(qCap(3)), after: steps(qCap(4)),
	}, {
		label: "Close", lane: fresh, free: 5,
		before: qAdds(fresh, "a"), after: steps(qClose()),
	}} {
		t.Run(tc.label, func(t *testing.T) {
			r := newQueueRunner(t, 2)
			q := r.q
			r.run(t, tc.before)
			room := roomOf(q.Room(tc.lane, tc.free))
			isClosed := func() bool {
				select {
				case <-room:
					return true
				default:
					return false
				}
			}
			if isClosed() {
				t.Fatal("closed before any slot was freed")
			}
			r.run(t, tc.noWake)
			if isClosed() {
				t.Fatalf("closed by %v", tc.noWake)
			}
			r.run(t, tc.after)
			if !isClosed() {
				t.Fatalf("still open after %v: Stats %+v, Cap %d", tc.after, q.Stats(), q.Cap())
			}
		})
	}
	t.Run("already free", func(t *testing.T) {
		q := newTestQueue(t, 2)
		for _, free := range []int{-1, 0, 1, 2} {
			select {
			case <-roomOf(q.Room(fresh, free)):
			default:
				t.Errorf("Room(fresh, %d) of an empty queue of capacity 2 is open", free)
			}
		}
		select {
		case <-roomOf(q.Room(fresh, 3)):
			t.Error("Room(fresh, 3) of a queue of capacity 2 is closed")
		default:
		}
	})
	t.Run("after Close", func(t *testing.T) {
		q := newTestQueue(t, 1)
		q.Close()
		select {
		case <-roomOf(q.Room(pass, 10)):
		default:
			t.Error("Room of a closed queue is open")
		}
	})
}

// Get blocks until a key is ready: added, or added while held and Done,
// and returns ErrClosed to every waiting consumer once the queue is closed
// and drained. A cancelled Get returns the context's error.
func TestQueueGetBlocks(t *testing.T) {
	type result struct {
		key string
		err error
	}
	getter := func(ctx context.Context, q *queue.Queue[string]) <-chan result {
		ch := make(chan result, 1)
		go func() {
			key, err := q.Get(ctx)
			ch <- result{key, err}
		}()
		return ch
	}
	// wantBlocked checks that ch has no result after a while: it cannot
	// fail wrongly, only miss a Get that returns late.
	wantBlocked := func(t *testing.T, ch <-chan result) {
		t.Helper()
		select {
		case r := <-ch:
			t.Fatalf("Get returned %+v, want it blocked", r)
		case <-time.After(20 * time.Millisecond):
		}
	}
	wantResult := func(t *testing.T, ch <-chan result, want result) {
		t.Helper()
		select {
		case r := <-ch:
			if r.key != want.key || !errors.Is(r.err, want.err) || (r.err == nil) != (want.err == nil) {
				t.Fatalf("Get returned %+v, want %+v", r, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Get still blocked, want %+v", want)
		}
	}
	ctx := context.Background()

	t.Run("until Add", func(t *testing.T) {
		q := newTestQueue(t, 1)
		ch := getter(ctx, q)
		wantBlocked(t, ch)
		if err := q.Add("a", pass); err != nil {
			t.Fatal(err)
		}
		wantResult(t, ch, result{key: "a"})
	})
	t.Run("until Done of a key added while held", func(t *testing.T) {
		r := newQueueRunner(t, 1)
		q := r.q
		r.run(t, steps(qAdd("a", fresh, nil), qGet("a"), qAdd("a", fresh, nil)))
		ch := getter(ctx, q)
		wantBlocked(t, ch)
		q.Done("a")
		wantResult(t, ch, result{key: "a"})
	})
	t.Run("until Close", func(t *testing.T) {
		q := newTestQueue(t, 1)
		chs := []<-chan result{getter(ctx, q), getter(ctx, q), getter(ctx, q)}
		wantBlocked(t, chs[0])
		q.Close()
		for _, ch := range chs {
			wantResult(t, ch, result{err: queue.ErrClosed})
		}
	})
	t.Run("until ctx ends", func(t *testing.T) {
		q := newTestQueue(t, 1)
		ctx, cancel := context.WithCancel(ctx)
		ch := getter(ctx, q)
		wantBlocked(t, ch)
		cancel()
		wantResult(t, ch, result{err: context.Canceled})
	})
	t.Run("a cancelled ctx still returns a ready key", func(t *testing.T) {
		q := newTestQueue(t, 1)
		if err := q.Add("a", fresh); err != nil {
			t.Fatal(err)
		}
		key, err := q.Get(cancelledCtx())
		if key != "a" || err != nil {
			t.Fatalf("Get(cancelled) = %q, %v; want a, nil", key, err)
		}
	})
}

// TestQueueClock: a queue with a clock stamps each key when it is first
// added — coalescing and promotion keep the stamp, a key added while held
// is stamped at that add — and GetSince returns that stamp; the
// depth is recorded at every insertion and removal into a Peak-EWMA with
// a time constant of 10 s. A bare queue reads no clock: waits and
// DepthPeak are 0.
func TestQueueClock(t *testing.T) {
	const s = time.Second
	for _, tc := range []struct {
		label string
		run   func(t *testing.T, clk *clocktesting.FakeClock, q *queue.Queue[string]) []keyWait
		want  []keyWait
	}{{
		label: "waited since the first add",
		run: func(t *testing.T, clk *clocktesting.FakeClock, q *queue.Queue[string]) []keyWait {
			mustAdd(t, q, "a", pass)
			clk.Step(2 * s)
			mustAdd(t, q, "b", fresh)
			mustAdd(t, q, "a", pass) // coalesces: keeps its stamp
			clk.Step(s)
			mustAdd(t, q, "a", fresh) // promoted: keeps its stamp
			clk.Step(s)
			return getWaits(t, clk, q, 2)
		},
		want: []keyWait{{"b", 2 * s}, {"a", 4 * s}},
	}, {
		label: "a key added while held is stamped at that add",
		run: func(t *testing.T, clk *clocktesting.FakeClock, q *queue.Queue[string]) []keyWait {
			mustAdd(t, q, "a", fresh)
			clk.Step(s)
			key, since, err := q.GetSince(cancelledCtx())
			if err != nil {
				t.Fatal(err)
			}
			var wait time.Duration
			if !since.IsZero() {
				wait = clk.Since(since)
			}
			clk.Step(3 * s)
			mustAdd(t, q, "a", fresh) // held: waits until Done
			clk.Step(5 * s)
			q.Done(key)
			clk.Step(s)
			return append([]keyWait{{key, wait}}, getWaits(t, clk, q, 1)...)
		},
		want: []keyWait{{"a", s}, {"a", 6 * s}},
	}, {
		label: "through a permit",
		run: func(t *testing.T, clk *clocktesting.FakeClock, q *queue.Queue[string]) []keyWait {
			p, err := q.Reserve(pass)
			if err != nil {
				t.Fatal(err)
			}
			clk.Step(s) // reserved, not yet added
			if err := p.Send("a"); err != nil {
				t.Fatal(err)
			}
			clk.Step(2 * s)
			return getWaits(t, clk, q, 1)
		},
		want: []keyWait{{"a", 2 * s}},
	}} {
		t.Run(tc.label, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0)
			if d := cmp.Diff(tc.want, tc.run(t, clk, newClockedQueue(t, 4, clk)), cmp.AllowUnexported(keyWait{})); d != "" {
				t.Errorf("keys and waits (-want +got):\n%s", d)
			}
			bare := newTestQueue(t, 4)
			var zero []keyWait
			for _, g := range tc.want {
				zero = append(zero, keyWait{key: g.key})
			}
			if d := cmp.Diff(zero, tc.run(t, clocktesting.NewFakeClock(t0), bare), cmp.AllowUnexported(keyWait{})); d != "" {
				t.Errorf("bare queue: keys and waits (-want +got):\n%s", d)
			}
			if p := bare.Stats().DepthPeak; p != 0 {
				t.Errorf("bare queue: DepthPeak %v, want 0", p)
			}
		})
	}

	t.Run("depth Peak-EWMA", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(t0)
		q := newClockedQueue(t, 4, clk)
		for _, step := range []struct {
			label string
			do    func()
			want  float64
		}{
			{"empty", func() {}, 0},
			{"three keys: the peak at once", func() { mustAdd(t, q, "a", fresh); mustAdd(t, q, "b", pass); mustAdd(t, q, "c", fresh) }, 3},
			{"a coalesced add changes nothing", func() { mustAdd(t, q, "a", pass) }, 3},
			{"all delivered at the same instant: still the peak", func() { getWaits(t, clk, q, 3) }, 3},
			{"one τ (10 s) later: 3·e⁻¹", func() { clk.Step(10 * s) }, 3 * math.Exp(-1)},
			{"a key added: no peak step (1 < 3·e⁻¹)", func() { mustAdd(t, q, "d", fresh) }, 3 * math.Exp(-1)},
			{"held at 1 for 10 s more", func() { clk.Step(10 * s) }, 1 + (3*math.Exp(-1)-1)*math.Exp(-1)},
		} {
			step.do()
			if got := q.Stats().DepthPeak; math.Abs(got-step.want) > 1e-12 {
				t.Errorf("%s: DepthPeak %v, want %v", step.label, got, step.want)
			}
		}
	})
}

// keyWait is a key GetSince returned and how long it waited.
type keyWait struct {
	key  string
	wait time.Duration
}

// getWaits gets and Dones n ready keys with GetSince, their waits on clk.
func getWaits(t *testing.T, clk *clocktesting.FakeClock, q *queue.Queue[string], n int) []keyWait {
	t.Helper()
	var got []keyWait
	for range n {
		key, since, err := q.GetSince(cancelledCtx())
		if err != nil {
			t.Fatalf("GetSince: %v", err)
		}
		q.Done(key)
		var wait time.Duration
		if !since.IsZero() { // a bare queue stamps nothing
			wait = clk.Since(since)
		}
		got = append(got, keyWait{key, wait})
	}
	return got
}

func mustAdd(t *testing.T, q *queue.Queue[string], key string, l queue.Lane) {
	t.Helper()
	if err := q.Add(key, l); err != nil {
		t.Fatalf("Add(%q, %d): %v", key, l, err)
	}
}

// roomOf is Room's channel, for tests that wait until they get it.
func roomOf(ch <-chan struct{}, _ func()) <-chan struct{} { return ch }
