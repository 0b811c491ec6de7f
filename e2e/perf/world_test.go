package perf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gatewayinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"
	gatewayv1listers "sigs.k8s.io/gateway-api/pkg/client/listers/apis/v1"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/examples/httproute-status/fixtures"
	"github.com/quietpatch/quietpatch/examples/httproute-status/routestatus"
	"github.com/quietpatch/quietpatch/internal/pipeline"
	"github.com/quietpatch/quietpatch/internal/queue"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
)

// ---- configuration ----

// config holds the sizes of the benchmarks, read from the environment (see
// the package documentation for the table).
type config struct {
	Routes         int           // QP_PERF_ROUTES
	ConvergeRoutes int           // QP_PERF_CONVERGE_ROUTES
	Workers        int           // QP_PERF_WORKERS
	K              int           // QP_PERF_K
	Intervals      int           // QP_PERF_INTERVALS
	NaiveIntervals int           // QP_PERF_NAIVE_INTERVALS
	Capacity       int           // QP_PERF_CAPACITY
	Lease          time.Duration // QP_PERF_LEASE
	StallPasses    int           // QP_PERF_STALL_PASSES
	StallInterval  time.Duration // QP_PERF_STALL_INTERVAL
	StallRecover   time.Duration // QP_PERF_STALL_RECOVER
	SamplePeriod   time.Duration // QP_PERF_SAMPLE
	PlotsDir       string        // QP_PLOTS_DIR

	AdaptiveRoutes  int             // QP_PERF_ADAPTIVE_ROUTES
	AdaptiveModes   []dispatchMode  // QP_PERF_ADAPTIVE_MODES
	RTTs            []time.Duration // QP_PERF_RTTS
	StormRoutes     int             // QP_PERF_STORM_ROUTES
	FreshRoutes     int             // QP_PERF_FRESH_ROUTES
	StormSample     time.Duration   // QP_PERF_STORM_SAMPLE
	Competitors     int             // QP_PERF_COMPETITORS
	CompetitorRate  float64         // QP_PERF_COMPETITOR_RATE
	AloneFor        time.Duration   // QP_PERF_ALONE
	PolitenessModes []dispatchMode  // QP_PERF_POLITENESS_MODES
	StormModes      []stormMode     // QP_PERF_STORM_MODES
}

func loadConfig() (config, error) {
	c := config{
		Routes: 10_000, ConvergeRoutes: 3_000, Workers: 16, K: 50, Intervals: 5, NaiveIntervals: 1,
		Capacity: 1_000, Lease: 15 * time.Second,
		StallPasses: 10, StallInterval: time.Second, StallRecover: 5 * time.Second, SamplePeriod: 500 * time.Millisecond,
		PlotsDir:       os.Getenv("QP_PLOTS_DIR"),
		AdaptiveRoutes: 1_000, AdaptiveModes: defaultAdaptiveModes, RTTs: []time.Duration{0, 10 * time.Millisecond, 50 * time.Millisecond},
		StormRoutes: 10_000, StormSample: 100 * time.Millisecond, FreshRoutes: 10_000,
		Competitors: 2, CompetitorRate: 20, AloneFor: 45 * time.Second,
		PolitenessModes: []dispatchMode{{"adaptive", 0}, {"fixed-64", 64}},
	}
	var errs []error
	ints := []struct {
		env string
		v   *int
		min int
	}{
		{"QP_PERF_ROUTES", &c.Routes, 10}, {"QP_PERF_CONVERGE_ROUTES", &c.ConvergeRoutes, 1},
		{"QP_PERF_WORKERS", &c.Workers, 1}, {"QP_PERF_K", &c.K, 1}, {"QP_PERF_INTERVALS", &c.Intervals, 1},
		{"QP_PERF_NAIVE_INTERVALS", &c.NaiveIntervals, 1}, {"QP_PERF_CAPACITY", &c.Capacity, 1},
		{"QP_PERF_STALL_PASSES", &c.StallPasses, 1},
		{"QP_PERF_ADAPTIVE_ROUTES", &c.AdaptiveRoutes, 1}, {"QP_PERF_STORM_ROUTES", &c.StormRoutes, 1},
		{"QP_PERF_FRESH_ROUTES", &c.FreshRoutes, 1},
		{"QP_PERF_COMPETITORS", &c.Competitors, 1},
	}
	for _, f := range ints {
		s := os.Getenv(f.env)
		if s == "" {
			continue
		}
		v, err := strconv.Atoi(s)
		if err != nil || v < f.min {
			errs = append(errs, fmt.Errorf("%s must be an integer >= %d, got %q", f.env, f.min, s))
			continue
		}
		*f.v = v
	}
	durs := []struct {
		env string
		v   *time.Duration
		min time.Duration
	}{
		{"QP_PERF_LEASE", &c.Lease, 2 * time.Second}, {"QP_PERF_STALL_INTERVAL", &c.StallInterval, 10 * time.Millisecond},
		{"QP_PERF_STALL_RECOVER", &c.StallRecover, 0}, {"QP_PERF_SAMPLE", &c.SamplePeriod, 10 * time.Millisecond},
		{"QP_PERF_STORM_SAMPLE", &c.StormSample, 10 * time.Millisecond}, {"QP_PERF_ALONE", &c.AloneFor, time.Second},
	}
	for _, f := range durs {
		s := os.Getenv(f.env)
		if s == "" {
			continue
		}
		v, err := time.ParseDuration(s)
		if err != nil || v < f.min {
			errs = append(errs, fmt.Errorf("%s must be a duration >= %v, got %q", f.env, f.min, s))
			continue
		}
		*f.v = v
	}
	if s := os.Getenv("QP_PERF_RTTS"); s != "" {
		c.RTTs = nil
		for _, f := range strings.Split(s, ",") {
			v, err := time.ParseDuration(strings.TrimSpace(f))
			if err != nil || v < 0 {
				errs = append(errs, fmt.Errorf("QP_PERF_RTTS must be a comma-separated list of durations >= 0, got %q", s))
				break
			}
			c.RTTs = append(c.RTTs, v)
		}
	}
	if s := os.Getenv("QP_PERF_ADAPTIVE_MODES"); s != "" {
		modes, err := parseModes(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("QP_PERF_ADAPTIVE_MODES: %w", err))
		} else {
			c.AdaptiveModes = modes
		}
	}
	c.StormModes, _ = parseStormModes(defaultStormModes)
	if s := os.Getenv("QP_PERF_STORM_MODES"); s != "" {
		modes, err := parseStormModes(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("QP_PERF_STORM_MODES: %w", err))
		} else {
			c.StormModes = modes
		}
	}
	if s := os.Getenv("QP_PERF_POLITENESS_MODES"); s != "" {
		modes, err := parseModes(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("QP_PERF_POLITENESS_MODES: %w", err))
		} else {
			c.PolitenessModes = modes
		}
	}
	if s := os.Getenv("QP_PERF_COMPETITOR_RATE"); s != "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v <= 0 || v > 1000 {
			errs = append(errs, fmt.Errorf("QP_PERF_COMPETITOR_RATE must be a number of requests per second in (0, 1000], got %q", s))
		} else {
			c.CompetitorRate = v
		}
	}
	if c.Lease%time.Second != 0 {
		errs = append(errs, fmt.Errorf("QP_PERF_LEASE must be a whole number of seconds, got %v", c.Lease))
	}
	if c.ConvergeRoutes > c.Routes {
		errs = append(errs, fmt.Errorf("QP_PERF_CONVERGE_ROUTES (%d) must not exceed QP_PERF_ROUTES (%d)", c.ConvergeRoutes, c.Routes))
	}
	if c.AdaptiveRoutes > c.Routes {
		errs = append(errs, fmt.Errorf("QP_PERF_ADAPTIVE_ROUTES (%d) must not exceed QP_PERF_ROUTES (%d)", c.AdaptiveRoutes, c.Routes))
	}
	if c.K > c.Routes {
		errs = append(errs, fmt.Errorf("QP_PERF_K (%d) must not exceed QP_PERF_ROUTES (%d)", c.K, c.Routes))
	}
	return c, errors.Join(errs...)
}

