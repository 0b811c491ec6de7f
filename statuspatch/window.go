package statuspatch

import (
	"context"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"

	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// window is the Retry-After window of 429 answers: no call starts before
// its end. The zero window is closed; it is safe for concurrent use.
type window struct {
	mu     sync.Mutex
	until  time.Time
	opened int64 // windows honoured
}

// extendAt opens the window asked for by err, the answer to a call ended
// at now, unless one open already ends later.
func (w *window) extendAt(now time.Time, err error) {
	d, ok := retryAfter(err)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if until := now.Add(d); until.After(w.until) {
		w.until = until
		w.opened++
	}
}

// leftAt returns what is left of the window at now, and the windows
// honoured so far.
func (w *window) leftAt(now time.Time) (left time.Duration, opened int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return max(w.until.Sub(now), 0), w.opened
}

// wait returns once clk is outside the window — one that moved later
// meanwhile is waited out too — or with ctx's error.
func (w *window) wait(ctx context.Context, clk clock.Clock) error {
	for {
		left, _ := w.leftAt(clk.Now())
		if left <= 0 {
			return nil
		}
		t := clk.NewTimer(left)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// retryAfter returns the delay a throttled call's answer asks for: a 429
// carrying Retry-After.
func retryAfter(err error) (time.Duration, bool) {
	if err == nil || outcome.Of(err) != outcome.Throttled {
		return 0, false
	}
	secs, ok := apierrors.SuggestsClientDelay(err)
	if !ok || secs <= 0 {
		return 0, false
	}
	return time.Duration(secs) * time.Second, true
}
