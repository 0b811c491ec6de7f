package pipeline

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
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

// newFixedFlight is a flight with a fixed limit of n.
func newFixedFlight(n int) *flight { return newFlight(newControl(limT0, false, n)) }

// begin starts a call under epoch (a serve holding a slot first, as the
// dispatcher does).
func begin(t *testing.T, f *flight, epoch int64) *call {
	t.Helper()
	if err := f.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	c, reason := f.begin(types.NamespacedName{Name: "k"}, epoch, limT0, false)
	if reason != "" {
		t.Fatalf("begin(%d): reason %q", epoch, reason)
	}
	return c
}

// finish ends c, answered or not.
func finish(f *flight, c *call, answered bool) {
	var err error
	if !answered {
		err = context.DeadlineExceeded
	}
	f.end(c, limT0, time.Millisecond, err, outcome.Of(err), "")
}

// openWindow opens the window err asks for at now, as the end of a call
// answered with err does.
func openWindow(f *flight, now time.Time, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.openWindowLocked(now, err)
}

// claimIs is what the fence is told the current claim is.
func claimIs(c leader.Claim, ours bool) func() (leader.Claim, bool) {
	return func() (leader.Claim, bool) { return c, ours }
}

// At most the limit's serves hold a slot; acquire waits for one to end
// and returns ctx's error when ctx ends first.
func TestFlightSlots(t *testing.T) {
	f := newFixedFlight(2)
	bg := context.Background()
	for range 2 {
		if err := f.acquire(bg); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
	defer cancel()
	if err := f.acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a third acquire with two slots held: %v, want the deadline", err)
	}
	res := make(chan error, 1)
	go func() { res <- f.acquire(bg) }()
	pollUntil(t, "the waiter", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.changed != nil })
	select {
	case err := <-res:
		t.Fatalf("acquire returned %v with every slot held", err)
	default:
	}
	f.release()
	select {
	case err := <-res:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not given the slot released")
	}
	if f.serving != 2 {
		t.Errorf("%d serving, want 2", f.serving)
	}
}

// A call begins only under the newest epoch seen, and its ctx ends when
// that epoch's claim ends.
func TestFlightEpochs(t *testing.T) {
	t.Run("an older epoch is refused; a newer one ends the older calls", func(t *testing.T) {
		f := newFixedFlight(10)
		c1 := begin(t, f, 1)
		c2 := begin(t, f, 2)
		if c1.ec.ctx.Err() == nil {
			t.Error("the epoch 1 call's ctx is not cancelled by a call under epoch 2")
		}
		if c2.ec.ctx.Err() != nil {
			t.Error("the epoch 2 call's ctx is cancelled")
		}
		if _, reason := f.begin(types.NamespacedName{}, 1, limT0, false); reason != dropStaleEpoch {
			t.Errorf("begin(1) after epoch 2: reason %q, want %q", reason, dropStaleEpoch)
		}
		begin(t, f, 2)
	})
	for _, tc := range []struct {
		label     string
		claim     leader.Claim
		ours      bool
		wantEnded bool
	}{
		{"ours, same epoch: nothing ends", leader.Claim{Holder: "me", Epoch: 5}, true, false},
		{"not ours", leader.Claim{Holder: "other", Epoch: 5}, false, true},
		{"ours, another epoch", leader.Claim{Holder: "me", Epoch: 6}, true, true},
		{"nobody's", leader.Claim{}, false, true},
	} {
		t.Run("observe: "+tc.label, func(t *testing.T) {
			f := newFixedFlight(10)
			c := begin(t, f, 5)
			f.observe(claimIs(tc.claim, tc.ours))
			if ended := c.ec.ctx.Err() != nil; ended != tc.wantEnded {
				t.Errorf("call ctx ended: %v, want %v", ended, tc.wantEnded)
			}
			_, reason := f.begin(types.NamespacedName{}, 5, limT0, false)
			if want := map[bool]string{true: dropNotLeader}[tc.wantEnded]; reason != want {
				t.Errorf("begin(5) after observe: reason %q, want %q", reason, want)
			}
			// A newer epoch (a claim regained) begins afresh.
			if c6 := begin(t, f, 6); c6.ec.ctx.Err() != nil {
				t.Error("a call of the next epoch has an ended ctx")
			}
		})
	}
	t.Run("observe before any call ends nothing", func(t *testing.T) {
		f := newFixedFlight(10)
		f.observe(claimIs(leader.Claim{}, false))
		begin(t, f, 1)
	})
	t.Run("in flight, and the oldest call", func(t *testing.T) {
		f := newFixedFlight(10)
		c1 := begin(t, f, 1)
		if err := f.acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
		f.begin(types.NamespacedName{Name: "b"}, 1, limT0.Add(time.Second), false)
		if s, oldest := f.statsAt(limT0); s.InFlight != 2 || !oldest.Equal(limT0) {
			t.Errorf("state: %d in flight, oldest %v; want 2, %v", s.InFlight, oldest, limT0)
		}
		finish(f, c1, true)
		if s, oldest := f.statsAt(limT0); s.InFlight != 1 || !oldest.Equal(limT0.Add(time.Second)) {
			t.Errorf("state after an end: %d in flight, oldest %v", s.InFlight, oldest)
		}
	})
}

