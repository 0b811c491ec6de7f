package statuspatch

import (
	"context"
	"slices"
	"sync"
)

// gate is a FIFO semaphore whose size is set while it runs, as
// rate.Limiter's is by SetLimit: at most size permits are held at once,
// and waiters are served in arrival order, a newcomer never passing them.
// The zero gate has size 0. It is safe for concurrent use.
type gate struct {
	mu      sync.Mutex
	size    int
	held    int
	waiters []chan struct{} // closed when granted
}

// acquire takes a permit, waiting behind the earlier waiters, or returns
// ctx's error. A permit free at once is taken even if ctx is done.
func (g *gate) acquire(ctx context.Context) error {
	g.mu.Lock()
	if len(g.waiters) == 0 && g.held < g.size {
		g.held++
		g.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	g.waiters = append(g.waiters, ch)
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-ch: // granted meanwhile: give it back
		g.held--
		g.grantLocked()
	default:
		g.waiters = slices.DeleteFunc(g.waiters, func(c chan struct{}) bool { return c == ch })
	}
	return ctx.Err()
}

// release gives a permit back.
func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held--
	g.grantLocked()
}

// setSize sets how many permits may be held at once; the waiters a larger
// size leaves room for are granted at once.
func (g *gate) setSize(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.size = n
	g.grantLocked()
}

// grantLocked hands permits to the waiters, in order, while there is room.
func (g *gate) grantLocked() {
	for len(g.waiters) > 0 && g.held < g.size {
		g.held++
		close(g.waiters[0])
		g.waiters = g.waiters[1:]
	}
}
