package leader

import (
	"context"
	"fmt"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/quietpatch/quietpatch/internal/leases"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// loop is the state of one Run, owned by Run's goroutine, on top of its
// Claimer's.
type loop struct {
	*Claimer

	lease      *coordv1.Lease // last known state; nil when unknown or absent
	absent     bool           // the Lease is known not to exist
	stale      bool           // lease must be re-read before acting on it
	observedAt time.Time      // local time lease last changed as seen by us
	lastRead   time.Time      // local time of the last successful request

	held          bool      // we hold the claim below
	epoch         int64     // epoch of our claim
	maxEpoch      int64     // largest epoch seen in any observation or claim
	expiry        time.Time // our claim runs out here (send time + LeaseDuration)
	lastOwnExpiry time.Time // when our last claim ended (zero if none)

	backoffUntil time.Time // Relinquish back-off
	retryAt      time.Time // after a transient failure, no request before this
	conflicts    int       // consecutive conflicts
	failing      bool      // the last request failed (for logging edges)
	deniedRead   time.Time // first of the current run of refused reads (zero: none)
	deniedWrite  time.Time // first of the current run of refused writes (zero: none)
	missingNS    time.Time // first create refused for a missing namespace (zero: none)
	lastHolder   string    // holder last logged
}

func (l *loop) run(ctx context.Context) error {
	spins := 0
	for {
		wake, err := l.step(ctx)
		if err != nil {
			l.stopHolding(l.clk.Now(), "run failed")
			return err
		}
		if ctx.Err() != nil {
			return l.shutdown(ctx)
		}
		now := l.clk.Now()
		if !wake.After(now) {
			// step only returns when it must wait; guard against a bug
			// turning into a busy loop.
			if spins++; spins < 100 {
				continue
			}
			wake = now.Add(l.cfg.RetryPeriod)
		}
		spins = 0
		// Whatever ends the wait stops the timer first.
		t := l.clk.NewTimer(wake.Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			return l.shutdown(ctx)
		case <-t.C():
		case <-l.kick:
			t.Stop()
			l.readWatch()
		case req := <-l.relinquishCh:
			t.Stop()
			req.done <- l.relinquish(ctx, req.backoff)
		}
	}
}

// step does whatever requests the current state calls for and returns the
// time it must next run at the latest (always after the clock's now), or a
// permanent error. It returns early, with any wake time, if ctx is done.
func (l *loop) step(ctx context.Context) (time.Time, error) {
	cfg := &l.cfg
	l.conflicts = 0
	for ctx.Err() == nil {
		now := l.clk.Now()
		if l.held && !now.Before(l.expiry) {
			l.stopHolding(now, "claim expired before it could be renewed")
		}
		if now.Before(l.retryAt) {
			// Or at our expiry, if we hold a claim that runs out before
			// (so the loss is noticed, logged and counted on time).
			if l.held && l.expiry.Before(l.retryAt) {
				return l.expiry, nil
			}
			return l.retryAt, nil
		}
		if !l.held && !l.watchUp.Load() && now.Sub(l.lastRead) >= cfg.RetryPeriod {
			l.stale = true // fallback while the watch is down
		}

		if l.stale || (l.lease == nil && !l.absent) {
			if err := l.get(ctx); err != nil {
				if l.permanent(err, &l.deniedRead) {
					return time.Time{}, err
				}
				l.transientFailure(err)
			}
			continue
		}

		if l.absent && cfg.RequireExisting {
			return time.Time{}, fmt.Errorf("%w: %s/%s (Config.RequireExisting is set)", ErrLeaseNotFound, cfg.Namespace, cfg.Name)
		}

		if l.held && l.ownClaimInLease() { // the Lease as last known still carries our claim
			renewAt := l.expiry.Add(-cfg.RenewGrace)
			if now.Before(renewAt) {
				return renewAt, nil
			}
			if err := l.renew(ctx); err != nil {
				if err := l.writeFailed(err); err != nil {
					return time.Time{}, err
				}
			}
			continue
		}

		if l.held { // the Lease no longer carries our claim
			l.stopHolding(now, "lease taken or changed by another party")
		}
		// Absent, free or another's: create or acquire it once we may.
		if wake, ok := l.mayAcquire(now); !ok {
			return wake, nil
		}
		switch err := l.acquire(ctx); {
		case err == nil:
		case l.absent && apierrors.IsNotFound(err):
			// The namespace does not exist: fatal once it has lasted a
			// full LeaseDuration (it may be on its way), never a silent
			// retry loop behind a healthy replica.
			if l.missingNS.IsZero() {
				l.missingNS = now
			}
			if now.Sub(l.missingNS) >= cfg.LeaseDuration {
				return time.Time{}, fmt.Errorf("leader: cannot create the Lease %s/%s: its namespace has not existed for %s: %w",
					cfg.Namespace, cfg.Name, now.Sub(l.missingNS), err)
			}
			l.transientFailure(err)
		default:
			if err := l.writeFailed(err); err != nil {
				return time.Time{}, err
			}
		}
	}
	return time.Time{}, nil
}

// ownClaimInLease reports whether the Lease as last known carries a claim
// this process made: our identity with the epoch of our latest acquisition.
// A Lease naming our identity with another epoch was written by an earlier
// process that used the same identity.
func (l *loop) ownClaimInLease() bool {
	return l.epoch != 0 && l.lease != nil && leases.Holder(l.lease) == l.cfg.Identity && transitionsOf(l.lease) == l.epoch
}

// mayAcquire reports whether we may try to acquire (or create) the Lease
// now, and if not, when to look again.
func (l *loop) mayAcquire(now time.Time) (time.Time, bool) {
	cfg := &l.cfg
	next := now.Add(cfg.RetryPeriod)
	if h := leases.Holder(l.lease); h != "" && (h != cfg.Identity || !l.ownClaimInLease()) {
		// Another holder's claim — or one made under our identity by
		// an earlier process (a restarted container keeps its pod
		// name), whose last writes may still land: wait it out.
		if exp := l.observedAt.Add(leases.Duration(l.lease)); now.Before(exp) {
			return minTime(exp, next), false
		}
	}
	if now.Before(l.backoffUntil) {
		return minTime(l.backoffUntil, next), false
	}
	return time.Time{}, true
}

// writeFailed handles a failed create, acquire or renew. It returns the
// error if it is permanent.
func (l *loop) writeFailed(err error) error {
	switch {
	case l.permanent(err, &l.deniedWrite):
		return err
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err), apierrors.IsNotFound(err):
		// Somebody else changed the Lease: re-read it, never overwrite.
		// One immediate re-read; a second conflict in a row waits
		// RetryPeriod like any transient failure.
		l.stale = true
		l.conflicts++
		if l.conflicts > 1 {
			l.transientFailure(err)
		}
	default:
		l.transientFailure(err)
	}
	return nil
}

