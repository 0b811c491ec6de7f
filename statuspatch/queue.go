package statuspatch

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"k8s.io/utils/clock"
)

// ErrFull is returned by [PatchQueue.Reserve] and [PatchQueue.TrySend] when
// every slot of the queue is taken (by waiting items and outstanding
// permits), and by [PatchQueue.Send] never: Send waits instead.
var ErrFull = errors.New("statuspatch: queue is full")

// ErrClosed is returned by every producer method once [PatchQueue.Close] has
// been called, and by [PatchQueue.Receive] once the queue is closed and
// drained.
var ErrClosed = errors.New("statuspatch: queue is closed")

// ErrInvalidPermit is returned by [Permit.Send] on a zero Permit or on a
// permit that was already sent or released.
var ErrInvalidPermit = errors.New("statuspatch: permit is invalid or already used")

// DefaultQueueName is the value of the "queue" attribute on the queue's
// instruments when [QueueConfig.Name] is empty.
const DefaultQueueName = "statuspatch"

// DefaultDepthTau is the Peak-EWMA time constant of the depth gauge when
// [QueueConfig.DepthTau] is zero.
const DefaultDepthTau = 10 * time.Second

// maxQueueCapacity bounds QueueConfig.Capacity: slots are addressed by
// int32 indices.
const maxQueueCapacity = math.MaxInt32

// QueueConfig configures a [PatchQueue]. Only Capacity is required; every
// other field has a documented default for its zero value.
type QueueConfig[T any] struct {
	// Capacity is the number of slots: items waiting plus outstanding
	// permits never exceed it. Items in flight (received, not yet Done)
	// do not hold a slot. Required, 1 ≤ Capacity ≤ 2³¹−1.
	//
	// Size it to hold what the consumer can apply in one reconcile
	// interval: interval / per-patch latency, where the latency includes
	// the client's own rate limit. Memory grows with use up to Capacity
	// slots, never beyond.
	Capacity int

	// Key returns the coalescing key of an item, typically
	// "namespace/name" of the object the patch is for. Optional. When set,
	// the queue coalesces (a newer item for a key already waiting replaces
	// it in place) and keeps keys exclusive (at most one item per key in
	// flight). When nil, every item is independent: no coalescing, no
	// exclusivity. Key is called once per producer call, outside the
	// queue's lock; it must not call back into the queue and must be
	// deterministic.
	Key func(T) string

	// MaxAge, when positive, is how long an item may wait: an item whose
	// Enqueued time is more than MaxAge before the moment it would be
	// delivered is dropped instead (counted as dropped, reason "expired").
	// A coalesced item's age counts from its latest value. Zero means
	// items never expire. Must be ≥ 0.
	MaxAge time.Duration

	// Name is the value of the "queue" attribute on every instrument, to
	// tell several queues apart. Default [DefaultQueueName].
	Name string

	// Meter creates the queue's instruments (see the package
	// documentation for the table). A nil Meter, or a
	// go.opentelemetry.io/otel/metric/noop Meter, turns measurement off
	// entirely: no instruments are created and no clock is read for
	// measurement on the hot path.
	Meter metric.Meter

	// Clock is the source of Enqueued times, MaxAge expiry and the depth
	// gauge. Default: the real clock (see [Item.Enqueued] for how it is
	// read). Tests inject k8s.io/utils/clock/testing fakes.
	Clock clock.PassiveClock

	// DepthTau is the time constant of the depth Peak-EWMA gauge
	// (statuspatch.queue.depth.peak_ewma). Zero means [DefaultDepthTau];
	// negative is rejected. Choose it at least as long as the metrics
	// collection interval.
	DepthTau time.Duration
}

// QueueStats are the queue's own counters since construction, the same
// numbers its instruments report (see the package documentation for the
// invariant they satisfy). They are kept whether or not a Meter is set.
type QueueStats struct {
	// Enqueued counts items accepted by a send, including those that
	// replaced a waiting item of the same key.
	Enqueued int64
	// Dequeued counts items delivered by Receive or TryReceive.
	Dequeued int64
	// Superseded counts waiting items replaced by a newer one of the same
	// key.
	Superseded int64
	// DroppedFull counts rejections because the queue was full: Reserve
	// and TrySend returning ErrFull, and Send giving up when its context
	// ended while the queue was full. Never enqueued.
	DroppedFull int64
	// DroppedClosed counts rejections because the queue was closed:
	// producer calls returning ErrClosed (including Permit.Send after
	// Close). Never enqueued.
	DroppedClosed int64
	// DroppedExpired counts items dropped at dequeue because they were
	// older than MaxAge. These were enqueued.
	DroppedExpired int64
	// Depth is the number of items waiting (Len).
	Depth int
	// InFlight is the number of items received and not yet Done.
	InFlight int
	// Reserved is the number of outstanding permits.
	Reserved int
}