// ---- the shared world: one control plane, one set of routes, informers ----

const (
	controllerName = "example.com/quietpatch-perf"
	fieldManager   = "quietpatch-perf"
	// routesPerNamespace spreads the routes; the API server's service IP
	// range (a /24) holds the two ClusterIP Services of at most ~120
	// application namespaces.
	routesPerNamespace = 100
	maxNamespaces      = 100
	// benchNamespace holds the leases and service accounts of the
	// benchmarks.
	benchNamespace = "qp-perf"
)

var routeGVR = schema.GroupVersionResource{Group: gatewayv1.GroupName, Version: "v1", Resource: "httproutes"}

// patchFilter selects, in apiserver_request_total, the status patches of
// HTTPRoutes.
var patchFilter = cluster.RequestFilter{Verb: "PATCH", Resource: "httproutes", Subresource: "status"}

// world is what every benchmark of the package shares: a control plane with
// cfg.Routes HTTPRoutes (and what they refer to) from fixtures, informers
// over them, and the admin clients (no client-side rate limit).
type world struct {
	cfg      config
	cp       *cluster.ControlPlane
	set      *fixtures.Set
	keys     []types.NamespacedName // the routes, in fixtures order
	computer *routestatus.Computer
	lookup   routestatus.Listers
	routes   gatewayv1listers.HTTPRouteLister
	// routeInformer holds the routes of the set (label caseLabel); the
	// gateways informer every Gateway.
	routeInformer, gateways cache.SharedIndexInformer
	dyn                     dynamic.Interface
	gw                      gatewayclient.Interface
	kube                    kubernetes.Interface

	stopInformers func()

	mu      sync.Mutex
	next    int             // the next route pick returns
	granted map[string]bool // service accounts given cluster-admin, or the status writer's role
}

type sharedWorld struct {
	once sync.Once
	w    *world
	err  error
}

var shared sharedWorld

// get returns the shared world, setting it up on first use: starting the
// control plane, creating the objects and syncing the informers takes about
// a minute for 10,000 routes on two busy cores.
func (s *sharedWorld) get(b *testing.B) *world {
	b.Helper()
	s.once.Do(func() {
		begin := time.Now()
		s.w, s.err = newWorld(context.Background(), b)
		if s.err == nil {
			b.Logf("shared world ready in %v: %d routes in %d namespaces, control plane %+v",
				time.Since(begin).Round(time.Millisecond), len(s.w.keys), s.w.set.Config.Namespaces, s.w.cp.Timings())
		}
	})
	if s.err != nil {
		b.Fatalf("shared world: %v", s.err)
	}
	return s.w
}

