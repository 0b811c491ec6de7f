package queue

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/quietpatch/quietpatch/internal/peak"
)

// Lane says how soon a key is served: fresh keys (events: an edit, an
// informer handler) before keys of periodic passes.
type Lane uint8

// The lanes; any other value counts as LanePass.
const (
	LaneFresh Lane = iota
	LanePass
)

// FreshBurst is the starvation bound of the pass lane: while it has keys
// waiting, at most FreshBurst fresh keys are served in a row.
const FreshBurst = 8

// Errors of the queue (statuspatch exports them as its own).
var (
	// ErrFull is returned when a lane has no free slot.
	ErrFull = errors.New("statuspatch: queue is full")
	// ErrClosed is returned by producers once the queue is closed, and by
	// Get once it is closed and drained.
	ErrClosed = errors.New("statuspatch: queue is closed")
)

// depthTau is the time constant of the depth's Peak-EWMA.
const depthTau = 10 * time.Second

// Queue is statuspatch.PatchQueue's implementation: a bounded queue of keys
// with client-go workqueue's rules (a key waits at most once, one consumer
// holds it at a time, a key added while held is served again after Done),
// in two lanes. statuspatch documents its contract; the pipeline uses
// three more operations (AddNew, Room, GetSince). All methods are safe for
// concurrent use; one mutex guards the state, and nothing is recorded
// under it but the depth's Peak-EWMA, which is state.
type Queue[K comparable] struct {
	clk  clock.PassiveClock // nil: no stamps, no Peak-EWMA (the bare queue)
	base time.Time          // with the real clock: now is base plus the monotonic time since

	mu       sync.Mutex
	capacity int
	lanes    [2]lane[K]
	waiting  map[K]waiter
	held     map[K]struct{}
	seq      uint64
	burst    int // fresh keys served in a row while pass keys waited
	closed   bool
	ready    chan struct{} // made by a waiting Get; closed (and cleared) when a key becomes ready
	rooms    []room
	depth    peak.Peak // of len(waiting), with clk
	last     time.Time // the latest insertion's time: removals are recorded at it
	stats    Stats
}

// lane is a FIFO of keys; an entry is live while its key waits in this lane
// with the same sequence number (a key that moved lanes leaves a dead
// entry behind).
type lane[K comparable] struct {
	fifo     []entry[K]
	head     int
	live     int // entries live in fifo
	count    int // keys waiting in the lane (also those held back) + reservations
	reserved int // reservations
}

type entry[K comparable] struct {
	key K
	seq uint64
}

type waiter struct {
	lane   Lane
	seq    uint64
	queued bool      // in its lane's fifo; false while the key is held
	since  time.Time // first added; zero without a clock
}

// Stats are a queue's counters since construction, and its state now
// (statuspatch.QueueStats documents them).
type Stats struct {
	Enqueued, Coalesced          int64
	Dequeued                     int64
	DroppedFull, DroppedClosed   int64
	Depth, Fresh, Held, Reserved int
	DepthPeak                    float64
}

// New returns an empty queue whose lanes hold capacity keys each
// (capacity >= 1: the callers check it). With a clock it stamps each key
// when first added (GetSince) and keeps the Peak-EWMA of the depth
// (Stats.DepthPeak); without, it reads no clock.
func New[K comparable](capacity int, clk clock.PassiveClock) *Queue[K] {
	q := &Queue[K]{clk: clk, capacity: capacity, waiting: map[K]waiter{}, held: map[K]struct{}{}, depth: peak.New(depthTau)}
	if _, ok := clk.(clock.RealClock); ok {
		q.base = time.Now() // time.Since reads the monotonic clock only: half the cost of time.Now
	}
	return q
}

// Add adds key to lane l at once, or fails with ErrFull or ErrClosed. A
// key that waits already needs no slot.
func (q *Queue[K]) Add(key K, l Lane) error { return q.add(key, l, true) }