// An Item is what [PatchQueue.Receive] delivers: the value and when it was
// enqueued. Pass it back to [PatchQueue.Done] when processing ends. Items
// are plain values; copying one is fine.
type Item[T any] struct {
	// Value is the latest value sent for the item's key (or the item
	// itself when the queue has no Key function).
	Value T

	// Enqueued is when Value was sent: for a coalesced item, the time of
	// the latest replacement. It is read from QueueConfig.Clock and kept
	// as an offset from the queue's construction time. With the real
	// clock that costs one monotonic clock read per send (time.Now reads
	// two clocks), and Enqueued carries a monotonic reading, so
	// time.Since(Enqueued) is exact; its wall-clock reading is the
	// construction time's plus the monotonic time elapsed, which differs
	// from time.Now by any step of the wall clock since.
	Enqueued time.Time

	key string
	ref int32  // index of the flight record + 1; 0 in the zero Item
	gen uint32 // the flight record's delivery generation
}

// Key returns the item's coalescing key, or "" when the queue has no Key
// function.
func (it Item[T]) Key() string { return it.key }

// A Permit is a reservation of one slot of a [PatchQueue], obtained from
// [PatchQueue.Reserve] before the caller spends work building the item.
//
// Exactly one of [Permit.Send] or [Permit.Release] must be called on it.
// The second and later uses are harmless: Send returns [ErrInvalidPermit]
// and enqueues nothing, Release does nothing. A permit that is neither sent
// nor released holds its slot for the life of the queue, shrinking its
// effective capacity by one; after [PatchQueue.Close] that no longer
// matters, as no producer can enqueue anything. The zero Permit is invalid.
//
// A Permit is a small value; copies refer to the same reservation, and
// the reservation is used up by the first Send or Release through any copy.
type Permit[T any] struct {
	q    *PatchQueue[T]
	slot int32
	gen  uint32
}

// PatchQueue is a bounded FIFO queue of patches (or anything else) with
// reservation, per-key coalescing and per-key exclusivity, built for a
// producer that must never block and must never grow memory without bound.
//
// Bound. Waiting items plus outstanding permits never exceed Capacity. An
// item leaves its slot when it is delivered; items in flight do not count.
//
// Producers. [PatchQueue.Reserve] takes a slot before the item exists, so a
// caller can find out that the queue is full before building a patch;
// [Permit.Send] fills it. [PatchQueue.TrySend] is Reserve and Send in one.
// Neither ever blocks. [PatchQueue.Send] is the blocking variant: it waits
// for a slot until its context ends.
//
// Coalescing (with a Key function). A send whose key has an item waiting
// replaces that item's value in place: the item keeps its place in line,
// takes no extra slot, and the replaced value is counted as superseded. This
// works even when the queue is full, so TrySend of a key already waiting
// never fails with ErrFull; a permit used this way gives its slot back.
//
// Exclusivity (with a Key function). While an item of a key is in flight,
// a newer item of that key waits (and coalesces) but is not delivered: the
// consumers skip it and take the next eligible item, so distinct keys stay
// in FIFO order. It becomes eligible, in its original place in line, when
// [PatchQueue.Done] is called for the item in flight. A consumer that never
// calls Done blocks its key for good.
//
// Expiry. With MaxAge set, an item older than MaxAge when a consumer would
// take it is dropped instead. Expired items are found by the consumers'
// scan, so Len may count some until a consumer passes them.
//
// Close. After [PatchQueue.Close], producers get [ErrClosed]; consumers
// keep receiving what is left (including items still waiting for their
// key's Done), then get ErrClosed.
//
// Goroutine safety. All methods are safe for concurrent use by any number
// of producers and consumers. A successful send happens before the Receive
// that delivers it; Done of an item happens before the delivery of the next
// item of its key.
//
// Memory. Slots grow with use up to Capacity and are reused. With a Key
// function the queue keeps a small record per key that is waiting or in
// flight, plus up to Capacity records (and their key strings) of keys that
// went idle, so that a key coming back at the next reconcile pass costs a
// map lookup rather than an insert and a delete; the oldest idle record is
// evicted beyond that. Nothing else grows.
//
// Cost. One mutex acquisition per call, one monotonic clock read per send,
// and no allocation in steady state; Receive skips, at most, one waiting
// item per key in flight. With a meter, the instruments add the depth
// Peak-EWMA update and nothing else: the counters are read at collection
// time. BenchmarkQueue compares it with a buffered channel and client-go's
// workqueue, with and without metrics; docs/performance.md has the figures.
//
// Build one with [NewPatchQueue]; the zero PatchQueue is not usable.
type PatchQueue[T any] struct {
	// Immutable after construction, but for capacity (guarded by mu).
	capacity int
	key      func(T) string
	maxAge   time.Duration
	clk      clock.PassiveClock // nil: the real clock, read as base + monotonic time since
	base     time.Time          // clock reading at construction; times are kept as offsets from it
	idleMax  int                // bound on idle flight records kept for reuse
	m        queueMetrics

	notEmpty chan struct{} // wake-up token for a waiting consumer (buffer 1)
	notFull  chan struct{} // wake-up token for a waiting producer (buffer 1)
	closedCh chan struct{} // closed by Close

	mu       sync.Mutex
	closed   bool
	count    int // items waiting
	eligible int // items waiting whose key is not in flight
	reserved int // outstanding permits
	inFlight int
	recvWait int // consumers blocked in Receive
	sendWait int // producers blocked in Send

	// Waiting items: a doubly linked list in FIFO order over nodes, with a
	// free list through next. -1 is the null index.
	nodes      []queueNode[T]
	head, tail int32
	freeNode   int32

	// Flight records: per key (with a Key function) while the key has an
	// item waiting or in flight; per delivered item (without one). Free
	// list through nextFree.
	flights    []queueFlight
	freeFlight int32
	byKey      map[string]int32

	// Idle flight records (with a Key function): keys with nothing waiting
	// and nothing in flight, kept in the map so that a key that comes
	// back (as every key does at the next reconcile pass) costs a map
	// lookup instead of an insert and a delete. A list in the order they
	// went idle; beyond idleMax the oldest is evicted.
	idleHead, idleTail int32
	idleCount          int

	permits    []queuePermitSlot
	freePermit int32

	// room, when not nil, is closed once roomN slots are free or the
	// queue is closed (roomSignal).
	room  chan struct{}
	roomN int

	stats QueueStats
}

