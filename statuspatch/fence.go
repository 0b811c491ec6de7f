package statuspatch

import (
	"context"
	"sync"
	"time"

	"github.com/quietpatch/quietpatch/leader"
)

// fence scopes patch calls to the claim they were made under. A call
// begins only under the newest epoch seen and while that epoch is neither
// ended nor quiesced; its context ends the moment the epoch's claim ends
// involuntarily (observe, or a newer epoch); quiesce stops new calls
// under an epoch given up on purpose and waits for those in flight. The
// zero fence has seen no epoch; it is safe for concurrent use.
type fence struct {
	mu     sync.Mutex
	cur    *epochCalls     // the newest epoch seen; nil before any
	since  map[int64]int64 // call id → unix nanos it began, for Healthy
	nextID int64
	idle   chan struct{} // closed and replaced when a call ends; nil until a quiesce waits
}

// epochCalls are the calls of one epoch: their contexts' parent, cancelled
// when the claim ends involuntarily.
type epochCalls struct {
	epoch      int64
	ctx        context.Context
	cancel     context.CancelFunc
	ended      bool // the claim ended involuntarily: ctx is cancelled
	quiesced   bool // given up on purpose: no new call
	unanswered bool // a call under this epoch ended without an answer
}

// call is one patch call begun under the fence.
type call struct {
	ec *epochCalls
	id int64
}

// beginAt starts a call under epoch at now, or says why it may not be made.
func (f *fence) beginAt(epoch int64, now time.Time) (call, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.cur == nil || epoch > f.cur.epoch:
		f.advanceLocked(epoch)
	case epoch < f.cur.epoch:
		return call{}, dropStaleEpoch
	}
	switch {
	case f.cur.quiesced:
		return call{}, dropReleased
	case f.cur.ended:
		return call{}, dropNotLeader
	}
	if f.since == nil {
		f.since = map[int64]int64{}
	}
	f.nextID++
	f.since[f.nextID] = now.UnixNano()
	return call{ec: f.cur, id: f.nextID}, ""
}

// advanceLocked makes epoch the newest, ending the older one.
func (f *fence) advanceLocked(epoch int64) {
	if f.cur != nil {
		f.cur.ended = true
		f.cur.cancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cur = &epochCalls{epoch: epoch, ctx: ctx, cancel: cancel}
}

// end ends c, answered or not, and returns how many calls were in flight
// just before.
func (f *fence) end(c call, answered bool) (inFlight int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	inFlight = len(f.since)
	delete(f.since, c.id)
	if !answered {
		c.ec.unanswered = true
	}
	if f.idle != nil {
		close(f.idle)
		f.idle = nil
	}
	return inFlight
}

// observe ends the newest epoch's calls when its claim is over: the claim
// current returns now is not ours, or of another epoch. The claim is read
// under the lock, so that a call begun under a fresher claim than a
// lagging notification carried is not ended by it.
func (f *fence) observe(current func() (leader.Claim, bool)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ours := current()
	if f.cur != nil && !f.cur.ended && (!ours || c.Epoch != f.cur.epoch) {
		f.cur.ended = true
		f.cur.cancel()
	}
}

// quiesce stops new calls under epoch and waits for every call in flight;
// it reports whether every call under epoch got an answer.
func (f *fence) quiesce(ctx context.Context, epoch int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.cur == nil || epoch > f.cur.epoch:
		f.advanceLocked(epoch) // no call was made under epoch; none may start
	case epoch < f.cur.epoch:
		return false // calls were made under a newer epoch
	}
	ec := f.cur
	ec.quiesced = true
	for len(f.since) > 0 {
		if f.idle == nil {
			f.idle = make(chan struct{})
		}
		idle := f.idle
		f.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
		}
		f.mu.Lock()
		if ctx.Err() != nil && len(f.since) > 0 {
			return false
		}
	}
	// A newer epoch seen meanwhile made calls under a newer epoch, as above.
	return f.cur == ec && !ec.unanswered
}

// state returns the calls in flight and when the oldest began (unix
// nanos, 0 without any).
func (f *fence) state() (inFlight int, oldest int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range f.since {
		if oldest == 0 || t < oldest {
			oldest = t
		}
	}
	return len(f.since), oldest
}
