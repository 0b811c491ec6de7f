package leader

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/quietpatch/quietpatch/internal/leases"
	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// callCtx returns a context for one request, bounded by CallTimeout and, if
// limit is non-zero, by limit.
func (l *loop) callCtx(ctx context.Context, limit time.Duration) (context.Context, context.CancelFunc) {
	d := l.c.cfg.CallTimeout
	if limit > 0 && limit < d {
		d = limit
	}
	return context.WithTimeout(ctx, d)
}

func (l *loop) get(ctx context.Context) error {
	c := l.c
	cctx, cancel := l.callCtx(ctx, 0)
	lease, err := c.leases.Get(cctx, c.cfg.Name, metav1.GetOptions{})
	cancel()
	c.in.request(opGet, err)
	now := c.clk.Now()
	switch {
	case err == nil:
		l.succeeded(now)
		l.deniedRead = time.Time{}
		l.observe(lease, now)
		return nil
	case apierrors.IsNotFound(err):
		l.succeeded(now)
		l.deniedRead = time.Time{}
		l.stale = false
		l.lease = nil
		l.absent = true
		if l.held {
			l.stopHolding(now, "lease deleted")
		}
		l.publish()
		return nil
	default:
		return err
	}
}

// acquire takes the Lease under a new epoch: creates it when it is known
// to be absent, else updates the state last read.
func (l *loop) acquire(ctx context.Context) error {
	c := l.c
	epoch, err := l.nextEpoch(transitionsOf(l.lease))
	if err != nil {
		return err
	}
	now := c.clk.Now()
	next, op := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: c.cfg.Name, Namespace: c.cfg.Namespace}}, opCreate
	if !l.absent {
		next, op = l.lease.DeepCopy(), opAcquire
	}
	metav1.SetMetaDataLabel(&next.ObjectMeta, LeaseLabel, "true")
	next.Spec.HolderIdentity = ptr(c.cfg.Identity)
	next.Spec.LeaseDurationSeconds = ptr(int32(c.cfg.LeaseDuration / time.Second))
	next.Spec.AcquireTime = &metav1.MicroTime{Time: now}
	next.Spec.RenewTime = &metav1.MicroTime{Time: now}
	next.Spec.LeaseTransitions = ptr(int32(epoch))
	res, err := l.write(ctx, op, next, 0)
	if err != nil {
		return err
	}
	l.missingNS = time.Time{}
	l.acquired(res, now, epoch)
	return nil
}

// write creates next (op create) or updates it (any other op), under
// CallTimeout and, if limit is non-zero, limit, and counts the request.
func (l *loop) write(ctx context.Context, op string, next *coordv1.Lease, limit time.Duration) (res *coordv1.Lease, err error) {
	cctx, cancel := l.callCtx(ctx, limit)
	defer cancel()
	if op == opCreate {
		res, err = l.c.leases.Create(cctx, next, metav1.CreateOptions{})
	} else {
		res, err = l.c.leases.Update(cctx, next, metav1.UpdateOptions{})
	}
	l.c.in.request(op, err)
	return res, err
}

// nextEpoch returns the epoch for a new acquisition of a Lease whose
// spec.leaseTransitions is trans: one more than both trans and any epoch we
// have seen, so our own epochs strictly increase even if the Lease was
// deleted and re-created with a lower count in between.
func (l *loop) nextEpoch(trans int64) (int64, error) {
	base := max(trans, l.maxEpoch)
	if base >= math.MaxInt32 {
		return 0, fmt.Errorf("%w: %s/%s", ErrTransitionsExhausted, l.c.cfg.Namespace, l.c.cfg.Name)
	}
	return base + 1, nil
}