type queueNode[T any] struct {
	value      T
	enq        int64 // enqueue time, nanoseconds since PatchQueue.base
	key        string
	flight     int32 // flight record of the key, or -1 without a Key function
	prev, next int32
}

type queueFlight struct {
	key      string
	waiting  int32  // node of the item waiting for this key, or -1
	gen      uint32 // bumped at each delivery; Items carry it
	busy     bool   // an item of this key is in flight
	idle     bool   // on the idle list
	nextFree int32  // free list link; idle list: next
	idlePrev int32
	// replacers counts outstanding permits from ReserveKey that hold no
	// slot of their own: they were granted because an item of this key
	// was waiting. While replacers > 0 the record is neither idle nor
	// freed.
	replacers int32
	// spare: the record holds one reserved slot (counted in
	// PatchQueue.reserved) for its replacers, taken over from the waiting
	// item when that item left the queue while replacers > 0, so that
	// their Send still finds room.
	spare bool
}

type queuePermitSlot struct {
	gen      uint32
	active   bool
	nextFree int32
	flight   int32 // a replacer: the key's flight record; -1: holds a slot of its own
}

// NewPatchQueue returns an empty queue configured by cfg, or an error that
// names the first invalid field.
func NewPatchQueue[T any](cfg QueueConfig[T]) (*PatchQueue[T], error) {
	switch {
	case cfg.Capacity <= 0:
		return nil, configErr("QueueConfig", "Capacity", "must be > 0, got %d", cfg.Capacity)
	case cfg.Capacity > maxQueueCapacity:
		return nil, configErr("QueueConfig", "Capacity", "must be <= %d, got %d", maxQueueCapacity, cfg.Capacity)
	case cfg.MaxAge < 0:
		return nil, configErr("QueueConfig", "MaxAge", "must be >= 0, got %v", cfg.MaxAge)
	case cfg.DepthTau < 0:
		return nil, configErr("QueueConfig", "DepthTau", "must be >= 0, got %v", cfg.DepthTau)
	}
	q := &PatchQueue[T]{
		capacity:   cfg.Capacity,
		key:        cfg.Key,
		maxAge:     cfg.MaxAge,
		clk:        cfg.Clock,
		notEmpty:   make(chan struct{}, 1),
		notFull:    make(chan struct{}, 1),
		closedCh:   make(chan struct{}),
		head:       -1,
		tail:       -1,
		freeNode:   -1,
		freeFlight: -1,
		freePermit: -1,
		idleHead:   -1,
		idleTail:   -1,
		idleMax:    cfg.Capacity,
	}
	if _, isReal := q.clk.(clock.RealClock); isReal {
		q.clk = nil // read the real clock the cheap way
	}
	if q.clk == nil {
		q.base = time.Now()
	} else {
		q.base = q.clk.Now()
	}
	if q.key != nil {
		q.byKey = make(map[string]int32, min(cfg.Capacity, 1024))
	}
	mcfg := queueMetricsConfig{meter: cfg.Meter, name: cfg.Name, tau: cfg.DepthTau}
	if err := q.m.init(&mcfg, q.clk, func() (QueueStats, int) { return q.Stats(), q.Cap() }); err != nil {
		return nil, configErr("QueueConfig", "Meter", "%v", err)
	}
	return q, nil
}

// now reads the queue's clock, as nanoseconds since base. The real clock
// costs one monotonic clock read (time.Since), where time.Now reads both
// the wall and the monotonic clocks.
func (q *PatchQueue[T]) now() int64 {
	if q.clk == nil {
		return int64(time.Since(q.base))
	}
	return int64(q.clk.Now().Sub(q.base))
}

// timeAt turns an offset from now back into a time.
func (q *PatchQueue[T]) timeAt(ns int64) time.Time {
	return q.base.Add(time.Duration(ns))
}

