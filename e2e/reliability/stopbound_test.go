package reliability_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/e2e/examplee2e"
	"github.com/quietpatch/quietpatch/examples/httproute-status/controller"
	"github.com/quietpatch/quietpatch/examples/httproute-status/fixtures"
)

// TestSIGTERMStopsWithinBound checks the example controller's stated bound
// (controller.Options.StopBound: PatchTimeout + the claimer's CallTimeout
// + controller.StopGrace) for a leading replica given SIGTERM while the API
// server answers nothing.
//
// The replica reaches the API server through a fault proxy. First its
// watches break (the proxy resets its connections, as an API server that
// restarts does) and every watch request is answered 429 (as an overloaded
// API server's Priority and Fairness answers), while the other requests go
// through, the Lease's too, so that the replica keeps leading. client-go's
// reflectors relist by watch-list requests and, after each 429, sleep out
// their back-off (0.8 s doubling, plus up to as much again of jitter)
// without looking at their context (client-go v0.37,
// tools/cache/reflector.go, Reflector.watchList): after its third 429, a
// reflector sleeps at least 6.4 s. Once one has had three, every request
// is held (Fault.Stall: the vacate gets no answer and runs into its
// CallTimeout) and the replica gets SIGTERM. It must exit within the bound
// plus half of it as slack for two loaded cores (the stop itself costs
// milliseconds of CPU). A controller that waits for its informers exits
// only once that reflector wakes up, 6.4 s or more after its 429.
func TestSIGTERMStopsWithinBound(t *testing.T) {
	cp, binary, rbac := shared.get(t)
	ctx := testContext(t, 2*time.Minute)
	const (
		name          gatewayv1.GatewayController = "quietpatch.io/e2e-stopbound"
		ns                                        = "sb-system"
		leaseDuration                             = 3 * time.Second // the claimer's CallTimeout: 1 s
		patchTimeout                              = time.Second
		rejections                                = 3 // the routes' watch-lists answered 429 before SIGTERM
	)
	set := installSet(t, ctx, cp, fixtures.Config{Routes: 4, Namespaces: 1, Prefix: "sb", ControllerName: name})
	proxy := newProxy(t, cp)
	cfg := baseConfig(t, binary, rbac, ns, name)
	cfg.ServiceAccount, cfg.LeaseDuration, cfg.PatchTimeout = "sb", leaseDuration, patchTimeout
	throughProxy(t, ctx, proxy, &cfg)
	d := deploy(t, ctx, cp, cfg)
	r, err := d.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := examplee2e.WaitConverged(ctx, cp.AdminGatewayClient(), examplee2e.ExpectFixtures(set), poll, nil); err != nil {
		t.Fatal(err)
	}

	var watchLists watchListCounts // answered 429, by resource
	if err := proxy.SetFault(cluster.Fault{ErrorProbability: 1, ErrorCode: http.StatusTooManyRequests, Match: func(req *http.Request) bool {
		q := req.URL.Query()
		if q.Get("watch") != "true" && q.Get("watch") != "1" {
			return false
		}
		if q.Get("sendInitialEvents") == "true" {
			watchLists.add(req.URL.Path)
		}
		return true
	}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.ClearFault)
	proxy.ResetConnections()
	if err := examplee2e.Poll(ctx, 10*time.Millisecond, func(context.Context) error {
		if n, _ := watchLists.max(); n < rejections {
			return fmt.Errorf("at most %d watch-list requests of one resource answered 429 (%s), want %d", n, watchLists.String(), rejections)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if h, err := d.Holder(ctx); err != nil || h != r.Identity {
		t.Fatalf("the Lease is held by %q (%v), want %s still leading", h, err, r.Identity)
	}

	// Frozen: from now on the proxy answers nothing.
	if err := proxy.SetFault(cluster.Fault{Stall: true}); err != nil {
		t.Fatal(err)
	}
	bound := controller.Options{LeaseNamespace: ns, LeaseDuration: leaseDuration, PatchTimeout: patchTimeout}.StopBound()
	limit := bound + bound/2
	stoppedAt := time.Now()
	if err := syscall.Kill(r.PID(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Done():
	case <-ctx.Done():
		t.Fatalf("%s has not exited %v after SIGTERM (bound %v)", r.Identity, time.Since(stoppedAt).Round(time.Millisecond), bound)
	}
	took := time.Since(stoppedAt)
	t.Logf("%s exited %v after SIGTERM (bound %v, limit with slack %v); watch-list requests answered 429: %s",
		r.Identity, took.Round(time.Millisecond), bound, limit, watchLists.String())
	if took > limit {
		t.Errorf("%s exited %v after SIGTERM, more than its bound %v plus slack (%v)", r.Identity, took.Round(time.Millisecond), bound, limit)
	}
	tail := r.LogTail(10)
	if !strings.Contains(tail, "httproute-status: stopped") {
		t.Errorf("%s did not stop cleanly (exit status 0); last log lines:\n%s", r.Identity, tail)
	}
	if !strings.Contains(tail, "informers not stopped within the stop grace") {
		t.Logf("the informers stopped within controller.StopGrace: the scenario did not leave a reflector asleep")
	}
}

// watchListCounts counts watch-list requests by path. Safe for concurrent
// use.
type watchListCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *watchListCounts) add(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[path]++
}

// max returns the highest count and its path.
func (c *watchListCounts) max() (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, path := 0, ""
	for p, m := range c.n {
		if m > n {
			n, path = m, p
		}
	}
	return n, path
}

func (c *watchListCounts) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	paths := slices.Sorted(maps.Keys(c.n))
	parts := make([]string, len(paths))
	for i, p := range paths {
		parts[i] = fmt.Sprintf("%s %d", p, c.n[p])
	}
	return strings.Join(parts, ", ")
}
