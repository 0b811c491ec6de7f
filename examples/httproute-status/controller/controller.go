package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gwinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"

	"github.com/quietpatch/quietpatch/examples/httproute-status/routestatus"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
)

// Name is the value of the queue, reconciler and dispatcher attributes on
// the library's instruments, and the user agent of the controller's clients.
const Name = "httproute-status"

// ErrAlreadyRunning is returned by a second call of [Controller.Run].
var ErrAlreadyRunning = errors.New("controller: Run already called")

// shutdownTimeout bounds the shutdown of the HTTP servers and of the meter
// provider. The lease is vacated under the claimer's own CallTimeout.
const shutdownTimeout = 5 * time.Second

// Controller is the HTTPRoute status controller: informers, a lease
// claimer, a reconciler, a bounded patch queue and a dispatcher, and the
// metrics and health endpoints. Build it with [New], run it once with
// [Controller.Run]. Ready and Live may be called from any goroutine at any
// time.
type Controller struct {
	opts Options
	log  *slog.Logger

	kubeInformers informers.SharedInformerFactory
	gwInformers   gwinformers.SharedInformerFactory
	refGrantsV1   bool // ReferenceGrants watched through v1 (else v1beta1)

	queue      *statuspatch.PatchQueue[statuspatch.Patch[routePatch]]
	reconciler *statuspatch.Reconciler[routeObject, routeStatus, routePatch]
	dispatcher *statuspatch.Dispatcher[routePatch]
	claimer    *leader.Claimer
	telemetry  *telemetry // nil when metrics are off

	started           atomic.Bool
	synced            atomic.Bool
	stopping          atomic.Bool
	dispatcherRunning atomic.Bool
}

