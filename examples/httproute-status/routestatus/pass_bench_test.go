package routestatus_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1listers "sigs.k8s.io/gateway-api/pkg/client/listers/apis/v1"

	"github.com/quietpatch/quietpatch/examples/httproute-status/fixtures"
	"github.com/quietpatch/quietpatch/examples/httproute-status/routestatus"
	"github.com/quietpatch/quietpatch/internal/pipeline"
	"github.com/quietpatch/quietpatch/internal/queue"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/conditions"
)

// passRoutesEnv overrides the number of routes of BenchmarkRoutePass
// (default 100,000).
const passRoutesEnv = "QP_BENCH_PASS_ROUTES"

// passRoutes returns the number of routes of one pass.
func passRoutes(b *testing.B) int {
	n := 100_000
	if s := os.Getenv(passRoutesEnv); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			b.Fatalf("%s must be a positive integer, got %q", passRoutesEnv, s)
		}
		n = v
	}
	return n
}

// passLeader is a pipeline.Leader whose claim, epoch 1, stays current for
// an hour: the passes measured never lose leadership.
type passLeader struct{ claim leader.Claim }

func (l passLeader) Identity() string                         { return l.claim.Holder }
func (l passLeader) Current() leader.Claim                    { return l.claim }
func (l passLeader) Subscribe() (<-chan leader.Claim, func()) { return nil, func() {} }

// passSource lists the same routes every pass, as a lister over a warm
// informer cache does (without the cost of copying the slice).
type passSource struct{ routes []*gatewayv1.HTTPRoute }

func (s passSource) List() ([]*gatewayv1.HTTPRoute, error) { return s.routes, nil }
func (s passSource) Get(types.NamespacedName) (*gatewayv1.HTTPRoute, bool, error) {
	return nil, false, nil
}

// passPatch is what the naive pass queues: the route's key and the merge
// patch body, as the seed controller queued them.
type passPatch struct {
	key  types.NamespacedName
	body []byte
}

// convergedSet generates n routes and gives each the status the computer
// computes for it (and a resourceVersion), so that a pass finds every route
// unchanged: the steady state of a controller.
func convergedSet(b *testing.B, n int) (*fixtures.Set, *routestatus.Computer, *routestatus.Snapshot, time.Time) {
	b.Helper()
	set, err := fixtures.Generate(fixtures.Config{Routes: n, Namespaces: 100, Prefix: "pass", ControllerName: "example.com/pass-bench"})
	if err != nil {
		b.Fatal(err)
	}
	c, err := routestatus.NewComputer(set.Options())
	if err != nil {
		b.Fatal(err)
	}
	lk := set.Snapshot()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for i, r := range set.Routes {
		r.ResourceVersion = strconv.Itoa(1000 + i)
		r.Generation = 1
		r.Status = c.Compute(r, lk, now)
	}
	return set, c, lk, now
}

