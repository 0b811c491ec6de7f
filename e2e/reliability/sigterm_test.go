package reliability_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/e2e/examplee2e"
	"github.com/quietpatch/quietpatch/examples/httproute-status/fixtures"
)

// isRouteStatusPatch selects the PATCH requests of HTTPRoute statuses.
func isRouteStatusPatch(r *http.Request) bool {
	return r.Method == http.MethodPatch && strings.Contains(r.URL.Path, "/httproutes/") && strings.HasSuffix(r.URL.Path, "/status")
}

// TestSIGTERMNoStatusWriteAfterVacate checks the promise "no status write
// lands after our vacate or after the successor's acquisition" for a
// replica of the example controller stopped with SIGTERM while its status
// patches are in flight: new calls stop and queued keys are dropped,
// but the calls in flight run until the API server answers, and the Lease
// is vacated only once every call got its answer (after a call that ended
// without one, the replica does not vacate and lets its claim run out).
//
// Two replicas, each its own process and ServiceAccount, reach the API
// server through a fault proxy each. The leader's proxy holds every route
// status PATCH for hold and then forwards it whether or not the client
// still waits (Fault.Detach): a patch the client cancelled still lands, as
// a write already on its way to etcd does. The successor's proxy holds its
// status PATCHes for successorHold, longer, until the leader has exited
// and its held patches have landed; otherwise the successor's own patches
// of the same routes would come first and the resourceVersion
// precondition would make the late writes fail, hiding them. Every route's
// entry is taken away, and once the leader has --workers patches in flight
// and more queued, it gets SIGTERM.
//
// Every version of the Lease and of the routes is recorded from the start,
// and checkHandover orders the status writes that landed against the
// Lease's writes by resourceVersion: none of the stopped leader's may come
// after its vacate or after the successor's acquisition; if it did not
// vacate, the successor must have acquired a full lease duration after the
// leader's last renewal was seen. A violation is reported per route, with
// the resourceVersions of the late writes and the stopped leader's status
// requests for it as the audit log recorded them.
func TestSIGTERMNoStatusWriteAfterVacate(t *testing.T) {
	cp, binary, rbac := shared.get(t)
	ctx := testContext(t, 3*time.Minute)
	const (
		controller    gatewayv1.GatewayController = "quietpatch.io/e2e-sigterm"
		ns                                        = "sg-system"
		leaseDuration                             = 4 * time.Second // renewals leave >= 2.67 s of claim for a call
		patchTimeout                              = 3 * time.Second
		// hold is how long a write is on its way: short against the claim
		// left at any call (>= RenewGrace, 2.67 s), so that a library
		// keeping its promise gets every answer before its claim ends.
		hold          = 500 * time.Millisecond
		successorHold = 1500 * time.Millisecond // > hold + a second: the successor cannot overwrite a late write first
	)
	set := installSet(t, ctx, cp, fixtures.Config{Routes: 100, Namespaces: 2, Prefix: "sg", ControllerName: controller})
	want := examplee2e.ExpectFixtures(set)
	lease := recordLease(t, ctx, cp, ns, examplee2e.DefaultLeaseName)
	routes := record(t, ctx, cp, routesGVR, "", metav1.ListOptions{})

	proxyA, proxyB := newProxy(t, cp), newProxy(t, cp)
	cfgA := baseConfig(t, binary, rbac, ns, controller)
	cfgA.ServiceAccount, cfgA.LeaseDuration, cfgA.PatchTimeout = "sg-a", leaseDuration, patchTimeout
	cfgA.StopGrace = 2 * leaseDuration
	throughProxy(t, ctx, proxyA, &cfgA)
	dA := deploy(t, ctx, cp, cfgA)
	a, err := dA.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := examplee2e.WaitConverged(ctx, cp.AdminGatewayClient(), want, poll, nil); err != nil {
		t.Fatal(err)
	}
	cfgB := baseConfig(t, binary, rbac, ns, controller)
	cfgB.ServiceAccount, cfgB.LeaseDuration, cfgB.PatchTimeout = "sg-b", leaseDuration, patchTimeout
	throughProxy(t, ctx, proxyB, &cfgB)
	b := deploy(t, ctx, cp, cfgB).Replicas()[0]
	if h, err := dA.Holder(ctx); err != nil || h != a.Identity {
		t.Fatalf("the Lease is held by %q (%v), want %s", h, err, a.Identity)
	}

	if err := proxyA.SetFault(cluster.Fault{Match: isRouteStatusPatch, Latency: hold, Detach: true}); err != nil {
		t.Fatal(err)
	}
	if err := proxyB.SetFault(cluster.Fault{Match: isRouteStatusPatch, Latency: successorHold}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxyA.ClearFault)
	t.Cleanup(proxyB.ClearFault)
	for _, r := range set.Routes {
		dropEntry(ctx, t, cp, routeName(r), controller)
	}
	var inFlight, depth float64
	if err := examplee2e.Poll(ctx, 20*time.Millisecond, func(ctx context.Context) error {
		m, err := a.Scrape(ctx)
		if err != nil {
			return err
		}
		inFlight, depth = m.Sum(examplee2e.MetricDispatchInFlight), m.Sum(examplee2e.MetricQueueDepth)
		if inFlight < workers || depth < workers {
			return fmt.Errorf("%v patches in flight, %v queued; want %d and more", inFlight, depth, workers)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	stoppedAt := time.Now()
	a.Stop(cfgA.StopGrace)
	t.Logf("%s got SIGTERM with %v status patches in flight and %v queued; it exited %v later (%v)",
		a.Identity, inFlight, depth, time.Since(stoppedAt).Round(time.Millisecond), a.ExitError())

	// Everything the leader sent has landed or failed once its proxy holds
	// nothing; then the successor may go fast.
	waitProxyIdle(t, ctx, proxyA)
	h, err := waitHandover(ctx, lease, a.Identity, b.Identity)
	if err != nil {
		t.Fatal(err)
	}
	proxyB.ClearFault()
	if _, err := examplee2e.WaitConverged(ctx, cp.AdminGatewayClient(), want, poll, nil); err != nil {
		t.Fatal(err)
	}
	// The successor idle: its status requests are all in the audit log.
	if err := examplee2e.Settle(ctx, []*examplee2e.Replica{b}); err != nil {
		t.Fatal(err)
	}
	vs := syncRoutes(t, ctx, cp, routes, routeName(set.Routes[0]))
	events, err := cp.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	var apps []string
	for _, n := range set.Namespaces {
		apps = append(apps, n.Name)
	}
	writes := slices.DeleteFunc(cluster.StatusChanges(vs), func(v cluster.Version) bool { return !slices.Contains(apps, v.Namespace) })
	t.Logf("proxy of %s: %+v", a.Identity, proxyA.Stats())
	checkHandover(t, h, writes, events, dA.Username(), cluster.ServiceAccountUsername(ns, cfgB.ServiceAccount), stoppedAt, leaseDuration)
}
