package statuspatch

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Lane says how soon a key is served: fresh keys (events: an edit, an
// informer handler) before keys of periodic passes.
type Lane uint8

// The lanes of a [PatchQueue]; any other value counts as LanePass.
const (
	LaneFresh Lane = iota
	LanePass
)

// FreshBurst is the starvation bound of the pass lane: while it has keys
// waiting, at most FreshBurst fresh keys are served in a row.
const FreshBurst = 8

// PatchQueue is a bounded queue of keys with client-go workqueue's rules: a
// key waits at most once (adding it again coalesces), at most one consumer
// holds a key at a time (between [PatchQueue.Get] and [PatchQueue.Done]),
// and a key added while held is served again after Done.
//
// Each [Lane] holds at most Capacity keys, waiting or reserved. Get serves
// the fresh lane first, but never more than [FreshBurst] fresh keys in a
// row while pass keys wait, so a pass key is served within FreshBurst+1
// deliveries of reaching the head of its lane. A key added to the fresh
// lane while it waits in the pass lane moves there, room permitting.
//
// No producer ever blocks: [PatchQueue.Add] and [PatchQueue.Reserve] fail
// at once with [ErrFull] or [ErrClosed], counted as dropped. After
// [PatchQueue.Close] consumers drain what waits, then Get returns
// ErrClosed. Build one with [NewPatchQueue]; all methods are safe for
// concurrent use.
type PatchQueue[K comparable] struct {
	inst *queueInstruments

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
	stats    QueueStats
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
	since  time.Time // first added; zero without instruments
}

type room struct {
	lane Lane
	free int
	ch   chan struct{}
}

// QueueStats are a queue's counters since construction, and its state now.
type QueueStats struct {
	// Enqueued counts keys added; Coalesced those that were waiting already.
	Enqueued, Coalesced int64
	// Dequeued counts keys delivered by Get.
	Dequeued int64
	// DroppedFull and DroppedClosed count refused adds and reservations.
	DroppedFull, DroppedClosed int64
	// Depth is the number of keys waiting, Fresh of them in the fresh lane;
	// Held the keys between Get and Done; Reserved the permits outstanding.
	Depth, Fresh, Held, Reserved int
}

// NewPatchQueue returns an empty queue sized and named by opts (Capacity,
// Name, Meter, Clock).
func NewPatchQueue[K comparable](opts Options) (*PatchQueue[K], error) {
	opts, err := opts.complete()
	if err != nil {
		return nil, err
	}
	q := &PatchQueue[K]{capacity: opts.Capacity, waiting: map[K]waiter{}, held: map[K]struct{}{}}
	if q.inst, err = newQueueInstruments(opts, q); err != nil {
		return nil, err
	}
	return q, nil
}

// Add adds key to lane l at once, or fails with ErrFull or ErrClosed. A
// key that waits already needs no slot.
func (q *PatchQueue[K]) Add(key K, l Lane) error { return q.add(key, l, true) }

// addNew is Add for the passes: a key that waits already, in either lane,
// is left where it is, uncounted — a pass finds a changed object again at
// every interval until it is served, and that is no new request.
func (q *PatchQueue[K]) addNew(key K, l Lane) error { return q.add(key, l, false) }

func (q *PatchQueue[K]) add(key K, l Lane, coalesce bool) error {
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
	now, depth := q.insertLocked(key, l)
	q.mu.Unlock()
	q.inst.depth(now, depth)
	return nil
}

// admitLocked checks that lane l has a free slot.
func (q *PatchQueue[K]) admitLocked(l Lane) error {
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
// if l is fresh and has room. It returns the time and depth for the gauge.
func (q *PatchQueue[K]) insertLocked(key K, l Lane) (time.Time, int) {
	q.stats.Enqueued++
	w, waits := q.waiting[key]
	if waits {
		q.stats.Coalesced++
		if w.lane != LanePass || l != LaneFresh || q.lanes[LaneFresh].count >= q.capacity {
			return time.Time{}, -1
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
		return time.Time{}, -1
	}
	q.lanes[l].count++
	q.seq++
	w = waiter{lane: l, seq: q.seq, since: q.now()}
	if _, held := q.held[key]; !held {
		w.queued = true
		q.pushLocked(key, w)
	}
	q.waiting[key] = w
	return w.since, len(q.waiting)
}

func (q *PatchQueue[K]) pushLocked(key K, w waiter) {
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
func (q *PatchQueue[K]) wakeGettersLocked() {
	if q.ready != nil {
		close(q.ready)
		q.ready = nil
	}
}

// compactLocked drops the served and dead entries of a lane.
func (q *PatchQueue[K]) compactLocked(ln *lane[K]) {
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
func (q *PatchQueue[K]) popLocked(l Lane) (K, waiter, bool) {
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
func (q *PatchQueue[K]) Get(ctx context.Context) (K, error) {
	for {
		q.mu.Lock()
		key, w, ok := q.nextLocked()
		if ok {
			delete(q.waiting, key)
			q.held[key] = struct{}{}
			q.stats.Dequeued++
			q.wakeRoomsLocked()
			now, depth := q.now(), len(q.waiting)
			q.mu.Unlock()
			q.inst.depth(now, depth)
			q.inst.waited(now, w.since)
			return key, nil
		}
		var zero K
		if q.closed && len(q.waiting) == 0 {
			q.mu.Unlock()
			return zero, ErrClosed
		}
		if q.ready == nil {
			q.ready = make(chan struct{})
		}
		ready := q.ready
		q.mu.Unlock()
		select {
		case <-ready:
		case <-ctx.Done():
			return zero, ctx.Err()
		}
	}
}

// nextLocked picks the lane to serve: fresh first, within the burst bound.
func (q *PatchQueue[K]) nextLocked() (K, waiter, bool) {
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
func (q *PatchQueue[K]) Done(key K) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.held, key)
	if w, ok := q.waiting[key]; ok && !w.queued {
		w.queued = true
		q.waiting[key] = w
		q.pushLocked(key, w)
	}
}

// Room returns a channel closed once lane has at least free slots free,
// or the queue is closed.
func (q *PatchQueue[K]) Room(l Lane, free int) <-chan struct{} {
	l = min(l, LanePass)
	q.mu.Lock()
	defer q.mu.Unlock()
	r := room{lane: l, free: free, ch: make(chan struct{})}
	q.rooms = append(q.rooms, r)
	q.wakeRoomsLocked()
	return r.ch
}

func (q *PatchQueue[K]) wakeRoomsLocked() {
	n := 0
	for _, r := range q.rooms {
		if q.closed || q.capacity-q.lanes[r.lane].count >= r.free {
			close(r.ch)
			continue
		}
		q.rooms[n] = r
		n++
	}
	clear(q.rooms[n:])
	q.rooms = q.rooms[:n]
}

// Close refuses producers from now on; consumers drain what waits.
func (q *PatchQueue[K]) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		q.wakeGettersLocked()
		q.wakeRoomsLocked()
	}
}

// Cap returns the capacity of each lane.
func (q *PatchQueue[K]) Cap() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.capacity
}

// SetCapacity changes the capacity of each lane; keys beyond it stay and
// only new ones are refused.
func (q *PatchQueue[K]) SetCapacity(n int) error {
	if n < 1 {
		return errors.New("statuspatch: capacity must be >= 1")
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.capacity = n
	q.wakeRoomsLocked()
	return nil
}

// Stats returns the queue's counters.
func (q *PatchQueue[K]) Stats() QueueStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.stats
	s.Depth, s.Held = len(q.waiting), len(q.held)
	s.Fresh = q.lanes[LaneFresh].count - q.lanes[LaneFresh].reserved
	s.Reserved = q.lanes[LaneFresh].reserved + q.lanes[LanePass].reserved
	return s
}

// now reads the clock for the instruments, which need it.
func (q *PatchQueue[K]) now() time.Time {
	if q.inst == nil {
		return time.Time{}
	}
	return q.inst.clock.Now()
}