func (l *loop) renew(ctx context.Context) error {
	c := l.c
	now := c.clk.Now()
	// A renewal must not land after our claim ran out (the next write is
	// then an acquisition, under a new epoch), so it gets no more time than
	// the claim has left.
	left := l.expiry.Sub(now)
	if left <= 0 {
		l.stopHolding(now, "claim expired before it could be renewed")
		return nil
	}
	next := l.lease.DeepCopy()
	next.Spec.RenewTime = &metav1.MicroTime{Time: now}
	next.Spec.LeaseDurationSeconds = ptr(int32(c.cfg.LeaseDuration / time.Second))
	res, err := l.write(ctx, opRenew, next, left)
	if err != nil {
		return err
	}
	l.succeeded(c.clk.Now())
	l.deniedWrite = time.Time{}
	l.expiry = now.Add(c.cfg.LeaseDuration)
	l.observe(res, c.clk.Now()) // publishes the extended claim
	return nil
}

// acquired records a successful create or acquire sent at sent.
func (l *loop) acquired(res *coordv1.Lease, sent time.Time, epoch int64) {
	c := l.c
	now := c.clk.Now()
	l.succeeded(now)
	l.deniedWrite = time.Time{}
	l.held = true
	l.epoch = epoch
	l.expiry = sent.Add(c.cfg.LeaseDuration)
	l.observe(res, now) // publishes the new claim
	c.in.transition(true)
	c.log.Info("leader: acquired the lease", "epoch", epoch, "expiry", l.expiry)
}

// stopHolding ends our claim locally at now (or at its expiry if earlier).
func (l *loop) stopHolding(now time.Time, reason string) {
	if !l.held {
		return
	}
	c := l.c
	l.held = false
	l.lastOwnExpiry = minTime(l.expiry, now)
	l.publish()
	c.in.transition(false)
	c.log.Info("leader: no longer holding the lease", "epoch", l.epoch, "reason", reason)
}

// observe records lease as the latest known state, seen at now.
func (l *loop) observe(lease *coordv1.Lease, now time.Time) {
	if l.lease == nil || keyOf(lease) != keyOf(l.lease) {
		l.observedAt = now
		if l.lease == nil {
			if t, ok := leases.SeenAt(l.c.client, lease.Name, lease.ResourceVersion); ok && t.Before(now) {
				l.observedAt = t
			}
		}
	}
	l.maxEpoch = max(l.maxEpoch, transitionsOf(lease))
	l.lease = lease
	l.absent = false
	l.stale = false
	l.publish()
}

// publish derives the claim from the loop's state and hands it to the hub.
func (l *loop) publish() {
	c := l.c
	id := c.cfg.Identity
	var cl Claim
	switch {
	case l.held:
		cl = Claim{Holder: id, Expiry: l.expiry, Epoch: l.epoch}
	case l.lease != nil:
		cl.Epoch = transitionsOf(l.lease)
		switch h := holderOf(l.lease); h {
		case "":
		case id: // names us, but we hold no claim: not current
			cl.Holder = id
			if l.ownClaimInLease() {
				cl.Expiry = l.lastOwnExpiry
			} // else an earlier process's claim: zero Expiry, never ours
		default:
			cl.Holder = h
			cl.Expiry = l.observedAt.Add(durationOf(l.lease))
		}
	case l.absent:
	default:
		return // unknown: keep what was last published
	}
	// Our own transitions are logged where they happen; this logs the
	// others' (including the lease falling free).
	if c.hub.publish(cl) && cl.Holder != l.lastHolder && cl.Holder != id && l.lastHolder != id {
		c.log.Debug("leader: lease holder changed", "holder", cl.Holder, "epoch", cl.Epoch)
	}
	l.lastHolder = cl.Holder
}

// vacate clears spec.holderIdentity if the Lease names us. A conflict means
// the Lease changed: it is re-read and vacated only if it still names us.
func (l *loop) vacate(ctx context.Context) error {
	c := l.c
	for range 2 {
		if !l.ownClaimInLease() {
			return nil // not ours (any more), or an earlier process's claim
		}
		next := l.lease.DeepCopy()
		next.Spec.HolderIdentity = nil
		res, err := l.write(ctx, opVacate, next, 0)
		if err == nil {
			l.observe(res, c.clk.Now())
			c.log.Info("leader: vacated the lease", "epoch", l.epoch)
			return nil
		}
		if !apierrors.IsConflict(err) {
			return err
		}
		if err := l.get(ctx); err != nil {
			return err
		}
	}
	return nil
}
