package leadere2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/leader"
)

// TestAtMostOneHolder races three claimers for one Lease and samples, every
// 2 ms, what each believes: at no sampled instant may two of them hold a
// current claim — through steady renewals, two relinquishments and a
// vacate. The audit log must show that only the three identities wrote the
// Lease, and only with create and update.
func TestAtMostOneHolder(t *testing.T) {
	e := newEnv(t)
	ids := []string{"a", "b", "c"}
	rcs := make([]*rest.Config, len(ids))
	for i, id := range ids {
		rcs[i] = e.identity(t, id, claimerVerbs()...)
	}
	// Start the three together, so they race to create the Lease.
	reps := make([]*replica, len(ids))
	for i, id := range ids {
		reps[i] = e.start(t, id, rcs[i], nil)
	}
	s := startSampler(reps)
	t.Cleanup(s.stop)

	h, o := waitAcquired(t, reps, 0, 15*time.Second)
	t.Logf("%s created or acquired the lease (epoch %d)", h.id, o.claim.Epoch)
	waitRenewals(t, h, o.claim.Epoch, 2)

	for range 2 {
		if err := h.c.Relinquish(e.ctx, time.Second); err != nil {
			t.Fatalf("%s relinquishing: %v", h.id, err)
		}
		prev := h.id
		h, o = waitAcquired(t, reps, o.claim.Epoch, leaseDuration+slack)
		t.Logf("%s relinquished; %s acquired (epoch %d)", prev, h.id, o.claim.Epoch)
		waitRenewals(t, h, o.claim.Epoch, 1)
	}

	if runErr, err := h.stop(); err != nil || !errors.Is(runErr, context.Canceled) {
		t.Fatalf("%s shutting down: Run returned %v (%v), want context.Canceled", h.id, runErr, err)
	}
	prev := h.id
	others := slices.DeleteFunc(slices.Clone(reps), func(r *replica) bool { return r == h })
	h, o = waitAcquired(t, others, o.claim.Epoch, 2*time.Second+slack)
	t.Logf("%s vacated; %s acquired (epoch %d)", prev, h.id, o.claim.Epoch)
	waitRenewals(t, h, o.claim.Epoch, 1)
	s.stop()

	t.Logf("mutual exclusion: %d samples over %s (%d torn, re-sampled), holders in turn %v, %d instants with two holders",
		s.samples, seconds(s.ended.Sub(s.began)), s.torn, s.turns, s.overlapCount)
	for _, v := range s.overlaps {
		t.Errorf("two claimers held a current claim at once: %s", v)
	}
	if s.samples < 500 {
		t.Errorf("only %d consistent samples: the check saw too little", s.samples)
	}
	if len(s.turns) < 4 {
		t.Errorf("the sampler saw holders %v, want at least 4 turns (3 hand-overs)", s.turns)
	}

	for _, r := range reps {
		if _, err := r.stop(); err != nil {
			t.Fatal(err)
		}
	}
	users := map[string]bool{}
	for _, id := range ids {
		users[e.user(id)] = true
	}
	writes := leaseWrites(t, e, users)
	byID := map[string]int{}
	for _, id := range ids {
		byID[id] = writes[e.user(id)]
	}
	t.Logf("successful Lease writes by identity (audit log): %v", byID)
	for _, id := range s.turns {
		if byID[id] == 0 {
			t.Errorf("the audit log shows no successful write by %s, which held the lease", id)
		}
	}
	if l := e.logs.String(); strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
		t.Errorf("claimers with least-privilege RBAC logged warnings or errors:\n%s", l)
	}
}

// leaseWrites reads the audit log of the test namespace's Leases: every
// write must come from one of users and be a create or an update (the
// claimer never patches or deletes). It returns the successful writes by
// user.
func leaseWrites(t *testing.T, e *env, users map[string]bool) map[string]int {
	t.Helper()
	evs, err := e.cp.FindAuditEvents(cluster.AuditFilter{APIGroup: "coordination.k8s.io", Resource: "leases", Namespace: e.ns})
	if err != nil {
		t.Fatal(err)
	}
	ok := map[string]int{}
	for _, ev := range evs {
		code := int32(0)
		if ev.ResponseStatus != nil {
			code = ev.ResponseStatus.Code
		}
		who := ev.User.Username
		if !users[who] {
			t.Errorf("audit: %s %s/%s by %q (code %d): not one of the claimers", ev.Verb, ev.ObjectRef.Namespace, ev.ObjectRef.Name, who, code)
			continue
		}
		if ev.Verb != "create" && ev.Verb != "update" {
			t.Errorf("audit: %s by %s (code %d): the claimer should only create and update", ev.Verb, who, code)
		}
		if code >= 200 && code < 300 {
			ok[who]++
		}
	}
	if len(evs) == 0 {
		t.Error("audit: no writes to the Lease at all")
	}
	return ok
}

// sampler reads every replica's claim every 2 ms and records instants at
// which more than one believed it held a current claim.
//
// One sample reads the replicas' claims one after another, takes the time
// now, and reads them all again: if every claim is unchanged, each replica
// held exactly that claim at now (a Claimer never re-publishes an earlier
// claim), so the sample is what all of them believed at that one instant.
// A sample in which a claim changed is torn, and discarded.
type sampler struct {
	reps []*replica
	quit chan struct{}
	done chan struct{}
	once sync.Once

	// Written by the sampling goroutine; read after done is closed.
	samples, torn int
	began, ended  time.Time
	turns         []string // holders, in the order the sampler saw them hold
	overlapCount  int
	overlaps      []string // the first few instants with two holders
}

func startSampler(reps []*replica) *sampler {
	s := &sampler{reps: reps, quit: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

// stop ends sampling and waits for the goroutine; idempotent.
func (s *sampler) stop() {
	s.once.Do(func() { close(s.quit) })
	<-s.done
}

func (s *sampler) run() {
	defer close(s.done)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	s.began = time.Now()
	first := make([]leader.Claim, len(s.reps))
	for {
		select {
		case <-s.quit:
			s.ended = time.Now()
			return
		case <-tick.C:
		}
		for i, r := range s.reps {
			first[i] = r.c.Current()
		}
		now := time.Now()
		torn := false
		for i, r := range s.reps {
			if !r.c.Current().Equal(first[i]) {
				torn = true
			}
		}
		if torn {
			s.torn++
			continue
		}
		s.samples++
		var holders []string
		for i, r := range s.reps {
			if first[i].IsCurrentFor(r.id, now) {
				holders = append(holders, r.id)
			}
		}
		switch {
		case len(holders) > 1:
			s.overlapCount++
			if len(s.overlaps) < 5 {
				var b strings.Builder
				fmt.Fprintf(&b, "at %s:", now.Format("15:04:05.000000"))
				for i, r := range s.reps {
					fmt.Fprintf(&b, " %s{holder %q epoch %d remaining %v}", r.id, first[i].Holder, first[i].Epoch, first[i].Remaining(now))
				}
				s.overlaps = append(s.overlaps, b.String())
			}
		case len(holders) == 1 && (len(s.turns) == 0 || s.turns[len(s.turns)-1] != holders[0]):
			s.turns = append(s.turns, holders[0])
		}
	}
}