// New validates opts, builds the clients (loading the kubeconfig unless
// clients or a REST configuration are given), asks discovery which
// ReferenceGrant version to watch when Options.ReferenceGrantVersion is
// auto (bounded by ctx and 10 s), and wires informers, claimer, queue,
// reconciler and dispatcher together. It starts nothing and listens on
// nothing: [Controller.Run] does.
//
// Invalid options yield an [*OptionError] (wrapping [ErrInvalidOptions])
// naming the field.
func New(ctx context.Context, opts Options) (*Controller, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Controller{opts: opts, log: opts.Logger}

	kube, gw, leases := opts.KubeClient, opts.GatewayClient, opts.LeaseClient
	if kube == nil || gw == nil {
		cfg, err := restConfig(opts)
		if err != nil {
			return nil, err
		}
		if kube == nil {
			if kube, err = kubernetes.NewForConfig(cfg); err != nil {
				return nil, fmt.Errorf("controller: building the Kubernetes client: %w", err)
			}
			if leases == nil {
				// A client of its own, with client-go's default limiter:
				// the lease never waits behind status patches.
				lcfg := rest.CopyConfig(cfg)
				lcfg.QPS, lcfg.Burst, lcfg.RateLimiter = 0, 0, nil
				lc, err := kubernetes.NewForConfig(lcfg)
				if err != nil {
					return nil, fmt.Errorf("controller: building the lease client: %w", err)
				}
				leases = lc.CoordinationV1()
			}
		}
		if gw == nil {
			if gw, err = gatewayclient.NewForConfig(cfg); err != nil {
				return nil, fmt.Errorf("controller: building the Gateway API client: %w", err)
			}
		}
	}
	if leases == nil {
		leases = kube.CoordinationV1()
	}

	switch opts.ReferenceGrantVersion {
	case ReferenceGrantV1:
		c.refGrantsV1 = true
	case ReferenceGrantV1beta1:
	default:
		c.refGrantsV1 = c.detectReferenceGrantV1(ctx, gw.Discovery())
	}

	if !disabledAddr(opts.MetricsAddr) || opts.MetricsListener != nil {
		if c.telemetry, err = newTelemetry(); err != nil {
			return nil, err
		}
	}
	meter := c.telemetry.meter()

	// Informers, with the indexes the event handlers use.
	c.kubeInformers = informers.NewSharedInformerFactory(kube, 0)
	c.gwInformers = gwinformers.NewSharedInformerFactory(gw, 0)
	services := c.kubeInformers.Core().V1().Services()
	namespaces := c.kubeInformers.Core().V1().Namespaces()
	routes := c.gwInformers.Gateway().V1().HTTPRoutes()
	gateways := c.gwInformers.Gateway().V1().Gateways()
	classes := c.gwInformers.Gateway().V1().GatewayClasses()
	if err := routes.Informer().AddIndexers(routeIndexers()); err != nil {
		return nil, fmt.Errorf("controller: adding HTTPRoute indexes: %w", err)
	}
	if err := gateways.Informer().AddIndexers(gatewayIndexers()); err != nil {
		return nil, fmt.Errorf("controller: adding Gateway indexes: %w", err)
	}
	lookup := routestatus.Listers{
		Services:       services.Lister(),
		Namespaces:     namespaces.Lister(),
		Gateways:       gateways.Lister(),
		GatewayClasses: classes.Lister(),
	}
	var grants cache.SharedIndexInformer
	if c.refGrantsV1 {
		g := c.gwInformers.Gateway().V1().ReferenceGrants()
		lookup.ReferenceGrantsV1, grants = g.Lister(), g.Informer()
	} else {
		g := c.gwInformers.Gateway().V1beta1().ReferenceGrants()
		lookup.ReferenceGrantsV1beta1, grants = g.Lister(), g.Informer()
	}

	computer, err := routestatus.NewComputer(routestatus.Options{
		ControllerName: gatewayControllerName(opts.ControllerName), Mesh: opts.Mesh,
	})
	if err != nil {
		return nil, optErr("ControllerName", fmt.Sprintf("%q", opts.ControllerName), "is invalid: %v", err)
	}

	// The lease.
	c.claimer, err = leader.NewClaimer(leases, leader.Config{
		Namespace:     opts.LeaseNamespace,
		Name:          opts.LeaseName,
		Identity:      opts.Identity,
		LeaseDuration: opts.LeaseDuration,
		RenewGrace:    opts.RenewGrace,
		RetryPeriod:   opts.RetryPeriod,
		Logger:        opts.Logger,
		Meter:         meter,
	})
	if err != nil {
		return nil, leaderOptionError(err)
	}

	// Queue, reconciler, dispatcher.
	c.queue, err = statuspatch.NewPatchQueue(statuspatch.QueueConfig[statuspatch.Patch[routePatch]]{
		Capacity: opts.QueueCapacity,
		Key:      statuspatch.PatchKey[routePatch],
		MaxAge:   2 * opts.ReconcileInterval,
		Name:     Name,
		Meter:    meter,
	})
	if err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	c.reconciler, err = statuspatch.NewReconciler(statuspatch.ReconcilerConfig[routeObject, routeStatus, routePatch]{
		Source:      routeSource{lister: routes.Lister()},
		Computer:    routeComputer{computer: computer, lookup: lookup, now: time.Now},
		Queue:       c.queue,
		Leader:      c.claimer,
		Interval:    opts.ReconcileInterval,
		Logger:      opts.Logger,
		DiffOptions: diffOptions(),
		Meter:       meter,
		Name:        Name,
	})
	if err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	c.dispatcher, err = statuspatch.NewDispatcher(statuspatch.DispatcherConfig[routePatch]{
		Queue:        c.queue,
		Patcher:      statusPatcher{client: gw.GatewayV1(), fieldManager: opts.FieldManager},
		Leader:       c.claimer,
		PatchTimeout: opts.PatchTimeout,
		Workers:      opts.Workers,
		Logger:       opts.Logger,
		Meter:        meter,
		Name:         Name,
	})
	if err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}

	// Event handlers: every change enqueues the routes it can affect.
	e := &enqueuer{routes: routes.Informer().GetIndexer(), gateways: gateways.Informer().GetIndexer(), enqueue: c.reconciler.Enqueue}
	for _, h := range []struct {
		inf cache.SharedIndexInformer
		on  func(metav1.Object)
	}{
		{routes.Informer(), e.onRoute},
		{services.Informer(), e.onService},
		{gateways.Informer(), e.onGateway},
		{classes.Informer(), e.onGatewayClass},
		{grants, e.onReferenceGrant},
		{namespaces.Informer(), e.onNamespace},
	} {
		if _, err := h.inf.AddEventHandler(handler(h.on)); err != nil {
			return nil, fmt.Errorf("controller: adding an event handler: %w", err)
		}
	}

	c.log.Info("controller configured",
		slog.String("controllerName", opts.ControllerName),
		slog.Bool("mesh", opts.Mesh),
		slog.String("lease", opts.LeaseNamespace+"/"+opts.LeaseName),
		slog.String("identity", opts.Identity),
		slog.Duration("interval", opts.ReconcileInterval),
		slog.Int("queueCapacity", opts.QueueCapacity),
		slog.Int("workers", opts.Workers),
		slog.Float64("kubeQPS", float64(opts.KubeQPS)),
		slog.Int("kubeBurst", opts.KubeBurst),
		slog.Duration("patchTimeout", opts.PatchTimeout),
		slog.String("referenceGrantVersion", map[bool]string{true: "v1", false: "v1beta1"}[c.refGrantsV1]))
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
// Start: listen on the metrics and health addresses (failing at once if it
// cannot), start the informers and wait for their caches
// (Options.CacheSyncTimeout), then start the dispatcher, the lease claimer
// and the reconciler. Until the caches are synced this replica does not
// compete for the lease.
//
// Failures that end Run: a listener or HTTP server fails; the caches do not
// sync in time; the lease loop fails (e.g. RBAC forbids the Lease); the
// dispatcher or the reconciler stops on its own.
//
// Shutdown, in this order: stop reconciling; stop the dispatcher (calls in
// flight are cancelled, queued patches dropped with reason shutdown — the
// next leader recomputes them); vacate the lease (so a successor takes over
// at once, and only after none of our patches can still be sent); stop the
// informers and the HTTP servers. Vacating last means no patch of ours is
// dispatched after we gave the lease up.
func (c *Controller) Run(ctx context.Context) error {
	if !c.started.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer c.stopping.Store(true)
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		defer cancel()
		_ = c.telemetry.shutdown(sctx)
	}()

	// runCtx ends at the first failure or when ctx is cancelled.
	runCtx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	var (
		failMu   sync.Mutex
		firstErr error
	)
	failWith := func(err error) {
		failMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		failMu.Unlock()
		fail(err)
	}

	// Listeners first: a busy port fails now, not after the cache sync.
	var servers []*server
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		defer cancel()
		for _, s := range servers {
			s.stop(sctx)
		}
	}()
	if c.telemetry != nil {
		s, err := listenAndServe("metrics", c.opts.MetricsAddr, c.opts.MetricsListener, c.metricsMux(), failWith)
		if err != nil {
			c.closeListeners()
			return err
		}
		servers = append(servers, s)
	}
	if !disabledAddr(c.opts.HealthAddr) || c.opts.HealthListener != nil {
		s, err := listenAndServe("health", c.opts.HealthAddr, c.opts.HealthListener, healthHandler(c.Live, c.Ready), failWith)
		if err != nil {
			c.closeListeners()
			return err
		}
		servers = append(servers, s)
	}

	// Informers, stopped explicitly after everything that reads them.
	infCtx, stopInformers := context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		stopInformers()
		c.kubeInformers.Shutdown()
		c.gwInformers.Shutdown()
	}()
	c.kubeInformers.StartWithContext(infCtx)
	c.gwInformers.StartWithContext(infCtx)
	c.log.Info("waiting for informer caches to sync", slog.Duration("timeout", c.opts.CacheSyncTimeout))
	syncCtx, cancelSync := context.WithTimeout(runCtx, c.opts.CacheSyncTimeout)
	err := errors.Join(
		c.kubeInformers.WaitForCacheSyncWithContext(syncCtx).AsError(),
		c.gwInformers.WaitForCacheSyncWithContext(syncCtx).AsError())
	syncTimedOut := errors.Is(syncCtx.Err(), context.DeadlineExceeded) && runCtx.Err() == nil
	cancelSync()
	if err != nil {
		if syncTimedOut {
			failWith(fmt.Errorf("controller: informer caches not synced within %s (are the Gateway API CRDs installed, and may we list and watch HTTPRoutes, Gateways, GatewayClasses, ReferenceGrants, Services and Namespaces?): %w",
				c.opts.CacheSyncTimeout, err))
		}
		c.log.Info("stopped before the informer caches synced")
		return firstErrOr(&failMu, &firstErr)
	}
	c.synced.Store(true)
	c.log.Info("informer caches synced; competing for the lease")

	// The dispatcher, the claimer and the reconciler, each with its own
	// context so that shutdown can stop them in order.
	type part struct {
		name   string
		cancel context.CancelFunc
		done   chan struct{}
	}
	start := func(name string, run func(context.Context) error) part {
		pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		p := part{name: name, cancel: cancel, done: make(chan struct{})}
		go func() {
			defer close(p.done)
			err := run(pctx)
			if pctx.Err() != nil {
				return // stopped by us
			}
			if err == nil {
				err = errors.New("stopped unexpectedly")
			}
			failWith(fmt.Errorf("controller: %s: %w", name, err))
		}()
		return p
	}
	dispatcher := start("dispatcher", func(ctx context.Context) error {
		c.dispatcherRunning.Store(true)
		defer c.dispatcherRunning.Store(false)
		return c.dispatcher.Run(ctx)
	})
	lease := start("lease loop", c.claimer.Run)
	leadership := start("leadership log", c.logLeadership)
	reconciler := start("reconciler", c.reconciler.Run)

	<-runCtx.Done()
	c.stopping.Store(true)
	if err := firstErrOr(&failMu, &firstErr); err != nil {
		// Run returns the error; its caller logs it, once.
		c.log.Info("shutting down after a failure: stopping the reconciler, the dispatcher, then vacating the lease")
	} else {
		c.log.Info("shutting down: stopping the reconciler, the dispatcher, then vacating the lease")
	}
	for _, p := range []part{reconciler, dispatcher, lease, leadership} {
		p.cancel()
		<-p.done
	}
	c.queue.Close()
	c.log.Info("controller stopped")
	return firstErrOr(&failMu, &firstErr)
}

