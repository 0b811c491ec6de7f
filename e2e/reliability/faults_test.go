package reliability_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/e2e/examplee2e"
	"github.com/quietpatch/quietpatch/examples/httproute-status/fixtures"
)

// TestSlowOrFailingAPI: a controller with QP_RELIABILITY_FAULT_ROUTES
// routes (default 2,000) reaches the API server through a FaultProxy that
// adds 2 s latency, stalls, answers 50% of requests with 503, then resets
// connections, each for 3 intervals while routes change. During the faults
// the controller's heap stays under 3× its heap after the first
// convergence + 16 MiB, its patch calls end at their deadline (timeouts
// counted, never more than --workers in flight); after each fault clears
// the changed routes converge within 2 intervals (+3 s slack for watches
// to resume on two busy cores); at the end its goroutine count is back to
// its count before the faults (+20).
func TestSlowOrFailingAPI(t *testing.T) {
	cp, binary, rbac := shared.get(t)
	ctx := testContext(t, 3*time.Minute)
	const (
		controller gatewayv1.GatewayController = "quietpatch.io/e2e-faults"
		ns                                     = "ft-system"
		changed                                = 20
		hold                                   = 3 * interval
		slack                                  = 3 * time.Second
	)
	n := envInt(t, "QP_RELIABILITY_FAULT_ROUTES", 2000)
	set := installSet(t, ctx, cp, fixtures.Config{Routes: n, Namespaces: 4, Prefix: "ft", ControllerName: controller})
	want := examplee2e.ExpectFixtures(set)
	proxy := newProxy(t, cp)
	cfg := baseConfig(t, binary, rbac, ns, controller)
	cfg.ServiceAccount = "ft"
	cfg.LeaseDuration = 15 * time.Second // the faults are the subject, not failover
	throughProxy(t, ctx, proxy, &cfg)
	begin := time.Now()
	d := deploy(t, ctx, cp, cfg)
	r := d.Replicas()[0]
	if _, err := examplee2e.WaitConverged(ctx, cp.AdminGatewayClient(), want, poll, nil); err != nil {
		t.Fatal(err)
	}
	m0, err := r.Scrape(ctx)
	if err != nil {
		t.Fatal(err)
	}
	heap0, g0 := m0.Sum("go_memstats_heap_alloc_bytes"), m0.Sum("go_goroutines")
	heapBound := 3*heap0 + 16<<20
	t.Logf("%d routes converged in %v; heap %.1f MiB, %v goroutines; heap bound %.1f MiB",
		n, time.Since(begin).Round(time.Millisecond), heap0/(1<<20), g0, heapBound/(1<<20))

	next := 0
	for _, f := range []struct {
		name  string
		fault cluster.Fault
	}{
		{"latency 2s", cluster.Fault{Latency: 2 * time.Second}},
		{"stall", cluster.Fault{Stall: true}},
		{"50% 503", cluster.Fault{ErrorProbability: 0.5, ErrorCode: 503}},
		{"resets", cluster.Fault{ResetProbability: 0.5}},
	} {
		if err := proxy.SetFault(f.fault); err != nil {
			t.Fatal(err)
		}
		for _, route := range set.Routes[next : next+changed] {
			dropEntry(ctx, t, cp, routeName(route), controller)
		}
		next += changed
		// Hold the fault, sampling the controller's own endpoint (not
		// through the proxy).
		var maxHeap, maxInFlight float64
		until := time.Now().Add(hold)
		for time.Now().Before(until) {
			m, err := r.Scrape(ctx)
			if err != nil {
				t.Fatal(err)
			}
			maxHeap = max(maxHeap, m.Sum("go_memstats_heap_alloc_bytes"))
			maxInFlight = max(maxInFlight, m.Sum(examplee2e.MetricDispatchInFlight))
			select {
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
		proxy.ClearFault()
		cleared := time.Now()
		if _, err := examplee2e.WaitConverged(ctx, cp.AdminGatewayClient(), want, 100*time.Millisecond, nil); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		took := time.Since(cleared)
		m, err := r.Scrape(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: max heap %.1f MiB, max in flight %v; converged %v after it cleared; outcomes so far %v",
			f.name, maxHeap/(1<<20), maxInFlight, took.Round(time.Millisecond), m.ByLabel(examplee2e.MetricDispatchPatches, "outcome"))
		if maxHeap > heapBound {
			t.Errorf("%s: heap reached %.1f MiB, bound %.1f MiB", f.name, maxHeap/(1<<20), heapBound/(1<<20))
		}
		if maxInFlight > workers {
			t.Errorf("%s: %v patch calls in flight, want <= %d workers", f.name, maxInFlight, workers)
		}
		if limit := 2*interval + slack; took > limit {
			t.Errorf("%s: converged %v after the fault cleared, want <= %v", f.name, took, limit)
		}
		if r.Exited() {
			t.Fatalf("%s: the controller exited: %v", f.name, r.ExitError())
		}
	}
	m, err := r.Scrape(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if to := m.Sum(examplee2e.MetricDispatchPatches, "outcome", "timeout"); to == 0 {
		t.Errorf("no patch call ended at its deadline under latency or stall")
	}
	var g float64
	if err := examplee2e.Poll(ctx, 200*time.Millisecond, func(ctx context.Context) error {
		m, err := r.Scrape(ctx)
		if err != nil {
			return err
		}
		if g = m.Sum("go_goroutines"); g > g0+20 {
			return fmt.Errorf("%v goroutines, %v before the faults", g, g0)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	t.Logf("goroutines %v before the faults, %v after; proxy %+v", g0, g, proxy.Stats())
}
