package leadere2e

import (
	"errors"
	"testing"
	"time"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/leader"
)

// TestRelinquish: the holder a relinquishes with a back-off longer than the
// lease; b takes over at once. Then b shuts down, vacating the Lease while
// a is still backing off: the Lease is free, yet a must not acquire it
// until its back-off has passed — and then it must, promptly.
func TestRelinquish(t *testing.T) {
	e := newEnv(t)
	const backoff = 3 * time.Second // > LeaseDuration: a would otherwise be free to acquire
	a := e.startClaimer(t, "a")
	_, oa := waitAcquired(t, []*replica{a}, 0, 15*time.Second)
	b := e.startClaimer(t, "b")
	waitSees(t, b, a.id, oa.claim.Epoch)

	if err := a.c.Relinquish(e.ctx, -time.Second); !errors.Is(err, leader.ErrNegativeBackoff) {
		t.Errorf("Relinquish with a negative back-off: %v, want ErrNegativeBackoff", err)
	}
	if !a.holds() {
		t.Fatalf("a no longer holds after a rejected Relinquish: %s", describe([]*replica{a}))
	}

	relAt := time.Now()
	if err := a.c.Relinquish(e.ctx, backoff); err != nil {
		t.Fatalf("Relinquish: %v", err)
	}
	relDone := time.Now()
	if a.holds() {
		t.Errorf("a still believes it holds after Relinquish returned: %s", describe([]*replica{a}))
	}
	backoffEnd := relAt.Add(backoff)

	_, ob := waitAcquired(t, []*replica{b}, oa.claim.Epoch, 2*time.Second+slack)
	handover := ob.at.Sub(relAt)
	if handover > 2*time.Second {
		t.Errorf("b acquired %v after a relinquished, want <= 2s", handover)
	}

	// Free the Lease while a backs off.
	if _, err := b.stop(); err != nil {
		t.Fatal(err)
	}
	freedAt := b.ended
	if left := backoffEnd.Sub(freedAt); left < time.Second {
		t.Fatalf("b vacated only %v before a's back-off ends: too late to show that a waits", left)
	}

	_, oa2 := waitAcquired(t, []*replica{a}, ob.claim.Epoch, backoff+retryPeriod+slack)
	aSent := oa2.claim.Expiry.Add(-leaseDuration) // when a sent its acquisition
	reacquired := oa2.at.Sub(relAt)
	t.Logf("relinquish: b took over after %s; b vacated %s after the relinquish; a re-acquired after %s (back-off %s; its request went out %s after the back-off ended)",
		seconds(handover), seconds(freedAt.Sub(relAt)), seconds(reacquired), seconds(backoff), seconds(aSent.Sub(backoffEnd)))
	if aSent.Before(backoffEnd) {
		t.Errorf("a sent its acquisition %v before its back-off ended", backoffEnd.Sub(aSent))
	}
	if bound := backoff + retryPeriod + slack; reacquired > bound {
		t.Errorf("a re-acquired %v after relinquishing, want <= %v (back-off + RetryPeriod + %v slack)", reacquired, bound, slack)
	}
	if oa2.claim.Epoch != ob.claim.Epoch+1 {
		t.Errorf("a re-acquired under epoch %d, want %d", oa2.claim.Epoch, ob.claim.Epoch+1)
	}

	// The API server's view: no successful write by a between the end of
	// Relinquish (which vacated) and the end of the back-off.
	evs, err := e.cp.FindAuditEvents(cluster.AuditFilter{Resource: "leases", Namespace: e.ns, Username: e.user(a.id)})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		at := ev.RequestReceivedTimestamp.Time
		ok := ev.ResponseStatus != nil && ev.ResponseStatus.Code < 300
		if ok && at.After(relDone) && at.Before(backoffEnd) {
			t.Errorf("audit: a wrote the Lease (%s) %v after relinquishing, during its %v back-off", ev.Verb, at.Sub(relAt), backoff)
		}
	}
}
