package pipeline

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Once Run's context is done no read of the Source starts: the caller may
// stop the informers when it cancels (informers.Start(ctx.Done())).

// A pass begun with a done context lists nothing.
func TestPassWithADoneContextReadsNoSource(t *testing.T) {
	r := newRig(t, 10, changedObjs("a", "b"))
	r.lead(1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.rec.ReconcileAll(ctx); err == nil {
		t.Error("ReconcileAll with a done context: want its error")
	}
	if n := r.src.lists.Load(); n != 0 {
		t.Errorf("Source.List called %d times after the context was done, want 0", n)
	}
}

// A key taken just before the context ended gets nothing from the Source.
func TestServeWithADoneContextReadsNoSource(t *testing.T) {
	r := newDrig(t)
	r.lead(1)
	r.add(t, "a")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if reason, _ := r.d.send(ctx, nsKey("a")); reason != dropShutdown {
		t.Errorf("send with a done context: reason %q, want %q", reason, dropShutdown)
	}
	if n := r.src.gets.Load(); n != 0 {
		t.Errorf("Source.Get called %d times after the context was done, want 0", n)
	}
}

// A key waiting out a Retry-After window when the context ends is dropped
// without building its patch again.
func TestServeWaitingOutAWindowReadsNoSourceAfterTheContextEnds(t *testing.T) {
	r := newDrig(t)
	r.lead(1)
	r.add(t, "a")
	openWindow(r.d.flight, r.clock.Now(), apierrors.NewTooManyRequests("slow down", 1))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan string, 1)
	go func() {
		reason, _ := r.d.send(ctx, nsKey("a"))
		done <- reason
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !r.clock.HasWaiters() { // send waits on the window's timer
		if time.Now().After(deadline) {
			t.Fatal("send never waited for the Retry-After window")
		}
		time.Sleep(time.Millisecond)
	}
	gets := r.src.gets.Load()
	cancel()
	r.clock.Step(2 * time.Second) // the window ends as the context does
	if reason := <-done; reason != dropShutdown {
		t.Errorf("send: reason %q, want %q", reason, dropShutdown)
	}
	if n := r.src.gets.Load() - gets; n != 0 {
		t.Errorf("Source.Get called %d times after the context was done, want 0", n)
	}
}