// AddNew is Add for the passes: a key that waits already, in either lane,
// is left where it is, uncounted — a pass finds a changed object again at
// every interval until it is served, and that is no new request.
func (q *Queue[K]) AddNew(key K, l Lane) error { return q.add(key, l, false) }

func (q *Queue[K]) add(key K, l Lane, coalesce bool) error {
	l = min(l, LanePass)
	q.mu.Lock()
	_, waits := q.waiting[key]
	if waits && !coalesce && !q.closed {
		q.mu.Unlock()
		return nil
	}
	if !waits || q.closed {
		if err := q.admitLocked(l); err != nil {
			q.mu.Unlock()
			return err
		}
	}
	q.insertLocked(key, l)
	q.mu.Unlock()
	return nil
}

// admitLocked checks that lane l has a free slot.
func (q *Queue[K]) admitLocked(l Lane) error {
	switch {
	case q.closed:
		q.stats.DroppedClosed++
		return ErrClosed
	case q.lanes[l].count >= q.capacity:
		q.stats.DroppedFull++
		return ErrFull
	}
	return nil
}

// insertLocked adds key to lane l, which has room for it unless key waits
// already: then it coalesces, moving from the pass lane to the fresh lane
// if l is fresh and has room.
func (q *Queue[K]) insertLocked(key K, l Lane) {
	q.stats.Enqueued++
	w, waits := q.waiting[key]
	if waits {
		q.stats.Coalesced++
		if w.lane != LanePass || l != LaneFresh || q.lanes[LaneFresh].count >= q.capacity {
			return
		}
		q.lanes[LanePass].count--
		q.lanes[LaneFresh].count++
		w.lane = LaneFresh
		if w.queued {
			q.lanes[LanePass].live--
			q.seq++
			w.seq = q.seq
			q.pushLocked(key, w)
		}
		q.waiting[key] = w
		q.wakeRoomsLocked()
		return
	}
	q.lanes[l].count++
	q.seq++
	w = waiter{lane: l, seq: q.seq, since: q.now()}
	q.last = w.since
	if _, held := q.held[key]; !held {
		w.queued = true
		q.pushLocked(key, w)
	}
	q.waiting[key] = w
	q.depthLocked(w.since)
}

// depthLocked records the depth at now in its Peak-EWMA.
func (q *Queue[K]) depthLocked(now time.Time) {
	if q.clk != nil {
		q.depth.Record(now, float64(len(q.waiting)))
	}
}

func (q *Queue[K]) pushLocked(key K, w waiter) {
	ln := &q.lanes[w.lane]
	if ln.head > 64 && ln.head > len(ln.fifo)/2 || len(ln.fifo)-ln.head > 2*ln.live+64 {
		q.compactLocked(ln)
	}
	ln.fifo = append(ln.fifo, entry[K]{key, w.seq})
	ln.live++
	q.wakeGettersLocked()
}

// wakeGettersLocked wakes the consumers waiting in Get, if any: the channel
// is made only when one waits, so a key added with nobody waiting costs no
// allocation.
func (q *Queue[K]) wakeGettersLocked() {
	if q.ready != nil {
		close(q.ready)
		q.ready = nil
	}
}

// compactLocked drops the served and dead entries of a lane.
func (q *Queue[K]) compactLocked(ln *lane[K]) {
	n := 0
	for _, e := range ln.fifo[ln.head:] {
		if w, ok := q.waiting[e.key]; ok && w.queued && w.seq == e.seq {
			ln.fifo[n] = e
			n++
		}
	}
	clear(ln.fifo[n:])
	ln.fifo, ln.head = ln.fifo[:n], 0
}

