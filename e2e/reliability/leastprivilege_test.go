package reliability_test

import (
	"slices"
	"testing"
	"time"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/e2e/examplee2e"
	"github.com/quietpatch/quietpatch/examples/httproute-status/fixtures"
)

// narrowed returns a copy of rbac whose ClusterRoles are renamed (suffix)
// and whose httproutes/status rule allows only the named routes, with the
// ClusterRoleBindings pointing at the renamed roles. The Roles (the Lease)
// are unchanged.
func narrowed(t *testing.T, rbac *examplee2e.RBAC, suffix string, allowed []string) *examplee2e.RBAC {
	t.Helper()
	out := &examplee2e.RBAC{Roles: rbac.Roles, RoleBindings: rbac.RoleBindings, Files: rbac.Files}
	found := false
	for _, cr := range rbac.ClusterRoles {
		c := cr.DeepCopy()
		c.Name += suffix
		for i, r := range c.Rules {
			if slices.Contains(r.Resources, "httproutes/status") {
				if len(r.Resources) != 1 {
					t.Fatalf("ClusterRole %s: the httproutes/status rule also grants %v; cannot narrow it alone", cr.Name, r.Resources)
				}
				c.Rules[i].ResourceNames = allowed
				found = true
			}
		}
		out.ClusterRoles = append(out.ClusterRoles, c)
	}
	if !found {
		t.Fatal("the deploy RBAC has no httproutes/status rule")
	}
	for _, b := range rbac.ClusterRoleBindings {
		c := b.DeepCopy()
		c.Name += suffix
		if c.RoleRef.Kind == "ClusterRole" {
			c.RoleRef.Name += suffix
		}
		out.ClusterRoleBindings = append(out.ClusterRoleBindings, c)
	}
	return out
}

// TestLeastPrivilege: under exactly the deploy RBAC every route converges.
// Under the same RBAC narrowed so that one route's status may not be
// patched, every other route converges, the forbidden patch is refused
// with 403, counted as outcome "forbidden", and attempted at most about
// once per reconcile pass — never retried in a loop.
func TestLeastPrivilege(t *testing.T) {
	cp, binary, rbac := shared.get(t)
	ctx := testContext(t, 2*time.Minute)

	t.Run("deploy RBAC", func(t *testing.T) {
		const controller gatewayv1.GatewayController = "quietpatch.io/e2e-lp"
		set := installSet(t, ctx, cp, fixtures.Config{Routes: 150, Namespaces: 3, Prefix: "lp", ControllerName: controller})
		cfg := baseConfig(t, binary, rbac, "lp-system", controller)
		begin := time.Now()
		deploy(t, ctx, cp, cfg)
		census, err := examplee2e.WaitConverged(ctx, cp.AdminGatewayClient(), examplee2e.ExpectFixtures(set), poll, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d routes converged %v after start under exactly %v", census.Converged, time.Since(begin).Round(time.Millisecond), rbac.Files)
		// Nothing the controller sent was refused.
		refused, err := cp.FindAuditEvents(cluster.AuditFilter{Username: cluster.ServiceAccountUsername(cfg.Namespace, "httproute-status"), Code: 403})
		if err != nil {
			t.Fatal(err)
		}
		if len(refused) != 0 {
			t.Errorf("%d writes refused with 403 under the deploy RBAC, e.g. %s %s/%s", len(refused), refused[0].Verb, refused[0].ObjectRef.Resource, refused[0].ObjectRef.Name)
		}
	})

	t.Run("one route forbidden", func(t *testing.T) {
		const controller gatewayv1.GatewayController = "quietpatch.io/e2e-lp-narrow"
		set := installSet(t, ctx, cp, fixtures.Config{Routes: 30, Namespaces: 2, Prefix: "lpn", ControllerName: controller})
		victim := set.Routes[0]
		var allowed []string
		want := examplee2e.ExpectFixtures(set)
		for _, r := range set.Routes[1:] {
			allowed = append(allowed, r.Name)
		}
		delete(want, routeName(victim))
		const sa = "httproute-status-narrow"
		cfg := baseConfig(t, binary, narrowed(t, rbac, "-narrow", allowed), "lpn-system", controller)
		cfg.ServiceAccount = sa
		user := cluster.ServiceAccountUsername(cfg.Namespace, sa)
		d := deploy(t, ctx, cp, cfg)
		if _, err := examplee2e.WaitConverged(ctx, cp.AdminGatewayClient(), want, poll, nil); err != nil {
			t.Fatal(err)
		}
		leader, err := d.WaitLeader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		forbidden := cluster.AuditFilter{Verb: "patch", Username: user, Resource: "httproutes", Subresource: "status", Namespace: victim.Namespace, Name: victim.Name}
		if _, err := cp.WaitForAuditEvent(ctx, forbidden); err != nil {
			t.Fatalf("no status patch of the forbidden route %s/%s in the audit log: %v", victim.Namespace, victim.Name, err)
		}

		// Count attempts over a window measured in the leader's passes.
		m0, err := leader.Scrape(ctx)
		if err != nil {
			t.Fatal(err)
		}
		a0, err := cp.FindAuditEvents(forbidden)
		if err != nil {
			t.Fatal(err)
		}
		const passes = 5
		windowStart := time.Now()
		if err := examplee2e.WaitPasses(ctx, []*examplee2e.Replica{leader}, passes); err != nil {
			t.Fatal(err)
		}
		window := time.Since(windowStart)
		m1, err := leader.Scrape(ctx)
		if err != nil {
			t.Fatal(err)
		}
		a1, err := cp.FindAuditEvents(forbidden)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range a1 {
			if e.ResponseStatus == nil || e.ResponseStatus.Code != 403 {
				t.Errorf("status patch of the forbidden route answered %v, want 403", e.ResponseStatus)
			}
		}
		attempts := len(a1) - len(a0)
		didPasses := m1.Passes() - m0.Passes()
		forb := m1.Sum(examplee2e.MetricDispatchPatches, "outcome", "forbidden")
		t.Logf("forbidden route %s/%s: %d attempts (all 403) over %v passes in %v; dispatch outcome forbidden = %v (total since start)",
			victim.Namespace, victim.Name, attempts, didPasses, window.Round(time.Millisecond), forb)
		// One attempt per pass, plus one for a pass in progress at each end.
		if limit := int(didPasses) + 2; attempts > limit {
			t.Errorf("%d attempts to patch the forbidden route over %v passes, want at most %d: retried in a loop", attempts, didPasses, limit)
		}
		if forb < float64(len(a1)) {
			t.Errorf("dispatch outcome forbidden = %v, want >= %d (the 403s the audit log shows)", forb, len(a1))
		}
		// Every other write of this identity succeeded.
		others, err := cp.FindAuditEvents(cluster.AuditFilter{Username: user, Code: 403})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range others {
			if e.ObjectRef == nil || e.ObjectRef.Name != victim.Name {
				t.Errorf("unexpected 403: %s %v", e.Verb, e.ObjectRef)
			}
		}
	})
}
