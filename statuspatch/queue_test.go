package statuspatch_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/metric/noop"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/quietpatch/quietpatch/statuspatch"
)

// Items in these tests are strings "key#value"; the key is what precedes
// the '#'.
func queueTestKey(s string) string {
	k, _, _ := strings.Cut(s, "#")
	return k
}

var queueT0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestNewPatchQueueConfig(t *testing.T) {
	for _, tc := range []struct {
		label   string
		cfg     statuspatch.QueueConfig[string]
		wantErr string // "" means valid
	}{
		{label: "minimal", cfg: statuspatch.QueueConfig[string]{Capacity: 1}},
		{label: "everything", cfg: statuspatch.QueueConfig[string]{
			Capacity: 10, Key: queueTestKey, MaxAge: time.Second, Name: "q",
			Meter: noop.NewMeterProvider().Meter("t"), Clock: testingclock.NewFakePassiveClock(queueT0), DepthTau: time.Minute}},
		{label: "zero capacity", cfg: statuspatch.QueueConfig[string]{},
			wantErr: "statuspatch: QueueConfig.Capacity must be > 0, got 0"},
		{label: "negative capacity", cfg: statuspatch.QueueConfig[string]{Capacity: -3},
			wantErr: "statuspatch: QueueConfig.Capacity must be > 0, got -3"},
		{label: "huge capacity", cfg: statuspatch.QueueConfig[string]{Capacity: 1 << 31},
			wantErr: "statuspatch: QueueConfig.Capacity must be <= 2147483647, got 2147483648"},
		{label: "negative MaxAge", cfg: statuspatch.QueueConfig[string]{Capacity: 1, MaxAge: -time.Second},
			wantErr: "statuspatch: QueueConfig.MaxAge must be >= 0, got -1s"},
		{label: "negative DepthTau", cfg: statuspatch.QueueConfig[string]{Capacity: 1, DepthTau: -time.Millisecond},
			wantErr: "statuspatch: QueueConfig.DepthTau must be >= 0, got -1ms"},
	} {
		t.Run(tc.label, func(t *testing.T) {
			q, err := statuspatch.NewPatchQueue(tc.cfg)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("NewPatchQueue: unexpected error %v", err)
				}
				if q.Cap() != tc.cfg.Capacity || q.Stats().Depth != 0 || q.InFlight() != 0 {
					t.Errorf("new queue: Cap %d Len %d InFlight %d, want %d 0 0", q.Cap(), q.Stats().Depth, q.InFlight(), tc.cfg.Capacity)
				}
				q.Close()
				return
			}
			if err == nil || err.Error() != tc.wantErr {
				t.Fatalf("NewPatchQueue error = %v, want %q", err, tc.wantErr)
			}
			if q != nil {
				t.Errorf("NewPatchQueue returned a queue with an error")
			}
		})
	}
}

// queueStep is one step of a rule table. The op says what it does:
//
//	try     TrySend(item), expect err
//	send    Send(cancelled ctx, item): never blocks; expect err
//	reserve Reserve() into permit label, expect err
//	psend   permits[label].Send(item), expect err
//	release permits[label].Release()
//	recv    TryReceive(): expect item (want "" means nothing delivered), or err
//	done    Done(the delivered item whose value is item)
//	close   Close()
//	tick    advance the fake clock by d
//	check   expect Len()==n[0], InFlight()==n[1]
//	stats   expect Stats()==stats
type queueStep struct {
	op    string
	item  string
	label string
	err   error
	d     time.Duration
	n     [2]int
	stats statuspatch.QueueStats
}

func (s queueStep) String() string {
	switch s.op {
	case "reserve", "release":
		return fmt.Sprintf("%s(%s)", s.op, s.label)
	case "psend":
		return fmt.Sprintf("psend(%s, %q)", s.label, s.item)
	case "tick":
		return fmt.Sprintf("tick(%v)", s.d)
	case "check":
		return fmt.Sprintf("check(len=%d, inflight=%d)", s.n[0], s.n[1])
	case "close", "stats":
		return s.op
	}
	return fmt.Sprintf("%s(%q)", s.op, s.item)
}