func firstErrOr(mu *sync.Mutex, err *error) error {
	mu.Lock()
	defer mu.Unlock()
	return *err
}

// closeListeners closes the listeners given in Options that Run did not
// get to serve.
func (c *Controller) closeListeners() {
	for _, l := range []net.Listener{c.opts.MetricsListener, c.opts.HealthListener} {
		if l != nil {
			_ = l.Close()
		}
	}
}

// logLeadership logs, at info level, when this replica gains or loses the
// lease and who holds it otherwise. It returns nil when ctx ends.
func (c *Controller) logLeadership(ctx context.Context) error {
	changes, cancel := c.claimer.Subscribe()
	defer cancel()
	id := c.claimer.Identity()
	var (
		leading bool
		holder  string
		epoch   int64
	)
	for {
		select {
		case <-ctx.Done():
			return nil
		case cl, ok := <-changes:
			if !ok {
				return nil
			}
			now := time.Now()
			l := cl.IsCurrentFor(id, now)
			h := ""
			if cl.IsCurrent(now) {
				h = cl.Holder
			}
			switch {
			case l && (!leading || cl.Epoch != epoch):
				c.log.Info("leading: this replica holds the lease", slog.Int64("epoch", cl.Epoch))
			case !l && leading:
				c.log.Info("not leading: this replica no longer holds the lease", slog.String("holder", h))
			case !l && h != holder:
				c.log.Info("lease holder observed", slog.String("holder", h), slog.Int64("epoch", cl.Epoch))
			}
			leading, holder, epoch = l, h, cl.Epoch
		}
	}
}

