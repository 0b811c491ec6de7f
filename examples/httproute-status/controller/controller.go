package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gwinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/examples/httproute-status/routestatus"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch/conditions"
	"github.com/quietpatch/quietpatch/statuspatch/source"
)

// Name is the value of the pipeline attribute on the library's instruments
// and in its logs, and the user agent of the controller's clients.
const Name = "httproute-status"

// ErrAlreadyRunning is returned by a second call of [Controller.Run].
var ErrAlreadyRunning = errors.New("controller: Run already called")

// StopGrace bounds what [Controller.Run] does once the pipeline has
// stopped: stopping the informers, the metrics and health endpoints and the
// meter provider, together. Run waits for the informers' goroutines at most
// that long: client-go's informers may take far longer to end than their
// context (see Controller.Run), and a process that is stopping need not
// wait for them.
const StopGrace = time.Second

// Controller is the HTTPRoute status controller: informers, the library's
// status pipeline for HTTPRoutes (quietpatch.Controller: lease claimer,
// reconciler, bounded queue, dispatcher), and the metrics and health
// endpoints. Build it with [New], run it once with [Controller.Run]. Its
// other methods may be called from any goroutine at any time.
type Controller struct {
	opts          Options
	kubeInformers informers.SharedInformerFactory
	gwInformers   gwinformers.SharedInformerFactory
	pipeline      quietpatch.Runner // a Controller, or a Sharded with Options.Shards > 1
	telemetry     *telemetry
	started       atomic.Bool
}

