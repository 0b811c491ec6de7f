package reliability_test

// This file holds every use the reliability tests make of the library's API
// directly (packages leader and statuspatch): the API is being reshaped, and
// this is the one place to adapt.

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
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
}

// libReplica is one replica built from the library's parts: a
// leader.Claimer and, optionally, a statuspatch.PatchQueue (keyed by
// statuspatch.PatchKey) drained by a statuspatch.Dispatcher.
type libReplica struct {
	t       *testing.T
	id      string
	claimer *leader.Claimer
	queue   *statuspatch.PatchQueue[statuspatch.Patch[statuspatch.MergePatch]]
	cancel  context.CancelFunc
	done    chan struct{} // closed once every Run has returned
}

// startLibReplica builds and runs a libReplica; it is stopped when the test
// ends.
func startLibReplica(t *testing.T, cfg libConfig) *libReplica {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg.Leases)
	if err != nil {
		t.Fatal(err)
	}
	c, err := leader.NewClaimer(cs.CoordinationV1(), leader.Config{
		Namespace: cfg.Namespace, Name: cfg.Lease, Identity: cfg.Identity,
		LeaseDuration: cfg.LeaseDuration, RetryPeriod: cfg.RetryPeriod,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &libReplica{t: t, id: cfg.Identity, claimer: c, done: make(chan struct{})}
	runs := []func(context.Context) error{c.Run}
	if cfg.Status != nil {
		dc, err := dynamic.NewForConfig(cfg.Status)
		if err != nil {
			t.Fatal(err)
		}
		patcher, err := statuspatch.NewDynamicStatusPatcher(dc, routesGVR, "quietpatch-e2e-"+cfg.Identity)
		if err != nil {
			t.Fatal(err)
		}
		r.queue, err = statuspatch.NewPatchQueue(statuspatch.QueueConfig[statuspatch.Patch[statuspatch.MergePatch]]{
			Capacity: 1000, Key: statuspatch.PatchKey[statuspatch.MergePatch],
		})
		if err != nil {
			t.Fatal(err)
		}
		d, err := statuspatch.NewDispatcher(statuspatch.DispatcherConfig[statuspatch.MergePatch]{
			Queue: r.queue, Patcher: patcher, Leader: c, PatchTimeout: cfg.PatchTimeout, Workers: cfg.Workers,
		})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, d.Run)
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

// epoch returns the epoch of our claim if it is current.
func (r *libReplica) epoch() (int64, bool) {
	c := r.claimer.Current()
	return c.Epoch, c.IsCurrentFor(r.id, time.Now())
}

// holder returns who holds the Lease as r last saw it.
func (r *libReplica) holder() string { return r.claimer.Current().Holder }

// patchRoute queues a merge patch of route's status to parents (with the
// route's resourceVersion as precondition), under epoch.
func (r *libReplica) patchRoute(route *gatewayv1.HTTPRoute, parents []gatewayv1.RouteParentStatus, epoch int64) error {
	p, err := statuspatch.NewMergePatch(route, map[string]any{"parents": parents})
	if err != nil {
		return err
	}
	return r.queue.TrySend(statuspatch.Patch[statuspatch.MergePatch]{Key: route.Namespace + "/" + route.Name, Epoch: epoch, Payload: p})
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
