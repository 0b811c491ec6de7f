package queue

import (
	"context"
	"errors"
	"slices"
)

// A Permit is a slot of one lane reserved by [Queue.Reserve]: send a
// key into it or release it, once. Later uses do nothing (Send returns
// ErrClosed).
type Permit[K comparable] struct {
	q    *Queue[K]
	lane Lane
	used *bool
}

// Reserve takes a slot of lane l, or fails at once with ErrFull or
// ErrClosed.
func (q *Queue[K]) Reserve(l Lane) (Permit[K], error) { return q.reserve(l, true) }

// reserve is Reserve; a full lane is counted as a drop only when count.
func (q *Queue[K]) reserve(l Lane, count bool) (Permit[K], error) {
	l = min(l, LanePass)
	q.mu.Lock()
	defer q.mu.Unlock()
	if !count && !q.closed && q.lanes[l].count >= q.capacity {
		return Permit[K]{}, ErrFull
	}
	if err := q.admitLocked(l); err != nil {
		return Permit[K]{}, err
	}
	q.lanes[l].count++
	q.lanes[l].reserved++
	return Permit[K]{q: q, lane: l, used: new(bool)}, nil
}

// ReserveWait takes a slot of lane l, waiting for one while the lane is
// full: it fails with ErrClosed once the queue is closed, and with ctx's
// error (counted as dropped, full) when ctx ends first.
func (q *Queue[K]) ReserveWait(ctx context.Context, l Lane) (Permit[K], error) {
	for {
		p, err := q.reserve(l, false)
		if !errors.Is(err, ErrFull) {
			return p, err
		}
		room, forget := q.Room(l, 1)
		select {
		case <-room:
		case <-ctx.Done():
			forget()
			q.mu.Lock()
			q.stats.DroppedFull++
			q.mu.Unlock()
			return Permit[K]{}, ctx.Err()
		}
	}
}

// Send adds key to the permit's lane in the reserved slot; a key that
// waits already gives the slot back.
func (p Permit[K]) Send(key K) error {
	if p.q == nil {
		return ErrClosed
	}
	q := p.q
	q.mu.Lock()
	if *p.used {
		q.mu.Unlock()
		return ErrClosed
	}
	q.unreserveLocked(p)
	if q.closed {
		q.stats.DroppedClosed++
		q.mu.Unlock()
		return ErrClosed
	}
	q.insertLocked(key, p.lane)
	q.wakeRoomsLocked() // a key that waits already gave the slot back
	q.mu.Unlock()
	return nil
}

// Release gives the slot back.
func (p Permit[K]) Release() {
	if p.q == nil {
		return
	}
	p.q.mu.Lock()
	defer p.q.mu.Unlock()
	if !*p.used {
		p.q.unreserveLocked(p)
		p.q.wakeRoomsLocked()
	}
}

func (q *Queue[K]) unreserveLocked(p Permit[K]) {
	*p.used = true
	q.lanes[p.lane].count--
	q.lanes[p.lane].reserved--
}

// room is a waiter for free slots of a lane (Room).
type room struct {
	lane Lane
	free int
	ch   chan struct{}
}

// Room returns a channel closed once lane has at least free slots free,
// or the queue is closed, and a function that forgets it (a waiter that
// gives up calls it, so that the queue keeps no waiter it will not wake).
func (q *Queue[K]) Room(l Lane, free int) (<-chan struct{}, func()) {
	l = min(l, LanePass)
	q.mu.Lock()
	defer q.mu.Unlock()
	ch := make(chan struct{})
	q.rooms = append(q.rooms, room{lane: l, free: free, ch: ch})
	q.wakeRoomsLocked()
	return ch, func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		q.rooms = slices.DeleteFunc(q.rooms, func(r room) bool { return r.ch == ch })
	}
}

func (q *Queue[K]) wakeRoomsLocked() {
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
