package reliability_test

// This file holds every use the reliability tests make of the library's API
// directly (packages leader and statuspatch): the API is being reshaped, and
// this is the one place to adapt.

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// libConfig describes a libReplica.
type libConfig struct {
	Namespace, Lease, Identity string
	LeaseDuration, RetryPeriod time.Duration
	// Leases is the client configuration of the claimer.
	Leases *rest.Config
	// Status, if set, is the client configuration of a dispatcher that
	// applies HTTPRoute status merge patches (statuspatch.DynamicStatusPatcher)
	// with Workers in flight and PatchTimeout; nil: a claimer only.
	Status       *rest.Config
	Workers      int
	PatchTimeout time.Duration
	// Fence makes the patcher name its writer in every write
	// (statuspatch.DynamicStatusPatcher.WithFence); Logger, if set,
	// receives the dispatcher's and the fence check's logs.
	Fence  bool
	Logger *slog.Logger
}

// libReplica is one replica built from the library's parts: a
// leader.Claimer and, optionally, a statuspatch.PatchQueue of route keys
// drained by a statuspatch.Dispatcher. There is no reconciler: patchRoute
// says what a route's status should be and queues its key; the dispatcher
// builds the patch when it serves the key, from the route as patchRoute
// was given it (its resourceVersion is the precondition), under the claim
// current then.
type libReplica struct {
	t       *testing.T
	id      string
	claimer *leader.Claimer
	queue   *statuspatch.PatchQueue[types.NamespacedName]
	stats   func() statuspatch.DispatcherStats // nil without a dispatcher
	cancel  context.CancelFunc
	done    chan struct{} // closed once every Run has returned

	mu     sync.Mutex
	routes map[types.NamespacedName]wanted
}

// wanted is a route as patchRoute was given it, and the parents its status
// should have.
type wanted struct {
	route   *gatewayv1.HTTPRoute
	parents []gatewayv1.RouteParentStatus
}

// startLibReplica builds and runs a libReplica; it is stopped when the test
// ends.
func startLibReplica(t *testing.T, cfg libConfig) *libReplica {
	t.Helper()
	leases, err := leader.NewLeaseClient(cfg.Leases)
	if err != nil {
		t.Fatal(err)
	}
	c, err := leader.NewClaimer(leases, leader.Config{
		Namespace: cfg.Namespace, Name: cfg.Lease, Identity: cfg.Identity,
		LeaseDuration: cfg.LeaseDuration, RetryPeriod: cfg.RetryPeriod,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &libReplica{t: t, id: cfg.Identity, claimer: c, done: make(chan struct{}), routes: map[types.NamespacedName]wanted{}}
	runs := []func(context.Context) error{c.Run}
	if cfg.Status != nil {
		patcher, err := statuspatch.NewStatusPatcherForConfig(cfg.Status, routesGVR, "quietpatch-e2e-"+cfg.Identity)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Fence {
			patcher = patcher.WithFence(cfg.Logger)
		}
		opts := statuspatch.Options{Name: cfg.Identity, Capacity: 1000, PatchTimeout: cfg.PatchTimeout, Workers: cfg.Workers, Logger: cfg.Logger}
		if r.queue, err = statuspatch.NewPatchQueue[types.NamespacedName](opts); err != nil {
			t.Fatal(err)
		}
		d, err := statuspatch.NewDispatcher(r.queue, libSource{r}, libComputer(r), patcher, c, opts)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, d.Run)
		r.stats = d.Stats
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	errs := make(chan error, len(runs))
	for _, run := range runs {
		go func() { errs <- run(ctx) }()
	}
	go func() {
		defer close(r.done)
		for range runs {
			if err := <-errs; err != nil && !errors.Is(err, context.Canceled) {
				r.t.Errorf("%s: Run: %v", r.id, err)
			}
		}
	}()
	t.Cleanup(r.stop)
	return r
}

// libSource is the dispatcher's Source: the routes patchRoute was given.
type libSource struct{ r *libReplica }

func (s libSource) List() ([]wanted, error) {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	out := make([]wanted, 0, len(s.r.routes))
	for _, w := range s.r.routes {
		out = append(out, w)
	}
	return out, nil
}

func (s libSource) Get(key types.NamespacedName) (wanted, bool, error) {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	w, ok := s.r.routes[key]
	return w, ok, nil
}

// libComputer wants the parents patchRoute gave; every key queued is
// sent (Equal is false): the test decides what to write.
func libComputer(r *libReplica) statuspatch.StatusComputer[wanted, []gatewayv1.RouteParentStatus, statuspatch.MergePatch] {
	return statuspatch.ComputerFuncs[wanted, []gatewayv1.RouteParentStatus, statuspatch.MergePatch]{
		KeyFunc: func(w wanted) types.NamespacedName {
			return types.NamespacedName{Namespace: w.route.Namespace, Name: w.route.Name}
		},
		CurrentFunc: func(w wanted) []gatewayv1.RouteParentStatus { return w.route.Status.Parents },
		DesiredFunc: func(w wanted) ([]gatewayv1.RouteParentStatus, error) { return w.parents, nil },
		EqualFunc:   func(_, _ []gatewayv1.RouteParentStatus) bool { return false },
		PatchFunc: func(w wanted, parents []gatewayv1.RouteParentStatus) (statuspatch.MergePatch, error) {
			return statuspatch.NewMergePatch(w.route, map[string]any{"parents": parents})
		},
	}
}

// leads reports whether our claim is current.
func (r *libReplica) leads() bool { return r.claimer.Current().IsCurrentFor(r.id, time.Now()) }

// outcomes returns the dispatcher's patch calls by outcome.
func (r *libReplica) outcomes() map[outcome.Outcome]int64 { return r.stats().Patches }

// holder returns who holds the Lease as r last saw it.
func (r *libReplica) holder() string { return r.claimer.Current().Holder }

// patchRoute asks for route's status to have parents (with the route's
// resourceVersion as precondition) and queues its key in the fresh lane;
// the dispatcher builds and sends the patch under the claim current when
// it serves the key.
func (r *libReplica) patchRoute(route *gatewayv1.HTTPRoute, parents []gatewayv1.RouteParentStatus) error {
	key := types.NamespacedName{Namespace: route.Namespace, Name: route.Name}
	r.mu.Lock()
	r.routes[key] = wanted{route: route, parents: parents}
	r.mu.Unlock()
	return r.queue.Add(key, statuspatch.LaneFresh)
}

// relinquish gives the Lease up on purpose, staying out of the race for
// backoff.
func (r *libReplica) relinquish(ctx context.Context, backoff time.Duration) error {
	return r.claimer.Relinquish(ctx, backoff)
}

// stop cancels every Run and waits (up to a minute) until they returned.
func (r *libReplica) stop() {
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(time.Minute):
		r.t.Errorf("libReplica %s: Run did not return within a minute of its cancellation", r.id)
	}
}