// popLocked takes the next live key of a lane.
func (q *Queue[K]) popLocked(l Lane) (K, waiter, bool) {
	ln := &q.lanes[l]
	for ln.head < len(ln.fifo) {
		e := ln.fifo[ln.head]
		ln.fifo[ln.head] = entry[K]{}
		ln.head++
		if w, ok := q.waiting[e.key]; ok && w.queued && w.seq == e.seq {
			ln.live--
			ln.count--
			return e.key, w, true
		}
	}
	ln.fifo, ln.head = ln.fifo[:0], 0
	var zero K
	return zero, waiter{}, false
}

// Get returns the next key, holding it until Done. It waits until a key is
// ready, the queue is closed and drained (ErrClosed), or ctx ends (its
// error); a ready key is returned even if ctx has ended.
func (q *Queue[K]) Get(ctx context.Context) (K, error) {
	key, _, err := q.GetSince(ctx)
	return key, err
}

// GetSince is Get, returning also when the key was first added (zero
// without a clock), for the wait histogram its caller records with a time
// it reads anyway, outside the queue's lock. A removal reads no clock: it
// is recorded in the depth's Peak-EWMA at the time of the latest
// insertion (a removal follows one; when keys are served as fast as they
// come, that is within a call's time).
func (q *Queue[K]) GetSince(ctx context.Context) (K, time.Time, error) {
	for {
		q.mu.Lock()
		key, w, ok := q.nextLocked()
		if ok {
			delete(q.waiting, key)
			q.held[key] = struct{}{}
			q.stats.Dequeued++
			q.wakeRoomsLocked()
			q.depthLocked(q.last)
			q.mu.Unlock()
			return key, w.since, nil
		}
		var zero K
		if q.closed && len(q.waiting) == 0 {
			q.mu.Unlock()
			return zero, time.Time{}, ErrClosed
		}
		if q.ready == nil {
			q.ready = make(chan struct{})
		}
		ready := q.ready
		q.mu.Unlock()
		select {
		case <-ready:
		case <-ctx.Done():
			return zero, time.Time{}, ctx.Err()
		}
	}
}

// nextLocked picks the lane to serve: fresh first, within the burst bound.
func (q *Queue[K]) nextLocked() (K, waiter, bool) {
	passWaits := q.lanes[LanePass].live > 0
	if q.lanes[LaneFresh].live > 0 && (!passWaits || q.burst < FreshBurst) {
		if passWaits {
			q.burst++
		}
		return q.popLocked(LaneFresh)
	}
	q.burst = 0
	return q.popLocked(LanePass)
}

// Done ends the hold on key taken by Get; a key added meanwhile becomes
// ready.
func (q *Queue[K]) Done(key K) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.held, key)
	if w, ok := q.waiting[key]; ok && !w.queued {
		w.queued = true
		q.waiting[key] = w
		q.pushLocked(key, w)
	}
}

// Close refuses producers from now on; consumers drain what waits.
func (q *Queue[K]) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		q.wakeGettersLocked()
		q.wakeRoomsLocked()
	}
}

// Cap returns the capacity of each lane.
func (q *Queue[K]) Cap() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.capacity
}

// SetCapacity changes the capacity of each lane; keys beyond it stay and
// only new ones are refused.
func (q *Queue[K]) SetCapacity(n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.capacity = n
	q.wakeRoomsLocked()
}

// Stats returns the queue's counters.
func (q *Queue[K]) Stats() Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.stats
	if q.clk != nil {
		s.DepthPeak = q.depth.ValueAt(q.now())
	}
	s.Depth, s.Held = len(q.waiting), len(q.held)
	s.Fresh = q.lanes[LaneFresh].count - q.lanes[LaneFresh].reserved
	s.Reserved = q.lanes[LaneFresh].reserved + q.lanes[LanePass].reserved
	return s
}

// now reads the clock, if the queue has one.
func (q *Queue[K]) now() time.Time {
	switch {
	case q.clk == nil:
		return time.Time{}
	case !q.base.IsZero():
		return q.base.Add(time.Since(q.base))
	}
	return q.clk.Now()
}
