package pipeline

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// pollUntil polls cond until it holds, failing after a deadline.
func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func newGate(n int) *gate {
	g := &gate{}
	g.setSize(n)
	return g
}

// tryAcquire takes a permit only if one is free and nobody waits: acquire
// with a context that has ended.
func (g *gate) tryAcquire() bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return g.acquire(ctx) == nil
}

func (g *gate) waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.waiters)
}

func (g *gate) permitsHeld() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

// acquirer runs acquire(ctx) in a goroutine; its result arrives on the
// channel returned.
func acquirer(g *gate, ctx context.Context) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- g.acquire(ctx) }()
	return ch
}

// queueAcquirers starts acquirers one after the other, each once the
// previous one waits in line, and returns their results in arrival order.
func queueAcquirers(t *testing.T, g *gate, ctxs ...context.Context) []<-chan error {
	t.Helper()
	var res []<-chan error
	for _, ctx := range ctxs {
		before := g.waiting()
		res = append(res, acquirer(g, ctx))
		pollUntil(t, fmt.Sprintf("waiter %d in line", len(res)), func() bool { return g.waiting() == before+1 })
	}
	return res
}

// wantGranted checks which of the acquirers returned: only those in
// granted, with a nil error.
func wantGranted(t *testing.T, res []<-chan error, granted ...int) {
	t.Helper()
	for _, i := range granted {
		select {
		case err := <-res[i]:
			if err != nil {
				t.Fatalf("acquirer %d: %v", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("acquirer %d not granted", i)
		}
	}
	for i, ch := range res {
		select {
		case err := <-ch:
			t.Fatalf("acquirer %d returned %v out of turn (want only %v)", i, err, granted)
		default:
		}
	}
}

func TestGateSize(t *testing.T) {
	g := newGate(7)
	held := 0
	for g.tryAcquire() {
		held++
	}
	if held != 7 {
		t.Fatalf("a gate of 7 admitted %d", held)
	}
	res := queueAcquirers(t, g, context.Background(), context.Background())
	g.setSize(8) // grown: the first waiter in
	wantGranted(t, res, 0)
	g.setSize(2) // shrunk: releases below the size only
	for range 6 {
		g.release()
	}
	wantGranted(t, res[1:])
	g.release()
	wantGranted(t, res[1:], 0)
	if g.permitsHeld() != 2 {
		t.Errorf("%d permits held, want 2", g.permitsHeld())
	}
}

// Waiters are served in arrival order, one per permit released, and a
// newcomer does not pass them (tryAcquire refuses while they wait).
func TestGateFIFOWaiters(t *testing.T) {
	g := newGate(1)
	if !g.tryAcquire() {
		t.Fatal("no first permit")
	}
	bg := context.Background()
	res := queueAcquirers(t, g, bg, bg, bg)
	for i := range res {
		g.release()
		wantGranted(t, res[i:], 0)
		if g.tryAcquire() {
			t.Fatalf("after release %d: tryAcquire took the permit granted to waiter %d", i, i)
		}
	}
	if g.waiting() != 0 || g.permitsHeld() != 1 {
		t.Fatalf("%d waiting, %d held; want 0 and 1", g.waiting(), g.permitsHeld())
	}
	g.release()
	if !g.tryAcquire() {
		t.Fatal("no permit once the line is empty")
	}
}

// A waiter whose ctx ends leaves the line; the others keep their order.
func TestGateWaiterLeaves(t *testing.T) {
	g := newGate(1)
	if !g.tryAcquire() {
		t.Fatal("no first permit")
	}
	bg := context.Background()
	ctx, cancel := context.WithCancel(bg)
	res := queueAcquirers(t, g, bg, ctx, bg)
	cancel()
	wantCancelled(t, res[1])
	pollUntil(t, "the cancelled waiter out of line", func() bool { return g.waiting() == 2 })
	res = []<-chan error{res[0], res[2]}
	g.release()
	wantGranted(t, res, 0)
	g.release()
	wantGranted(t, res[1:], 0)
	if g.permitsHeld() != 1 {
		t.Fatalf("%d permits held, want 1", g.permitsHeld())
	}
}

// A waiter whose ctx ends at the moment a permit is granted to it gives
// the permit back, to the next waiter: here it is granted while the waiter,
// woken by its ctx, waits for the gate's lock.
func TestGateCancelledWaiterGivesGrantBack(t *testing.T) {
	g := newGate(1)
	if !g.tryAcquire() {
		t.Fatal("no first permit")
	}
	ctx, cancel := context.WithCancel(context.Background())
	res := queueAcquirers(t, g, ctx, context.Background())
	g.mu.Lock()
	cancel()
	pollUntil(t, "the cancelled waiter blocked on the gate's lock", func() bool {
		return goroutineBlocked("sync.Mutex.Lock", "(*gate).acquire")
	})
	g.held-- // release(), under the lock already held
	g.grantLocked()
	g.mu.Unlock()
	wantCancelled(t, res[0])
	wantGranted(t, res[1:], 0)
	if g.waiting() != 0 || g.permitsHeld() != 1 {
		t.Fatalf("%d waiting, %d held; want 0 and 1 (the permit went to the second waiter)", g.waiting(), g.permitsHeld())
	}
}

// wantCancelled checks that the acquirer returned context.Canceled.
func wantCancelled(t *testing.T, res <-chan error) {
	t.Helper()
	select {
	case err := <-res:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled waiter: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancelled waiter still waiting")
	}
}

// goroutineBlocked reports whether a goroutine is blocked in state with
// fn on its stack.
func goroutineBlocked(state, fn string) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		if strings.Contains(header, "["+state) && strings.Contains(g, fn) {
			return true
		}
	}
	return false
}
