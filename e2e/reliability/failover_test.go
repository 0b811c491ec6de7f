package reliability_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/e2e/examplee2e"
	"github.com/quietpatch/quietpatch/examples/httproute-status/fixtures"
)

// claimWindowsCheck returns one message per status write (a status request
// of users the API server answered with 2xx) whose time is outside every
// claim the audit log shows for that user: a write received at s by U is
// within a claim when U's latest successful Lease write w received at or
// before s answered no earlier than s - leaseDuration, and no other user
// wrote the Lease successfully after w and at or before s. Status requests
// outside a claim that were not applied (any other code, e.g. 504 for a
// request the client had abandoned and a proxy delivered late) are returned
// as late instead.
func claimWindowsCheck(events []auditv1.Event, ns, lease string, users []string, leaseDuration time.Duration) (checked int, violations, late []string) {
	var leaseWrites []auditv1.Event
	for _, e := range events {
		ok := e.ResponseStatus != nil && e.ResponseStatus.Code/100 == 2
		if ok && e.ObjectRef != nil && e.ObjectRef.Resource == "leases" && e.ObjectRef.Namespace == ns && e.ObjectRef.Name == lease &&
			(e.Verb == "update" || e.Verb == "create" || e.Verb == "patch") {
			leaseWrites = append(leaseWrites, e)
		}
	}
	slices.SortFunc(leaseWrites, func(a, b auditv1.Event) int {
		return a.RequestReceivedTimestamp.Time.Compare(b.RequestReceivedTimestamp.Time)
	})
	for _, e := range events {
		if e.ObjectRef == nil || e.ObjectRef.Resource != "httproutes" || e.ObjectRef.Subresource != "status" || !slices.Contains(users, e.User.Username) {
			continue
		}
		checked++
		s, u := e.RequestReceivedTimestamp.Time, e.User.Username
		var last *auditv1.Event
		for i := range leaseWrites {
			w := &leaseWrites[i]
			if w.RequestReceivedTimestamp.Time.After(s) {
				break
			}
			if w.User.Username == u {
				last = w
			} else if last != nil {
				last = nil // someone else took the Lease since
			}
		}
		code := int32(0)
		if e.ResponseStatus != nil {
			code = e.ResponseStatus.Code
		}
		out := &violations
		if code/100 != 2 {
			out = &late
		}
		switch {
		case last == nil:
			*out = append(*out, fmt.Sprintf("%s: status %s of %s/%s (code %d) at %s without holding the Lease",
				u, e.Verb, e.ObjectRef.Namespace, e.ObjectRef.Name, code, s.Format(time.StampMicro)))
		case s.After(last.StageTimestamp.Add(leaseDuration)):
			*out = append(*out, fmt.Sprintf("%s: status %s of %s/%s (code %d) at %s, after its claim (last renewed %s) ran out",
				u, e.Verb, e.ObjectRef.Namespace, e.ObjectRef.Name, code, s.Format(time.StampMicro), last.StageTimestamp.Format(time.StampMicro)))
		}
	}
	return checked, violations, late
}

// TestFailoverKillLeader: three replicas, each its own process and its own
// ServiceAccount, compete for one Lease. The leader is killed with SIGKILL,
// three times (the killed replica is started again after each round).
// Routes changed right after each kill converge within lease duration + 2
// intervals (+1 s slack for two busy cores), and the audit log shows no
// status write by an identity that did not hold a current claim.
func TestFailoverKillLeader(t *testing.T) {
	cp, binary, rbac := shared.get(t)
	ctx := testContext(t, 3*time.Minute)
	const (
		controller      gatewayv1.GatewayController = "quietpatch.io/e2e-failover"
		ns                                          = "fo-system"
		leaseDuration                               = 3 * time.Second
		rounds                                      = 3
		changedPerRound                             = 10
		slack                                       = time.Second
	)
	set := installSet(t, ctx, cp, fixtures.Config{Routes: 100, Namespaces: 2, Prefix: "fo", ControllerName: controller})
	want := examplee2e.ExpectFixtures(set)
	bound := leaseDuration + 2*interval + slack

	deps := map[string]*examplee2e.Deployment{} // by identity
	var users []string
	start := func(sa string) {
		cfg := baseConfig(t, binary, rbac, ns, controller)
		cfg.ServiceAccount, cfg.LeaseDuration = sa, leaseDuration
		d := deploy(t, ctx, cp, cfg)
		deps[d.Replicas()[0].Identity] = d
	}
	for i := range 3 {
		sa := fmt.Sprintf("fo-%d", i)
		users = append(users, cluster.ServiceAccountUsername(ns, sa))
		start(sa)
	}
	if _, err := examplee2e.WaitConverged(ctx, cp.AdminGatewayClient(), want, poll, nil); err != nil {
		t.Fatal(err)
	}
	holder := func(ctx context.Context) (string, error) {
		l, err := cp.AdminClient().CoordinationV1().Leases(ns).Get(ctx, examplee2e.DefaultLeaseName, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			return "", fmt.Errorf("the Lease has no holder")
		}
		return *l.Spec.HolderIdentity, nil
	}

	var worst time.Duration
	for round := range rounds {
		old, err := holder(ctx)
		if err != nil {
			t.Fatal(err)
		}
		d := deps[old]
		if d == nil {
			t.Fatalf("round %d: the Lease is held by %q, not one of the replicas", round, old)
		}
		killed := time.Now()
		d.Replicas()[0].Kill()
		changed := set.Routes[round*changedPerRound : (round+1)*changedPerRound]
		for _, r := range changed {
			dropEntry(ctx, t, cp, routeName(r), controller)
		}
		var next string
		if err := examplee2e.Poll(ctx, 50*time.Millisecond, func(ctx context.Context) error {
			h, err := holder(ctx)
			if err != nil {
				return err
			}
			if h == old {
				return fmt.Errorf("still held by the killed %s", old)
			}
			next = h
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		tookOver := time.Since(killed)
		if _, err := examplee2e.WaitConverged(ctx, cp.AdminGatewayClient(), want, 50*time.Millisecond, nil); err != nil {
			t.Fatal(err)
		}
		converged := time.Since(killed)
		worst = max(worst, converged)
		t.Logf("round %d: killed leader %s; %s took over after %v; %d routes changed after the kill converged %v after it (bound %v)",
			round, old, next, tookOver.Round(time.Millisecond), len(changed), converged.Round(time.Millisecond), bound)
		if converged > bound {
			t.Errorf("round %d: converged %v after the kill, want <= lease duration + 2 intervals + %v = %v", round, converged, slack, bound)
		}
		// Start the killed one's ServiceAccount again, as a kubelet would.
		if err := d.Stop(); err != nil {
			t.Fatal(err)
		}
		delete(deps, old)
		start(d.Config().ServiceAccount)
	}

	events, err := cp.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	checked, violations, late := claimWindowsCheck(events, ns, examplee2e.DefaultLeaseName, users, leaseDuration)
	t.Logf("worst convergence after a kill %v; %d status requests of the replicas checked against the claims in the audit log; %d not applied arrived outside a claim %v",
		worst.Round(time.Millisecond), checked, len(late), late)
	for _, v := range violations {
		t.Error(v)
	}
	if checked < len(set.Routes) {
		t.Errorf("only %d status writes of the replicas in the audit log, want >= %d", checked, len(set.Routes))
	}
}