func (s *sharedWorld) close() error {
	if s.w == nil {
		return nil
	}
	s.w.stopInformers()
	return s.w.cp.Stop()
}

func newWorld(ctx context.Context, b *testing.B) (*world, error) {
	cfg, err := loadConfig()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cp, err := cluster.Start(ctx, cluster.Options{APIServerArgs: profileArgs()})
	if err != nil {
		return nil, err
	}
	w, err := newWorldOn(ctx, b, cp, cfg)
	if err != nil {
		return nil, errors.Join(err, cp.Stop())
	}
	return w, nil
}

// newWorldOn sets a world up on the control plane cp, with cfg's sizes:
// what the benchmarks share, and what a test builds on a small scale.
// Stopping cp is the caller's business; the world's informers stop with
// stopInformers.
func newWorldOn(ctx context.Context, tb testing.TB, cp *cluster.ControlPlane, cfg config) (*world, error) {
	w := &world{cfg: cfg, cp: cp, stopInformers: func() {}}
	if err := w.setup(ctx, tb); err != nil {
		w.stopInformers()
		return nil, err
	}
	return w, nil
}

// caseLabel is the label every route of a fixtures Set carries: the
// world's route informer selects on it, so that routes the benchmarks
// create for themselves (BenchmarkStorm's) stay out of the world's lists.
const caseLabel = "quietpatch.io/case"

func (w *world) setup(ctx context.Context, b testing.TB) error {
	ns := min(maxNamespaces, max(1, w.cfg.Routes/routesPerNamespace))
	set, err := fixtures.Generate(fixtures.Config{Routes: w.cfg.Routes, Namespaces: ns, Prefix: "perf", ControllerName: controllerName})
	if err != nil {
		return err
	}
	w.set = set
	for _, r := range set.Routes {
		w.keys = append(w.keys, types.NamespacedName{Namespace: r.Namespace, Name: r.Name})
	}
	if w.computer, err = routestatus.NewComputer(set.Options()); err != nil {
		return err
	}
	if w.dyn, err = dynamic.NewForConfig(w.cp.AdminConfig()); err != nil {
		return err
	}
	w.gw, w.kube = w.cp.AdminGatewayClient(), w.cp.AdminClient()
	if err := w.cp.EnsureNamespace(ctx, benchNamespace); err != nil {
		return err
	}
	begin := time.Now()
	if err := install(ctx, w.cp, set.Objects(), 32); err != nil {
		return err
	}
	b.Logf("created %d objects in %v", len(set.Objects()), time.Since(begin).Round(time.Millisecond))

	// Informers: what a controller would run, shared by every benchmark.
	// The routes come from a factory of their own, selecting the Set's.
	ictx, icancel := context.WithCancel(context.Background())
	gwf := gatewayinformers.NewSharedInformerFactory(w.gw, 0)
	rf := gatewayinformers.NewSharedInformerFactoryWithOptions(w.gw, 0,
		gatewayinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = caseLabel }))
	kf := kubeinformers.NewSharedInformerFactory(w.kube, 0)
	w.routes = rf.Gateway().V1().HTTPRoutes().Lister()
	w.routeInformer = rf.Gateway().V1().HTTPRoutes().Informer()
	w.gateways = gwf.Gateway().V1().Gateways().Informer()
	w.lookup = routestatus.Listers{
		Services:          kf.Core().V1().Services().Lister(),
		Namespaces:        kf.Core().V1().Namespaces().Lister(),
		Gateways:          gwf.Gateway().V1().Gateways().Lister(),
		GatewayClasses:    gwf.Gateway().V1().GatewayClasses().Lister(),
		ReferenceGrantsV1: gwf.Gateway().V1().ReferenceGrants().Lister(),
	}
	gwf.Start(ictx.Done())
	rf.Start(ictx.Done())
	kf.Start(ictx.Done())
	w.stopInformers = func() {
		icancel()
		gwf.Shutdown()
		rf.Shutdown()
		kf.Shutdown()
	}
	for typ, ok := range gwf.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer for %v did not sync", typ)
		}
	}
	for typ, ok := range rf.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer for %v did not sync", typ)
		}
	}
	for typ, ok := range kf.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer for %v did not sync", typ)
		}
	}
	return poll(ctx, 100*time.Millisecond, "all routes in the informer cache", func() error {
		if n := len(w.list(nil)); n != len(w.keys) {
			return fmt.Errorf("%d of %d routes", n, len(w.keys))
		}
		return nil
	})
}

// install creates objs as the admin, in order; consecutive objects of one
// type are created concurrently, up to workers at a time. Objects that exist
// are left alone.
func install(ctx context.Context, cp *cluster.ControlPlane, objs []runtime.Object, workers int) error {
	for start := 0; start < len(objs); {
		end := start + 1
		for end < len(objs) && reflect.TypeOf(objs[end]) == reflect.TypeOf(objs[start]) {
			end++
		}
		batch := objs[start:end]
		start = end
		if err := parallel(ctx, len(batch), workers, func(ctx context.Context, i int) error {
			return create(ctx, cp, batch[i])
		}); err != nil {
			return err
		}
	}
	return nil
}