// New validates opts, builds the clients (loading the kubeconfig unless
// clients or a REST configuration are given), asks discovery which
// ReferenceGrant version to watch when Options.ReferenceGrantVersion is
// auto (bounded by ctx and 10 s), and wires the informers and their event
// handlers to the status pipeline. It starts nothing and listens on
// nothing: [Controller.Run] does.
//
// Invalid options yield an [*OptionError] (wrapping [ErrInvalidOptions])
// naming the field.
func New(ctx context.Context, opts Options) (*Controller, error) {
	opts, err := opts.Complete()
	if err != nil {
		return nil, err
	}
	c := &Controller{opts: opts}
	kube, gw, leases, err := clients(opts)
	if err != nil {
		return nil, err
	}
	refGrantsV1 := opts.ReferenceGrantVersion == ReferenceGrantV1 ||
		opts.ReferenceGrantVersion == ReferenceGrantAuto && c.detectReferenceGrantV1(ctx, gw.Discovery())
	if c.telemetry, err = newTelemetry(); err != nil {
		return nil, err
	}

	// Informers, with the indexes the event handlers use.
	c.kubeInformers = informers.NewSharedInformerFactory(kube, 0)
	c.gwInformers = gwinformers.NewSharedInformerFactory(gw, 0)
	services, namespaces := c.kubeInformers.Core().V1().Services(), c.kubeInformers.Core().V1().Namespaces()
	gwv1 := c.gwInformers.Gateway().V1()
	routes, gateways, classes := gwv1.HTTPRoutes(), gwv1.Gateways(), gwv1.GatewayClasses()
	if err := gateways.Informer().AddIndexers(gatewayIndexers()); err != nil {
		return nil, fmt.Errorf("controller: adding informer indexes: %w", err)
	}
	if opts.Shards <= 1 { // a sharded pipeline builds its own route caches
		if err := routes.Informer().AddIndexers(routeIndexers()); err != nil {
			return nil, fmt.Errorf("controller: adding informer indexes: %w", err)
		}
	}
	lookup := routestatus.Listers{Services: services.Lister(), Namespaces: namespaces.Lister(),
		Gateways: gateways.Lister(), GatewayClasses: classes.Lister()}
	var grants cache.SharedIndexInformer
	if refGrantsV1 {
		lookup.ReferenceGrantsV1, grants = gwv1.ReferenceGrants().Lister(), gwv1.ReferenceGrants().Informer()
	} else {
		g := c.gwInformers.Gateway().V1beta1().ReferenceGrants()
		lookup.ReferenceGrantsV1beta1, grants = g.Lister(), g.Informer()
	}
	computer, err := routestatus.NewComputer(routestatus.Options{ControllerName: gatewayv1.GatewayController(opts.ControllerName), Mesh: opts.Mesh})
	if err != nil {
		return nil, fmt.Errorf("controller: %w", err) // Complete checked the name
	}

	patcher, err := newPatcher(opts, gw)
	if err != nil {
		return nil, err
	}
	// The pipeline: its Run waits for every informer, then competes for
	// the lease; it enqueues the routes' own events, and those the events
	// of their dependencies affect, found through the indexes.
	cfg := quietpatch.Config{
		Leases:       leases,
		Lease:        opts.leaseConfig(),
		Name:         Name,
		Interval:     opts.ReconcileInterval,
		Capacity:     opts.QueueCapacity,
		Workers:      opts.Workers,
		PatchTimeout: opts.PatchTimeout,
		SyncTimeout:  opts.CacheSyncTimeout,
		DiffOptions:  []gocmp.Option{conditions.IgnoreTransitionTime(), conditions.SortByType()},
		Logger:       opts.Logger,
		Meter:        c.telemetry.provider.Meter(MeterName),
	}
	comp := routeComputer{computer: computer, lookup: lookup, now: time.Now}
	deps := []quietpatch.Dependency{
		{Informer: services.Informer()}, {Informer: gateways.Informer()}, {Informer: classes.Informer()},
		{Informer: grants}, {Informer: namespaces.Informer()},
	}
	if opts.Shards > 1 {
		// A cache per shard held, built by the library on this
		// ListerWatcher; no cache of every route, so no route index: a
		// dependency's event makes a pass over the shards held, which
		// queues only the routes whose status changed.
		cfg.Shards, cfg.Dependencies = opts.Shards, deps
		httproutes := gw.GatewayV1().HTTPRoutes(metav1.NamespaceAll)
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return httproutes.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return httproutes.Watch(ctx, o)
			},
		}
		if c.pipeline, err = quietpatch.NewSharded(lw, comp, patcher, cfg); err != nil {
			return nil, fmt.Errorf("controller: %w", err)
		}
	} else {
		on := routesOf{routes: routes.Informer().GetIndexer(), gateways: gateways.Informer().GetIndexer()}
		deps[0].Keys, deps[1].Keys, deps[2].Keys = on.by(indexService, objectName), on.by(indexGateway, objectName), on.gatewayClass
		deps[3].Keys, deps[4].Keys = on.by(indexGrantNamespace, metav1.Object.GetNamespace), on.by(cache.NamespaceIndex, metav1.Object.GetName)
		cfg.Dependencies = deps
		if c.pipeline, err = quietpatch.New(source.FromInformer[routeObject](routes.Informer()), comp, patcher, cfg); err != nil {
			return nil, fmt.Errorf("controller: %w", err)
		}
	}

	// The pipeline logs the rest (interval, capacity, workers) once synced.
	c.opts.Logger.Info("controller configured", slog.String("controllerName", opts.ControllerName), slog.Bool("mesh", opts.Mesh),
		slog.String("lease", opts.LeaseNamespace+"/"+opts.LeaseName), slog.String("identity", cfg.Lease.Identity), slog.Int("shards", max(opts.Shards, 1)),
		slog.Float64("kubeQPS", float64(opts.KubeQPS)), slog.Duration("patchTimeout", opts.PatchTimeout), slog.Bool("fence", opts.Fence),
		slog.String("referenceGrantVersion", map[bool]string{true: "v1", false: "v1beta1"}[refGrantsV1]))
	return c, nil
}

