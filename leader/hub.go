package leader

import (
	"sync"
	"sync/atomic"
)

// hub holds the latest Claim and fans changes out to subscribers without
// ever blocking the publisher.
//
// Each subscriber has a channel with a buffer of one. Publishing replaces a
// value the subscriber has not received yet (drain, then send), so the
// buffer always holds the newest claim and the send cannot block: only the
// publisher sends, under mu, and after the drain the buffer has room. A
// subscriber therefore sees claims in the order they were published, with
// the ones it was too slow for skipped, and always ends on the latest.
type hub struct {
	mu     sync.Mutex            // serialises publishers and subscribers
	latest atomic.Pointer[Claim] // written under mu, read without it (once per patch)
	subs   map[chan Claim]struct{}
}

func (h *hub) current() Claim {
	if c := h.latest.Load(); c != nil {
		return *c
	}
	return Claim{}
}

// publish records c and, when it differs from the previous claim, offers it
// to every subscriber. It reports whether c was a change.
func (h *hub) publish(c Claim) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c.Equal(h.current()) {
		return false
	}
	h.latest.Store(&c)
	for ch := range h.subs {
		select {
		case <-ch: // drop the stale claim the subscriber has not taken yet
		default:
		}
		ch <- c // cannot block: we are the only sender and the buffer has room
	}
	return true
}

func (h *hub) subscribe() (<-chan Claim, func()) {
	ch := make(chan Claim, 1)
	h.mu.Lock()
	if h.subs == nil {
		h.subs = make(map[chan Claim]struct{})
	}
	h.subs[ch] = struct{}{}
	ch <- h.current()
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := h.subs[ch]; ok {
			delete(h.subs, ch)
			close(ch)
		}
	}
}