// Reserve takes one slot for an item the caller is about to build, without
// blocking. It returns [ErrClosed] after Close and [ErrFull] when all
// slots are taken; both are counted as drops (reasons "closed" and "full")
// because the item that would have been built is not enqueued. See
// [Permit] for what the caller owes in return.
func (q *PatchQueue[T]) Reserve() (Permit[T], error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		q.dropLocked(queueDropClosed)
		return Permit[T]{}, ErrClosed
	}
	if q.count+q.reserved >= q.capacity {
		q.dropLocked(queueDropFull)
		return Permit[T]{}, ErrFull
	}
	i := q.allocPermitLocked()
	s := &q.permits[i]
	s.flight = -1
	q.reserved++
	return Permit[T]{q: q, slot: i, gen: s.gen}, nil
}

// ReserveKey is [PatchQueue.Reserve] for an item whose key the caller
// already knows. If an item of key is waiting, the permit needs no free
// slot: it is granted even when the queue is full, and its [Permit.Send]
// replaces the waiting item (superseded) — or, if a consumer took that
// item in the meantime, enqueues the new item in the slot the taken item
// left, which the queue keeps for the permit. So a producer that computes
// a newer value for a waiting key is never refused for lack of room, and
// the latest value wins. Otherwise ReserveKey is Reserve: it takes a free
// slot or fails with [ErrFull] or [ErrClosed], counting the drop.
//
// Without a Key function ReserveKey is Reserve. The item later sent
// through the permit must have key as its key; if it has another,
// Send treats it as a new item that needs a free slot.
func (q *PatchQueue[T]) ReserveKey(key string) (Permit[T], error) {
	if q.key == nil {
		return q.Reserve()
	}
	q.mu.Lock()
	fi, ok := q.byKey[key]
	if q.closed || !ok || (q.flights[fi].waiting < 0 && !q.flights[fi].spare) {
		q.mu.Unlock()
		return q.Reserve()
	}
	defer q.mu.Unlock()
	f := &q.flights[fi]
	f.replacers++
	i := q.allocPermitLocked()
	s := &q.permits[i]
	s.flight = fi
	return Permit[T]{q: q, slot: i, gen: s.gen}, nil
}

// allocPermitLocked returns an active permit slot, flight unset.
func (q *PatchQueue[T]) allocPermitLocked() int32 {
	i := q.freePermit
	if i >= 0 {
		q.freePermit = q.permits[i].nextFree
	} else {
		q.permits = append(q.permits, queuePermitSlot{})
		i = int32(len(q.permits) - 1)
	}
	s := &q.permits[i]
	s.active = true
	s.nextFree = -1
	return i
}

