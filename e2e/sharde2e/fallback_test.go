package sharde2e_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/e2e/examplee2e"
	"github.com/quietpatch/quietpatch/examples/httproute-status/fixtures"
)

// unfilteredWarning is the line a replica logs, once, when the server
// returned routes outside a shard's range.
const unfilteredWarning = "quietpatch: the API server does not filter by ShardSelector"

// TestShardedFallbackWithoutGate: on an API server without the
// ShardedListAndWatch gate, which ignores ShardSelector, two replicas with
// K = 4 still split the routes 2/2, every route converges, each replica's
// caches hold exactly its shards' routes (filtered client-side), each
// reports quietpatch_shard_unfiltered 1 and logs the warning once.
func TestShardedFallbackWithoutGate(t *testing.T) {
	_, binary, rbac := shared.get(t) // the binary and the RBAC
	ctx := testContext(t, 2*time.Minute)
	begin := time.Now()
	cp, err := cluster.Start(ctx, cluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	})
	t.Logf("control plane without the gate started in %s", seconds(time.Since(begin)))
	const (
		k          = 4
		ns         = "shard-fallback"
		controller = gatewayv1.GatewayController("quietpatch.io/e2e-shards-fallback")
	)
	set := installSet(t, ctx, cp, fixtures.Config{Routes: 120, Namespaces: 2, Prefix: "shf", ControllerName: controller})
	if _, err := cp.AdminClient().CoreV1().Namespaces().Create(ctx, nsObject(ns), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	g := &group{t: t, cp: cp, base: baseConfig(binary, rbac, ns, controller, k), k: k}
	start := time.Now()
	g.add(ctx, "a")
	g.add(ctx, "b")
	s, at, err := g.waitSpread(ctx, 4*leaseDuration+2*slack, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("spread %s %s after the start", s, seconds(at.Sub(start)))
	if _, err := examplee2e.WaitConverged(ctx, cp.AdminGatewayClient(), examplee2e.ExpectFixtures(set), 200*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	if err := g.waitObjects(ctx, 2*slack, s, 1); err != nil {
		t.Fatalf("caches: %v", err)
	}
	for _, m := range g.ms {
		n, err := countLines(m.replica().LogPath, unfilteredWarning)
		if err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("%s logged %q %d times, want once", m.id(), unfilteredWarning, n)
		}
	}
	t.Logf("converged, caches filtered client-side, warned once each, %s after the start", seconds(time.Since(start)))
}
