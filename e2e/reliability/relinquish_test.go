package reliability_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/e2e/examplee2e"
)

// TestRelinquishNoStatusWriteAfterVacate checks the promise "no status
// write lands after our vacate or after the successor's acquisition" for a
// replica built from the library's parts (a leader.Claimer, a
// queue of route keys and quietpatch's dispatcher (internal/pipeline) with a
// MergePatcher) that gives the Lease up with Relinquish while
// status patches are in flight: new calls stop and queued keys are
// dropped, the calls in flight run until the API server answers, and the
// Lease is vacated only once every call got its answer (after a call that
// ended without one, the replica does not vacate and lets its claim run
// out).
//
// Replica a patches HTTPRoute statuses through a fault proxy that holds
// every status PATCH for hold and then forwards it whether or not the
// client still waits (Fault.Detach); replica b, a claimer only, is the
// successor. Once every route carries a's entry (the pipeline works, RBAC
// is in force), a queues a new status for every route and, with --workers
// patches held in the proxy, relinquishes. Every version of the Lease and
// the routes is recorded from the start; checkHandover orders the status
// writes that landed against the Lease's writes by resourceVersion: none of
// a's may land after its vacate or b's acquisition (b writes no status at
// all), and without a vacate b must have waited out a's claim. A violation
// is reported per route with the late writes' resourceVersions and a's
// requests for it from the audit log.
func TestRelinquishNoStatusWriteAfterVacate(t *testing.T) {
	cp, _, rbac := shared.get(t)
	ctx := testContext(t, 2*time.Minute)
	const (
		controller    gatewayv1.GatewayController = "quietpatch.io/e2e-relinquish"
		leaseDuration                             = 4 * time.Second // renewals leave >= 2.67 s of claim for a call
		retryPeriod                               = 250 * time.Millisecond
		patchTimeout                              = 3 * time.Second
		// hold is how long a write is on its way: short against the claim
		// left at any call (>= RenewGrace, 2.67 s), so that a library
		// keeping its promise gets every answer before its claim ends.
		hold    = 500 * time.Millisecond
		backoff = time.Minute // a stays out of the race for the rest of the test
		n       = 40
	)
	ns, err := cp.NewNamespace(ctx, "rq-")
	if err != nil {
		t.Fatal(err)
	}
	leaseName := examplee2e.DefaultLeaseName // the name the example's RBAC grants
	routeList := createRoutes(t, ctx, cp, ns, n)
	lease := recordLease(t, ctx, cp, ns, leaseName)
	routes := record(t, ctx, cp, routesGVR, ns, metav1.ListOptions{})
	proxy := newProxy(t, cp)
	identity := func(sa string) *rest.Config {
		rc, err := cp.ConfigFor(ctx, ns, sa)
		if err != nil {
			t.Fatal(err)
		}
		if err := rbac.Apply(ctx, cp.AdminClient(), ns, sa); err != nil {
			t.Fatal(err)
		}
		rc.QPS, rc.Burst = kubeQPS, burst
		return rc
	}
	rcA, rcB := identity("rq-a"), identity("rq-b")
	a := startLibReplica(t, libConfig{
		Namespace: ns, Lease: leaseName, Identity: "rq-a", LeaseDuration: leaseDuration, RetryPeriod: retryPeriod,
		Leases: rcA, Status: proxy.Config(rcA), Workers: workers, PatchTimeout: patchTimeout,
	})
	if err := examplee2e.Poll(ctx, 20*time.Millisecond, func(context.Context) error {
		if !a.leads() {
			return fmt.Errorf("%s does not hold the Lease (holder %q)", a.id, a.holder())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b := startLibReplica(t, libConfig{
		Namespace: ns, Lease: leaseName, Identity: "rq-b", LeaseDuration: leaseDuration, RetryPeriod: retryPeriod, Leases: rcB,
	})
	applyStatus(t, ctx, cp, a, ns, controller, "warm-up")
	if err := examplee2e.Poll(ctx, 20*time.Millisecond, func(context.Context) error {
		if h := b.holder(); h != a.id {
			return fmt.Errorf("%s sees %q hold the Lease", b.id, h)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	if err := proxy.SetFault(cluster.Fault{Match: isRouteStatusPatch, Latency: hold, Detach: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.ClearFault)
	for _, r := range routeList {
		cur, err := cp.AdminGatewayClient().GatewayV1().HTTPRoutes(ns).Get(ctx, r.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.patchRoute(cur, entry(cur, controller, "in flight at the relinquish")); err != nil {
			t.Fatal(err)
		}
	}
	if err := examplee2e.Poll(ctx, 5*time.Millisecond, func(context.Context) error {
		if s := proxy.Stats(); s.Delaying < workers {
			return fmt.Errorf("%d status patches held in the proxy, want %d", s.Delaying, workers)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	held := proxy.Stats().Delaying
	relinquishedAt := time.Now()
	relErr := a.relinquish(ctx, backoff)
	t.Logf("%s relinquished with %d status patches held in the proxy: Relinquish returned %v after %v",
		a.id, held, relErr, time.Since(relinquishedAt).Round(time.Millisecond))

	h, err := waitHandover(ctx, lease, a.id, b.id)
	if err != nil {
		t.Fatal(err)
	}
	waitProxyIdle(t, ctx, proxy)
	vs := syncRoutes(t, ctx, cp, routes, routeName(routeList[0]))
	events, err := cp.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("proxy: %+v", proxy.Stats())
	checkHandover(t, h, cluster.StatusChanges(vs), events,
		cluster.ServiceAccountUsername(ns, a.id), cluster.ServiceAccountUsername(ns, b.id), relinquishedAt, leaseDuration)
}

// createRoutes creates n HTTPRoutes in ns with one parentRef each (a
// Gateway that does not exist: no controller of the tests writes their
// status), deleted when the test ends.
func createRoutes(t *testing.T, ctx context.Context, cp *cluster.ControlPlane, ns string, n int) []*gatewayv1.HTTPRoute {
	t.Helper()
	c := cp.AdminGatewayClient().GatewayV1().HTTPRoutes(ns)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := examplee2e.DeleteRoutes(ctx, cp, ns); err != nil {
			t.Error(err)
		}
	})
	out := make([]*gatewayv1.HTTPRoute, 0, n)
	for i := range n {
		r, err := c.Create(ctx, &gatewayv1.HTTPRoute{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("route-%03d", i)},
			Spec: gatewayv1.HTTPRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{
				ParentRefs: []gatewayv1.ParentReference{{Name: "no-such-gateway"}},
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// entry is the status of route with one entry of controller, for its
// first parentRef, whose Accepted condition carries message.
func entry(route *gatewayv1.HTTPRoute, controller gatewayv1.GatewayController, message string) []gatewayv1.RouteParentStatus {
	return []gatewayv1.RouteParentStatus{{
		ParentRef:      route.Spec.ParentRefs[0],
		ControllerName: controller,
		Conditions: []metav1.Condition{{
			Type: string(gatewayv1.RouteConditionAccepted), Status: metav1.ConditionTrue, Reason: string(gatewayv1.RouteReasonAccepted),
			Message: message, ObservedGeneration: route.Generation, LastTransitionTime: metav1.Now(),
		}},
	}}
}

// hasEntry reports whether route's status has controller's entry with
// message.
func hasEntry(route *gatewayv1.HTTPRoute, controller gatewayv1.GatewayController, message string) bool {
	for _, p := range route.Status.Parents {
		if c := meta.FindStatusCondition(p.Conditions, string(gatewayv1.RouteConditionAccepted)); p.ControllerName == controller && c != nil && c.Message == message {
			return true
		}
	}
	return false
}

// applyStatus has r's dispatcher give every route in ns controller's entry
// with message, queueing again (from a fresh read) every route still
// without it, until all have it.
func applyStatus(t *testing.T, ctx context.Context, cp *cluster.ControlPlane, r *libReplica, ns string, controller gatewayv1.GatewayController, message string) {
	t.Helper()
	if err := examplee2e.Poll(ctx, 500*time.Millisecond, func(ctx context.Context) error {
		l, err := cp.AdminGatewayClient().GatewayV1().HTTPRoutes(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		missing := 0
		for i := range l.Items {
			route := &l.Items[i]
			if hasEntry(route, controller, message) {
				continue
			}
			missing++
			if err := r.patchRoute(route, entry(route, controller, message)); err != nil {
				return err
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d routes without the entry %q", missing, len(l.Items), message)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