func qTry(item string, err error) queueStep  { return queueStep{op: "try", item: item, err: err} }
func qSend(item string, err error) queueStep { return queueStep{op: "send", item: item, err: err} }
func qReserve(label string, err error) queueStep {
	return queueStep{op: "reserve", label: label, err: err}
}
func qPSend(label, item string, err error) queueStep {
	return queueStep{op: "psend", label: label, item: item, err: err}
}
func qRelease(label string) queueStep { return queueStep{op: "release", label: label} }
func qRecv(want string) queueStep     { return queueStep{op: "recv", item: want} }
func qRecvErr(err error) queueStep    { return queueStep{op: "recv", err: err} }
func qDone(item string) queueStep     { return queueStep{op: "done", item: item} }
func qClose() queueStep               { return queueStep{op: "close"} }
func qTick(d time.Duration) queueStep { return queueStep{op: "tick", d: d} }
func qCheck(waiting, inFlight int) queueStep {
	return queueStep{op: "check", n: [2]int{waiting, inFlight}}
}
func qStats(s statuspatch.QueueStats) queueStep {
	return queueStep{op: "stats", stats: s}
}

func TestQueueRules(t *testing.T) {
	full, closed, invalid := statuspatch.ErrFull, statuspatch.ErrClosed, statuspatch.ErrInvalidPermit
	for _, tc := range []struct {
		label    string
		capacity int
		keyless  bool
		maxAge   time.Duration
		steps    []queueStep
	}{{
		label: "FIFO across distinct keys", capacity: 4,
		steps: []queueStep{
			qTry("c#1", nil), qTry("a#1", nil), qTry("b#1", nil),
			qRecv("c#1"), qRecv("a#1"), qRecv("b#1"), qRecv(""),
			qCheck(0, 3),
		},
	}, {
		label: "bounded: TrySend fails when full and counts the drop", capacity: 2,
		steps: []queueStep{
			qTry("a#1", nil), qTry("b#1", nil), qTry("c#1", full), qSend("c#1", context.Canceled),
			qCheck(2, 0),
			qStats(statuspatch.QueueStats{Enqueued: 2, DroppedFull: 2, Depth: 2}),
			qRecv("a#1"), qTry("c#1", nil), qRecv("b#1"), qRecv("c#1"),
		},
	}, {
		label: "items in flight hold no slot", capacity: 1,
		steps: []queueStep{
			qTry("a#1", nil), qRecv("a#1"), qTry("b#1", nil), qRecv("b#1"), qTry("c#1", nil),
			qCheck(1, 2),
		},
	}, {
		label: "reservations count against capacity", capacity: 2,
		steps: []queueStep{
			qReserve("p", nil), qReserve("q", nil), qReserve("r", full), qTry("a#1", full),
			qRelease("p"), qTry("a#1", nil), qTry("b#1", full),
			qPSend("q", "b#1", nil), qCheck(2, 0),
			qStats(statuspatch.QueueStats{Enqueued: 2, DroppedFull: 3, Depth: 2}),
		},
	}, {
		label: "coalescing: latest wins in place, counted superseded", capacity: 3,
		steps: []queueStep{
			qTry("a#1", nil), qTry("b#1", nil), qTry("a#2", nil), qSend("a#3", nil), qCheck(2, 0),
			qRecv("a#3"), qRecv("b#1"),
			qStats(statuspatch.QueueStats{Enqueued: 4, Dequeued: 2, Superseded: 2, InFlight: 2}),
		},
	}, {
		label: "coalescing works when full", capacity: 2,
		steps: []queueStep{
			qTry("a#1", nil), qTry("b#1", nil), qTry("c#1", full),
			qTry("b#2", nil), qSend("a#2", nil), qRecv("a#2"), qRecv("b#2"),
			qStats(statuspatch.QueueStats{Enqueued: 4, Dequeued: 2, Superseded: 2, DroppedFull: 1, InFlight: 2}),
		},
	}, {
		label: "a permit used to coalesce gives its slot back", capacity: 2,
		steps: []queueStep{
			qTry("a#1", nil), qReserve("p", nil), qTry("b#1", full),
			qPSend("p", "a#2", nil), qTry("b#1", nil), qCheck(2, 0),
			qRecv("a#2"), qRecv("b#1"),
		},
	}, {
		label: "exclusivity: a key in flight is skipped until Done", capacity: 4,
		steps: []queueStep{
			qTry("a#1", nil), qRecv("a#1"),
			qTry("a#2", nil), qTry("b#1", nil), qTry("a#3", nil),
			qRecv("b#1"), qRecv(""), qCheck(1, 2),
			qDone("a#1"), qRecv("a#3"), qRecv(""),
			qDone("a#3"), qDone("b#1"), qCheck(0, 0),
		},
	}, {
		label: "exclusivity: a released key keeps its place in line", capacity: 4,
		steps: []queueStep{
			qTry("a#1", nil), qRecv("a#1"),
			qTry("a#2", nil), qTry("b#1", nil), qTry("c#1", nil),
			qRecv("b#1"), qDone("a#1"), qRecv("a#2"), qRecv("c#1"),
		},
	}, {
		label: "Done twice, or of the zero Item, does nothing", capacity: 2,
		steps: []queueStep{
			qTry("a#1", nil), qRecv("a#1"), qDone("a#1"), qDone("a#1"), qDone(""),
			qTry("a#2", nil), qRecv("a#2"), qDone("a#1"), qCheck(0, 1),
			qTry("a#3", nil), qRecv(""), qDone("a#2"), qRecv("a#3"),
		},
	}, {
		label: "without a key: no coalescing, no exclusivity", capacity: 3, keyless: true,
		steps: []queueStep{
			qTry("a#1", nil), qTry("a#2", nil), qTry("a#3", nil), qTry("a#4", full),
			qRecv("a#1"), qRecv("a#2"), qDone("a#2"), qDone("a#2"), qCheck(1, 1), qRecv("a#3"),
			qStats(statuspatch.QueueStats{Enqueued: 3, Dequeued: 3, DroppedFull: 1, InFlight: 2}),
		},
	}, {
		label: "permit used twice or zero", capacity: 2,
		steps: []queueStep{
			qReserve("p", nil), qPSend("p", "a#1", nil), qPSend("p", "a#2", invalid), qRelease("p"),
			qPSend("zero", "b#1", invalid), qRelease("zero"),
			qReserve("r", nil), qRelease("r"), qPSend("r", "c#1", invalid),
			qCheck(1, 0), qRecv("a#1"),
			qStats(statuspatch.QueueStats{Enqueued: 1, Dequeued: 1, InFlight: 1}),
		},
	}, {
		label: "MaxAge: an item too old at dequeue is dropped", capacity: 4, maxAge: 10 * time.Second,
		steps: []queueStep{
			qTry("a#1", nil), qTick(5 * time.Second), qTry("b#1", nil),
			qTick(6 * time.Second), qRecv("b#1"), qCheck(0, 1),
			qTry("c#1", nil), qTick(10 * time.Second), qRecv("c#1"),
			qStats(statuspatch.QueueStats{Enqueued: 3, Dequeued: 2, DroppedExpired: 1, InFlight: 2}),
		},
	}, {
		label: "MaxAge: coalescing renews the age", capacity: 4, maxAge: 10 * time.Second,
		steps: []queueStep{
			qTry("a#1", nil), qTick(8 * time.Second), qTry("a#2", nil), qTick(8 * time.Second), qRecv("a#2"),
		},
	}, {
		label: "MaxAge: an item held back by its key expires too", capacity: 4, maxAge: 10 * time.Second,
		steps: []queueStep{
			qTry("a#1", nil), qRecv("a#1"), qTry("a#2", nil), qTry("b#1", nil),
			qTick(11 * time.Second), qTry("c#1", nil), qRecv("c#1"), qCheck(0, 2),
			qDone("a#1"), qRecv(""),
			qStats(statuspatch.QueueStats{Enqueued: 4, Dequeued: 2, DroppedExpired: 2, InFlight: 1}),
		},
	}, {
		label: "MaxAge: nothing eligible, nothing expired", capacity: 4, maxAge: time.Second,
		steps: []queueStep{
			qTry("a#1", nil), qRecv("a#1"), qTry("a#2", nil), qTick(time.Minute), qRecv(""), qCheck(1, 1),
			qDone("a#1"), qRecv(""), qCheck(0, 0),
		},
	}, {
		label: "Close: producers are refused, consumers drain", capacity: 3,
		steps: []queueStep{
			qTry("a#1", nil), qTry("b#1", nil), qReserve("p", nil), qClose(), qClose(),
			qTry("c#1", closed), qTry("a#2", closed), qSend("c#1", closed), qReserve("r", closed),
			qPSend("p", "d#1", closed), qCheck(2, 0),
			qRecv("a#1"), qRecv("b#1"), qRecvErr(closed),
			qStats(statuspatch.QueueStats{Enqueued: 2, Dequeued: 2, DroppedClosed: 5, InFlight: 2}),
		},
	}, {
		label: "Close: an item held back by its key is drained after Done", capacity: 3,
		steps: []queueStep{
			qTry("a#1", nil), qRecv("a#1"), qTry("a#2", nil), qClose(),
			qRecv(""), qDone("a#1"), qRecv("a#2"), qRecvErr(closed),
		},
	}} {
		t.Run(tc.label, func(t *testing.T) {
			clk := testingclock.NewFakePassiveClock(queueT0)
			cfg := statuspatch.QueueConfig[string]{Capacity: tc.capacity, Key: queueTestKey, MaxAge: tc.maxAge, Clock: clk}
			if tc.keyless {
				cfg.Key = nil
			}
			q, err := statuspatch.NewPatchQueue(cfg)
			if err != nil {
				t.Fatal(err)
			}
			permits := map[string]statuspatch.Permit[string]{}
			delivered := map[string]statuspatch.Item[string]{}
			cancelled, cancel := context.WithCancel(context.Background())
			cancel()
			for i, s := range tc.steps {
				var err error
				switch s.op {
				case "try":
					err = q.TrySend(s.item)
				case "send":
					err = q.Send(cancelled, s.item)
				case "reserve":
					permits[s.label], err = q.Reserve()
				case "psend":
					err = permits[s.label].Send(s.item)
				case "release":
					permits[s.label].Release()
				case "recv":
					it, ok, rerr := q.TryReceive()
					err = rerr
					got := ""
					if ok {
						got = it.Value
						delivered[got] = it
						if cfg.Key != nil && it.Key() != cfg.Key(got) {
							t.Errorf("step %d %v: Key() = %q, want %q", i, s, it.Key(), cfg.Key(got))
						}
					}
					if got != s.item {
						t.Fatalf("step %d %v: received %q, want %q", i, s, got, s.item)
					}
				case "done":
					q.Done(delivered[s.item])
				case "close":
					q.Close()
				case "tick":
					clk.SetTime(clk.Now().Add(s.d))
				case "check":
					if l, f := q.Stats().Depth, q.InFlight(); l != s.n[0] || f != s.n[1] {
						t.Fatalf("step %d %v: Len %d InFlight %d", i, s, l, f)
					}
				case "stats":
					if d := cmp.Diff(s.stats, q.Stats()); d != "" {
						t.Fatalf("step %d %v: Stats (-want +got):\n%s", i, s, d)
					}
				default:
					t.Fatalf("step %d: unknown op %q", i, s.op)
				}
				if !errors.Is(err, s.err) || (err == nil) != (s.err == nil) {
					t.Fatalf("step %d %v: error %v, want %v", i, s, err, s.err)
				}
				st := q.Stats()
				if st.Depth+st.Reserved > q.Cap() {
					t.Fatalf("step %d %v: %d waiting + %d reserved exceed capacity %d", i, s, st.Depth, st.Reserved, q.Cap())
				}
				if st.Enqueued != st.Dequeued+st.Superseded+st.DroppedExpired+int64(st.Depth) {
					t.Fatalf("step %d %v: counters do not add up: %+v", i, s, st)
				}
			}
			q.Close()
		})
	}
}

