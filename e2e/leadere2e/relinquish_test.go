package leadere2e

import (
	"errors"
	"testing"
	"time"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/e2e/cluster"
)

// TestRelinquish: the holder a relinquishes with a back-off longer than the
// lease; b takes over at once. Then b shuts down, vacating the Lease while
// a is still backing off: the Lease is free, yet a must not acquire it
// until its back-off has passed — and then it must, promptly:
//
//   - order and epochs: in every version of the Lease (an administrator's
//     watch), a's claim is followed by its vacate and b's acquisition
//     under the next epoch, b's claim by b's vacate and a's acquisition
//     under the one after;
//   - at once: b sent its acquisition before a's claim would have run out
//     as b saw it (a is relinquished right after b saw it renew);
//   - never early (exact, no slack): a sent its acquisition no earlier than
//     its back-off ended, and the audit log shows no successful Lease
//     write by a between its Relinquish and the end of its back-off;
//   - not late: a sent its acquisition within RetryPeriod + slack of the
//     end of its back-off (slack: see its declaration).
func TestRelinquish(t *testing.T) {
	e := newEnv(t)
	hist := watchLease(t, e)
	// Longer than LeaseDuration (a would otherwise be free to acquire), and
	// long enough that b can take over and vacate, each within slack,
	// well before it ends.
	const backoff = leaseDuration + 2*slack
	a := e.startClaimer(t, "a")
	_, oa := waitAcquired(t, []*replica{a}, 0, 15*time.Second)
	b := e.startClaimer(t, "b")
	waitSees(t, b, a.id, oa.claim.Epoch)

	var ce *quietpatch.ConfigError
	if err := a.c.Relinquish(e.ctx, -time.Second); !errors.As(err, &ce) || ce.Field != "backoff" || !errors.Is(err, quietpatch.ErrInvalidConfig) {
		t.Errorf("Relinquish with a negative back-off: %v, want a ConfigError naming backoff", err)
	}
	if !a.holds() {
		t.Fatalf("a no longer holds after a rejected Relinquish: %s", describe([]*replica{a}))
	}

	waitSeesRenewal(t, b, a.id, oa.claim.Epoch)
	relAt := time.Now()
	if err := a.c.Relinquish(e.ctx, backoff); err != nil {
		t.Fatalf("Relinquish: %v", err)
	}
	relDone := time.Now()
	if a.holds() {
		t.Errorf("a still believes it holds after Relinquish returned: %s", describe([]*replica{a}))
	}
	backoffEnd := relAt.Add(backoff)

	_, ob := waitAcquired(t, []*replica{b}, oa.claim.Epoch, leaseDuration+slack)
	handover := ob.at.Sub(relAt)
	bLeft := b.rec.lastExpiry(a.id, oa.claim.Epoch).Sub(ob.claim.Expiry.Add(-leaseDuration))
	checkHandover(t, e, hist, a.id, b.id, oa.claim.Epoch, true)
	if bLeft <= 0 {
		t.Errorf("b sent its acquisition %v after a's claim ran out as b saw it: it waited the claim out instead of taking the relinquished Lease", -bLeft)
	}
	if ob.claim.Epoch != oa.claim.Epoch+1 {
		t.Errorf("b acquired under epoch %d, want %d", ob.claim.Epoch, oa.claim.Epoch+1)
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
	t.Logf("relinquish: b took over after %s (%s of a's claim left as b saw it); b vacated %s after the relinquish; a re-acquired after %s (back-off %s; its request went out %s after the back-off ended)",
		seconds(handover), seconds(bLeft), seconds(freedAt.Sub(relAt)), seconds(reacquired), seconds(backoff), seconds(aSent.Sub(backoffEnd)))
	checkHandover(t, e, hist, b.id, a.id, ob.claim.Epoch, true)
	if aSent.Before(backoffEnd) {
		t.Errorf("a sent its acquisition %v before its back-off ended", backoffEnd.Sub(aSent))
	}
	if late := aSent.Sub(backoffEnd); late > retryPeriod+slack {
		t.Errorf("a sent its acquisition %v after its back-off ended, want <= %v (RetryPeriod + %v slack)", late, retryPeriod+slack, slack)
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
