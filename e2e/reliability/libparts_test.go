package reliability_test

// This file holds every use the reliability tests make of the library's API
// directly (packages quietpatch, leader and statuspatch, and the internal
// parts the dispatcher is built from): the API is being reshaped, and this is
// the one place to adapt.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/internal/pipeline"
	"github.com/quietpatch/quietpatch/internal/queue"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
	"github.com/quietpatch/quietpatch/statuspatch/source"
)

// libConfig describes a libReplica.
type libConfig struct {
	Namespace, Lease, Identity string
	LeaseDuration, RetryPeriod time.Duration
	// Leases is the client configuration of the claimer.
	Leases *rest.Config
	// Status, if set, is the client configuration of a dispatcher that
	// applies HTTPRoute status merge patches (statuspatch.MergePatcher)
	// with Workers in flight and PatchTimeout; nil: a claimer only.
	Status       *rest.Config
	Workers      int
	PatchTimeout time.Duration
	// Fence makes the patcher name its writer in every write
	// (statuspatch.MergePatcher.WithFence); Logger, if set,
	// receives the dispatcher's and the fence check's logs.
	Fence  bool
	Logger *slog.Logger
}

// libReplica is one replica built from the library's parts: a
// leader.Claimer and, optionally, a queue of route keys (internal/queue,
// statuspatch.PatchQueue's) drained by a dispatcher (internal/pipeline,
// quietpatch.New's) following the claimer. There is no reconciler: patchRoute
// says what a route's status should be and queues its key; the dispatcher
// builds the patch when it serves the key, from the route as patchRoute
// was given it (its resourceVersion is the precondition), under the claim
// current then.
type libReplica struct {
	t       *testing.T
	id      string
	claimer *leader.Claimer
	queue   *queue.Queue[types.NamespacedName]
	stats   func() pipeline.DispatcherStats // nil without a dispatcher
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
		patcher, err := statuspatch.NewMergePatcher(cfg.Status, routesGVR, "quietpatch-e2e-"+cfg.Identity)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Fence {
			patcher = patcher.WithFence(cfg.Logger)
		}
		// Lease: the WriteClaim of every call names it (the fence).
		opts := pipeline.Options{Name: cfg.Identity, Capacity: 1000, PatchTimeout: cfg.PatchTimeout, Workers: cfg.Workers, Logger: cfg.Logger,
			Lease: types.NamespacedName{Namespace: cfg.Namespace, Name: cfg.Lease}}
		r.queue = queue.New[types.NamespacedName](opts.Capacity, clock.RealClock{})
		d, err := pipeline.NewDispatcher(r.queue, libSource{r}, libComputer(r), patcher, c, opts, nil)
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
	return pipeline.ComputerFuncs[wanted, []gatewayv1.RouteParentStatus, statuspatch.MergePatch]{
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
	return r.queue.Add(key, queue.LaneFresh)
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

// kneeAnnotation is the annotation TestEditDuringFirstConvergence edits;
// the knee pipeline's status message shows its value.
const kneeAnnotation = "quietpatch.io/knee-edit"

// kneeConfig describes a kneePipeline.
type kneeConfig struct {
	Namespace, Lease string
	Controller       gatewayv1.GatewayController
}

// kneePipeline is a quietpatch.Controller of every HTTPRoute whose status
// is one parent entry of Controller with the message "edit=<the value of
// kneeAnnotation>" ("none" without it). Its Source holds the informer's
// initial Adds back from the pipeline's event handler until the pipeline
// leads (heldSource): they reach it while it leads, as they do at 30,000
// routes and more, when their delivery outlasts the Lease acquisition.
type kneePipeline struct {
	inf  cache.SharedIndexInformer
	comp pipeline.ComputerFuncs[*gatewayv1.HTTPRoute, string, statuspatch.MergePatch]
	ctrl *quietpatch.Controller[*gatewayv1.HTTPRoute, string, statuspatch.MergePatch]
}

// startKneePipeline runs a kneePipeline whose patches go through status
// (the informer and the Lease through the admin client); it is stopped
// when the test ends.
func startKneePipeline(t *testing.T, ctx context.Context, cp *cluster.ControlPlane, status *rest.Config, cfg kneeConfig) *kneePipeline {
	t.Helper()
	leases, err := leader.NewLeaseClient(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	patcher, err := statuspatch.NewMergePatcher(status, routesGVR, "quietpatch-e2e-knee")
	if err != nil {
		t.Fatal(err)
	}
	p := &kneePipeline{inf: gwinformers.NewSharedInformerFactory(cp.AdminGatewayClient(), 0).Gateway().V1().HTTPRoutes().Informer()}
	message := func(r *gatewayv1.HTTPRoute) string {
		for _, ps := range r.Status.Parents {
			if ps.ControllerName == cfg.Controller && len(ps.Conditions) > 0 {
				return ps.Conditions[0].Message
			}
		}
		return ""
	}
	p.comp = pipeline.ComputerFuncs[*gatewayv1.HTTPRoute, string, statuspatch.MergePatch]{
		KeyFunc:     func(r *gatewayv1.HTTPRoute) types.NamespacedName { return routeName(r) },
		CurrentFunc: message,
		DesiredFunc: func(r *gatewayv1.HTTPRoute) (string, error) {
			v := r.Annotations[kneeAnnotation]
			if v == "" {
				v = "none"
			}
			return "edit=" + v, nil
		},
		EqualFunc: func(a, b string) bool { return a == b },
		PatchFunc: func(r *gatewayv1.HTTPRoute, msg string) (statuspatch.MergePatch, error) {
			return statuspatch.NewMergePatch(r, map[string]any{"parents": []gatewayv1.RouteParentStatus{{
				ParentRef:      gatewayv1.ParentReference{Name: "knee"},
				ControllerName: cfg.Controller,
				Conditions: []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted",
					Message: msg, ObservedGeneration: r.Generation, LastTransitionTime: r.CreationTimestamp}},
			}}})
		},
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	src := heldSource{Source: source.FromInformer[*gatewayv1.HTTPRoute](p.inf), inf: p.inf, ctx: runCtx,
		leading: func() bool { return p.ctrl.Leading() }}
	if p.ctrl, err = quietpatch.New(src, p.comp, patcher, quietpatch.Config{
		Name: "knee", Interval: time.Minute, Workers: 4, PatchTimeout: 5 * time.Second,
		Leases: leases,
		Lease: leader.Config{Namespace: cfg.Namespace, Name: cfg.Lease, Identity: "knee-0",
			LeaseDuration: 15 * time.Second, RetryPeriod: 250 * time.Millisecond},
	}); err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { p.inf.RunWithContext(runCtx) })
	wg.Go(func() {
		if err := p.ctrl.Run(runCtx); err != nil {
			t.Errorf("knee pipeline: %v", err)
		}
	})
	return p
}

// heldSource is a pipeline's Source over an informer that is itself the
// Informer quietpatch.New registers its event handler on: the handler gets
// the informer's initial Adds only once leading reports true (or ctx
// ends), the rest at once. HasSynced is the informer's own: the pipeline
// syncs, then competes for the Lease, while the handler still waits for
// the initial list. It has no Informer method, so that New takes it as
// the Informer.
type heldSource struct {
	statuspatch.Source[*gatewayv1.HTTPRoute]
	inf     cache.SharedIndexInformer
	ctx     context.Context
	leading func() bool
}

func (s heldSource) HasSynced() bool { return s.inf.HasSynced() }

func (s heldSource) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return s.inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			for isInInitialList && !s.leading() && s.ctx.Err() == nil {
				time.Sleep(time.Millisecond)
			}
			h.OnAdd(obj, isInInitialList)
		},
		UpdateFunc: h.OnUpdate,
		DeleteFunc: h.OnDelete,
	})
}

// written returns the keys of the routes, as the pipeline's cache has them,
// whose status is the one the pipeline wants.
func (p *kneePipeline) written() []types.NamespacedName {
	var keys []types.NamespacedName
	for _, o := range p.inf.GetIndexer().List() {
		r := o.(*gatewayv1.HTTPRoute)
		if want, _ := p.comp.Desired(r); p.comp.Current(r) == want {
			keys = append(keys, routeName(r))
		}
	}
	return keys
}

// current returns the status message of the route with key in the
// pipeline's cache.
func (p *kneePipeline) current(key types.NamespacedName) string {
	o, ok, _ := p.inf.GetIndexer().GetByKey(key.Namespace + "/" + key.Name)
	if !ok {
		return ""
	}
	return p.comp.Current(o.(*gatewayv1.HTTPRoute))
}

// stats sums up the pipeline's counters.
func (p *kneePipeline) stats() string {
	s := p.ctrl.Stats()
	return fmt.Sprintf("queue %+v; dispatcher patches %v, dropped %v, echoes %d", s.Queue, s.Dispatcher.Patches, s.Dispatcher.Dropped, s.Dispatcher.Echoes)
}
