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

func (l *loop) get(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, l.cfg.CallTimeout)
	lease, err := l.leases.Get(cctx, l.cfg.Name, metav1.GetOptions{})
	cancel()
	l.in.request(opGet, err)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	now := l.clk.Now()
	l.succeeded(now, &l.deniedRead)
	if err == nil {
		l.observe(lease, now)
		return nil
	}
	l.stale = false
	l.lease = nil
	l.absent = true
	if l.held {
		l.stopHolding(now, "lease deleted")
	}
	l.publish()
	return nil
}

// acquire takes the Lease under a new epoch: creates it when it is known
// to be absent, else updates the state last read.
func (l *loop) acquire(ctx context.Context) error {
	epoch, err := l.nextEpoch(transitionsOf(l.lease))
	if err != nil {
		return err
	}
	now := l.clk.Now()
	next, op := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.cfg.Name, Namespace: l.cfg.Namespace}}, opCreate
	if !l.absent {
		next, op = l.lease.DeepCopy(), opAcquire
	}
	metav1.SetMetaDataLabel(&next.ObjectMeta, LeaseLabel, "true")
	next.Spec.HolderIdentity = new(l.cfg.Identity)
	next.Spec.LeaseDurationSeconds = new(int32(l.cfg.LeaseDuration / time.Second))
	next.Spec.AcquireTime = &metav1.MicroTime{Time: now}
	next.Spec.RenewTime = &metav1.MicroTime{Time: now}
	next.Spec.LeaseTransitions = new(int32(epoch))
	res, err := l.write(ctx, op, next, l.cfg.CallTimeout)
	if err != nil {
		return err
	}
	l.missingNS = time.Time{}
	l.acquired(res, now, epoch)
	return nil
}

// write creates next (op create) or updates it (any other op), under
// timeout, and counts the request.
func (l *loop) write(ctx context.Context, op string, next *coordv1.Lease, timeout time.Duration) (res *coordv1.Lease, err error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if op == opCreate {
		res, err = l.leases.Create(cctx, next, metav1.CreateOptions{})
	} else {
		res, err = l.leases.Update(cctx, next, metav1.UpdateOptions{})
	}
	l.in.request(op, err)
	return res, err
}

// nextEpoch returns the epoch for a new acquisition of a Lease whose
// spec.leaseTransitions is trans: one more than both trans and any epoch we
// have seen, so our own epochs strictly increase even if the Lease was
// deleted and re-created with a lower count in between.
func (l *loop) nextEpoch(trans int64) (int64, error) {
	base := max(trans, l.maxEpoch)
	if base >= math.MaxInt32 {
		return 0, fmt.Errorf("%w: %s/%s", ErrTransitionsExhausted, l.cfg.Namespace, l.cfg.Name)
	}
	return base + 1, nil
}

func (l *loop) renew(ctx context.Context) error {
	now := l.clk.Now()
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
	next.Spec.LeaseDurationSeconds = new(int32(l.cfg.LeaseDuration / time.Second))
	res, err := l.write(ctx, opRenew, next, min(left, l.cfg.CallTimeout))
	if err != nil {
		return err
	}
	l.succeeded(l.clk.Now(), &l.deniedWrite)
	l.expiry = now.Add(l.cfg.LeaseDuration)
	l.observe(res, l.clk.Now()) // publishes the extended claim
	return nil
}

// acquired records a successful create or acquire sent at sent.
func (l *loop) acquired(res *coordv1.Lease, sent time.Time, epoch int64) {
	now := l.clk.Now()
	l.succeeded(now, &l.deniedWrite)
	l.held = true
	l.epoch = epoch
	l.expiry = sent.Add(l.cfg.LeaseDuration)
	l.observe(res, now) // publishes the new claim
	l.in.moves.Add("acquired")
	l.log.Info("leader: acquired the lease", "epoch", epoch, "expiry", l.expiry)
}

// stopHolding ends our claim locally at now (or at its expiry if earlier).
func (l *loop) stopHolding(now time.Time, reason string) {
	if !l.held {
		return
	}
	l.held = false
	l.lastOwnExpiry = minTime(l.expiry, now)
	l.publish()
	l.in.moves.Add("lost")
	l.log.Info("leader: no longer holding the lease", "epoch", l.epoch, "reason", reason)
}

// observe records lease as the latest known state, seen at now.
func (l *loop) observe(lease *coordv1.Lease, now time.Time) {
	if l.lease == nil || keyOf(lease) != keyOf(l.lease) {
		l.observedAt = now
		if l.lease == nil {
			if t, ok := leases.SeenAt(l.client, lease.Name, lease.ResourceVersion); ok && t.Before(now) {
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
	id := l.cfg.Identity
	var cl Claim
	switch {
	case l.held:
		cl = Claim{Holder: id, Expiry: l.expiry, Epoch: l.epoch}
	case l.lease != nil:
		cl.Holder, cl.Epoch = leases.Holder(l.lease), transitionsOf(l.lease)
		switch {
		case cl.Holder != "" && cl.Holder != id:
			cl.Expiry = l.observedAt.Add(leases.Duration(l.lease))
		case l.ownClaimInLease(): // names us, but we hold no claim: not current
			cl.Expiry = l.lastOwnExpiry
		} // else free, or an earlier process's claim under our identity: zero Expiry
	case l.absent:
	default:
		return // unknown: keep what was last published
	}
	// Our own transitions are logged where they happen; this logs the
	// others' (including the lease falling free).
	if l.hub.publish(cl) && cl.Holder != l.lastHolder && cl.Holder != id && l.lastHolder != id {
		l.log.Debug("leader: lease holder changed", "holder", cl.Holder, "epoch", cl.Epoch)
	}
	l.lastHolder = cl.Holder
}

// vacate clears spec.holderIdentity if the Lease names us. A conflict means
// the Lease changed: it is re-read and vacated only if it still names us.
func (l *loop) vacate(ctx context.Context) error {
	for range 2 {
		if !l.ownClaimInLease() {
			return nil // not ours (any more), or an earlier process's claim
		}
		next := l.lease.DeepCopy()
		next.Spec.HolderIdentity = nil
		res, err := l.write(ctx, opVacate, next, l.cfg.CallTimeout)
		if err == nil {
			l.observe(res, l.clk.Now())
			l.log.Info("leader: vacated the lease", "epoch", l.epoch)
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