// Waiting returns the value of the item of key waiting in the queue, and
// whether there is one. An item in flight is not waiting. Without a Key
// function it always reports false.
func (q *PatchQueue[T]) Waiting(key string) (T, bool) {
	var zero T
	if q.key == nil {
		return zero, false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	fi, ok := q.byKey[key]
	if !ok || q.flights[fi].waiting < 0 {
		return zero, false
	}
	return q.nodes[q.flights[fi].waiting].value, true
}

// takeLocked ends the reservation p and reports whether it was valid. For
// a replacer (a permit of ReserveKey holding no slot) it returns the key's
// flight record, whose replacers count the caller must settle with
// settleReplacerLocked; otherwise -1, and the permit's slot is given back
// to the free count.
func (p Permit[T]) takeLocked() (fi int32, ok bool) {
	q := p.q
	if p.slot < 0 || int(p.slot) >= len(q.permits) {
		return -1, false
	}
	s := &q.permits[p.slot]
	if !s.active || s.gen != p.gen {
		return -1, false
	}
	s.active = false
	s.gen++
	s.nextFree = q.freePermit
	q.freePermit = p.slot
	fi = s.flight
	if fi < 0 {
		q.reserved--
	} else {
		q.flights[fi].replacers--
	}
	return fi, true
}

// settleReplacerLocked tidies the flight record fi after one of its
// replacers was used: once none is left, a spare slot goes back to the free
// count and a record with nothing waiting or in flight goes idle.
func (q *PatchQueue[T]) settleReplacerLocked(fi int32) {
	f := &q.flights[fi]
	if f.replacers > 0 {
		return
	}
	if f.spare {
		f.spare = false
		q.reserved--
		q.wakeSendLocked()
	}
	if f.waiting < 0 && !f.busy && !f.idle {
		q.idleLocked(fi)
	}
}

// leftLocked is called when the waiting item of flight record fi left the
// queue (delivered or expired): if replacers still count on that item, the
// record keeps its slot for them.
func (q *PatchQueue[T]) leftLocked(fi int32) {
	f := &q.flights[fi]
	if f.replacers > 0 && !f.spare {
		f.spare = true
		q.reserved++
	}
}

// Send enqueues item into the reserved slot. If the item's key already has
// an item waiting, that item's value is replaced in place (superseded) and
// the reserved slot is given back. If the queue was closed since Reserve,
// Send gives the slot back, counts the item as dropped (reason "closed")
// and returns [ErrClosed]. On a zero, sent or released permit it returns
// [ErrInvalidPermit] and does nothing else. A permit of
// [PatchQueue.ReserveKey] granted without a free slot fails with [ErrFull]
// only if the item's key is not the key it was reserved for.
func (p Permit[T]) Send(item T) error {
	q := p.q
	if q == nil {
		return ErrInvalidPermit
	}
	var key string
	if q.key != nil {
		key = q.key(item)
	}
	now := q.now()
	q.mu.Lock()
	fi, ok := p.takeLocked()
	if !ok {
		q.mu.Unlock()
		return ErrInvalidPermit
	}
	err := q.sendPermitLocked(item, key, fi, now)
	if fi >= 0 {
		q.settleReplacerLocked(fi)
	}
	q.mu.Unlock()
	return err
}

// sendPermitLocked enqueues item for a permit just taken: rfi is the
// flight record of a replacer, or -1 for a permit that held a slot (now
// back in the free count).
func (q *PatchQueue[T]) sendPermitLocked(item T, key string, rfi int32, now int64) error {
	if q.closed {
		q.dropLocked(queueDropClosed)
		return ErrClosed
	}
	fi, done := q.coalesceLocked(item, key, now)
	if done {
		q.wakeSendLocked()
		return nil
	}
	switch {
	case rfi < 0:
		// The permit's slot was given back by takeLocked: it becomes the
		// item's, count+reserved is as before.
	case rfi == fi && q.flights[fi].spare:
		// The key's waiting item left; the slot it held was kept for us.
		q.flights[fi].spare = false
		q.reserved--
	case q.count+q.reserved >= q.capacity:
		// A replacer sent with another key than it reserved.
		q.dropLocked(queueDropFull)
		return ErrFull
	}
	q.insertLocked(item, key, fi, now)
	return nil
}

// Release gives the reserved slot back without sending anything, for
// example because the patch turned out to be unnecessary. Nothing is
// counted. Release of a zero, sent or released permit does nothing.
func (p Permit[T]) Release() {
	q := p.q
	if q == nil {
		return
	}
	q.mu.Lock()
	if fi, ok := p.takeLocked(); ok {
		if fi >= 0 {
			q.settleReplacerLocked(fi)
		} else {
			q.wakeSendLocked()
		}
	}
	q.mu.Unlock()
}

// TrySend enqueues item without blocking: Reserve and [Permit.Send] in one
// step. An item whose key is already waiting replaces it even when the
// queue is full. Otherwise it returns [ErrFull] when no slot is free and
// [ErrClosed] after Close, counting the drop.
func (q *PatchQueue[T]) TrySend(item T) error {
	var key string
	if q.key != nil {
		key = q.key(item)
	}
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		q.dropLocked(queueDropClosed)
		return ErrClosed
	}
	fi, done := q.coalesceLocked(item, key, now)
	if done {
		return nil
	}
	if q.count+q.reserved >= q.capacity {
		q.dropLocked(queueDropFull)
		return ErrFull
	}
	q.insertLocked(item, key, fi, now)
	return nil
}

// Send enqueues item, waiting for a free slot if needed. It returns nil
// once the item is enqueued (or has replaced a waiting item of its key),
// [ErrClosed] if the queue is or becomes closed first, and ctx.Err() if ctx
// ends first while the queue is full (counted as dropped, reason "full").
// When a slot is free or the key is waiting, Send succeeds even if ctx is
// already done. A nil ctx means context.Background().
func (q *PatchQueue[T]) Send(ctx context.Context, item T) error {
	if ctx == nil {
		ctx = context.Background()
	}
	var key string
	if q.key != nil {
		key = q.key(item)
	}
	now := q.now()
	q.mu.Lock()
	for {
		if q.closed {
			q.dropLocked(queueDropClosed)
			q.mu.Unlock()
			return ErrClosed
		}
		fi, done := q.coalesceLocked(item, key, now)
		if done {
			q.mu.Unlock()
			return nil
		}
		if q.count+q.reserved < q.capacity {
			q.insertLocked(item, key, fi, now)
			if q.count+q.reserved < q.capacity {
				// Pass the wake-up on: there may be room for
				// another waiting producer.
				q.wakeSendLocked()
			}
			q.mu.Unlock()
			return nil
		}
		if err := ctx.Err(); err != nil {
			q.dropLocked(queueDropFull)
			q.mu.Unlock()
			return err
		}
		q.sendWait++
		q.mu.Unlock()
		select {
		case <-q.notFull:
		case <-ctx.Done():
		case <-q.closedCh:
		}
		now = q.now()
		q.mu.Lock()
		q.sendWait--
	}
}

// coalesceLocked replaces the waiting item of key, if any, and reports
// done. Otherwise it returns the key's flight record (or -1) for
// insertLocked, sparing a second map lookup.
func (q *PatchQueue[T]) coalesceLocked(item T, key string, now int64) (fi int32, done bool) {
	if q.key == nil {
		return -1, false
	}
	fi, ok := q.byKey[key]
	if !ok {
		return -1, false
	}
	w := q.flights[fi].waiting
	if w < 0 {
		return fi, false
	}
	n := &q.nodes[w]
	n.value = item
	n.enq = now
	q.stats.Enqueued++
	q.stats.Superseded++
	return fi, true
}

