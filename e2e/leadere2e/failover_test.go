package leadere2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quietpatch/quietpatch/e2e/cluster"
)

// TestFailoverAfterCrash: the holder reaches the API server through a fault
// proxy; the proxy starts stalling every request and the holder is
// cancelled, so it can neither renew nor vacate — to the rest of the world
// it crashed. The other replica must take over once the crashed holder's
// claim ran out, and not before:
//
//   - order and epochs: in every version of the Lease (an administrator's
//     watch), the successor's acquisition under epoch+1 directly follows
//     the crashed holder's last version — no vacate landed — and the
//     successor never saw the Lease free;
//   - never early (exact, no slack): the successor sent its acquisition no
//     earlier than the crashed holder's claim ran out on the holder's own
//     reckoning;
//   - not late: the successor sent its acquisition within RetryPeriod +
//     slack of the moment the claim ran out as it saw it, and the whole
//     failover took at most LeaseDuration + RetryPeriod + slack (slack: see
//     its declaration).
//
// The crash comes right after the holder acquired the Lease (as soon as the
// other replica has seen it), so the successor must wait out nearly the
// whole LeaseDuration: the worst case.
func TestFailoverAfterCrash(t *testing.T) {
	e := newEnv(t)
	hist := watchLease(t, e)
	p, err := e.cp.NewFaultProxy()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.ClearFault()
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	rcA := e.identity(t, "a", claimerVerbs()...)
	rcB := e.identity(t, "b", claimerVerbs()...)

	a := e.start(t, "a", p.Config(rcA), nil)
	_, oa := waitAcquired(t, []*replica{a}, 0, 15*time.Second)
	epoch := oa.claim.Epoch
	b := e.start(t, "b", rcB, nil)
	waitSees(t, b, a.id, epoch)

	if err := p.SetFault(cluster.Fault{Stall: true}); err != nil {
		t.Fatal(err)
	}
	crashAt := time.Now()
	a.cancel() // its vacate stalls in the proxy until CallTimeout gives up

	_, ob := waitAcquired(t, []*replica{b}, epoch, leaseDuration+retryPeriod+slack+time.Second)
	failover := ob.at.Sub(crashAt)

	runErr, err := a.wait(callTimeout + 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(runErr, context.Canceled) {
		t.Errorf("crashed holder's Run returned %v, want context.Canceled", runErr)
	}
	if st := p.Stats(); st.Stalled == 0 {
		t.Errorf("proxy stalled no request (%+v): the holder's vacate did not go through the fault", st)
	}

	aEnd := a.rec.lastExpiry(a.id, epoch)  // a's own claim ran out here
	bView := b.rec.lastExpiry(a.id, epoch) // ... and here as b saw it
	bSent := ob.claim.Expiry.Add(-leaseDuration)
	t.Logf("failover after crash: %s (lease %s + retry %s; a's claim had %s left at the crash; b saw it run out %s later than a and sent its acquisition %s after that)",
		seconds(failover), seconds(leaseDuration), seconds(retryPeriod), seconds(aEnd.Sub(crashAt)), seconds(bView.Sub(aEnd)), seconds(bSent.Sub(bView)))

	checkHandover(t, e, hist, a.id, b.id, epoch, false)
	if ob.claim.Epoch != epoch+1 {
		t.Errorf("b acquired under epoch %d, want %d", ob.claim.Epoch, epoch+1)
	}
	for _, o := range b.rec.all() {
		if o.claim.Epoch == epoch && o.claim.Holder == "" {
			t.Errorf("b saw the lease free at %s: the crashed holder's vacate landed", o)
		}
	}
	if bSent.Before(aEnd) {
		t.Errorf("b sent its acquisition %v before a's claim ran out: a's claim was cut short", aEnd.Sub(bSent))
	}
	if late := bSent.Sub(bView); late > retryPeriod+slack {
		t.Errorf("b sent its acquisition %v after a's claim ran out as b saw it, want <= %v (RetryPeriod + %v slack)", late, retryPeriod+slack, slack)
	}
	if bound := leaseDuration + retryPeriod + slack; failover > bound {
		t.Errorf("failover after crash took %v, want <= %v (LeaseDuration + RetryPeriod + %v slack)", failover, bound, slack)
	}
}

// TestFailoverAfterVacate: a holder shutting down normally vacates the
// Lease, and the waiting replica takes over because of the vacate rather
// than when the claim runs out. Three rounds, each with a fresh successor,
// each stopping the holder right after the successor saw it renew, so that
// nearly a whole LeaseDuration of claim is left:
//
//   - order and epochs: in every version of the Lease (an administrator's
//     watch), the holder's last version is followed by its vacate (holder
//     cleared, epoch kept), then by the successor's acquisition under
//     epoch+1;
//   - prompt: the successor sent its acquisition before the holder's claim
//     would have run out as the successor saw it — it did not wait the
//     claim out, which a bound on the wall clock of a busy machine cannot
//     tell apart; the wait for it is bounded by LeaseDuration + slack.
func TestFailoverAfterVacate(t *testing.T) {
	e := newEnv(t)
	hist := watchLease(t, e)
	const rounds = 3
	cur := e.startClaimer(t, "r0")
	_, o := waitAcquired(t, []*replica{cur}, 0, 15*time.Second)
	var worst time.Duration
	for i := 1; i <= rounds; i++ {
		next := e.startClaimer(t, fmt.Sprintf("r%d", i))
		waitSees(t, next, cur.id, o.claim.Epoch)
		waitSeesRenewal(t, next, cur.id, o.claim.Epoch)

		stopAt := time.Now()
		runErr, err := cur.stop()
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(runErr, context.Canceled) {
			t.Errorf("%s: Run returned %v, want context.Canceled", cur.id, runErr)
		}
		_, on := waitAcquired(t, []*replica{next}, o.claim.Epoch, leaseDuration+slack)
		d := on.at.Sub(stopAt)
		sent := on.claim.Expiry.Add(-leaseDuration)
		left := next.rec.lastExpiry(cur.id, o.claim.Epoch).Sub(sent)
		t.Logf("failover after vacate, round %d: %s (%s stopped, %s acquired epoch %d with %s of %s's claim left as it saw it; Run returned after %s)",
			i, seconds(d), cur.id, next.id, on.claim.Epoch, seconds(left), cur.id, seconds(cur.ended.Sub(stopAt)))
		checkHandover(t, e, hist, cur.id, next.id, o.claim.Epoch, true)
		if left <= 0 {
			t.Errorf("round %d: %s sent its acquisition %v after %s's claim ran out as it saw it: it waited the claim out instead of taking the vacated Lease",
				i, next.id, -left, cur.id)
		}
		if on.claim.Epoch != o.claim.Epoch+1 {
			t.Errorf("round %d: epoch %d after %d, want +1", i, on.claim.Epoch, o.claim.Epoch)
		}
		worst = max(worst, d)
		cur, o = next, on
	}
	t.Logf("failover after vacate: worst of %d rounds %s", rounds, seconds(worst))
}