// Ready reports whether this replica is ready: nil when the informer caches
// are synced, the lease loop runs, the dispatcher drains the queue and the
// reconciler runs — whether or not this replica leads. Otherwise an error
// listing every reason.
func (c *Controller) Ready() error {
	if c.stopping.Load() {
		return errors.New("shutting down")
	}
	if !c.synced.Load() {
		return errors.New("informer caches not synced")
	}
	var errs []error
	if err := c.claimer.Healthy(); err != nil {
		errs = append(errs, fmt.Errorf("lease loop: %w", err))
	}
	if err := c.dispatcher.Healthy(); err != nil {
		errs = append(errs, fmt.Errorf("dispatcher: %w", err))
	}
	if err := c.reconciler.Healthy(); err != nil {
		errs = append(errs, fmt.Errorf("reconciler: %w", err))
	}
	return errors.Join(errs...)
}

// Live reports whether the process should be restarted: an error only when
// a dispatcher worker is stuck in a patch call (a Patcher ignoring its
// context). Every other failure ends Run, and with it the process.
func (c *Controller) Live() error {
	if c.dispatcherRunning.Load() {
		if err := c.dispatcher.Healthy(); err != nil && !errors.Is(err, statuspatch.ErrNotStarted) && !errors.Is(err, statuspatch.ErrStopped) {
			return fmt.Errorf("dispatcher: %w", err)
		}
	}
	return nil
}

