package sharde2e_test

import (
	"context"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/metrics"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/e2e/examplee2e"
	"github.com/quietpatch/quietpatch/internal/pipeline"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
)

// limiterWaits counts the requests of this process that went through a
// client-go client-side rate limiter (metrics.RateLimiterLatency, which
// client-go calls for every request whose client has one), by whether
// they were Lease requests, and how long the Lease requests waited.
type limiterWaits struct {
	leases, waited, others atomic.Int64
	maxWait                atomic.Int64 // nanoseconds
}

func (w *limiterWaits) Observe(_ context.Context, _ string, u url.URL, latency time.Duration) {
	if !strings.Contains(u.Path, "/leases") {
		w.others.Add(1)
		return
	}
	w.leases.Add(1)
	if latency >= time.Millisecond {
		w.waited.Add(1)
	}
	for {
		m := w.maxWait.Load()
		if int64(latency) <= m || w.maxWait.CompareAndSwap(m, int64(latency)) {
			return
		}
	}
}

// waits is the process's hook: client-go takes one, once.
var (
	waits         limiterWaits
	registerWaits sync.Once
)

// burnCPU keeps every core busy until ctx ends.
func burnCPU(ctx context.Context) (stop func()) {
	var wg sync.WaitGroup
	for range runtime.NumCPU() {
		wg.Go(func() {
			for x := 0; ctx.Err() == nil; x++ {
				for i := range 1 << 16 {
					x ^= i * x
				}
			}
		})
	}
	return wg.Wait
}

// TestShardLeasesNeverWaitInTheClientLimiter: one replica runs K = 8
// shards — 8 claims, a membership Lease and a list of the Leases every
// RetryPeriod — from a rest.Config at client-go's QPS 5, with short lease
// timings (a renewal per shard every second: about 11 Lease requests a
// second, more than the limiter's 5) and every core busy with a CPU
// burner besides the API server. Built the library's way
// (leader.NewLeaseClient of that config), no Lease request goes through a
// client-side limiter, and over five lease durations after it took them
// the replica loses no shard. (A Lease client made with
// kubernetes.NewForConfig of the same config queues them in its limiter:
// quietpatch.NewSharded refuses it.)
func TestShardLeasesNeverWaitInTheClientLimiter(t *testing.T) {
	cp, _, _ := shared.get(t)
	ctx := testContext(t, 3*time.Minute)
	const (
		k             = 8
		leaseDuration = 3 * time.Second
		run           = 5 * leaseDuration
	)
	registerWaits.Do(func() { metrics.Register(metrics.RegisterOpts{RateLimiterLatency: &waits}) })
	ns, err := cp.NewNamespace(ctx, "ll-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // the other tests count every route of the control plane
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := examplee2e.DeleteRoutes(ctx, cp, ns); err != nil {
			t.Error(err)
		}
	})
	for i := range 40 {
		if _, err := cp.AdminGatewayClient().GatewayV1().HTTPRoutes(ns).Create(ctx, &gatewayv1.HTTPRoute{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("route-%02d", i)},
			Spec:       gatewayv1.HTTPRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "gw"}}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := cp.AdminConfig()
	cfg.QPS, cfg.Burst = 5, 10 // client-go's defaults, spelled out
	leases, err := leader.NewLeaseClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	patcher, err := statuspatch.NewMergePatcher(cfg, routesGVR, "quietpatch-e2e-lease-limiter")
	if err != nil {
		t.Fatal(err)
	}
	routes := cp.AdminGatewayClient().GatewayV1().HTTPRoutes(ns)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (k8sruntime.Object, error) { return routes.List(ctx, o) },
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return routes.Watch(ctx, o)
		},
	}
	// Statuses are left alone: the test is about the Lease traffic.
	comp := pipeline.ComputerFuncs[*gatewayv1.HTTPRoute, gatewayv1.HTTPRouteStatus, statuspatch.MergePatch]{
		KeyFunc: func(r *gatewayv1.HTTPRoute) types.NamespacedName {
			return types.NamespacedName{Namespace: r.Namespace, Name: r.Name}
		},
		CurrentFunc: func(r *gatewayv1.HTTPRoute) gatewayv1.HTTPRouteStatus { return r.Status },
		DesiredFunc: func(r *gatewayv1.HTTPRoute) (gatewayv1.HTTPRouteStatus, error) { return r.Status, nil },
		EqualFunc:   func(gatewayv1.HTTPRouteStatus, gatewayv1.HTTPRouteStatus) bool { return true },
		PatchFunc: func(r *gatewayv1.HTTPRoute, s gatewayv1.HTTPRouteStatus) (statuspatch.MergePatch, error) {
			return statuspatch.NewMergePatch(r, s)
		},
	}
	s, err := quietpatch.NewSharded(lw, comp, patcher, quietpatch.Config{
		Name:   "lease-limiter",
		Leases: leases,
		Lease:  leader.Config{Namespace: ns, Name: leaseName, Identity: "ll-a", LeaseDuration: leaseDuration},
		Shards: k,
	})
	if err != nil {
		t.Fatal(err)
	}
	before, waitedBefore := waits.leases.Load(), waits.waited.Load()
	burnCtx, stopBurning := context.WithTimeout(ctx, 2*time.Minute)
	burning := burnCPU(burnCtx)
	defer func() { stopBurning(); burning() }()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	if err := examplee2e.Poll(ctx, 50*time.Millisecond, func(context.Context) error {
		if st := s.Stats(); len(st.Held) != k {
			return fmt.Errorf("holding shards %v of %d", st.Held, k)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	took := s.Stats()
	epochs := map[int]int64{}
	for i, st := range took.PerShard {
		epochs[i] = st.Claim.Epoch
	}
	// Five lease durations holding every shard, the cores busy: every
	// shard still held under the claim it took, none lost or moved.
	end := time.Now().Add(run)
	if err := examplee2e.Poll(ctx, 50*time.Millisecond, func(context.Context) error {
		st := s.Stats()
		if len(st.Held) != k || st.Lost > 0 {
			return examplee2e.Permanent(fmt.Errorf("%v into the run: holding %v, %d shards lost since the start", (run - time.Until(end)).Round(time.Millisecond), st.Held, st.Lost))
		}
		for i, ps := range st.PerShard {
			if ps.Claim.Epoch != epochs[i] {
				return examplee2e.Permanent(fmt.Errorf("shard %d: epoch %d, took it under %d: the claim was lost and taken again", i, ps.Claim.Epoch, epochs[i]))
			}
		}
		if time.Now().Before(end) {
			return fmt.Errorf("holding all %d shards, %v to go", k, time.Until(end).Round(time.Second))
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	st := s.Stats()
	lease, waited, maxWait := waits.leases.Load()-before, waits.waited.Load()-waitedBefore, time.Duration(waits.maxWait.Load())
	t.Logf("K=%d on one replica, QPS 5 config, lease duration %v, cores busy: %d Lease requests through a client-side limiter (%d waited >= 1 ms, longest %v); "+
		"%d other requests through one; shards acquired %d, lost %d",
		k, leaseDuration, lease, waited, maxWait.Round(time.Millisecond), waits.others.Load(), st.Acquired, st.Lost)
	if lease != 0 || waited != 0 {
		t.Errorf("%d Lease requests went through a client-side rate limiter (%d waited, up to %v), want none", lease, waited, maxWait)
	}
	if st.Acquired != k || st.Lost != 0 {
		t.Errorf("shards acquired %d, lost %d: want %d and 0", st.Acquired, st.Lost, k)
	}
}