func TestQueueEnqueuedTime(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(queueT0)
	q, err := statuspatch.NewPatchQueue(statuspatch.QueueConfig[string]{Capacity: 2, Key: queueTestKey, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.TrySend("a#1"); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(queueT0.Add(time.Second))
	if err := q.TrySend("a#2"); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(queueT0.Add(time.Minute))
	it, ok, err := q.TryReceive()
	if !ok || err != nil {
		t.Fatalf("TryReceive = %v, %v", ok, err)
	}
	if want := queueT0.Add(time.Second); !it.Enqueued.Equal(want) {
		t.Errorf("Enqueued = %v, want the time of the latest value %v", it.Enqueued, want)
	}
}

func TestQueueEnqueuedTimeRealClock(t *testing.T) {
	q, err := statuspatch.NewPatchQueue(statuspatch.QueueConfig[string]{Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	before := time.Now()
	if err := q.TrySend("a"); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	it, err := q.Receive(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Both sides carry monotonic readings, so these compare exactly.
	if it.Enqueued.Before(before) || it.Enqueued.After(after) {
		t.Errorf("Enqueued %v not within [%v, %v]", it.Enqueued, before, after)
	}
}

// queueWaitFor polls cond until it holds or the deadline passes.
func queueWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// queueAwait receives from c, failing the test if nothing arrives in time
// (a lost wake-up shows up here).
func queueAwait[V any](t *testing.T, c <-chan V) V {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for a blocked call to return")
		panic("unreachable")
	}
}

func queueSenders[T any](q *statuspatch.PatchQueue[T]) int {
	s, _ := statuspatch.QueueWaiters(q)
	return s
}

func queueReceivers[T any](q *statuspatch.PatchQueue[T]) int {
	_, r := statuspatch.QueueWaiters(q)
	return r
}

func TestQueueSendBlocks(t *testing.T) {
	t.Run("until a slot frees", func(t *testing.T) {
		q, _ := statuspatch.NewPatchQueue(statuspatch.QueueConfig[string]{Capacity: 1, Key: queueTestKey})
		defer q.Close()
		if err := q.TrySend("a#1"); err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { errc <- q.Send(context.Background(), "b#1") }()
		queueWaitFor(t, "Send to block", func() bool { return queueSenders(q) == 1 })
		select {
		case err := <-errc:
			t.Fatalf("Send returned %v while the queue was full", err)
		default:
		}
		if it, ok, _ := q.TryReceive(); !ok || it.Value != "a#1" {
			t.Fatalf("TryReceive = %q, %v", it.Value, ok)
		}
		if err := queueAwait(t, errc); err != nil {
			t.Fatalf("Send = %v", err)
		}
		if it, ok, _ := q.TryReceive(); !ok || it.Value != "b#1" {
			t.Fatalf("TryReceive = %q, %v, want b#1", it.Value, ok)
		}
	})
	t.Run("until a permit is released", func(t *testing.T) {
		q, _ := statuspatch.NewPatchQueue(statuspatch.QueueConfig[string]{Capacity: 1})
		defer q.Close()
		p, err := q.Reserve()
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { errc <- q.Send(context.Background(), "b") }()
		queueWaitFor(t, "Send to block", func() bool { return queueSenders(q) == 1 })
		p.Release()
		if err := queueAwait(t, errc); err != nil {
			t.Fatalf("Send = %v", err)
		}
	})
	t.Run("not when the key is waiting", func(t *testing.T) {
		q, _ := statuspatch.NewPatchQueue(statuspatch.QueueConfig[string]{Capacity: 1, Key: queueTestKey})
		defer q.Close()
		if err := q.TrySend("a#1"); err != nil {
			t.Fatal(err)
		}
		if err := q.Send(context.Background(), "a#2"); err != nil {
			t.Fatalf("Send = %v", err)
		}
	})
	t.Run("until ctx ends", func(t *testing.T) {
		q, _ := statuspatch.NewPatchQueue(statuspatch.QueueConfig[string]{Capacity: 1})
		defer q.Close()
		if err := q.TrySend("a"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- q.Send(ctx, "b") }()
		queueWaitFor(t, "Send to block", func() bool { return queueSenders(q) == 1 })
		cancel()
		if err := queueAwait(t, errc); !errors.Is(err, context.Canceled) {
			t.Fatalf("Send = %v, want context.Canceled", err)
		}
		if st := q.Stats(); st.DroppedFull != 1 || st.Enqueued != 1 {
			t.Errorf("Stats = %+v, want one drop (full), one enqueued", st)
		}
	})
	t.Run("until Close", func(t *testing.T) {
		q, _ := statuspatch.NewPatchQueue(statuspatch.QueueConfig[string]{Capacity: 1})
		if err := q.TrySend("a"); err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 2)
		for range 2 {
			go func() { errc <- q.Send(context.Background(), "b") }()
		}
		queueWaitFor(t, "Sends to block", func() bool { return queueSenders(q) == 2 })
		q.Close()
		for range 2 {
			if err := queueAwait(t, errc); !errors.Is(err, statuspatch.ErrClosed) {
				t.Fatalf("Send = %v, want ErrClosed", err)
			}
		}
	})
	t.Run("many waiters all get in as slots free", func(t *testing.T) {
		const n = 5
		q, _ := statuspatch.NewPatchQueue(statuspatch.QueueConfig[int]{Capacity: 1})
		defer q.Close()
		if err := q.TrySend(-1); err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, n)
		for i := range n {
			go func() { errc <- q.Send(context.Background(), i) }()
		}
		queueWaitFor(t, "Sends to block", func() bool { return queueSenders(q) == n })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		got := 0
		for got < n+1 {
			it, err := q.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			q.Done(it)
			got++
		}
		for range n {
			if err := queueAwait(t, errc); err != nil {
				t.Fatalf("Send = %v", err)
			}
		}
	})
}

// TestQueueWakeUpsPassOn frees several slots (or sends several items) at
// once while several goroutines wait: every one of them must wake, though
// the queue keeps a single wake-up token per side.
func TestQueueWakeUpsPassOn(t *testing.T) {
	const n = 3
	t.Run("producers", func(t *testing.T) {
		q, _ := statuspatch.NewPatchQueue(statuspatch.QueueConfig[int]{Capacity: n})
		defer q.Close()
		for i := range n {
			if err := q.TrySend(i); err != nil {
				t.Fatal(err)
			}
		}
		errc := make(chan error, n)
		for i := range n {
			go func() { errc <- q.Send(context.Background(), n+i) }()
		}
		queueWaitFor(t, "Sends to block", func() bool { return queueSenders(q) == n })
		for range n {
			if _, ok, _ := q.TryReceive(); !ok {
				t.Fatal("TryReceive found nothing")
			}
		}
		for range n {
			if err := queueAwait(t, errc); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Run("consumers", func(t *testing.T) {
		q, _ := statuspatch.NewPatchQueue(statuspatch.QueueConfig[int]{Capacity: n})
		defer q.Close()
		errc := make(chan error, n)
		for range n {
			go func() {
				_, err := q.Receive(context.Background())
				errc <- err
			}()
		}
		queueWaitFor(t, "Receives to block", func() bool { return queueReceivers(q) == n })
		for i := range n {
			if err := q.TrySend(i); err != nil {
				t.Fatal(err)
			}
		}
		for range n {
			if err := queueAwait(t, errc); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestQueueReceiveBlocks(t *testing.T) {
	t.Run("until an item arrives", func(t *testing.T) {
		q, _ := statuspatch.NewPatchQueue(statuspatch.QueueConfig[string]{Capacity: 1})
		defer q.Close()
		type res struct {
			it  statuspatch.Item[string]
			err error
		}
		resc := make(chan res, 1)
		go func() {
			it, err := q.Receive(context.Background())
			resc <- res{it, err}
		}()
		queueWaitFor(t, "Receive to block", func() bool { return queueReceivers(q) == 1 })
		if err := q.TrySend("a"); err != nil {
			t.Fatal(err)
		}
		if r := queueAwait(t, resc); r.err != nil || r.it.Value != "a" {
			t.Fatalf("Receive = %q, %v", r.it.Value, r.err)
		}
	})
	t.Run("until Done of the key in flight", func(t *testing.T) {
		q, _ := statuspatch.NewPatchQueue(statuspatch.QueueConfig[string]{Capacity: 2, Key: queueTestKey})
		defer q.Close()
		_ = q.TrySend("a#1")
		first, _ := q.Receive(context.Background())
		_ = q.TrySend("a#2")
		resc := make(chan string, 1)
		go func() {
			it, err := q.Receive(context.Background())
			if err != nil {
				resc <- err.Error()
				return
			}
			resc <- it.Value
		}()
		queueWaitFor(t, "Receive to block", func() bool { return queueReceivers(q) == 1 })
		q.Done(first)
		if got := queueAwait(t, resc); got != "a#2" {
			t.Fatalf("Receive = %q, want a#2", got)
		}
	})
	t.Run("until ctx ends", func(t *testing.T) {
		q, _ := statuspatch.NewPatchQueue(statuspatch.QueueConfig[string]{Capacity: 1})
		defer q.Close()
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := q.Receive(ctx)
			errc <- err
		}()
		queueWaitFor(t, "Receive to block", func() bool { return queueReceivers(q) == 1 })
		cancel()
		if err := queueAwait(t, errc); !errors.Is(err, context.Canceled) {
			t.Fatalf("Receive = %v, want context.Canceled", err)
		}
	})
	t.Run("ready item wins over a done ctx", func(t *testing.T) {
		q, _ := statuspatch.NewPatchQueue(statuspatch.QueueConfig[string]{Capacity: 1})
		defer q.Close()
		_ = q.TrySend("a")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if it, err := q.Receive(ctx); err != nil || it.Value != "a" {
			t.Fatalf("Receive = %q, %v", it.Value, err)
		}
		if _, err := q.Receive(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Receive on empty = %v, want context.Canceled", err)
		}
	})
	t.Run("until Close, every waiting consumer", func(t *testing.T) {
		const n = 3
		q, _ := statuspatch.NewPatchQueue(statuspatch.QueueConfig[string]{Capacity: 1})
		errc := make(chan error, n)
		for range n {
			go func() {
				_, err := q.Receive(context.Background())
				errc <- err
			}()
		}
		queueWaitFor(t, "Receives to block", func() bool { return queueReceivers(q) == n })
		q.Close()
		for range n {
			if err := queueAwait(t, errc); !errors.Is(err, statuspatch.ErrClosed) {
				t.Fatalf("Receive = %v, want ErrClosed", err)
			}
		}
	})
	t.Run("after Close, until the held-back item is drained", func(t *testing.T) {
		const n = 3
		q, _ := statuspatch.NewPatchQueue(statuspatch.QueueConfig[string]{Capacity: 2, Key: queueTestKey})
		_ = q.TrySend("a#1")
		first, _ := q.Receive(context.Background())
		_ = q.TrySend("a#2")
		q.Close()
		resc := make(chan string, n)
		for range n {
			go func() {
				it, err := q.Receive(context.Background())
				if err != nil {
					resc <- err.Error()
					return
				}
				resc <- it.Value
			}()
		}
		queueWaitFor(t, "Receives to block", func() bool { return queueReceivers(q) == n })
		q.Done(first)
		got := map[string]int{}
		for range n {
			got[queueAwait(t, resc)]++
		}
		want := map[string]int{"a#2": 1, statuspatch.ErrClosed.Error(): n - 1}
		if d := cmp.Diff(want, got); d != "" {
			t.Fatalf("results (-want +got):\n%s", d)
		}
	})
}

func TestQueueNoAllocs(t *testing.T) {
	for _, tc := range []struct {
		label string
		cfg   statuspatch.QueueConfig[string]
	}{
		{label: "nil meter, keyed", cfg: statuspatch.QueueConfig[string]{Capacity: 64, Key: queueTestKey}},
		{label: "noop meter, keyed", cfg: statuspatch.QueueConfig[string]{Capacity: 64, Key: queueTestKey, Meter: noop.NewMeterProvider().Meter("x")}},
		{label: "nil meter, keyless", cfg: statuspatch.QueueConfig[string]{Capacity: 64}},
		{label: "nil meter, MaxAge", cfg: statuspatch.QueueConfig[string]{Capacity: 64, Key: queueTestKey, MaxAge: time.Hour}},
	} {
		t.Run(tc.label, func(t *testing.T) {
			q, err := statuspatch.NewPatchQueue(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			keys := queueBenchKeys(128) // more keys than slots
			ctx := context.Background()
			i := 0
			cycle := func() {
				k := keys[i%len(keys)]
				i++
				if err := q.TrySend(k); err != nil {
					t.Fatal(err)
				}
				p, err := q.Reserve()
				if err != nil {
					t.Fatal(err)
				}
				if err := p.Send(k); err != nil { // coalesces
					t.Fatal(err)
				}
				it, err := q.Receive(ctx)
				if err != nil {
					t.Fatal(err)
				}
				q.Done(it)
				for { // without a key, the second send did not coalesce
					it, ok, err := q.TryReceive()
					if err != nil {
						t.Fatal(err)
					}
					if !ok {
						break
					}
					q.Done(it)
				}
			}
			for range 2 * len(keys) { // warm up: grow to the high-water mark
				cycle()
			}
			if a := testing.AllocsPerRun(1000, cycle); a != 0 {
				t.Errorf("allocs per TrySend+Reserve+Permit.Send+Receive+TryReceive+Done = %v, want 0", a)
			}
		})
	}
}

// TestQueueKeyRecordsBounded checks that the per-key records kept for keys
// that come back are bounded by the capacity, however many distinct keys
// pass through, and that a key coming back after going idle behaves like a
// new one.
func TestQueueKeyRecordsBounded(t *testing.T) {
	const capacity = 4
	q, err := statuspatch.NewPatchQueue(statuspatch.QueueConfig[string]{Capacity: capacity, Key: queueTestKey})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var held []statuspatch.Item[string]
	for i := range 1000 {
		if err := q.TrySend(fmt.Sprintf("k%d#%d", i, i)); err != nil {
			t.Fatal(err)
		}
		it, ok, _ := q.TryReceive()
		if !ok {
			t.Fatalf("item %d not delivered", i)
		}
		if i%100 == 0 { // some stay in flight for a while
			held = append(held, it)
			continue
		}
		q.Done(it)
		if keys, idle := statuspatch.QueueTrackedKeys(q); idle > capacity || keys > capacity+len(held) {
			t.Fatalf("after %d keys: %d key records (%d idle), want at most %d", i+1, keys, idle, capacity+len(held))
		}
	}
	for _, it := range held {
		q.Done(it)
	}
	if keys, idle := statuspatch.QueueTrackedKeys(q); keys != capacity || idle != capacity {
		t.Errorf("at rest: %d key records, %d idle; want %d, %d", keys, idle, capacity, capacity)
	}
	// An idle key and an evicted key both come back as new.
	for _, k := range []string{"k999", "k0", "k999"} {
		if err := q.TrySend(k + "#again"); err != nil {
			t.Fatal(err)
		}
		it, ok, _ := q.TryReceive()
		if !ok || it.Value != k+"#again" {
			t.Fatalf("TryReceive = %q %v, want %s#again", it.Value, ok, k)
		}
		q.Done(it)
	}
	if st := q.Stats(); st.Dequeued != 1003 || st.InFlight != 0 || st.Depth != 0 {
		t.Errorf("Stats = %+v", st)
	}
}
