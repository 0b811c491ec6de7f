package pipeline

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
)

// A 429 with Retry-After opens a window no call starts in; it is counted
// once, and a shorter one inside it changes nothing.
func TestWindowLeft(t *testing.T) {
	var w window
	w.extendAt(limT0, apierrors.NewTooManyRequests("slow down", 2))
	w.extendAt(limT0.Add(500*time.Millisecond), apierrors.NewTooManyRequests("slow down", 1)) // ends earlier
	w.extendAt(limT0, apierrors.NewConflict(schema.GroupResource{}, "x", errors.New("changed")))
	for _, tc := range []struct {
		after time.Duration
		left  time.Duration
	}{{0, 2 * time.Second}, {500 * time.Millisecond, 1500 * time.Millisecond}, {1999 * time.Millisecond, time.Millisecond}, {2 * time.Second, 0}, {time.Hour, 0}} {
		if left, opened := w.leftAt(limT0.Add(tc.after)); left != tc.left || opened != 1 {
			t.Errorf("leftAt(+%v) = %v, %d windows; want %v, 1", tc.after, left, opened, tc.left)
		}
	}
	w.extendAt(limT0.Add(time.Second), apierrors.NewTooManyRequests("slow down", 3)) // ends later
	if left, opened := w.leftAt(limT0.Add(time.Second)); left != 3*time.Second || opened != 2 {
		t.Errorf("after a longer window: %v left, %d windows; want 3s, 2", left, opened)
	}
}

// wait returns once the window is over: waiters inside it wait on the
// clock, and one whose window moves later meanwhile waits for the new end.
func TestWindowWait(t *testing.T) {
	clk := clocktesting.NewFakeClock(limT0)
	var w window
	if err := w.wait(context.Background(), clk); err != nil {
		t.Fatalf("wait with no window: %v", err)
	}
	w.extendAt(clk.Now(), apierrors.NewTooManyRequests("x", 1))
	res := make(chan error, 2)
	for range 2 {
		go func() { res <- w.wait(context.Background(), clk) }()
	}
	pollUntil(t, "the waiters' timers", func() bool { return clk.Waiters() == 2 })
	clk.Step(500 * time.Millisecond)
	w.extendAt(clk.Now(), apierrors.NewTooManyRequests("x", 1)) // now until +1.5s
	clk.Step(500 * time.Millisecond)                            // the first window's end
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
	w.extendAt(clk.Now(), apierrors.NewTooManyRequests("x", 1))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.wait(ctx, clk); !errors.Is(err, context.Canceled) {
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