// Claim returns the latest lease claim this replica observed.
func (c *Controller) Claim() leader.Claim { return c.claimer.Current() }

// QueueStats returns the patch queue's counters.
func (c *Controller) QueueStats() statuspatch.QueueStats { return c.queue.Stats() }

func (c *Controller) metricsMux() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", c.telemetry.handler())
	return mux
}

// server is one HTTP endpoint served by Run.
type server struct {
	srv  *http.Server
	done chan struct{}
}

// listenAndServe serves h on l, or on a new listener on addr when l is nil.
// A Serve that ends other than by stop reports through fail.
func listenAndServe(name, addr string, l net.Listener, h http.Handler, fail func(error)) (*server, error) {
	if l == nil {
		var err error
		if l, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("controller: %s endpoint: %w", name, err)
		}
	}
	s := &server{
		srv:  &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second},
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fail(fmt.Errorf("controller: %s endpoint on %s: %w", name, l.Addr(), err))
		}
	}()
	return s, nil
}

func (s *server) stop(ctx context.Context) {
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	<-s.done
}

// restConfig loads the REST configuration (Options.RestConfig, the
// kubeconfig file, in-cluster, then the standard loading rules) and sets the
// rate limit and user agent.
func restConfig(opts Options) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	switch {
	case opts.RestConfig != nil:
		cfg = rest.CopyConfig(opts.RestConfig)
	case opts.Kubeconfig != "":
		if cfg, err = clientcmd.BuildConfigFromFlags("", opts.Kubeconfig); err != nil {
			return nil, fmt.Errorf("controller: loading kubeconfig %q: %w", opts.Kubeconfig, err)
		}
	default:
		cfg, err = rest.InClusterConfig()
		if errors.Is(err, rest.ErrNotInCluster) {
			rules := clientcmd.NewDefaultClientConfigLoadingRules()
			cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		}
		if err != nil {
			return nil, fmt.Errorf("controller: no Kubernetes configuration (not in a cluster, and $KUBECONFIG / ~/.kube/config gave none; use --kubeconfig): %w", err)
		}
	}
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
		c.log.Warn("cannot tell which ReferenceGrant version the API server serves; assuming v1 (set --reference-grant-version)",
			slog.Any("error", err))
		return true
	}
	for _, r := range list.APIResources {
		if r.Name == "referencegrants" {
			return true
		}
	}
	c.log.Info("gateway.networking.k8s.io/v1 does not serve referencegrants; watching v1beta1")
	return false
}

// leaderOptionError maps a leader.Config error to the Options field that
// caused it.
func leaderOptionError(err error) error {
	if !errors.Is(err, leader.ErrInvalidConfig) {
		return fmt.Errorf("controller: %w", err)
	}
	msg := err.Error()
	for _, f := range []struct{ config, field string }{
		{"Config.LeaseDuration", "LeaseDuration"},
		{"Config.RenewGrace", "RenewGrace"},
		{"Config.RetryPeriod", "RetryPeriod"},
		{"Config.CallTimeout", "LeaseDuration"},
		{"Config.Namespace", "LeaseNamespace"},
		{"Config.Name", "LeaseName"},
		{"Config.Identity", "Identity"},
	} {
		if i := strings.Index(msg, f.config+" "); i >= 0 {
			return &OptionError{Field: f.field, Rule: msg[i+len(f.config)+1:]}
		}
	}
	return &OptionError{Field: "LeaseDuration", Rule: msg}
}

func gatewayControllerName(s string) gatewayv1.GatewayController {
	return gatewayv1.GatewayController(s)
}