// quiesce stops new calls under an epoch, waits for the calls in flight,
// and reports whether every call under it got an answer.
func TestFlightQuiesce(t *testing.T) {
	answered, unanswered := true, false
	bg := context.Background()
	quiesced := func(f *flight) bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.epoch != nil && f.epoch.quiesced
	}
	quiesceAsync := func(ctx context.Context, f *flight, epoch int64) <-chan bool {
		ch := make(chan bool, 1)
		go func() { ch <- f.quiesce(ctx, epoch) }()
		return ch
	}
	stillWaiting := func(t *testing.T, ch <-chan bool) {
		t.Helper()
		select {
		case got := <-ch:
			t.Fatalf("quiesce returned %v with a call in flight", got)
		default:
		}
	}
	wantResult := func(t *testing.T, ch <-chan bool, want bool) {
		t.Helper()
		select {
		case got := <-ch:
			if got != want {
				t.Fatalf("quiesce = %v, want %v", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("quiesce still waiting")
		}
	}

	t.Run("waits for the call in flight, lets it run, every call answered", func(t *testing.T) {
		f := newFixedFlight(10)
		finish(f, begin(t, f, 1), answered)
		c := begin(t, f, 1)
		res := quiesceAsync(bg, f, 1)
		pollUntil(t, "quiesce to begin", func() bool { return quiesced(f) })
		if _, reason := f.begin(types.NamespacedName{}, 1, limT0, false); reason != dropReleased {
			t.Errorf("begin while quiescing: reason %q, want %q", reason, dropReleased)
		}
		stillWaiting(t, res)
		if c.ec.ctx.Err() != nil {
			t.Error("quiesce cancelled the call in flight")
		}
		finish(f, c, answered)
		wantResult(t, res, true)
	})
	t.Run("a call ended without an answer", func(t *testing.T) {
		f := newFixedFlight(10)
		finish(f, begin(t, f, 1), unanswered)
		finish(f, begin(t, f, 1), answered)
		wantResult(t, quiesceAsync(bg, f, 1), false)
	})
	t.Run("ctx ends with a call in flight", func(t *testing.T) {
		f := newFixedFlight(10)
		c := begin(t, f, 1)
		ctx, cancel := context.WithCancel(bg)
		res := quiesceAsync(ctx, f, 1)
		pollUntil(t, "quiesce to begin", func() bool { return quiesced(f) })
		cancel()
		wantResult(t, res, false)
		finish(f, c, answered)
	})
	t.Run("an epoch older than the newest", func(t *testing.T) {
		f := newFixedFlight(10)
		finish(f, begin(t, f, 2), answered)
		wantResult(t, quiesceAsync(bg, f, 1), false)
	})
	t.Run("a newer epoch: no call may start under it, the older calls are waited for", func(t *testing.T) {
		f := newFixedFlight(10)
		c := begin(t, f, 1)
		res := quiesceAsync(bg, f, 2)
		pollUntil(t, "quiesce to begin", func() bool { return quiesced(f) })
		if c.ec.ctx.Err() == nil {
			t.Error("the epoch 1 call's ctx is not cancelled by quiescing epoch 2")
		}
		if _, reason := f.begin(types.NamespacedName{}, 2, limT0, false); reason != dropReleased {
			t.Errorf("begin(2) while quiescing epoch 2: reason %q, want %q", reason, dropReleased)
		}
		stillWaiting(t, res)
		finish(f, c, answered)
		wantResult(t, res, true)
	})
	t.Run("a newer epoch begins while quiescing: not every call of the epoch quiesced was answered", func(t *testing.T) {
		f := newFixedFlight(10)
		c1 := begin(t, f, 1)
		res := quiesceAsync(bg, f, 1)
		pollUntil(t, "quiesce to begin", func() bool { return quiesced(f) })
		c2 := begin(t, f, 2)
		finish(f, c1, unanswered)
		finish(f, c2, answered)
		wantResult(t, res, false)
	})
	t.Run("no call ever", func(t *testing.T) {
		wantResult(t, quiesceAsync(bg, newFixedFlight(10), 1), true)
	})
}

// A 429 with Retry-After opens a window no call starts in; it is counted
// once, and a shorter one inside it changes nothing.
func TestFlightWindow(t *testing.T) {
	f := newFixedFlight(1)
	openWindow(f, limT0, apierrors.NewTooManyRequests("slow down", 2))
	openWindow(f, limT0.Add(500*time.Millisecond), apierrors.NewTooManyRequests("slow down", 1)) // ends earlier
	openWindow(f, limT0, apierrors.NewConflict(schema.GroupResource{}, "x", errors.New("changed")))
	for _, tc := range []struct {
		after time.Duration
		left  time.Duration
	}{{0, 2 * time.Second}, {500 * time.Millisecond, 1500 * time.Millisecond}, {1999 * time.Millisecond, time.Millisecond}, {2 * time.Second, 0}, {time.Hour, 0}} {
		if s, _ := f.statsAt(limT0.Add(tc.after)); s.Backoff != tc.left || s.RetryAfters != 1 {
			t.Errorf("at +%v: %v left, %d windows; want %v, 1", tc.after, s.Backoff, s.RetryAfters, tc.left)
		}
	}
	openWindow(f, limT0.Add(time.Second), apierrors.NewTooManyRequests("slow down", 3)) // ends later
	if s, _ := f.statsAt(limT0.Add(time.Second)); s.Backoff != 3*time.Second || s.RetryAfters != 2 {
		t.Errorf("after a longer window: %v left, %d windows; want 3s, 2", s.Backoff, s.RetryAfters)
	}
}

// The dispatcher's waitWindow returns once the window is over: waiters
// inside it wait on the clock, and one whose window moves later meanwhile
// waits for the new end.
func TestWindowWait(t *testing.T) {
	r := newDrig(t)
	clk, bg := r.clock, context.Background()
	if err := r.d.waitWindow(bg); err != nil {
		t.Fatalf("wait with no window: %v", err)
	}
	openWindow(r.d.flight, clk.Now(), apierrors.NewTooManyRequests("x", 1))
	res := make(chan error, 2)
	for range 2 {
		go func() { res <- r.d.waitWindow(bg) }()
	}
	pollUntil(t, "the waiters' timers", func() bool { return clk.Waiters() == 2 })
	clk.Step(500 * time.Millisecond)
	openWindow(r.d.flight, clk.Now(), apierrors.NewTooManyRequests("x", 1)) // now until +1.5s
	clk.Step(500 * time.Millisecond)                                        // the first window's end
	pollUntil(t, "the waiters waiting for the moved window", func() bool { return clk.Waiters() == 2 })
	select {
	case err := <-res:
		t.Fatalf("a waiter returned %v at +1s, inside the moved window", err)
	default:
	}
	clk.Step(500 * time.Millisecond)
	for range 2 {
		select {
		case err := <-res:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter still waits after the window")
		}
	}
	openWindow(r.d.flight, clk.Now(), apierrors.NewTooManyRequests("x", 1))
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if err := r.d.waitWindow(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("wait with ctx done inside a window: %v", err)
	}
}

func TestRetryAfterErrors(t *testing.T) {
	for _, tc := range []struct {
		label string
		err   error
		want  time.Duration
	}{
		{"nil", nil, 0},
		{"429 with Retry-After", apierrors.NewTooManyRequests("x", 2), 2 * time.Second},
		{"429 without", apierrors.NewTooManyRequests("x", 0), 0},
		{"wrapped 429", fmt.Errorf("patch: %w", apierrors.NewTooManyRequests("x", 3)), 3 * time.Second},
		{"server timeout with Retry-After: not throttled", apierrors.NewServerTimeout(schema.GroupResource{}, "patch", 4), 0},
		{"conflict", apierrors.NewConflict(schema.GroupResource{}, "x", errors.New("changed")), 0},
	} {
		t.Run(tc.label, func(t *testing.T) {
			got, ok := retryAfter(tc.err)
			if got != tc.want || ok != (tc.want > 0) {
				t.Errorf("retryAfter = %v, %v; want %v", got, ok, tc.want)
			}
		})
	}
}
