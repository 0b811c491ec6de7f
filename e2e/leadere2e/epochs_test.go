package leadere2e

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
)

// acquisition is one (holder, epoch) pair and when it was first seen.
type acquisition struct {
	holder string
	epoch  int64
	at     time.Time
}

func (a acquisition) String() string { return fmt.Sprintf("%s@%d", a.holder, a.epoch) }

// TestEpochsIncrease hands the lease over five times — create, two
// relinquishments, a vacate, and the same holder acquiring again — and
// checks the epochs three ways: in the claims every claimer's subscription
// delivered, in every version of the Lease an administrator's watch saw, and
// in the Lease's final spec.leaseTransitions.
func TestEpochsIncrease(t *testing.T) {
	e := newEnv(t)
	hist := watchLease(t, e)

	ids := []string{"a", "b", "c"}
	rcs := make([]*rest.Config, len(ids))
	for i, id := range ids {
		rcs[i] = e.identity(t, id, claimerVerbs()...)
	}
	reps := make([]*replica, len(ids))
	for i, id := range ids {
		reps[i] = e.start(t, id, rcs[i], nil)
	}

	h, o := waitAcquired(t, reps, 0, 15*time.Second)
	caused := []acquisition{{h.id, o.claim.Epoch, o.at}}
	for range 2 {
		if err := h.c.Relinquish(e.ctx, time.Second); err != nil {
			t.Fatalf("%s relinquishing: %v", h.id, err)
		}
		h, o = waitAcquired(t, reps, o.claim.Epoch, leaseDuration+slack)
		caused = append(caused, acquisition{h.id, o.claim.Epoch, o.at})
	}
	if _, err := h.stop(); err != nil {
		t.Fatal(err)
	}
	others := slices.DeleteFunc(slices.Clone(reps), func(r *replica) bool { return r == h })
	h, o = waitAcquired(t, others, o.claim.Epoch, 2*time.Second+slack)
	caused = append(caused, acquisition{h.id, o.claim.Epoch, o.at})
	// Leave h alone in the race, then have it relinquish with no back-off:
	// it acquires again at once, and that must be a new epoch too.
	for _, r := range others {
		if r != h {
			if _, err := r.stop(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := h.c.Relinquish(e.ctx, 0); err != nil {
		t.Fatalf("%s relinquishing: %v", h.id, err)
	}
	again, o2 := waitAcquired(t, []*replica{h}, o.claim.Epoch, leaseDuration+slack)
	caused = append(caused, acquisition{again.id, o2.claim.Epoch, o2.at})
	if o2.claim.Epoch <= o.claim.Epoch {
		t.Errorf("%s acquired again under epoch %d, after %d", h.id, o2.claim.Epoch, o.claim.Epoch)
	}
	for _, r := range reps {
		if _, err := r.stop(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("acquisitions the test caused: %v", caused)

	// 1. What the claimers observed through Subscribe.
	first := map[[2]any]acquisition{} // (holder, epoch) -> earliest sight
	holderOf := map[int64]string{}
	for _, r := range reps {
		prev := int64(0)
		for _, ob := range r.rec.all() {
			c := ob.claim
			if c.Epoch < prev {
				t.Errorf("%s observed epoch %d after %d", r.id, c.Epoch, prev)
			}
			prev = c.Epoch
			if c.Holder == "" {
				continue
			}
			if h, ok := holderOf[c.Epoch]; ok && h != c.Holder {
				t.Errorf("epoch %d observed with two holders, %s and %s", c.Epoch, h, c.Holder)
			}
			holderOf[c.Epoch] = c.Holder
			k := [2]any{c.Holder, c.Epoch}
			if a, ok := first[k]; !ok || ob.at.Before(a.at) {
				first[k] = acquisition{c.Holder, c.Epoch, ob.at}
			}
		}
	}
	observed := make([]acquisition, 0, len(first))
	for _, a := range first {
		observed = append(observed, a)
	}
	slices.SortFunc(observed, func(x, y acquisition) int { return x.at.Compare(y.at) })
	for i := 1; i < len(observed); i++ {
		if observed[i].epoch <= observed[i-1].epoch {
			t.Errorf("acquisitions in the order first observed: %v then %v: epochs do not increase", observed[i-1], observed[i])
		}
	}

	// 2. Every version of the Lease, as the administrator's watch saw it.
	lease, err := e.cp.AdminClient().CoordinationV1().Leases(e.ns).Get(e.ctx, e.lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	versions := hist.waitFor(t, lease.ResourceVersion)
	var stored []acquisition
	prevT, prevHolder := int64(0), ""
	for _, v := range versions {
		switch {
		case v.transitions < prevT:
			t.Errorf("leaseTransitions went down, %d -> %d (resourceVersion %s)", prevT, v.transitions, v.rv)
		case v.transitions > prevT:
			if v.holder == "" {
				t.Errorf("leaseTransitions %d written without a holder (resourceVersion %s)", v.transitions, v.rv)
			}
			if v.transitions != prevT+1 {
				t.Errorf("leaseTransitions jumped %d -> %d (resourceVersion %s)", prevT, v.transitions, v.rv)
			}
			stored = append(stored, acquisition{holder: v.holder, epoch: v.transitions})
		case v.holder != "" && v.holder != prevHolder:
			t.Errorf("%s took the lease from %q without a new epoch (leaseTransitions %d, resourceVersion %s)", v.holder, prevHolder, v.transitions, v.rv)
		}
		prevT, prevHolder = v.transitions, v.holder
	}
	t.Logf("acquisitions observed through Subscribe: %v; stored in the Lease (%d versions watched): %v", observed, len(versions), stored)
	if !slices.EqualFunc(observed, stored, func(x, y acquisition) bool { return x.holder == y.holder && x.epoch == y.epoch }) {
		t.Errorf("the claimers observed acquisitions %v, the Lease stored %v", observed, stored)
	}

	// 3. The Lease's final count, and the acquisitions the test caused.
	final := int64(0)
	if lease.Spec.LeaseTransitions != nil {
		final = int64(*lease.Spec.LeaseTransitions)
	}
	if len(stored) == 0 || final != stored[len(stored)-1].epoch || final != caused[len(caused)-1].epoch {
		t.Errorf("spec.leaseTransitions is %d; last stored acquisition %v, last caused %v", final, stored, caused[len(caused)-1])
	}
	for _, c := range caused {
		if !slices.ContainsFunc(stored, func(s acquisition) bool { return s.holder == c.holder && s.epoch == c.epoch }) {
			t.Errorf("acquisition %v, seen by its claimer, is not among those stored: %v", c, stored)
		}
	}
	if len(stored) < 5 {
		t.Errorf("%d acquisitions stored, want at least the 5 the test caused", len(stored))
	}
}

// leaseVersion is one version of the Lease seen by the watch.
type leaseVersion struct {
	rv          string
	holder      string
	transitions int64
}

// leaseHistory records every version of the test's Lease.
type leaseHistory struct {
	mu       sync.Mutex
	versions []leaseVersion
	ended    bool // the watch ended
}

// watchLease starts an administrator's watch of the test's Lease, before
// it exists, and records every version until the test ends.
func watchLease(t *testing.T, e *env) *leaseHistory {
	t.Helper()
	w, err := e.cp.AdminClient().CoordinationV1().Leases(e.ns).Watch(e.ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", e.lease).String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	h := &leaseHistory{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*coordv1.Lease)
			if !ok {
				continue
			}
			v := leaseVersion{rv: l.ResourceVersion}
			if l.Spec.HolderIdentity != nil {
				v.holder = *l.Spec.HolderIdentity
			}
			if l.Spec.LeaseTransitions != nil {
				v.transitions = int64(*l.Spec.LeaseTransitions)
			}
			h.mu.Lock()
			h.versions = append(h.versions, v)
			h.mu.Unlock()
		}
		h.mu.Lock()
		h.ended = true
		h.mu.Unlock()
	}()
	t.Cleanup(func() {
		w.Stop()
		<-done
	})
	return h
}

// waitFor waits until the watch has delivered resourceVersion rv, and
// returns every version up to it.
func (h *leaseHistory) waitFor(t *testing.T, rv string) []leaseVersion {
	t.Helper()
	var out []leaseVersion
	poll(t, 5*time.Second, "the watch delivers resourceVersion "+rv, func() error {
		h.mu.Lock()
		defer h.mu.Unlock()
		if i := slices.IndexFunc(h.versions, func(v leaseVersion) bool { return v.rv == rv }); i >= 0 {
			out = slices.Clone(h.versions[:i+1])
			return nil
		}
		if h.ended {
			return errors.New("the watch ended early")
		}
		return fmt.Errorf("%d versions so far", len(h.versions))
	})
	return out
}