func create(ctx context.Context, cp *cluster.ControlPlane, obj runtime.Object) error {
	kube, gw := cp.AdminClient(), cp.AdminGatewayClient()
	opts := metav1.CreateOptions{}
	var err error
	switch o := obj.(type) {
	case *corev1.Namespace:
		_, err = kube.CoreV1().Namespaces().Create(ctx, o, opts)
	case *corev1.Service:
		_, err = kube.CoreV1().Services(o.Namespace).Create(ctx, o, opts)
	case *gatewayv1.GatewayClass:
		_, err = gw.GatewayV1().GatewayClasses().Create(ctx, o, opts)
	case *gatewayv1.Gateway:
		_, err = gw.GatewayV1().Gateways(o.Namespace).Create(ctx, o, opts)
	case *gatewayv1.ReferenceGrant:
		_, err = gw.GatewayV1().ReferenceGrants(o.Namespace).Create(ctx, o, opts)
	case *gatewayv1.HTTPRoute:
		_, err = gw.GatewayV1().HTTPRoutes(o.Namespace).Create(ctx, o, opts)
	default:
		return fmt.Errorf("install: unsupported object type %T", obj)
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating %T: %w", obj, err)
	}
	return nil
}

// parallel calls fn(ctx, i) for i in [0, n) from at most workers goroutines
// and returns the first error; after an error no new call starts.
func parallel(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(max(workers, 1), n) {
		wg.Go(func() {
			for i := range next {
				if err := fn(ctx, i); err != nil {
					cancel(err)
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

// poll calls cond every interval until it returns nil, and fails with its
// last error, naming what, when ctx ends first.
func poll(ctx context.Context, interval time.Duration, what string, cond func() error) error {
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(interval):
		}
	}
}

// benchContext is a context bounded by d and by the benchmark's end.
func benchContext(b *testing.B, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(b.Context(), d)
	b.Cleanup(cancel)
	return ctx
}

// ---- routes: listing, computing, changing ----

// keySet returns the first n route keys as a set.
func (w *world) keySet(n int) map[types.NamespacedName]bool {
	set := make(map[types.NamespacedName]bool, n)
	for _, k := range w.keys[:n] {
		set[k] = true
	}
	return set
}

// keysOf returns keys as a set.
func keysOf(keys []types.NamespacedName) map[types.NamespacedName]bool {
	set := make(map[types.NamespacedName]bool, len(keys))
	for _, k := range keys {
		set[k] = true
	}
	return set
}

// list returns the cached routes whose keys are in keys, or all when keys
// is nil.
func (w *world) list(keys map[types.NamespacedName]bool) []*gatewayv1.HTTPRoute {
	all, _ := w.routes.List(labels.Everything()) // a lister never fails
	if keys == nil {
		return all
	}
	out := all[:0]
	for _, r := range all {
		if keys[types.NamespacedName{Namespace: r.Namespace, Name: r.Name}] {
			out = append(out, r)
		}
	}
	return out
}

// desired computes the status route should have.
func (w *world) desired(r *gatewayv1.HTTPRoute) gatewayv1.HTTPRouteStatus {
	return w.computer.Compute(r, w.lookup, time.Now())
}

// changed returns the cached routes among keys (all when nil) whose status
// is not the desired one.
func (w *world) changed(keys map[types.NamespacedName]bool) []*gatewayv1.HTTPRoute {
	var out []*gatewayv1.HTTPRoute
	for _, r := range w.list(keys) {
		if !routestatus.Equal(r.Status, w.desired(r)) {
			out = append(out, r)
		}
	}
	return out
}

// waitConverged waits until the informer shows every route among keys (all
// when nil) with its desired status.
func (w *world) waitConverged(ctx context.Context, keys map[types.NamespacedName]bool) error {
	return poll(ctx, 200*time.Millisecond, "routes converged", func() error {
		if c := w.changed(keys); len(c) > 0 {
			return fmt.Errorf("%d routes not converged, e.g. %s/%s", len(c), c[0].Namespace, c[0].Name)
		}
		return nil
	})
}

// converge brings every route among keys (all when nil) to its desired
// status with plain patches, workers at a time, and waits until the
// informer shows it: the starting point of the benchmarks that need a
// converged cluster. It does nothing when the routes are converged.
func (w *world) converge(ctx context.Context, keys map[types.NamespacedName]bool) error {
	for range 3 {
		todo := w.changed(keys)
		if len(todo) == 0 {
			return nil
		}
		var rec recorder
		_ = w.floor(ctx, todo, w.cfg.Workers, &rec)
		if err := w.waitConverged(ctx, keys); err == nil {
			return nil
		} else if ctx.Err() != nil {
			return err
		}
	}
	return w.waitConverged(ctx, keys)
}

// reset empties status.parents of every route among keys and waits until
// the informer shows it: the starting point of a convergence.
func (w *world) reset(ctx context.Context, keys map[types.NamespacedName]bool) error {
	var todo []*gatewayv1.HTTPRoute
	for _, r := range w.list(keys) {
		if len(r.Status.Parents) > 0 {
			todo = append(todo, r)
		}
	}
	body := []byte(`{"status":{"parents":[]}}`)
	err := parallel(ctx, len(todo), 2*w.cfg.Workers, func(ctx context.Context, i int) error {
		_, err := w.dyn.Resource(routeGVR).Namespace(todo[i].Namespace).Patch(ctx, todo[i].Name, types.MergePatchType, body,
			metav1.PatchOptions{FieldManager: fieldManager + "-reset"}, "status")
		return err
	})
	if err != nil {
		return fmt.Errorf("resetting statuses: %w", err)
	}
	return poll(ctx, 100*time.Millisecond, "statuses reset", func() error {
		for _, r := range w.list(keys) {
			if len(r.Status.Parents) > 0 {
				return fmt.Errorf("%s/%s still has a status", r.Namespace, r.Name)
			}
		}
		return nil
	})
}

// changeSpecs changes the spec of the routes with keys (the weight of their
// first backend flips between 1 and 2), which bumps their generation and so
// their desired status (observedGeneration), and waits until the informer
// shows every change.
func (w *world) changeSpecs(ctx context.Context, keys []types.NamespacedName) error {
	gens := make([]int64, len(keys))
	err := parallel(ctx, len(keys), w.cfg.Workers, func(ctx context.Context, i int) error {
		client := w.gw.GatewayV1().HTTPRoutes(keys[i].Namespace)
		for attempt := 0; ; attempt++ {
			r, err := client.Get(ctx, keys[i].Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			r = r.DeepCopy()
			weight := r.Spec.Rules[0].BackendRefs[0].Weight
			next := int32(2)
			if weight != nil && *weight == 2 {
				next = 1
			}
			r.Spec.Rules[0].BackendRefs[0].Weight = &next
			r, err = client.Update(ctx, r, metav1.UpdateOptions{})
			if apierrors.IsConflict(err) && attempt < 5 {
				continue
			}
			if err != nil {
				return err
			}
			gens[i] = r.Generation
			return nil
		}
	})
	if err != nil {
		return fmt.Errorf("changing route specs: %w", err)
	}
	return poll(ctx, 50*time.Millisecond, "spec changes in the informer cache", func() error {
		for i, k := range keys {
			r, err := w.routes.HTTPRoutes(k.Namespace).Get(k.Name)
			if err != nil {
				return err
			}
			if r.Generation < gens[i] {
				return fmt.Errorf("%s at generation %d, want %d", k, r.Generation, gens[i])
			}
		}
		return nil
	})
}

// pick returns k route keys to change: successive calls take distinct
// routes (wrapping around), spread over the namespaces.
func (w *world) pick(k int) []types.NamespacedName {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]types.NamespacedName, k)
	for j := range out {
		out[j] = w.keys[(w.next+j)%len(w.keys)]
	}
	w.next = (w.next + k) % len(w.keys)
	return out
}

// patchCount reads the number of HTTPRoute status PATCH requests the API
// server has completed.
func (w *world) patchCount(ctx context.Context) (float64, error) {
	return w.cp.RequestCount(ctx, patchFilter)
}

// patchesSince returns how many status PATCH requests completed since the
// reading before, once at least want have been counted (the API server
// counts a request just after answering it) and the count stayed put for
// settle, or when 10 s have passed.
func (w *world) patchesSince(ctx context.Context, before float64, want int, settle time.Duration) (int, error) {
	deadline := time.Now().Add(10 * time.Second)
	last, stableSince := -1.0, time.Now()
	for {
		n, err := w.patchCount(ctx)
		if err != nil {
			return 0, err
		}
		if n != last {
			last, stableSince = n, time.Now()
		}
		got := int(n - before)
		if (got >= want && time.Since(stableSince) >= settle) || time.Now().After(deadline) {
			return got, nil
		}
		select {
		case <-ctx.Done():
			return got, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ---- patches ----

// statusBody is what a patch merges into .status: the whole
// (listType=atomic) parents list, never null.
type statusBody struct {
	Parents []gatewayv1.RouteParentStatus `json:"parents"`
}

// buildPatch builds the merge patch (with a resourceVersion precondition)
// that sets route's status to desired, as the example controller does.
func buildPatch(r *gatewayv1.HTTPRoute, desired gatewayv1.HTTPRouteStatus) (statuspatch.MergePatch, error) {
	if err := routestatus.Validate(desired); err != nil {
		return statuspatch.MergePatch{}, err
	}
	parents := desired.Parents
	if parents == nil {
		parents = []gatewayv1.RouteParentStatus{}
	}
	return statuspatch.NewMergePatch(r, statusBody{Parents: parents})
}

// send applies p with client as statuspatch.MergePatcher does:
// one PATCH of the status subresource, merge-patch content type, the same
// field manager (the dynamic client cannot send the timeout parameter: the
// baselines go without, as a user's client-go loop does).
func send(ctx context.Context, client dynamic.Interface, p statuspatch.MergePatch) error {
	body, err := p.Body()
	if err != nil {
		return err
	}
	_, err = client.Resource(routeGVR).Namespace(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, body,
		metav1.PatchOptions{FieldManager: fieldManager}, "status")
	return err
}

// floor is the baseline of the convergence benchmark: a plain client-go
// loop, workers goroutines computing and sending one patch per route, with
// no queue, no reconciler and no dispatcher. It returns once every patch was
// answered, and the error of the first that failed.
func (w *world) floor(ctx context.Context, routes []*gatewayv1.HTTPRoute, workers int, rec *recorder) error {
	return w.floorWith(ctx, w.dyn, routes, workers, rec)
}

// floorWith is floor with client.
func (w *world) floorWith(ctx context.Context, client dynamic.Interface, routes []*gatewayv1.HTTPRoute, workers int, rec *recorder) error {
	var firstErr error
	var once sync.Once
	_ = parallel(ctx, len(routes), workers, func(ctx context.Context, i int) error {
		p, err := buildPatch(routes[i], w.desired(routes[i]))
		if err == nil {
			err = send(ctx, client, p)
		}
		rec.record(err)
		if err != nil {
			once.Do(func() { firstErr = err })
		}
		return nil
	})
	return firstErr
}

// recorder counts patch outcomes and remembers when the first and the last
// successful patch returned.
type recorder struct {
	ok, failed      atomic.Int64
	conflicts       atomic.Int64 // of failed: 409 Conflict
	firstOK, lastOK atomic.Int64 // UnixNano; 0: none yet
	mu              sync.Mutex
	firstErr        error
}

func (r *recorder) record(err error) {
	if err != nil {
		r.failed.Add(1)
		if apierrors.IsConflict(err) {
			r.conflicts.Add(1)
		}
		r.mu.Lock()
		if r.firstErr == nil {
			r.firstErr = err
		}
		r.mu.Unlock()
		return
	}
	now := time.Now().UnixNano()
	r.ok.Add(1)
	r.firstOK.CompareAndSwap(0, now)
	for {
		last := r.lastOK.Load()
		if now <= last || r.lastOK.CompareAndSwap(last, now) {
			return
		}
	}
}

// done is the number of patches answered, successfully or not.
func (r *recorder) done() int64 { return r.ok.Load() + r.failed.Load() }

func (r *recorder) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.firstErr
}

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// wrap returns a Patcher that applies p and records the outcome.
func (r *recorder) wrap(p statuspatch.Patcher[statuspatch.MergePatch]) statuspatch.Patcher[statuspatch.MergePatch] {
	return pipeline.PatcherFunc[statuspatch.MergePatch](func(ctx context.Context, mp statuspatch.MergePatch) error {
		err := p.Patch(ctx, mp)
		r.record(err)
		return err
	})
}

// waitDone waits until rec has seen n answers.
func waitDone(ctx context.Context, rec *recorder, n int64) error {
	return poll(ctx, 10*time.Millisecond, fmt.Sprintf("%d patches answered", n), func() error {
		if d := rec.done(); d < n {
			return fmt.Errorf("%d answered", d)
		}
		return nil
	})
}

// ---- quietpatch in process ----

// routeSource is the reconciler's statuspatch.Source over the informer
// cache, limited to keys (all routes when nil).
type routeSource struct {
	w    *world
	keys map[types.NamespacedName]bool
}

func (s routeSource) List() ([]*gatewayv1.HTTPRoute, error) { return s.w.list(s.keys), nil }

func (s routeSource) Get(key types.NamespacedName) (*gatewayv1.HTTPRoute, bool, error) {
	if s.keys != nil && !s.keys[key] {
		return nil, false, nil
	}
	r, err := s.w.routes.HTTPRoutes(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	return r, err == nil, err
}

type (
	routeReconciler = pipeline.Reconciler[*gatewayv1.HTTPRoute, gatewayv1.HTTPRouteStatus, statuspatch.MergePatch]
	routeDispatcher = pipeline.Dispatcher[*gatewayv1.HTTPRoute, gatewayv1.HTTPRouteStatus, statuspatch.MergePatch]
	routeQueue      = queue.Queue[types.NamespacedName]
)

// stackConfig says how to build a quietpatch stack (queue, reconciler,
// dispatcher) over the shared world.
type stackConfig struct {
	Name     string
	Capacity int
	Workers  int
	// Leader, when set, is the claim the parts follow — a replica's
	// Claimer, which its owner runs. Nil gives the stack a Claimer of its
	// own, identity Name, on a fresh Lease (admin client, default
	// timings): start runs it and returns once it leads, stop vacates.
	Leader pipeline.Leader
	// Lease is the name of Leader's Lease in benchNamespace, which the
	// WriteClaim of every call names (with Leader only).
	Lease string
	Keys  map[types.NamespacedName]bool // nil: all routes
	// Current, when set, replaces reading the route's status: the stalled
	// memory benchmark makes every route look changed with it.
	Current func(*gatewayv1.HTTPRoute) gatewayv1.HTTPRouteStatus
	Client  *rest.Config // the patcher's client; default the admin's
	// Patcher, when set, replaces the MergePatcher over Client.
	Patcher  statuspatch.Patcher[statuspatch.MergePatch]
	Interval time.Duration // default 10 s
	// Meter, when set, receives the parts' instruments (registered by
	// start, unregistered by stop).
	Meter metric.Meter
}

// routeComputer is the reconciler's StatusComputer for HTTPRoutes, the
// example's: desired from routestatus over the world's listers, compared
// with routestatus.Equal, patched with buildPatch.
type routeComputer = pipeline.ComputerFuncs[*gatewayv1.HTTPRoute, gatewayv1.HTTPRouteStatus, statuspatch.MergePatch]

// computerFuncs returns the routeComputer; current, when set, replaces
// reading the route's status.
func (w *world) computerFuncs(current func(*gatewayv1.HTTPRoute) gatewayv1.HTTPRouteStatus) routeComputer {
	desired := func(r *gatewayv1.HTTPRoute) (gatewayv1.HTTPRouteStatus, error) { return w.desired(r), nil }
	if current == nil {
		current = func(r *gatewayv1.HTTPRoute) gatewayv1.HTTPRouteStatus { return r.Status }
		// As the example's controller does: a status found up to date is
		// not built again.
		desired = func(r *gatewayv1.HTTPRoute) (gatewayv1.HTTPRouteStatus, error) {
			if w.computer.UpToDate(r, w.lookup) {
				return r.Status, nil
			}
			return w.desired(r), nil
		}
	}
	return routeComputer{
		KeyFunc: func(r *gatewayv1.HTTPRoute) types.NamespacedName {
			return types.NamespacedName{Namespace: r.Namespace, Name: r.Name}
		},
		CurrentFunc: current,
		DesiredFunc: desired,
		EqualFunc:   routestatus.Equal,
		PatchFunc:   buildPatch,
	}
}

// stack is quietpatch running in process, composed from the library's
// internal parts as quietpatch.New composes them: a queue of route keys,
// a Reconciler over the informer cache with the example's computer, and a
// Dispatcher building each patch from the same cache and computer and
// applying it with a MergePatcher whose outcomes rec counts, both
// following a Claimer — the stack's own unless stackConfig.Leader is set.
type stack struct {
	queue      *routeQueue
	reconciler *routeReconciler
	dispatcher *routeDispatcher
	metrics    *pipeline.Metrics
	rec        recorder

	// claimer is the stack's own Claimer (nil with stackConfig.Leader),
	// run by start until stop.
	claimer     *leader.Claimer
	claimCancel context.CancelFunc
	claimDone   chan error

	cancel     context.CancelFunc
	unregister func()
	wg         sync.WaitGroup
	errs       chan error
}

func (w *world) newStack(cfg stackConfig) (*stack, error) {
	s := &stack{errs: make(chan error, 2)}
	l := cfg.Leader
	lease := types.NamespacedName{Namespace: benchNamespace, Name: cfg.Lease}
	if l == nil {
		lease.Name = cfg.Name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		leases, err := leader.NewLeaseClient(w.cp.AdminConfig())
		if err != nil {
			return nil, err
		}
		if s.claimer, err = leader.NewClaimer(leases, leader.Config{Namespace: lease.Namespace, Name: lease.Name, Identity: cfg.Name}); err != nil {
			return nil, err
		}
		l = s.claimer
	}
	opts, err := pipeline.Options{Name: cfg.Name, Capacity: cfg.Capacity, Workers: cfg.Workers, Interval: cfg.Interval, Lease: lease}.Complete()
	if err != nil {
		return nil, err
	}
	s.queue = queue.New[types.NamespacedName](opts.Capacity, opts.Clock)
	s.metrics = pipeline.NewMetrics(cfg.Meter, opts)
	src, comp := routeSource{w: w, keys: cfg.Keys}, w.computerFuncs(cfg.Current)
	if s.reconciler, err = pipeline.NewReconciler(src, comp, s.queue, l, opts, s.metrics); err != nil {
		return nil, err
	}
	patcher := cfg.Patcher
	if patcher == nil {
		client := cfg.Client
		if client == nil {
			client = w.cp.AdminConfig()
		}
		if patcher, err = statuspatch.NewMergePatcher(client, routeGVR, fieldManager); err != nil {
			return nil, err
		}
	}
	if s.dispatcher, err = pipeline.NewDispatcher(s.queue, src, comp, s.rec.wrap(patcher), l, opts, s.metrics); err != nil {
		return nil, err
	}
	return s, nil
}

// start registers the instruments, runs the dispatcher, and the
// reconciler's own loop when runReconciler is set (otherwise the benchmark
// drives passes with ReconcileAll). With a Claimer of its own, it runs it
// first and returns once it leads (the first claim on a free Lease takes
// a few hundred milliseconds at most).
func (s *stack) start(ctx context.Context, runReconciler bool) error {
	unregister, err := s.metrics.Register(s.queue, s.reconciler.Stats, s.dispatcher.Stats)
	if err != nil {
		return err
	}
	s.unregister = unregister
	if s.claimer != nil {
		claimCtx, cancel := context.WithCancel(context.Background())
		s.claimCancel, s.claimDone = cancel, make(chan error, 1)
		go func() { s.claimDone <- s.claimer.Run(claimCtx) }()
		err := poll(ctx, 5*time.Millisecond, "the stack's claimer leading", func() error {
			if err := s.claimer.Ready(); err != nil {
				return err
			}
			if !s.claimer.Current().IsCurrentFor(s.claimer.Identity(), time.Now()) {
				return errors.New("not leading yet")
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Go(func() { s.errs <- s.dispatcher.Run(runCtx) })
	if runReconciler {
		s.wg.Go(func() { s.errs <- s.reconciler.Run(runCtx) })
	}
	return nil
}

// stop stops what start started — the reconciler and the dispatcher, then
// the queue, then the stack's own Claimer (which vacates the Lease if every
// call was answered) — and unregisters the instruments.
func (s *stack) stop() error {
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	s.queue.Close()
	close(s.errs)
	var errs []error
	for err := range s.errs {
		errs = append(errs, err)
	}
	if s.claimCancel != nil {
		s.claimCancel()
		if err := <-s.claimDone; err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, fmt.Errorf("the stack's claimer: %w", err))
		}
	}
	if s.unregister != nil {
		s.unregister()
	}
	return errors.Join(errs...)
}

// ---- the seed's unbounded queue ----

// unbounded is the queue of the seed controller: a slice that grows without
// limit, drained by dispatcher goroutines.
type unbounded[T any] struct {
	mu     sync.Mutex
	items  []T
	notify chan struct{}
}

func newUnbounded[T any]() *unbounded[T] { return &unbounded[T]{notify: make(chan struct{}, 1)} }

func (q *unbounded[T]) push(v T) {
	q.mu.Lock()
	q.items = append(q.items, v)
	q.mu.Unlock()
	q.signal()
}

func (q *unbounded[T]) signal() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// pop waits for an item until ctx ends.
func (q *unbounded[T]) pop(ctx context.Context) (T, bool) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			v := q.items[0]
			var zero T
			q.items[0] = zero
			q.items = q.items[1:]
			more := len(q.items) > 0
			q.mu.Unlock()
			if more {
				q.signal() // wake another consumer
			}
			return v, true
		}
		q.mu.Unlock()
		select {
		case <-q.notify:
		case <-ctx.Done():
			var zero T
			return zero, false
		}
	}
}

func (q *unbounded[T]) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// drain runs workers goroutines that pop patches and send them with client,
// without a deadline (as the seed did), recording outcomes, until ctx ends.
// The returned function waits for them.
func (q *unbounded[T]) drain(ctx context.Context, workers int, apply func(context.Context, T) error, rec *recorder) (wait func()) {
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				v, ok := q.pop(ctx)
				if !ok {
					return
				}
				err := apply(ctx, v)
				if ctx.Err() != nil {
					return
				}
				rec.record(err)
			}
		})
	}
	return wg.Wait
}

// identity returns a config for the ServiceAccount benchNamespace/name
// (a bearer token, so it also works through a FaultProxy), with the rights of
// cluster-admin and no client-side rate limit. Unlike the admin, whose
// requests are exempt from the API server's priority and fairness, a
// ServiceAccount is subject to it, as a controller is.
func (w *world) identity(ctx context.Context, name string) (*rest.Config, error) {
	cfg, err := w.cp.ConfigFor(ctx, benchNamespace, name)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.granted[name] {
		if err := w.cp.GrantClusterRole(ctx, benchNamespace, name, "cluster-admin"); err != nil {
			return nil, err
		}
		if w.granted == nil {
			w.granted = map[string]bool{}
		}
		w.granted[name] = true
	}
	cfg.QPS = -1
	return cfg, nil
}

// statusWriterRole is the ClusterRole of statusWriter identities.
const statusWriterRole = "qp-perf-httproute-status-writer"

// statusWriter returns a config for the ServiceAccount benchNamespace/name,
// allowed to patch HTTPRoute statuses and nothing else, with no client-side
// rate limit: a controller's status client. API Priority and Fairness
// treats it as any service account (flow schema service-accounts, one flow
// per user, priority level workload-low), where the admin is exempt.
func (w *world) statusWriter(ctx context.Context, name string) (*rest.Config, error) {
	cfg, err := w.cp.ConfigFor(ctx, benchNamespace, name)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if key := "status-writer/" + name; !w.granted[key] {
		_, err := w.kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: statusWriterRole},
			Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{gatewayv1.GroupName}, Resources: []string{"httproutes/status"}, Verbs: []string{"patch"},
			}},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
		if err := w.cp.GrantClusterRole(ctx, benchNamespace, name, statusWriterRole); err != nil {
			return nil, err
		}
		if w.granted == nil {
			w.granted = map[string]bool{}
		}
		w.granted[key] = true
	}
	cfg.QPS = -1
	err = waitAllowed(ctx, cfg, authorizationv1.ResourceAttributes{
		Verb: "patch", Group: gatewayv1.GroupName, Resource: "httproutes", Subresource: "status",
	})
	return cfg, err
}

// waitAllowed waits until the identity of cfg may do verb on the resource
// (group, resource, subresource) in namespace, as the API server's
// authorizer answers a SelfSubjectAccessReview: a new RBAC binding takes a
// moment to reach the authorizer's cache.
func waitAllowed(ctx context.Context, cfg *rest.Config, attrs authorizationv1.ResourceAttributes) error {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return poll(ctx, 50*time.Millisecond, fmt.Sprintf("%s to be allowed to %s %s/%s", cfg.UserAgent, attrs.Verb, attrs.Resource, attrs.Subresource), func() error {
		r, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if !r.Status.Allowed {
			return fmt.Errorf("not allowed yet: %s", r.Status.Reason)
		}
		return nil
	})
}