// insertLocked appends item at the tail. The caller has checked for room
// (or holds a permit for it). fi is the key's flight record from
// coalesceLocked, or -1 if the key has none yet.
func (q *PatchQueue[T]) insertLocked(item T, key string, fi int32, now int64) {
	if q.key != nil {
		if fi < 0 {
			fi = q.allocFlightLocked()
			q.flights[fi].key = key
			q.byKey[key] = fi
		} else if q.flights[fi].idle {
			q.unidleLocked(fi)
		}
	}
	ni := q.freeNode
	if ni >= 0 {
		q.freeNode = q.nodes[ni].next
	} else {
		q.nodes = append(q.nodes, queueNode[T]{})
		ni = int32(len(q.nodes) - 1)
	}
	n := &q.nodes[ni]
	n.value = item
	n.enq = now
	n.key = key
	n.flight = fi
	n.prev = q.tail
	n.next = -1
	if q.tail >= 0 {
		q.nodes[q.tail].next = ni
	} else {
		q.head = ni
	}
	q.tail = ni
	q.count++
	q.stats.Enqueued++
	blocked := false
	if fi >= 0 {
		f := &q.flights[fi]
		f.waiting = ni
		blocked = f.busy
	}
	if !blocked {
		q.eligible++
		q.wakeRecvLocked()
	}
	if q.m.on {
		q.m.depthChanged(q.timeAt(now), q.count)
	}
}

// allocFlightLocked returns a fresh flight record, not busy, nothing
// waiting.
func (q *PatchQueue[T]) allocFlightLocked() int32 {
	fi := q.freeFlight
	if fi >= 0 {
		q.freeFlight = q.flights[fi].nextFree
	} else {
		q.flights = append(q.flights, queueFlight{})
		fi = int32(len(q.flights) - 1)
	}
	f := &q.flights[fi]
	f.waiting = -1
	f.busy = false
	f.idle = false
	f.nextFree = -1
	f.idlePrev = -1
	f.replacers = 0
	f.spare = false
	return fi
}

func (q *PatchQueue[T]) freeFlightLocked(fi int32) {
	f := &q.flights[fi]
	f.key = ""
	f.waiting = -1
	f.busy = false
	f.idle = false
	f.idlePrev = -1
	f.nextFree = q.freeFlight
	q.freeFlight = fi
}

// idleLocked puts the keyed flight record fi, now with nothing waiting
// and nothing in flight, on the idle list, evicting the oldest idle record
// beyond idleMax.
func (q *PatchQueue[T]) idleLocked(fi int32) {
	f := &q.flights[fi]
	f.idle = true
	f.nextFree = -1
	f.idlePrev = q.idleTail
	if q.idleTail >= 0 {
		q.flights[q.idleTail].nextFree = fi
	} else {
		q.idleHead = fi
	}
	q.idleTail = fi
	q.idleCount++
	if q.idleCount > q.idleMax {
		old := q.idleHead
		q.unidleLocked(old)
		delete(q.byKey, q.flights[old].key)
		q.freeFlightLocked(old)
	}
}

// unidleLocked takes flight record fi off the idle list.
func (q *PatchQueue[T]) unidleLocked(fi int32) {
	f := &q.flights[fi]
	if f.idlePrev >= 0 {
		q.flights[f.idlePrev].nextFree = f.nextFree
	} else {
		q.idleHead = f.nextFree
	}
	if f.nextFree >= 0 {
		q.flights[f.nextFree].idlePrev = f.idlePrev
	} else {
		q.idleTail = f.idlePrev
	}
	f.idle = false
	f.nextFree = -1
	f.idlePrev = -1
	q.idleCount--
}

// unlinkLocked removes node ni from the waiting list and frees it,
// releasing its references. It does not touch the counters.
func (q *PatchQueue[T]) unlinkLocked(ni int32) {
	n := &q.nodes[ni]
	if n.prev >= 0 {
		q.nodes[n.prev].next = n.next
	} else {
		q.head = n.next
	}
	if n.next >= 0 {
		q.nodes[n.next].prev = n.prev
	} else {
		q.tail = n.prev
	}
	var zero T
	n.value = zero
	n.key = ""
	n.prev = -1
	n.next = q.freeNode
	q.freeNode = ni
}

