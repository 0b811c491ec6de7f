package reliability_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/e2e/examplee2e"
	"github.com/quietpatch/quietpatch/examples/httproute-status/fixtures"
)

// TestLeadershipMovesWhileQueueFull: the leader reaches the API server
// through a fault proxy. The API is made slow for it and its queue filled
// (every route's entry taken away), then stalled, so that its claim runs
// out and a second replica (another ServiceAccount, direct connection)
// takes the Lease. When the fault clears, nothing the old leader enqueued
// under its claim is applied: the audit log shows no status write by it
// after its claim ended, it counts the keys it served without a call
// (not_leader, stale_epoch or claim_ending at dispatch), and the new leader
// makes every route converge.
func TestLeadershipMovesWhileQueueFull(t *testing.T) {
	cp, binary, rbac := shared.get(t)
	ctx := testContext(t, 3*time.Minute)
	const (
		controller    gatewayv1.GatewayController = "quietpatch.io/e2e-stale"
		ns                                        = "st-system"
		leaseDuration                             = 3 * time.Second
		capacity                                  = 40
	)
	set := installSet(t, ctx, cp, fixtures.Config{Routes: 200, Namespaces: 2, Prefix: "st", ControllerName: controller})
	want := examplee2e.ExpectFixtures(set)

	proxy := newProxy(t, cp)
	// Replica A: through the proxy, one worker, a small queue.
	cfgA := baseConfig(t, binary, rbac, ns, controller)
	cfgA.ServiceAccount, cfgA.LeaseDuration, cfgA.Workers, cfgA.QueueCapacity = "st-a", leaseDuration, 1, capacity
	cfgA.PatchTimeout = 2 * time.Second
	throughProxy(t, ctx, proxy, &cfgA)
	dA := deploy(t, ctx, cp, cfgA)
	a := dA.Replicas()[0]
	if _, err := dA.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := examplee2e.WaitConverged(ctx, cp.AdminGatewayClient(), want, poll, nil); err != nil {
		t.Fatal(err)
	}
	// Replica B: direct, a follower for now.
	cfgB := baseConfig(t, binary, rbac, ns, controller)
	cfgB.ServiceAccount, cfgB.LeaseDuration = "st-b", leaseDuration
	dB := deploy(t, ctx, cp, cfgB)
	b := dB.Replicas()[0]

	holder := func(ctx context.Context) (string, error) {
		l, err := cp.AdminClient().CoordinationV1().Leases(ns).Get(ctx, examplee2e.DefaultLeaseName, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return "", fmt.Errorf("reading the Lease holder: %v", err)
		}
		return *l.Spec.HolderIdentity, nil
	}
	if h, err := holder(ctx); err != nil || h != a.Identity {
		t.Fatalf("holder %q (%v), want %s", h, err, a.Identity)
	}

	m0, err := a.Scrape(ctx)
	if err != nil {
		t.Fatal(err)
	}
	halted0 := m0.Sum(examplee2e.MetricReconcileHalted)
	var depthAtStall float64
	// Slow API for A, then take away every entry: A's queue fills.
	if err := proxy.SetFault(cluster.Fault{Latency: 400 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.ClearFault)
	for _, r := range set.Routes {
		dropEntry(ctx, t, cp, routeName(r), controller)
	}
	if err := examplee2e.Poll(ctx, 100*time.Millisecond, func(ctx context.Context) error {
		m, err := a.Scrape(ctx)
		if err != nil {
			return err
		}
		if h := m.Sum(examplee2e.MetricReconcileHalted); h == halted0 {
			return fmt.Errorf("no pass halted on a full queue yet")
		}
		if depthAtStall = m.Sum(examplee2e.MetricQueueDepth); depthAtStall < capacity/2 {
			return fmt.Errorf("queue depth %v, want >= %d", depthAtStall, capacity/2)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Stall A: its claim runs out and B takes the Lease.
	if err := proxy.SetFault(cluster.Fault{Stall: true}); err != nil {
		t.Fatal(err)
	}
	stalled := time.Now()
	if err := examplee2e.Poll(ctx, 50*time.Millisecond, func(ctx context.Context) error {
		h, err := holder(ctx)
		if err != nil {
			return err
		}
		if h != b.Identity {
			return fmt.Errorf("held by %s", h)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s took the Lease %v after %s was stalled", b.Identity, time.Since(stalled).Round(time.Millisecond), a.Identity)
	proxy.ClearFault()
	if _, err := examplee2e.WaitConverged(ctx, cp.AdminGatewayClient(), want, poll, nil); err != nil {
		t.Fatal(err)
	}
	var drops map[string]float64
	if err := examplee2e.Poll(ctx, 100*time.Millisecond, func(ctx context.Context) error {
		m, err := a.Scrape(ctx)
		if err != nil {
			return err
		}
		// What was queued under the lost claim is dropped at dispatch:
		// the claim is not current (not_leader), a newer epoch's calls
		// were made (stale_epoch), or too little of it was left
		// (claim_ending).
		drops = m.ByLabel(examplee2e.MetricDispatchDropped, "reason")
		if drops["not_leader"]+drops["stale_epoch"]+drops["claim_ending"] == 0 {
			return fmt.Errorf("no drops counted by %s yet: %v", a.Identity, drops)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	m, err := a.Scrape(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("old leader %s: queue depth %v (capacity %d) when stalled; dispatcher drops by reason %v; queue drops by reason %v; patch outcomes %v; passes halted on a full queue %v; proxy %+v",
		a.Identity, depthAtStall, capacity, drops, m.ByLabel(examplee2e.MetricQueueDropped, "reason"), m.ByLabel(examplee2e.MetricDispatchPatches, "outcome"), m.Sum(examplee2e.MetricReconcileHalted), proxy.Stats())

	events, err := cp.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	users := []string{cluster.ServiceAccountUsername(ns, cfgA.ServiceAccount), cluster.ServiceAccountUsername(ns, cfgB.ServiceAccount)}
	checked, violations, late := claimWindowsCheck(events, ns, examplee2e.DefaultLeaseName, users, leaseDuration)
	t.Logf("%d status requests of the two replicas checked against their claims; %d arrived after the claim ended and were not applied: %v", checked, len(late), late)
	for _, v := range violations {
		t.Error(v)
	}
	if a.Exited() {
		t.Errorf("the old leader exited: %v", a.ExitError())
	}
}