// BenchmarkRoutePass measures one reconcile pass over the HTTPRoutes of a
// converged cluster (100,000 routes by default, QP_BENCH_PASS_ROUTES to
// change it), where no route's status needs to change. One op is one pass;
// ns/object, allocs/object and B/object divide by the routes of the passes
// (allocations counted with runtime.MemStats around the loop). The lookup
// is an in-memory Snapshot and the routes a slice, so the figures are CPU
// only, no API calls.
//
//   - unchanged-typed: ReconcileAll of the library's reconciler
//     (internal/pipeline) with the example's computer and the typed
//     routestatus.Equal: compute, compare, nothing else.
//   - unchanged-uptodate: the same pass as the example's controller makes
//     it: Computer.UpToDate first, Compute only for a route whose status is
//     not up to date (none here), then Equal.
//   - unchanged-uptodate-listers: the same over routestatus.Listers of
//     informer indexers (what the controller's lookup is) instead of a
//     Snapshot: the listers' own allocations (keys, not-found errors).
//   - unchanged-gocmp: the same pass with a go-cmp comparator
//     (conditions.CmpEqual with IgnoreTransitionTime and SortByType) in
//     place of routestatus.Equal.
//   - naive: what the seed controller did before its fix: compute, then
//     always build the merge patch (routestatus.MergePatch) and append it to
//     an unbounded queue (a slice that a consumer would drain), whether or
//     not the status changed.
func BenchmarkRoutePass(b *testing.B) {
	n := passRoutes(b)
	set, computer, lk, now := convergedSet(b, n)
	claim := leader.Claim{Holder: "pass-bench", Expiry: time.Now().Add(time.Hour), Epoch: 1}

	compute := func(r *gatewayv1.HTTPRoute) (gatewayv1.HTTPRouteStatus, error) {
		return computer.Compute(r, lk, now), nil
	}
	reconciler := func(b *testing.B, desired func(*gatewayv1.HTTPRoute) (gatewayv1.HTTPRouteStatus, error),
		equal func(a, b gatewayv1.HTTPRouteStatus) bool) *pipeline.Reconciler[*gatewayv1.HTTPRoute, gatewayv1.HTTPRouteStatus, statuspatch.MergePatch] {
		q := queue.New[types.NamespacedName](1000, nil)
		b.Cleanup(q.Close)
		comp := pipeline.ComputerFuncs[*gatewayv1.HTTPRoute, gatewayv1.HTTPRouteStatus, statuspatch.MergePatch]{
			KeyFunc: func(r *gatewayv1.HTTPRoute) types.NamespacedName {
				return types.NamespacedName{Namespace: r.Namespace, Name: r.Name}
			},
			CurrentFunc: func(r *gatewayv1.HTTPRoute) gatewayv1.HTTPRouteStatus { return r.Status },
			DesiredFunc: desired,
			EqualFunc:   equal,
			PatchFunc: func(r *gatewayv1.HTTPRoute, desired gatewayv1.HTTPRouteStatus) (statuspatch.MergePatch, error) {
				return statuspatch.NewMergePatch(r, desired)
			},
		}
		r, err := pipeline.NewReconciler(passSource{routes: set.Routes}, comp, q, passLeader{claim: claim}, pipeline.Options{}, nil)
		if err != nil {
			b.Fatal(err)
		}
		return r
	}

	measure := func(b *testing.B, pass func() error) {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		passes := 0
		for b.Loop() {
			if err := pass(); err != nil {
				b.Fatal(err)
			}
			passes++
		}
		elapsed := time.Since(start)
		b.StopTimer()
		runtime.ReadMemStats(&after)
		objects := float64(passes * n)
		b.ReportMetric(float64(elapsed.Nanoseconds())/objects, "ns/object")
		b.ReportMetric(float64(after.Mallocs-before.Mallocs)/objects, "allocs/object")
		b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/objects, "B/object")
	}

	reconcilerPass := func(r *pipeline.Reconciler[*gatewayv1.HTTPRoute, gatewayv1.HTTPRouteStatus, statuspatch.MergePatch]) func() error {
		return func() error {
			res, err := r.ReconcileAll(context.Background())
			if err != nil {
				return err
			}
			if res.Unchanged != n {
				return fmt.Errorf("pass found %d of %d routes unchanged (%+v)", res.Unchanged, n, res)
			}
			return nil
		}
	}

	b.Run("unchanged-typed", func(b *testing.B) {
		measure(b, reconcilerPass(reconciler(b, compute, routestatus.Equal)))
	})
	b.Run("unchanged-uptodate", func(b *testing.B) {
		upToDate := func(r *gatewayv1.HTTPRoute) (gatewayv1.HTTPRouteStatus, error) {
			if computer.UpToDate(r, lk) {
				return r.Status, nil
			}
			return computer.Compute(r, lk, now), nil
		}
		measure(b, reconcilerPass(reconciler(b, upToDate, routestatus.Equal)))
	})
	b.Run("unchanged-uptodate-listers", func(b *testing.B) {
		ls := listersOf(b, set)
		upToDate := func(r *gatewayv1.HTTPRoute) (gatewayv1.HTTPRouteStatus, error) {
			if computer.UpToDate(r, ls) {
				return r.Status, nil
			}
			return computer.Compute(r, ls, now), nil
		}
		measure(b, reconcilerPass(reconciler(b, upToDate, routestatus.Equal)))
	})
	b.Run("unchanged-gocmp", func(b *testing.B) {
		gocmp := conditions.CmpEqual[gatewayv1.HTTPRouteStatus](
			conditions.IgnoreTransitionTime(), conditions.SortByType())
		measure(b, reconcilerPass(reconciler(b, compute, gocmp)))
	})
	b.Run("naive", func(b *testing.B) {
		var queued int
		measure(b, func() error {
			var queue []passPatch // unbounded: one patch per route per pass
			for _, r := range set.Routes {
				desired := computer.Compute(r, lk, now)
				body, err := routestatus.MergePatch(r, desired)
				if err != nil {
					return err
				}
				queue = append(queue, passPatch{key: types.NamespacedName{Namespace: r.Namespace, Name: r.Name}, body: body})
			}
			if len(queue) != n {
				return errors.New("naive pass queued fewer patches than routes")
			}
			queued += len(queue)
			return nil
		})
		if queued == 0 {
			b.Fatal("naive pass queued nothing")
		}
	})
}

// listersOf returns routestatus.Listers over indexers holding set's
// objects other than routes, as informers would.
func listersOf(b *testing.B, set *fixtures.Set) routestatus.Listers {
	b.Helper()
	idx := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	svcs, nss, gws, gcs, grants := idx(), idx(), idx(), idx(), idx()
	for _, o := range set.Objects() {
		var err error
		switch o.(type) {
		case *corev1.Service:
			err = svcs.Add(o)
		case *corev1.Namespace:
			err = nss.Add(o)
		case *gatewayv1.Gateway:
			err = gws.Add(o)
		case *gatewayv1.GatewayClass:
			err = gcs.Add(o)
		case *gatewayv1.ReferenceGrant:
			err = grants.Add(o)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	return routestatus.Listers{
		Services: corev1listers.NewServiceLister(svcs), Namespaces: corev1listers.NewNamespaceLister(nss),
		Gateways: gatewayv1listers.NewGatewayLister(gws), GatewayClasses: gatewayv1listers.NewGatewayClassLister(gcs),
		ReferenceGrantsV1: gatewayv1listers.NewReferenceGrantLister(grants),
	}
}
