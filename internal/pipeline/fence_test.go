package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/quietpatch/quietpatch/leader"
)

func begin(t *testing.T, f *fence, epoch int64) call {
	t.Helper()
	c, reason := f.beginAt(epoch, limT0)
	if reason != "" {
		t.Fatalf("begin(%d): reason %q", epoch, reason)
	}
	return c
}

// claimIs is what the fence is told the current claim is.
func claimIs(c leader.Claim, ours bool) func() (leader.Claim, bool) {
	return func() (leader.Claim, bool) { return c, ours }
}

// A call begins only under the newest epoch seen, and its ctx ends when
// that epoch's claim ends.
func TestFenceEpochs(t *testing.T) {
	t.Run("an older epoch is refused; a newer one ends the older calls", func(t *testing.T) {
		var f fence
		c1 := begin(t, &f, 1)
		c2 := begin(t, &f, 2)
		if c1.ec.ctx.Err() == nil {
			t.Error("the epoch 1 call's ctx is not cancelled by a call under epoch 2")
		}
		if c2.ec.ctx.Err() != nil {
			t.Error("the epoch 2 call's ctx is cancelled")
		}
		if _, reason := f.beginAt(1, limT0); reason != dropStaleEpoch {
			t.Errorf("begin(1) after epoch 2: reason %q, want %q", reason, dropStaleEpoch)
		}
		begin(t, &f, 2)
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
			var f fence
			c := begin(t, &f, 5)
			f.observe(claimIs(tc.claim, tc.ours))
			if ended := c.ec.ctx.Err() != nil; ended != tc.wantEnded {
				t.Errorf("call ctx ended: %v, want %v", ended, tc.wantEnded)
			}
			_, reason := f.beginAt(5, limT0)
			if want := map[bool]string{true: dropNotLeader}[tc.wantEnded]; reason != want {
				t.Errorf("begin(5) after observe: reason %q, want %q", reason, want)
			}
			// A newer epoch (a claim regained) begins afresh.
			if c6 := begin(t, &f, 6); c6.ec.ctx.Err() != nil {
				t.Error("a call of the next epoch has an ended ctx")
			}
		})
	}
	t.Run("observe before any call ends nothing", func(t *testing.T) {
		var f fence
		f.observe(claimIs(leader.Claim{}, false))
		begin(t, &f, 1)
	})
	t.Run("in flight, and the oldest call", func(t *testing.T) {
		var f fence
		c1, _ := f.beginAt(1, limT0)
		f.beginAt(1, limT0.Add(time.Second))
		if n, oldest := f.state(); n != 2 || oldest != limT0.UnixNano() {
			t.Errorf("state() = %d, %d; want 2, %d", n, oldest, limT0.UnixNano())
		}
		if n := f.end(c1, true); n != 2 {
			t.Errorf("end returned %d in flight before, want 2", n)
		}
		if n, oldest := f.state(); n != 1 || oldest != limT0.Add(time.Second).UnixNano() {
			t.Errorf("state() after an end = %d, %d", n, oldest)
		}
	})
}

// quiesce stops new calls under an epoch, waits for the calls in flight,
// and reports whether every call under it got an answer.
func TestFenceQuiesce(t *testing.T) {
	answered, unanswered := true, false
	bg := context.Background()
	quiesced := func(f *fence) bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.cur != nil && f.cur.quiesced
	}
	quiesceAsync := func(ctx context.Context, f *fence, epoch int64) <-chan bool {
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
		var f fence
		f.end(begin(t, &f, 1), answered)
		c := begin(t, &f, 1)
		res := quiesceAsync(bg, &f, 1)
		pollUntil(t, "quiesce to begin", func() bool { return quiesced(&f) })
		if _, reason := f.beginAt(1, limT0); reason != dropReleased {
			t.Errorf("begin while quiescing: reason %q, want %q", reason, dropReleased)
		}
		stillWaiting(t, res)
		if c.ec.ctx.Err() != nil {
			t.Error("quiesce cancelled the call in flight")
		}
		f.end(c, answered)
		wantResult(t, res, true)
	})
	t.Run("a call ended without an answer", func(t *testing.T) {
		var f fence
		f.end(begin(t, &f, 1), unanswered)
		f.end(begin(t, &f, 1), answered)
		wantResult(t, quiesceAsync(bg, &f, 1), false)
	})
	t.Run("ctx ends with a call in flight", func(t *testing.T) {
		var f fence
		c := begin(t, &f, 1)
		ctx, cancel := context.WithCancel(bg)
		res := quiesceAsync(ctx, &f, 1)
		pollUntil(t, "quiesce to begin", func() bool { return quiesced(&f) })
		cancel()
		wantResult(t, res, false)
		f.end(c, answered)
	})
	t.Run("an epoch older than the newest", func(t *testing.T) {
		var f fence
		f.end(begin(t, &f, 2), answered)
		wantResult(t, quiesceAsync(bg, &f, 1), false)
	})
	t.Run("a newer epoch: no call may start under it, the older calls are waited for", func(t *testing.T) {
		var f fence
		c := begin(t, &f, 1)
		res := quiesceAsync(bg, &f, 2)
		pollUntil(t, "quiesce to begin", func() bool { return quiesced(&f) })
		if c.ec.ctx.Err() == nil {
			t.Error("the epoch 1 call's ctx is not cancelled by quiescing epoch 2")
		}
		if _, reason := f.beginAt(2, limT0); reason != dropReleased {
			t.Errorf("begin(2) while quiescing epoch 2: reason %q, want %q", reason, dropReleased)
		}
		stillWaiting(t, res)
		f.end(c, answered)
		wantResult(t, res, true)
	})
	t.Run("a newer epoch begins while quiescing: not every call of the epoch quiesced was answered", func(t *testing.T) {
		var f fence
		c1 := begin(t, &f, 1)
		res := quiesceAsync(bg, &f, 1)
		pollUntil(t, "quiesce to begin", func() bool { return quiesced(&f) })
		c2 := begin(t, &f, 2)
		f.end(c1, unanswered)
		f.end(c2, answered)
		wantResult(t, res, false)
	})
	t.Run("no call ever", func(t *testing.T) {
		var f fence
		wantResult(t, quiesceAsync(bg, &f, 1), true)
	})
}
