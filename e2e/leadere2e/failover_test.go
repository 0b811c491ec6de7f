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
// it crashed. The other replica must take over within LeaseDuration +
// RetryPeriod of the crash, and not before the crashed holder's claim ran
// out on the holder's own reckoning.
//
// The crash comes right after the holder acquired the Lease (as soon as the
// other replica has seen it), so the successor must wait out nearly the
// whole LeaseDuration: the worst case.
func TestFailoverAfterCrash(t *testing.T) {
	e := newEnv(t)
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

	aEnd := a.rec.lastExpiry(epoch) // a's own claim ran out here
	bSent := ob.claim.Expiry.Add(-leaseDuration)
	t.Logf("failover after crash: %s (lease %s + retry %s; a's claim had %s left at the crash; b sent its acquisition %s after it ran out)",
		seconds(failover), seconds(leaseDuration), seconds(retryPeriod), seconds(aEnd.Sub(crashAt)), seconds(bSent.Sub(aEnd)))

	if bound := leaseDuration + retryPeriod + slack; failover > bound {
		t.Errorf("failover after crash took %v, want <= %v (LeaseDuration + RetryPeriod + %v slack)", failover, bound, slack)
	}
	if bSent.Before(aEnd) {
		t.Errorf("b sent its acquisition %v before a's claim ran out: a's claim was cut short", aEnd.Sub(bSent))
	}
	if ob.claim.Epoch != epoch+1 {
		t.Errorf("b acquired under epoch %d, want %d", ob.claim.Epoch, epoch+1)
	}
	for _, o := range b.rec.all() {
		if o.claim.Epoch == epoch && o.claim.Holder == "" {
			t.Errorf("b saw the lease free at %s: the crashed holder's vacate landed", o)
		}
	}
}

// TestFailoverAfterVacate: a holder shutting down normally vacates the
// Lease, and the waiting replica takes over within 2 s. Three rounds, each
// with a fresh successor.
func TestFailoverAfterVacate(t *testing.T) {
	e := newEnv(t)
	const rounds = 3
	cur := e.startClaimer(t, "r0")
	_, o := waitAcquired(t, []*replica{cur}, 0, 15*time.Second)
	var worst time.Duration
	for i := 1; i <= rounds; i++ {
		next := e.startClaimer(t, fmt.Sprintf("r%d", i))
		waitSees(t, next, cur.id, o.claim.Epoch)

		stopAt := time.Now()
		runErr, err := cur.stop()
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(runErr, context.Canceled) {
			t.Errorf("%s: Run returned %v, want context.Canceled", cur.id, runErr)
		}
		_, on := waitAcquired(t, []*replica{next}, o.claim.Epoch, 2*time.Second+slack)
		d := on.at.Sub(stopAt)
		t.Logf("failover after vacate, round %d: %s (%s stopped, %s acquired epoch %d; Run returned after %s)",
			i, seconds(d), cur.id, next.id, on.claim.Epoch, seconds(cur.ended.Sub(stopAt)))
		if d > 2*time.Second {
			t.Errorf("round %d: %s acquired %v after %s shut down, want <= 2s", i, next.id, d, cur.id)
		}
		if on.claim.Epoch != o.claim.Epoch+1 {
			t.Errorf("round %d: epoch %d after %d, want +1", i, on.claim.Epoch, o.claim.Epoch)
		}
		worst = max(worst, d)
		cur, o = next, on
	}
	t.Logf("failover after vacate: worst of %d rounds %s (bound 2s)", rounds, seconds(worst))
}
