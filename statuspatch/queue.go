package statuspatch

import (
	"context"
	"fmt"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/internal/queue"
	"k8s.io/utils/clock"
)

// Lane says how soon a key is served: fresh keys (events: an edit, an
// informer handler) before keys of periodic passes.
type Lane uint8

// The lanes of a [PatchQueue]; any other value counts as LanePass.
const (
	LaneFresh Lane = Lane(queue.LaneFresh)
	LanePass  Lane = Lane(queue.LanePass)
)

// Errors of a [PatchQueue].
var (
	// ErrFull is returned when a lane of a PatchQueue has no free slot.
	ErrFull = queue.ErrFull
	// ErrClosed is returned by producers once the queue is closed, and by
	// [PatchQueue.Get] once it is closed and drained.
	ErrClosed = queue.ErrClosed
)

// PatchQueue is a bounded queue of keys with client-go workqueue's rules: a
// key waits at most once (adding it again coalesces: no second slot,
// counted), at most one consumer holds a key at a time (between
// [PatchQueue.Get] and [PatchQueue.Done]), and a key added while held is
// served again after Done. It is the queue between quietpatch's passes and
// its dispatcher, usable on its own.
//
// Each [Lane] holds at most Cap keys, waiting or reserved. Get serves the
// fresh lane first, but never more than 8 fresh keys in a row while pass
// keys wait, so a pass key is served within 9 deliveries of reaching the
// head of its lane. A key added to the fresh lane while it waits in the
// pass lane moves there, room permitting.
//
// No producer blocks unless it asks to: [PatchQueue.Add] and
// [PatchQueue.Reserve] fail at once with [ErrFull] or [ErrClosed], counted
// as dropped; [PatchQueue.ReserveWait] waits for a slot at most until its
// context ends; a consumer waits in Get at most until its context ends. After [PatchQueue.Close]
// consumers drain what waits, then Get returns ErrClosed. The depth is
// recorded at every insertion and removal into a Peak-EWMA
// (QueueStats.DepthPeak, time constant 10 s). Build one with
// [NewPatchQueue]; all methods are safe for concurrent use.
type PatchQueue[K comparable] struct{ q *queue.Queue[K] }

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
	// DepthPeak is the Peak-EWMA of Depth now: it jumps to every peak and
	// decays with a time constant of 10 s.
	DepthPeak float64
}

// NewPatchQueue returns an empty queue whose lanes hold capacity keys
// each. A capacity below 1 is rejected with a *quietpatch.ConfigError.
func NewPatchQueue[K comparable](capacity int) (*PatchQueue[K], error) {
	if capacity < 1 {
		return nil, &base.ConfigError{Field: "capacity", Reason: fmt.Sprintf("must be >= 1, got %d", capacity)}
	}
	return &PatchQueue[K]{queue.New[K](capacity, clock.RealClock{})}, nil
}

// Add adds key to lane l at once, or fails with ErrFull or ErrClosed. A
// key that waits already needs no slot.
func (p *PatchQueue[K]) Add(key K, l Lane) error { return p.q.Add(key, queue.Lane(l)) }

// Reserve takes a slot of lane l, or fails at once with ErrFull or
// ErrClosed: a producer reserves before it builds an item, and builds
// nothing the queue cannot take.
func (p *PatchQueue[K]) Reserve(l Lane) (Permit[K], error) {
	r, err := p.q.Reserve(queue.Lane(l))
	return Permit[K]{r}, err
}

// ReserveWait is Reserve for a producer that would rather wait than drop:
// it takes a slot of lane l, waiting while the lane is full, and fails
// with ErrClosed once the queue is closed, or with ctx's error — counted as
// dropped (full) — when ctx ends first. Give ctx a deadline to bound the
// wait.
func (p *PatchQueue[K]) ReserveWait(ctx context.Context, l Lane) (Permit[K], error) {
	r, err := p.q.ReserveWait(ctx, queue.Lane(l))
	return Permit[K]{r}, err
}

// Get returns the next key, holding it until Done. It waits until a key is
// ready, the queue is closed and drained (ErrClosed), or ctx ends (its
// error); a ready key is returned even if ctx has ended.
func (p *PatchQueue[K]) Get(ctx context.Context) (K, error) { return p.q.Get(ctx) }

// Done ends the hold on key taken by Get; a key added meanwhile becomes
// ready.
func (p *PatchQueue[K]) Done(key K) { p.q.Done(key) }

// Close refuses producers from now on; consumers drain what waits.
func (p *PatchQueue[K]) Close() { p.q.Close() }

// Cap returns the capacity of each lane.
func (p *PatchQueue[K]) Cap() int { return p.q.Cap() }

// SetCapacity changes the capacity of each lane; keys beyond it stay and
// only new ones are refused. A capacity below 1 is rejected with a
// *quietpatch.ConfigError.
func (p *PatchQueue[K]) SetCapacity(n int) error {
	if n < 1 {
		return &base.ConfigError{Field: "capacity", Reason: fmt.Sprintf("must be >= 1, got %d", n)}
	}
	p.q.SetCapacity(n)
	return nil
}

// Stats returns the queue's counters.
func (p *PatchQueue[K]) Stats() QueueStats { return QueueStats(p.q.Stats()) }

// A Permit is a slot of one lane reserved by [PatchQueue.Reserve]: send a
// key into it or release it, once. Later uses do nothing (Send returns
// ErrClosed).
type Permit[K comparable] struct{ p queue.Permit[K] }

// Send adds key to the permit's lane in the reserved slot; a key that
// waits already gives the slot back.
func (p Permit[K]) Send(key K) error { return p.p.Send(key) }

// Release gives the slot back.
func (p Permit[K]) Release() { p.p.Release() }
