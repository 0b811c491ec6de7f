package reliability_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/e2e/examplee2e"
	"github.com/quietpatch/quietpatch/examples/httproute-status/fixtures"
)

// TestEditDuringFirstConvergence: a pipeline (quietpatch.New, four patch
// calls in flight, each status PATCH delayed by kneeLatency in a
// FaultProxy) converges QP_RELIABILITY_KNEE_ROUTES routes (default 2,000)
// for the first time: about routes × (kneeLatency + the server's time) /
// 4, some 15–25 s. Its Source holds the informer's initial Adds back from
// the pipeline's event handler until the pipeline leads, so that they
// reach it while it leads (as they do at 30,000 routes and more, when
// their delivery outlasts the Lease acquisition). Once a fifth of the
// routes has its status, the test
// edits kneeEdits of those: each edit's status must be written within
// kneeBound — a few calls in the fresh lane, with slack for two loaded
// cores —, long before the convergence ends. With the initial Adds in the
// fresh lane an edit waited behind every route not yet written (17.0 s
// of a 21.6 s convergence here, against 0.1 s without them).
func TestEditDuringFirstConvergence(t *testing.T) {
	cp := shared.controlPlane(t)
	ctx := testContext(t, 3*time.Minute)
	const (
		controller  gatewayv1.GatewayController = "quietpatch.io/e2e-knee"
		ns                                      = "kn-system"
		kneeLatency                             = 25 * time.Millisecond
		kneeEdits                               = 5
		kneeBound                               = 3 * time.Second
	)
	n := envInt(t, "QP_RELIABILITY_KNEE_ROUTES", 2000)
	installSet(t, ctx, cp, fixtures.Config{Routes: n, Namespaces: 4, Prefix: "kn", ControllerName: controller})
	proxy := newProxy(t, cp)
	status, err := proxy.ConfigFor(ctx, ns, "knee") // creates ns
	if err != nil {
		t.Fatal(err)
	}
	status.QPS = -1
	if err := cp.GrantClusterRole(ctx, ns, "knee", "cluster-admin"); err != nil {
		t.Fatal(err)
	}
	if err := proxy.SetFault(cluster.Fault{Latency: kneeLatency, Match: func(r *http.Request) bool {
		return r.Method == http.MethodPatch && strings.HasSuffix(r.URL.Path, "/status")
	}}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d routes created", n)
	p := startKneePipeline(t, ctx, cp, status, kneeConfig{Namespace: ns, Lease: "kn", Controller: controller})
	begin := time.Now()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pipeline: %s", p.stats())
		}
	})

	// Wait until a fifth of the routes has its status, then edit routes
	// that have it.
	var edits []kneeEdit
	if err := examplee2e.Poll(ctx, 20*time.Millisecond, func(context.Context) error {
		written := p.written()
		if len(written) < n/5 {
			return fmt.Errorf("%d of %d routes written", len(written), n)
		}
		for _, k := range written[:kneeEdits] {
			edits = append(edits, kneeEdit{key: k, at: time.Now()})
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"1"}}}`, kneeAnnotation)
			if _, err := cp.AdminGatewayClient().GatewayV1().HTTPRoutes(k.Namespace).Patch(ctx, k.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				return examplee2e.Permanent(err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	edited := time.Since(begin)
	// Each edit's status, then the whole convergence.
	var slowest time.Duration
	for i := range edits {
		e := &edits[i]
		if err := examplee2e.Poll(ctx, 20*time.Millisecond, func(context.Context) error {
			if got := p.current(e.key); got != "edit=1" {
				return fmt.Errorf("%s: status %q, want %q", e.key, got, "edit=1")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		e.took = time.Since(e.at)
		slowest = max(slowest, e.took)
	}
	afterEdits := time.Since(begin)
	if err := examplee2e.Poll(ctx, 50*time.Millisecond, func(context.Context) error {
		if w := len(p.written()); w < n {
			return fmt.Errorf("%d of %d routes written", w, n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	converged := time.Since(begin)
	var took []string
	for _, e := range edits {
		took = append(took, fmt.Sprintf("%.2f", e.took.Seconds()))
	}
	t.Logf("%d routes: first convergence %.1f s; %d edits at %.1f s, their statuses written after %s s (all by %.1f s); pipeline: %+v",
		n, converged.Seconds(), kneeEdits, edited.Seconds(), strings.Join(took, " "), afterEdits.Seconds(), p.stats())
	if slowest > kneeBound {
		t.Errorf("an edit made during the first convergence waited %v for its status, want at most %v (the convergence took %v)",
			slowest.Round(time.Millisecond), kneeBound, converged.Round(time.Millisecond))
	}
	if left := converged - afterEdits; slowest <= kneeBound && left < 2*kneeBound {
		t.Logf("the convergence ended %v after the edits' statuses: too soon for the test to tell a fresh edit from the backlog", left.Round(time.Millisecond))
	}
}

// kneeEdit is one route edited during the first convergence.
type kneeEdit struct {
	key  types.NamespacedName
	at   time.Time
	took time.Duration // edit → its status in the pipeline's cache
}