// Run builds a controller with [New] and runs it until ctx is cancelled;
// see [Controller.Run].
func Run(ctx context.Context, opts Options) error {
	c, err := New(ctx, opts)
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// Options returns the options in effect, defaults applied.
func (c *Controller) Options() Options { return c.opts }

// Run runs the controller until ctx is cancelled, then shuts down and
// returns nil; or until a part of it fails, then shuts down and returns
// that failure. It may be called once.
//
// It listens on the metrics and health addresses (failing at once if it
// cannot), starts the informers and runs the pipeline
// (quietpatch.Controller.Run), which waits for the caches
// (Options.CacheSyncTimeout) before it competes for the lease and stops in
// the safe order: reconciler, dispatcher, then the Lease. Then Run stops
// the informers and the endpoints.
//
// Run returns at most [Options.StopBound] after ctx is done, whether the
// API server answers or not: the pipeline's stop (the patch calls in
// flight run to their answer, at most PatchTimeout; then the Lease is
// vacated under the claimer's CallTimeout, min(5s, LeaseDuration/3)),
// then StopGrace for the rest. It does not wait longer for the informers:
// a client-go v0.37 reflector whose watch broke and whose watch-list
// request was then refused or answered 429 (an API server restarting or
// overloaded) sleeps out its back-off, up to a minute, before it looks at
// its context (tools/cache/reflector.go, Reflector.watchList), and
// SharedInformerFactory.Shutdown waits for it. Such goroutines end on
// their own, or with the process.
//
// Failures that end Run: a listener or HTTP server fails; the caches do not
// sync in time; the lease loop fails (e.g. RBAC forbids the Lease); the
// dispatcher or the reconciler stops on its own.
func (c *Controller) Run(ctx context.Context) error {
	if !c.started.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	// runCtx ends with ctx, or when an endpoint fails.
	runCtx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	var (
		stops         []func(context.Context)
		informersDone chan struct{} // closed once the informers' goroutines have ended
	)
	defer func() { // once the pipeline has stopped: everything else within StopGrace
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), StopGrace)
		defer cancel()
		for _, stop := range stops {
			stop(sctx)
		}
		_ = c.telemetry.provider.Shutdown(sctx)
		if informersDone == nil {
			return
		}
		select {
		case <-informersDone:
		case <-sctx.Done():
			c.opts.Logger.Info("informers not stopped within the stop grace; not waiting for them", slog.Duration("stopGrace", StopGrace))
		}
	}()
	// Listeners first: a busy port fails now, not after the cache sync.
	for _, ep := range []struct {
		name, addr string
		l          net.Listener
		h          func() http.Handler
	}{
		{"metrics", c.opts.MetricsAddr, c.opts.MetricsListener, c.telemetry.handler},
		{"health", c.opts.HealthAddr, c.opts.HealthListener, func() http.Handler { return healthHandler(c.Live, c.Ready) }},
	} {
		if (ep.addr == "" || ep.addr == "0") && ep.l == nil { // turned off
			continue
		}
		stop, err := serve(ep.name, ep.addr, ep.l, ep.h(), fail)
		if err != nil {
			for _, l := range []net.Listener{c.opts.MetricsListener, c.opts.HealthListener} {
				if l != nil {
					_ = l.Close()
				}
			}
			return err
		}
		stops = append(stops, stop)
	}

	// Informers, stopped after the pipeline that reads them; waited for
	// within StopGrace (above).
	infCtx, stopInformers := context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		stopInformers()
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.kubeInformers.Shutdown()
			c.gwInformers.Shutdown()
		}()
		informersDone = done
	}()
	c.kubeInformers.StartWithContext(infCtx)
	c.gwInformers.StartWithContext(infCtx)
	err := c.pipeline.Run(runCtx)
	if errors.Is(err, quietpatch.ErrNotSynced) {
		err = fmt.Errorf("controller: informer caches not synced within %s (are the Gateway API CRDs installed, and may we list and watch HTTPRoutes, Gateways, GatewayClasses, ReferenceGrants, Services and Namespaces?): %w",
			c.opts.CacheSyncTimeout, err)
	}
	if err == nil && ctx.Err() == nil {
		err = context.Cause(runCtx) // an endpoint failed
	}
	return err
}

// Ready reports whether this replica is ready, leader or not (see
// quietpatch.Controller.Ready): nil once the informer caches are synced
// and the lease loop, the dispatcher and the reconciler run.
func (c *Controller) Ready() error { return c.pipeline.Ready() }

