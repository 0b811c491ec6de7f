package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/internal/queue"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// serve sends the patch key needs, if any, with a permit held; it gives
// the permit back. A key served without a call is counted and logged with
// the reason. Once ctx is done it starts no read of the Source: Run's
// caller may stop the informers when it cancels ctx.
func (d *Dispatcher[O, S, P]) serve(ctx context.Context, key types.NamespacedName, since time.Time) {
	if d.metrics != nil && !since.IsZero() { // the wait histogram's one reading of the clock
		d.metrics.recordWait(d.opts.Clock.Since(since))
	}
	if reason, err := d.send(ctx, key); reason != "" {
		d.drop(key, reason, err)
		d.flight.release() // a call gives it back when it ends
	}
}

// send makes the call key needs now, or says why there is none.
func (d *Dispatcher[O, S, P]) send(ctx context.Context, key types.NamespacedName) (reason string, err error) {
	for {
		if ctx.Err() != nil {
			return dropShutdown, nil
		}
		now := d.opts.Clock.Now()
		claim := d.leader.Current()
		if !claim.IsCurrentFor(d.leader.Identity(), now) {
			return dropNotLeader, nil
		}
		left := claim.Remaining(now)
		if left < d.claimMargin() {
			return dropClaimEnding, nil
		}
		payload, reason, err := d.build(key)
		if reason != "" {
			return reason, err
		}
		// The window is checked at the moment the call is made: one may
		// have opened since the key was taken.
		if wait := d.flight.windowAt(d.opts.Clock.Now()); wait > 0 {
			t := d.opts.Clock.NewTimer(wait)
			select {
			case <-t.C():
				continue // build again from the cache as it is then
			case <-ctx.Done():
				t.Stop()
				return dropShutdown, nil
			}
		}
		c, reason := d.flight.begin(key, claim.Epoch, d.opts.Clock.Now(), d.versions != nil)
		if reason != "" {
			return reason, nil
		}
		d.call(key, c, payload, min(d.opts.PatchTimeout, left))
		return "", nil
	}
}

// claim returns the latest claim and whether it is ours now.
func (d *Dispatcher[O, S, P]) claim() (leader.Claim, bool) {
	c := d.leader.Current()
	return c, c.IsCurrentFor(d.leader.Identity(), d.opts.Clock.Now())
}

// build gets the object and builds its patch, or says why there is none.
func (d *Dispatcher[O, S, P]) build(key types.NamespacedName) (payload P, reason string, err error) {
	stage := "Source.Get"
	defer func() {
		if v := recover(); v != nil {
			reason, err = dropError, fmt.Errorf("%s panicked: %v", stage, v)
		}
	}()
	obj, found, err := d.src.Get(key)
	switch {
	case err != nil:
		return payload, dropError, err
	case !found:
		return payload, dropDeleted, nil
	}
	if v, ok := any(obj).(interface{ GetResourceVersion() string }); ok && d.versions != nil && d.holds != nil &&
		d.flight.stale(key, v.GetResourceVersion(), d.holds, d.requeue) {
		return payload, dropHeld, nil
	}
	stage = "StatusComputer"
	current := d.comp.Current(obj)
	desired, err := d.comp.Desired(obj)
	if err != nil {
		return payload, dropError, fmt.Errorf("desired status: %w", err)
	}
	if d.comp.Equal(current, desired) {
		return payload, dropUnchanged, nil
	}
	if payload, err = d.comp.Patch(obj, desired); err != nil {
		return payload, dropError, fmt.Errorf("build patch: %w", err)
	}
	if d.opts.Logger.Enabled(context.Background(), slog.LevelDebug) {
		d.opts.Logger.Debug("statuspatch: sending patch", slog.String("key", key.String()),
			slog.String("diff", safeDiff(current, desired, d.opts.DiffOptions)))
	}
	return payload, "", nil
}

// requeue enqueues key in the fresh lane: a hold ended (the next pass
// finds a key the full lane refuses).
func (d *Dispatcher[O, S, P]) requeue(key types.NamespacedName) {
	_ = d.queue.Add(key, queue.LaneFresh)
}

// drop counts and logs a key served without a call.
func (d *Dispatcher[O, S, P]) drop(key types.NamespacedName, reason string, err error) {
	d.dropped.Add(reason)
	if d.opts.Logger.Enabled(context.Background(), slog.LevelDebug) {
		d.opts.Logger.Debug("statuspatch: no patch sent", slog.String("key", key.String()),
			slog.String("reason", string(reason)), slog.Any("error", err))
	}
}

// claimMargin is Options.ClaimMargin, or twice the latency estimate within
// [MinClaimMargin, PatchTimeout/2].
func (d *Dispatcher[O, S, P]) claimMargin() time.Duration {
	if d.opts.ClaimMargin > 0 {
		return d.opts.ClaimMargin
	}
	est := time.Duration(2 * d.flight.estimate() * float64(time.Second))
	return min(max(MinClaimMargin, est), d.opts.PatchTimeout/2)
}

// call makes one patch call c, and accounts for it.
func (d *Dispatcher[O, S, P]) call(key types.NamespacedName, c *call, payload P, timeout time.Duration) {
	w := d.writer
	w.Epoch = c.ec.epoch
	ctx, cancel := context.WithTimeout(context.WithValue(c.ec.ctx, base.WriteClaimKey{}, w), timeout)
	start := d.opts.Clock.Now()
	var (
		rv  string
		err error
	)
	if d.versions != nil {
		rv, err = d.versions.PatchVersion(ctx, payload)
	} else {
		err = d.patcher.Patch(ctx, payload)
	}
	end := d.opts.Clock.Now()
	elapsed := end.Sub(start)
	o := outcome.Of(err)
	if err != nil && ctx.Err() != nil && (o == outcome.Failed || o == outcome.Canceled || o == outcome.Timeout) {
		// The call gave up because its context ended, whatever the patcher
		// wrapped that in: the claim ended (cancelled) or the deadline.
		o = outcome.Timeout
		if c.ec.ctx.Err() != nil {
			o = outcome.Canceled
		}
	}
	cancel()
	if err != nil {
		rv = ""
	}
	if d.flight.end(c, end, elapsed, err, o, rv) {
		// An event held while we wrote was not our echo: serve the key
		// again after this serve (it is held until Done).
		_ = d.queue.Add(key, queue.LaneFresh) // full: the next pass finds it
	}
	d.metrics.recordCall(o, elapsed) // before the counter: who sees the count sees the duration
	d.patches.Add(o)
	if err == nil {
		return
	}
	level := slog.LevelDebug
	if last := d.lastWarn[o]; last != nil {
		if prev := last.Load(); start.UnixNano()-prev >= int64(time.Minute) && last.CompareAndSwap(prev, start.UnixNano()) {
			level = slog.LevelWarn
		}
	}
	d.opts.Logger.Log(context.Background(), level, "statuspatch: patch failed; not retried, the next pass recomputes it",
		slog.String("key", key.String()), slog.String("outcome", string(o)),
		slog.Duration("elapsed", elapsed), slog.Duration("deadline", timeout), slog.Any("error", err))
}