func (l *loop) transientFailure(err error) {
	l.retryAt = l.clk.Now().Add(l.cfg.RetryPeriod)
	if !l.failing {
		l.failing = true
		l.log.Debug("leader: lease requests failing, retrying every RetryPeriod", "err", err, "retryPeriod", l.cfg.RetryPeriod)
	}
}

// permanent reports whether err ends Run. A request the server rejects as
// invalid does at once. Forbidden and Unauthorized answers do once they have
// lasted a full LeaseDuration with no success of the same kind (read, or
// write) in between: a kube-apiserver that has just restarted refuses
// requests until its authorization caches have synced, and that must not
// stop a healthy replica, while a real permission gap still ends Run within
// one lease duration, during which this replica cannot hold the lease
// anyway. since is the first refusal of the current run (per kind).
func (l *loop) permanent(err error, since *time.Time) bool {
	if !fatal(err) {
		return false
	}
	switch outcome.Of(err) {
	case outcome.Forbidden, outcome.Unauthorized:
		now := l.clk.Now()
		if since.IsZero() {
			*since = now
		}
		return now.Sub(*since) >= l.cfg.LeaseDuration
	}
	return true
}

// succeeded records a successful request at now, ending the run of
// refusals of its kind (denied: deniedRead or deniedWrite).
func (l *loop) succeeded(now time.Time, denied *time.Time) {
	l.lastRead = now
	*denied = time.Time{}
	if l.failing {
		l.failing = false
		l.log.Debug("leader: lease requests succeed again")
	}
}

// readWatch marks the Lease stale if the watch saw a state we do not know.
func (l *loop) readWatch() {
	ev, ok := l.takeWatchEvent()
	if !ok {
		return
	}
	if ev.deleted {
		if !l.absent {
			l.stale = true
		}
		return
	}
	if l.lease == nil || ev.key != keyOf(l.lease) {
		l.stale = true
	}
}

// relinquish handles Relinquish: back off, then release.
func (l *loop) relinquish(ctx context.Context, backoff time.Duration) error {
	now := l.clk.Now()
	if until := now.Add(backoff); until.After(l.backoffUntil) {
		l.backoffUntil = until
	}
	return l.release(ctx, ctx, "relinquished")
}

// shutdown handles cancellation of Run's context: release under fresh
// deadlines, return the context's error.
func (l *loop) shutdown(ctx context.Context) error {
	base := context.WithoutCancel(ctx)
	vctx, cancel := context.WithTimeout(base, l.cfg.CallTimeout)
	defer cancel()
	if err := l.release(base, vctx, "shutting down"); err != nil {
		l.log.Info("leader: vacating the lease on shutdown failed; the claim runs out on its own", "err", err)
	}
	l.log.Info("leader: claimer stopped", "reason", "context cancelled")
	return context.Cause(ctx)
}

// release gives our claim up on purpose: the registered Writers quiesce
// while the claim is still reported as ours (bounded by ctx and by the
// claim's expiry); then we stop holding; then we vacate with vctx — unless
// a Writer reports a write that ended without an answer, in which case the
// Lease keeps naming us and the claim runs out, so that a successor waits a
// full lease duration.
func (l *loop) release(ctx, vctx context.Context, reason string) error {
	answered := true
	if l.epoch != 0 {
		limit := l.cfg.CallTimeout // a claim already ended: its writes were cancelled
		if l.held {
			limit = max(l.expiry.Sub(l.clk.Now()), 0)
		}
		qctx, cancel := context.WithTimeout(ctx, limit)
		answered = l.quiesceWriters(qctx, l.epoch)
		cancel()
	}
	l.stopHolding(l.clk.Now(), reason)
	if !answered {
		if l.ownClaimInLease() {
			l.log.Info("leader: not vacating the lease: a write made under our claim ended without an answer from the API server and could still land; the claim runs out on its own",
				"epoch", l.epoch, "expiry", l.lastOwnExpiry)
		}
		return nil
	}
	return l.vacate(vctx)
}