// dequeueLocked delivers the first eligible item that has not expired.
// When no item is eligible it looks at nothing. Otherwise it scans from the
// head, dropping every expired item it passes (eligible or held back by its
// key), up to the first eligible item that has not expired; if there is
// none, it has scanned (and expired) the whole queue.
func (q *PatchQueue[T]) dequeueLocked(it *Item[T]) bool {
	if q.eligible == 0 {
		return false
	}
	var now int64
	if q.maxAge > 0 || q.m.on {
		now = q.now()
	}
	for ni := q.head; ni >= 0; {
		n := &q.nodes[ni]
		next := n.next
		blocked := n.flight >= 0 && q.flights[n.flight].busy
		if q.maxAge > 0 && now-n.enq > int64(q.maxAge) {
			q.expireLocked(ni, blocked, now)
			ni = next
			continue
		}
		if blocked {
			ni = next
			continue
		}
		it.Value, it.Enqueued, it.key = n.value, q.timeAt(n.enq), n.key
		fi := n.flight
		if fi < 0 {
			fi = q.allocFlightLocked()
		}
		f := &q.flights[fi]
		f.waiting = -1
		f.busy = true
		f.gen++
		q.leftLocked(fi)
		it.ref, it.gen = fi+1, f.gen
		q.unlinkLocked(ni)
		q.count--
		q.eligible--
		q.inFlight++
		q.stats.Dequeued++
		if q.m.on {
			q.m.depthChanged(q.timeAt(now), q.count)
		}
		q.afterRemovalLocked()
		if q.eligible > 0 {
			// Pass the wake-up on to another waiting consumer.
			q.wakeRecvLocked()
		}
		return true
	}
	return false
}

// expireLocked drops the waiting node ni because it is older than MaxAge.
func (q *PatchQueue[T]) expireLocked(ni int32, blocked bool, now int64) {
	n := &q.nodes[ni]
	if fi := n.flight; fi >= 0 {
		f := &q.flights[fi]
		f.waiting = -1
		q.leftLocked(fi)
		if !f.busy && f.replacers == 0 {
			q.idleLocked(fi)
		}
	}
	q.unlinkLocked(ni)
	q.count--
	if !blocked {
		q.eligible--
	}
	q.stats.DroppedExpired++
	if q.m.on {
		q.m.depthChanged(q.timeAt(now), q.count)
	}
	q.afterRemovalLocked()
}

// afterRemovalLocked wakes whoever a removal of a waiting item concerns: a
// producer waiting for a slot, and, once a closed queue is empty, the
// consumers waiting to learn that.
func (q *PatchQueue[T]) afterRemovalLocked() {
	q.wakeSendLocked()
	if q.closed && q.count == 0 {
		q.wakeRecvLocked()
	}
}

func (q *PatchQueue[T]) wakeRecvLocked() {
	if q.recvWait > 0 {
		select {
		case q.notEmpty <- struct{}{}:
		default:
		}
	}
}

func (q *PatchQueue[T]) wakeSendLocked() {
	q.signalRoomLocked()
	if q.sendWait > 0 {
		select {
		case q.notFull <- struct{}{}:
		default:
		}
	}
}

// Receive delivers the next eligible item: the first in FIFO order whose
// key is not in flight, dropping expired items it passes. It blocks until
// there is one, ctx ends (ctx.Err()), or the queue is closed and drained
// ([ErrClosed]). When an item is ready, Receive returns it even if ctx is
// already done. The item holds no slot from here on; call [PatchQueue.Done]
// with it when processing ends. A nil ctx means context.Background().
//
// After Close, Receive still waits for items held back by a key in flight
// (until that key's Done), so a drain does not lose them.
func (q *PatchQueue[T]) Receive(ctx context.Context) (Item[T], error) {
	if ctx == nil {
		ctx = context.Background()
	}
	var it Item[T]
	q.mu.Lock()
	for {
		if q.dequeueLocked(&it) {
			q.mu.Unlock()
			return it, nil
		}
		if q.closed && q.count == 0 {
			// Pass the news on to another waiting consumer.
			q.wakeRecvLocked()
			q.mu.Unlock()
			return Item[T]{}, ErrClosed
		}
		if err := ctx.Err(); err != nil {
			q.mu.Unlock()
			return Item[T]{}, err
		}
		// Once closed, only a Done (making an item eligible) or the
		// last removal can change the answer: wait for a token.
		closedCh := q.closedCh
		if q.closed {
			closedCh = nil
		}
		q.recvWait++
		q.mu.Unlock()
		select {
		case <-q.notEmpty:
		case <-ctx.Done():
		case <-closedCh:
		}
		q.mu.Lock()
		q.recvWait--
	}
}

// TryReceive is the non-blocking Receive: it returns (item, true, nil) if an
// item was delivered, (zero, false, nil) if none is eligible now, and
// (zero, false, ErrClosed) once the queue is closed and drained.
func (q *PatchQueue[T]) TryReceive() (Item[T], bool, error) {
	var it Item[T]
	q.mu.Lock()
	ok := q.dequeueLocked(&it)
	closed := q.closed && q.count == 0
	q.mu.Unlock()
	if ok {
		return it, true, nil
	}
	if closed {
		return Item[T]{}, false, ErrClosed
	}
	return Item[T]{}, false, nil
}

// Done marks a delivered item as processed. With a Key function, this lets
// the next item of its key be delivered. Done of the zero Item, of an item
// already Done, or of an item from another queue does nothing (the last
// is detected on a best-effort basis only: don't).
func (q *PatchQueue[T]) Done(it Item[T]) {
	if it.ref <= 0 {
		return
	}
	fi := it.ref - 1
	q.mu.Lock()
	defer q.mu.Unlock()
	if int(fi) >= len(q.flights) {
		return
	}
	f := &q.flights[fi]
	if !f.busy || f.gen != it.gen {
		return
	}
	f.busy = false
	q.inFlight--
	if f.waiting >= 0 {
		// The key's next item, held back until now, is eligible.
		q.eligible++
		q.wakeRecvLocked()
		return
	}
	if q.key != nil {
		if f.replacers == 0 {
			q.idleLocked(fi)
		}
		return
	}
	q.freeFlightLocked(fi)
}

