package leader

import (
	"context"
	"fmt"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
)

// watchTimeoutSeconds asks the API server to end each watch after this
// long; the watch is then re-established at once. It bounds the life of
// the one long-running request the claimer makes.
const watchTimeoutSeconds = 5 * 60

// watchState is the latest event the watch goroutine saw about our Lease,
// under Claimer.mu, fresh until the loop has taken it. The loop only
// learns that something changed; it re-reads the Lease with a GET before
// acting, so a watch event that lags behind our own writes can never make
// us believe we lost the lease.
type watchState struct {
	last  watchEvent
	fresh bool // last is not taken yet
}

type watchEvent struct {
	deleted bool
	key     leaseKey
}

// takeWatchEvent returns the latest watch event if the loop has not taken
// it yet.
func (c *Claimer) takeWatchEvent() (watchEvent, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fresh := c.watch.fresh
	c.watch.fresh = false
	return c.watch.last, fresh
}

func (c *Claimer) noteWatchEvent(deleted bool, key leaseKey) {
	c.mu.Lock()
	c.watch.last, c.watch.fresh = watchEvent{deleted: deleted, key: key}, true
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default: // a kick is pending already; the loop will read the latest event
	}
}

// watchLease watches the Lease until ctx is done, re-establishing the watch
// whenever it ends: at once after a watch that lasted at least RetryPeriod
// (the server ends each after watchTimeoutSeconds), otherwise — it failed
// or ended early — after RetryPeriod, so a misbehaving server or proxy
// cannot turn this into a busy loop. Meanwhile the loop re-reads the Lease
// every RetryPeriod instead.
//
// The watch asks for no resourceVersion, so the server starts it with the
// Lease's current state; the field selector limits it to our Lease, and
// events for other Leases are ignored anyway (fake clients ignore selectors).
func (c *Claimer) watchLease(ctx context.Context) {
	opts := metav1.ListOptions{
		FieldSelector:  fields.OneTermEqualSelector("metadata.name", c.cfg.Name).String(),
		TimeoutSeconds: new(int64(watchTimeoutSeconds)),
	}
	warned := false // a permanent watch failure was logged
	for ctx.Err() == nil {
		started := c.clk.Now()
		w, err := c.startWatch(ctx, opts)
		if ctx.Err() != nil {
			if err == nil {
				w.Stop()
			}
			return
		}
		c.in.request(opWatch, err)
		// A failure is logged at debug level, but a permanent one (say
		// RBAC lacks the watch verb) once as a warning: we poll instead.
		switch {
		case err == nil:
			c.watchUp.Store(true)
			c.consume(ctx, w)
			w.Stop()
			c.watchUp.Store(false)
		case !fatal(err):
			c.log.Debug("leader: watching the lease failed", "err", err)
		case !warned:
			warned = true
			c.log.Warn("leader: cannot watch the lease; re-reading it every RetryPeriod instead", "err", err, "retryPeriod", c.cfg.RetryPeriod)
		}
		if c.clk.Since(started) >= c.cfg.RetryPeriod {
			continue // a watch that lived its life: re-establish at once
		}
		t := c.clk.NewTimer(c.cfg.RetryPeriod)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// startWatch opens the watch under CallTimeout. The watch's context must
// outlive the call — cancelling it ends the stream — so the deadline is a
// timer that cancels it only if the call has not returned in time.
func (c *Claimer) startWatch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	wctx, cancel := context.WithCancelCause(ctx)
	timer := time.AfterFunc(c.cfg.CallTimeout, func() { cancel(context.DeadlineExceeded) })
	w, err := c.leases.Watch(wctx, opts)
	if !timer.Stop() { // too late: the stream's context is cancelled
		if err == nil {
			w.Stop()
		}
		cancel(nil)
		return nil, fmt.Errorf("leader: opening the watch: %w", context.DeadlineExceeded)
	}
	if err != nil {
		cancel(nil)
		return nil, err
	}
	return &cancelOnStop{Interface: w, cancel: func() { cancel(nil) }}, nil
}

// cancelOnStop releases the watch's context when the watch is stopped.
type cancelOnStop struct {
	watch.Interface
	cancel func()
}

func (w *cancelOnStop) Stop() {
	w.Interface.Stop()
	w.cancel()
}

// consume forwards events about our Lease until the watch ends or ctx is
// done.
func (c *Claimer) consume(ctx context.Context, w watch.Interface) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				return
			}
			lease, isLease := ev.Object.(*coordv1.Lease) // a bookmark's has no name: ignored
			if isLease && lease.Name == c.cfg.Name && (lease.Namespace == c.cfg.Namespace || lease.Namespace == "") {
				c.noteWatchEvent(ev.Type == watch.Deleted, keyOf(lease))
			}
		}
	}
}