// Live reports whether the process should be restarted: an error only when
// a patch call is stuck (see quietpatch.Controller.Live).
func (c *Controller) Live() error { return c.pipeline.Live() }

// Stats returns a snapshot of the pipeline (quietpatch.Stats): its
// counters, its queue's capacity and the latest lease claim observed, or,
// with Options.Shards > 1, the shards held and run and each one's counters.
func (c *Controller) Stats() quietpatch.Stats { return c.pipeline.Stats() }

// serve serves h on l, or on a new listener on addr when l is nil, until
// stop is called. A Serve that ends otherwise reports through fail.
func serve(name, addr string, l net.Listener, h http.Handler, fail func(error)) (stop func(context.Context), err error) {
	if l == nil {
		if l, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("controller: %s endpoint: %w", name, err)
		}
	}
	srv, done := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
			fail(fmt.Errorf("controller: %s endpoint on %s: %w", name, l.Addr(), err))
		}
	}()
	return func(ctx context.Context) {
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
		<-done
	}, nil
}

// clients returns the clients of opts, building those missing from the
// REST configuration. A Lease client built here is leader.NewLeaseClient's:
// no client-side rate limiter, so that a Lease request never waits in one;
// with KubeClient given and no LeaseClient, the Lease is served by
// KubeClient.
func clients(opts Options) (kubernetes.Interface, gatewayclient.Interface, coordinationv1client.LeasesGetter, error) {
	kube, gw, leases := opts.KubeClient, opts.GatewayClient, opts.LeaseClient
	if kube == nil || gw == nil {
		cfg, err := restConfig(opts)
		if err != nil {
			return nil, nil, nil, err
		}
		kc, errK := kubernetes.NewForConfig(cfg)
		lc, errL := leader.NewLeaseClient(cfg)
		gc, errG := gatewayclient.NewForConfig(cfg)
		if err := errors.Join(errK, errL, errG); err != nil {
			return nil, nil, nil, fmt.Errorf("controller: building the clients: %w", err)
		}
		if kube == nil && leases == nil {
			leases = lc
		}
		kube, gw = cmp.Or[kubernetes.Interface](kube, kc), cmp.Or[gatewayclient.Interface](gw, gc)
	}
	if leases == nil {
		leases = kube.CoordinationV1()
	}
	return kube, gw, leases, nil
}

// restConfig loads the REST configuration — Options.RestConfig, else the
// kubeconfig file, else client-go's loading rules ($KUBECONFIG,
// ~/.kube/config, then in-cluster) — and sets the rate limit (a negative
// QPS: none) and the user agent.
func restConfig(opts Options) (*rest.Config, error) {
	cfg := opts.RestConfig
	if cfg == nil {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = opts.Kubeconfig
		var err error
		if cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig(); err != nil {
			return nil, fmt.Errorf("controller: loading kubeconfig %q (empty: $KUBECONFIG, ~/.kube/config, in-cluster; use --kubeconfig): %w", opts.Kubeconfig, err)
		}
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst, cfg.RateLimiter = opts.KubeQPS, opts.KubeBurst, nil
	cfg.UserAgent = "quietpatch-" + Name
	return cfg, nil
}

// detectReferenceGrantV1 asks discovery whether
// gateway.networking.k8s.io/v1 serves referencegrants; on failure it
// assumes so and logs a warning.
func (c *Controller) detectReferenceGrantV1(ctx context.Context, d discovery.DiscoveryInterface) bool {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := discovery.ToServerResourcesInterfaceWithContext(d).ServerResourcesForGroupVersionWithContext(dctx, gatewayv1.GroupVersion.String())
	if err != nil {
		c.opts.Logger.Warn("cannot tell which ReferenceGrant version the API server serves; assuming v1 (set --reference-grant-version)",
			slog.Any("error", err))
		return true
	}
	if slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "referencegrants" }) {
		return true
	}
	c.opts.Logger.Info("gateway.networking.k8s.io/v1 does not serve referencegrants; watching v1beta1")
	return false
}