// Close closes the queue. Producers then get [ErrClosed] (including the
// holders of outstanding permits, at Send); consumers receive what is left,
// then ErrClosed. The observable gauges (capacity, depth Peak-EWMA) are
// unregistered. Close is idempotent and never blocks on consumers.
func (q *PatchQueue[T]) Close() {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.closed = true
	close(q.closedCh)
	if q.count == 0 {
		q.wakeRecvLocked()
	}
	q.signalRoomLocked()
	q.mu.Unlock()
	q.m.unregister()
}

// roomSignal returns a channel that is closed once at least n slots are
// free — at once if they are now — or the queue is closed. The queue keeps
// one such signal: a new call closes the previous one's channel. When the
// capacity changes while it waits, n scales with it: the signal waits for
// the same share of the queue. The
// reconciler waits on it to resume a pass halted on a full queue. Every
// change that may free a slot wakes a blocked producer (wakeSendLocked),
// which checks the signal too.
func (q *PatchQueue[T]) roomSignal(n int) <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.room != nil {
		close(q.room)
	}
	ch := make(chan struct{})
	q.room, q.roomN = ch, n
	q.signalRoomLocked()
	return ch
}

func (q *PatchQueue[T]) signalRoomLocked() {
	if q.room != nil && (q.closed || q.capacity-q.count-q.reserved >= q.roomN) {
		close(q.room)
		q.room = nil
	}
}

// Len returns the number of items waiting, not counting items in flight
// or reserved slots. Expired items count until a consumer passes them.
func (q *PatchQueue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.count
}

// free returns the number of slots neither waiting nor reserved.
func (q *PatchQueue[T]) free() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return max(q.capacity-q.count-q.reserved, 0)
}

// appendWaitingKeys appends the keys of the items waiting, in FIFO order.
func (q *PatchQueue[T]) appendWaitingKeys(dst []string) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	for ni := q.head; ni >= 0; ni = q.nodes[ni].next {
		dst = append(dst, q.nodes[ni].key)
	}
	return dst
}

// Cap returns the queue's capacity, QueueConfig.Capacity.
func (q *PatchQueue[T]) Cap() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.capacity
}

// SetCapacity changes the capacity to n, 1 ≤ n ≤ 2³¹−1: for example to
// follow what the consumer drains in a reconcile interval. Growing lets
// waiting producers in at once. Shrinking below what is waiting and
// reserved removes nothing: producers are refused until enough has been
// received. Memory already allocated for slots is kept.
func (q *PatchQueue[T]) SetCapacity(n int) error {
	if n <= 0 || n > maxQueueCapacity {
		return configErr("PatchQueue", "SetCapacity", "n must be between 1 and %d, got %d", maxQueueCapacity, n)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.room != nil {
		// The signal waits for the same share of the queue.
		q.roomN = max(1, int(int64(q.roomN)*int64(n)/int64(q.capacity)))
	}
	q.capacity = n
	q.idleMax = n
	q.wakeSendLocked()
	return nil
}

// InFlight returns the number of items delivered and not yet Done.
func (q *PatchQueue[T]) InFlight() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.inFlight
}

// Stats returns a consistent snapshot of the queue's counters.
func (q *PatchQueue[T]) Stats() QueueStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.stats
	s.Depth = q.count
	s.InFlight = q.inFlight
	s.Reserved = q.reserved
	return s
}

// Closed reports whether Close has been called.
func (q *PatchQueue[T]) Closed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

// QueueDropReason says why a [PatchQueue] dropped an item: the values of
// the reason attribute of quietpatch.queue.dropped, and the fields of
// [QueueStats] that count them.
type QueueDropReason string

// Queue drop reasons.
const (
	// QueueDropFull: a send or reservation refused because every slot was
	// taken (QueueStats.DroppedFull). Never enqueued.
	QueueDropFull QueueDropReason = "full"
	// QueueDropClosed: a send or reservation refused because the queue was
	// closed (QueueStats.DroppedClosed). Never enqueued.
	QueueDropClosed QueueDropReason = "closed"
	// QueueDropExpired: an item enqueued, then dropped at dequeue because
	// it had waited longer than QueueConfig.MaxAge
	// (QueueStats.DroppedExpired).
	QueueDropExpired QueueDropReason = "expired"
)

type queueDropReason int

const (
	queueDropFull queueDropReason = iota
	queueDropClosed
	queueDropExpired
)

// dropLocked counts a rejection (full or closed).
func (q *PatchQueue[T]) dropLocked(r queueDropReason) {
	switch r {
	case queueDropFull:
		q.stats.DroppedFull++
	case queueDropClosed:
		q.stats.DroppedClosed++
	}
}
