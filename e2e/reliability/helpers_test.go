package reliability_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/e2e/examplee2e"
	"github.com/quietpatch/quietpatch/examples/httproute-status/fixtures"
)

// Timings shared by the controller tests: short enough that a test takes
// seconds, long enough that two busy cores do not make leadership flap.
const (
	interval = time.Second // --reconcile-interval
	kubeQPS  = 200         // --kube-qps
	burst    = 400         // --kube-burst
	workers  = 4           // --workers
	poll     = 200 * time.Millisecond
)

// baseConfig is the Deployment configuration the controller tests start
// from.
func baseConfig(t *testing.T, binary string, rbac *examplee2e.RBAC, ns string, controller gatewayv1.GatewayController) examplee2e.Config {
	return examplee2e.Config{
		Binary:            binary,
		Dir:               t.TempDir(),
		RBAC:              rbac,
		Namespace:         ns,
		ControllerName:    string(controller),
		ReconcileInterval: interval,
		LeaseDuration:     3 * time.Second,
		RetryPeriod:       250 * time.Millisecond,
		PatchTimeout:      2 * time.Second,
		Workers:           workers,
		KubeQPS:           kubeQPS,
		KubeBurst:         burst,
		ReadyTimeout:      time.Minute,
		StopGrace:         5 * time.Second,
	}
}

// deploy starts a Deployment, stopped when the test ends; if the test
// failed, the replicas' last log lines are logged first.
func deploy(t *testing.T, ctx context.Context, cp *cluster.ControlPlane, cfg examplee2e.Config) *examplee2e.Deployment {
	t.Helper()
	d, err := examplee2e.Deploy(ctx, cp, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, r := range d.Replicas() {
				t.Logf("replica %s (pid %d), log %s:\n%s", r.Identity, r.PID(), r.LogPath, r.LogTail(30))
			}
		}
		if err := d.Stop(); err != nil {
			t.Errorf("stopping %s: %v", cfg.ServiceAccount, err)
		}
	})
	return d
}

// installSet generates a fixtures Set, creates its objects and deletes its
// routes when the test ends (before Deployments registered later stop).
func installSet(t *testing.T, ctx context.Context, cp *cluster.ControlPlane, cfg fixtures.Config) *fixtures.Set {
	t.Helper()
	set, err := fixtures.Generate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := examplee2e.Install(ctx, cp, set.Objects(), 8, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var apps []string
		for _, ns := range set.Namespaces {
			apps = append(apps, ns.Name)
		}
		if err := examplee2e.DeleteRoutes(ctx, cp, apps...); err != nil {
			t.Errorf("deleting routes: %v", err)
		}
	})
	return set
}

// dropEntry removes controller's entries from the route's status as the
// admin, so that the controller must write them again.
func dropEntry(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, nn types.NamespacedName, controller gatewayv1.GatewayController) {
	t.Helper()
	routes := cp.AdminGatewayClient().GatewayV1().HTTPRoutes(nn.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		r, err := routes.Get(ctx, nn.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		r.Status.Parents = slices.DeleteFunc(r.Status.Parents, func(p gatewayv1.RouteParentStatus) bool { return p.ControllerName == controller })
		_, err = routes.UpdateStatus(ctx, r, metav1.UpdateOptions{FieldManager: "quietpatch-e2e-saboteur"})
		return err
	})
	if err != nil {
		t.Fatalf("dropping the entry of %s from %s: %v", controller, nn, err)
	}
}

// routeName is the namespaced name of a route.
func routeName(r *gatewayv1.HTTPRoute) types.NamespacedName {
	return types.NamespacedName{Namespace: r.Namespace, Name: r.Name}
}

// newProxy starts a fault proxy in front of the API server, closed when
// the test ends.
func newProxy(t *testing.T, cp *cluster.ControlPlane) *cluster.FaultProxy {
	t.Helper()
	proxy, err := cp.NewFaultProxy()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := proxy.Close(); err != nil {
			t.Error(err)
		}
	})
	return proxy
}

// throughProxy makes the replicas of cfg reach the API server through
// proxy: a kubeconfig for cfg's ServiceAccount whose server is the proxy,
// passed as a --kubeconfig after the Deployment's own (the later flag wins).
func throughProxy(t *testing.T, ctx context.Context, proxy *cluster.FaultProxy, cfg *examplee2e.Config) {
	t.Helper()
	rc, err := proxy.ConfigFor(ctx, cfg.Namespace, cfg.ServiceAccount)
	if err != nil {
		t.Fatal(err)
	}
	viaProxy := filepath.Join(cfg.Dir, cfg.ServiceAccount+"-via-proxy.kubeconfig")
	if err := examplee2e.WriteKubeconfig(viaProxy, rc); err != nil {
		t.Fatal(err)
	}
	cfg.ExtraArgs = append(cfg.ExtraArgs, "--kubeconfig="+viaProxy)
}

// waitProxyIdle waits until proxy holds no request: every request a fault
// delayed has been answered upstream or has ended.
func waitProxyIdle(t *testing.T, ctx context.Context, proxy *cluster.FaultProxy) {
	t.Helper()
	if err := examplee2e.Poll(ctx, 20*time.Millisecond, func(context.Context) error {
		if s := proxy.Stats(); s.Delaying > 0 {
			return fmt.Errorf("%d requests still held by the proxy or on their way upstream", s.Delaying)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
