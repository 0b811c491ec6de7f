package perf

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"
	gatewayv1listers "sigs.k8s.io/gateway-api/pkg/client/listers/apis/v1"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/examples/httproute-status/fixtures"
	"github.com/quietpatch/quietpatch/examples/httproute-status/routestatus"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/source"
)

// stormLabel marks a storm's routes, its value the storm's name: the
// world's route informer does not select them.
const stormLabel = "quietpatch.io/storm"

// storm is what BenchmarkStorm, BenchmarkPoliteness and BenchmarkFreshChange
// share: N HTTPRoutes (QP_PERF_STORM_ROUTES, 10,000) spread over the world's
// application namespaces, all attached to the listener "http" of a Gateway
// of their own, an informer over them, and a status writer (a
// ServiceAccount that may only patch HTTPRoute statuses, no client-side rate
// limit). Flipping the listener's allowedRoutes between the application
// namespaces (the routes are Accepted) and the Gateway's own namespace only
// (NotAllowedByListeners) changes the desired status of every storm route.
//
// A storm is named after its size (stormName): its Gateway, its routes'
// name prefix and their stormLabel value, so that storms of different sizes
// live side by side on one control plane.
type storm struct {
	w      *world
	name   string // the Gateway's name, the routes' prefix and label value
	keys   []types.NamespacedName
	inf    cache.SharedIndexInformer
	lister gatewayv1listers.HTTPRouteLister
	writer *rest.Config
	dyn    dynamic.Interface // the writer's

	mu     sync.Mutex
	open   bool // the listener admits the application namespaces now
	leases int  // Leases made, one per controller run

	stopInformer func()
}

type sharedStorm struct {
	once sync.Once
	s    *storm
	err  error
}

// stormSet holds the benchmarks' storms, one per size, each set up on
// first use.
type stormSet struct {
	mu  sync.Mutex
	all map[int]*sharedStorm
}

var storms stormSet

// get returns the storm of QP_PERF_STORM_ROUTES routes.
func (ss *stormSet) get(b *testing.B, w *world) *storm { return ss.sized(b, w, w.cfg.StormRoutes) }

// sized returns the storm of n routes, setting it up on first use: creating
// 10,000 routes and bringing their statuses to the open Gateway's takes a
// minute or two.
func (ss *stormSet) sized(b *testing.B, w *world, n int) *storm {
	b.Helper()
	ss.mu.Lock()
	if ss.all == nil {
		ss.all = map[int]*sharedStorm{}
	}
	one := ss.all[n]
	if one == nil {
		one = &sharedStorm{}
		ss.all[n] = one
	}
	ss.mu.Unlock()
	one.once.Do(func() {
		begin := time.Now()
		one.s, one.err = newStorm(context.Background(), b, w, n)
		if one.err == nil {
			b.Logf("storm %q ready in %v: %d routes", one.s.name, time.Since(begin).Round(time.Millisecond), len(one.s.keys))
		}
	})
	if one.err != nil {
		b.Fatalf("storm of %d routes: %v", n, one.err)
	}
	return one.s
}

func (ss *stormSet) close() error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, one := range ss.all {
		if one.s != nil {
			one.s.stopInformer()
		}
	}
	return nil
}

// stormName is the name of the storm of n routes: "storm" for
// QP_PERF_STORM_ROUTES (BenchmarkStorm's), "storm-<n>" for another size.
func stormName(w *world, n int) string {
	if n == w.cfg.StormRoutes {
		return "storm"
	}
	return fmt.Sprintf("storm-%d", n)
}

// newStorm creates the storm of n routes on w's control plane and
// converges their statuses (plain patches), within a deadline that grows
// with n. The caller stops its informer (stopInformer).
func newStorm(ctx context.Context, tb testing.TB, w *world, n int) (*storm, error) {
	ctx, cancel := context.WithTimeout(ctx, max(20*time.Minute, time.Duration(n)*25*time.Millisecond))
	defer cancel()
	s := &storm{w: w, name: stormName(w, n), open: true, stopInformer: func() {}}
	gw := w.set.Gateway.DeepCopy()
	gw.Name = s.name
	gw.Spec.Listeners = gw.Spec.Listeners[:1] // "http": application namespaces, *.example.com
	objs := []runtime.Object{gw}
	var apps []string
	for _, ns := range w.set.Namespaces {
		if ns.Labels[fixtures.AccessLabel] == "true" {
			apps = append(apps, ns.Name)
		}
	}
	for i := range n {
		r := stormRoute(w.set.InfraNamespace, apps[i%len(apps)], s.name, fmt.Sprintf("%s-%05d", s.name, i))
		objs = append(objs, r)
		s.keys = append(s.keys, types.NamespacedName{Namespace: r.Namespace, Name: r.Name})
	}
	begin := time.Now()
	if err := install(ctx, w.cp, objs, 32); err != nil {
		return nil, err
	}
	tb.Logf("created the storm Gateway %q and %d routes in %v", s.name, len(s.keys), time.Since(begin).Round(time.Millisecond))

	ictx, icancel := context.WithCancel(context.Background())
	f := gatewayinformers.NewSharedInformerFactoryWithOptions(w.gw, 0,
		gatewayinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = stormLabel + "=" + s.name }))
	s.inf = f.Gateway().V1().HTTPRoutes().Informer()
	s.lister = f.Gateway().V1().HTTPRoutes().Lister()
	f.Start(ictx.Done())
	s.stopInformer = func() {
		icancel()
		f.Shutdown()
	}
	fail := func(err error) (*storm, error) {
		s.stopInformer()
		return nil, err
	}
	if !cache.WaitForCacheSync(ctx.Done(), s.inf.HasSynced) {
		return fail(errors.New("the storm routes' informer did not sync"))
	}
	err := poll(ctx, 100*time.Millisecond, "the storm Gateway in the informer cache", func() error {
		_, err := w.lookup.Gateways.Gateways(w.set.InfraNamespace).Get(s.name)
		return err
	})
	if err != nil {
		return fail(err)
	}
	if s.writer, err = w.statusWriter(ctx, s.name+"-writer"); err != nil {
		return fail(err)
	}
	if s.dyn, err = dynamic.NewForConfig(s.writer); err != nil {
		return fail(err)
	}
	begin = time.Now()
	if err := s.converge(ctx); err != nil {
		return fail(err)
	}
	tb.Logf("storm routes converged in %v", time.Since(begin).Round(time.Millisecond))
	return s, nil
}

// converge brings the storm routes whose status is not the desired one to
// it with plain patches (the status writer, w.cfg.Workers at a time, up to
// three rounds) and waits until the informer shows every route converged.
// Call it once the informer shows the changes it is to converge.
func (s *storm) converge(ctx context.Context) error {
	for range 3 {
		var rec recorder
		if err := s.w.floorWith(ctx, s.dyn, s.changed(), s.w.cfg.Workers, &rec); err == nil {
			break
		}
	}
	return s.waitConverged(ctx)
}

// stormRoute is route name in namespace ns, labelled for the storm
// storm and attached to the listener "http" of its Gateway (of the same
// name), with a valid backend.
func stormRoute(infra, ns, storm, name string) *gatewayv1.HTTPRoute {
	group := gatewayv1.Group(gatewayv1.GroupName)
	kind := gatewayv1.Kind("Gateway")
	gwNS := gatewayv1.Namespace(infra)
	section := gatewayv1.SectionName(fixtures.ListenerHTTP)
	port := gatewayv1.PortNumber(80)
	weight := int32(1)
	return &gatewayv1.HTTPRoute{
		TypeMeta:   metav1.TypeMeta{APIVersion: gatewayv1.GroupVersion.String(), Kind: "HTTPRoute"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{stormLabel: storm}},
		Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{
				Group: &group, Kind: &kind, Namespace: &gwNS, Name: gatewayv1.ObjectName(storm), SectionName: &section,
			}}},
			Hostnames: []gatewayv1.Hostname{gatewayv1.Hostname(name + "." + ns + ".example.com")},
			Rules: []gatewayv1.HTTPRouteRule{{
				BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
					BackendObjectReference: gatewayv1.BackendObjectReference{Name: "backend", Port: &port}, Weight: &weight,
				}}},
			}},
		},
	}
}

// list returns the storm routes in the informer cache.
func (s *storm) list() []*gatewayv1.HTTPRoute {
	all, _ := s.lister.List(labels.Everything()) // a lister never fails
	return all
}

// changed returns the storm routes whose status is not the desired one.
func (s *storm) changed() []*gatewayv1.HTTPRoute {
	var out []*gatewayv1.HTTPRoute
	for _, r := range s.list() {
		if !routestatus.Equal(r.Status, s.w.desired(r)) {
			out = append(out, r)
		}
	}
	return out
}

// waitConverged waits until the informer shows every storm route with its
// desired status. Each check computes every route: poll sparingly while
// something else is measured.
func (s *storm) waitConverged(ctx context.Context) error {
	return poll(ctx, 500*time.Millisecond, "storm routes converged", func() error {
		if n := len(s.list()); n != len(s.keys) {
			return fmt.Errorf("%d of %d storm routes in the cache", n, len(s.keys))
		}
		if c := s.changed(); len(c) > 0 {
			return fmt.Errorf("%d storm routes not converged, e.g. %s/%s", len(c), c[0].Namespace, c[0].Name)
		}
		return nil
	})
}

// flip changes the storm Gateway's listener to admit the application
// namespaces if it did not, or only its own namespace if it did, and
// waits until the world's Gateway informer shows the change. Every storm
// route's desired status changes.
func (s *storm) flip(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	client := s.w.gw.GatewayV1().Gateways(s.w.set.InfraNamespace)
	var updated *gatewayv1.Gateway
	for attempt := 0; ; attempt++ {
		gw, err := client.Get(ctx, s.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		gw = gw.DeepCopy()
		ns := &gatewayv1.RouteNamespaces{}
		if s.open {
			same := gatewayv1.NamespacesFromSame
			ns.From = &same
		} else {
			sel := gatewayv1.NamespacesFromSelector
			ns.From = &sel
			ns.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{fixtures.AccessLabel: "true"}}
		}
		gw.Spec.Listeners[0].AllowedRoutes = &gatewayv1.AllowedRoutes{Namespaces: ns}
		updated, err = client.Update(ctx, gw, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) && attempt < 5 {
			continue
		}
		if err != nil {
			return fmt.Errorf("flipping the storm Gateway: %w", err)
		}
		break
	}
	s.open = !s.open
	return poll(ctx, 5*time.Millisecond, "the storm Gateway's change in the informer cache", func() error {
		gw, err := s.w.lookup.Gateways.Gateways(s.w.set.InfraNamespace).Get(s.name)
		if err != nil {
			return err
		}
		if gw.Generation < updated.Generation {
			return fmt.Errorf("generation %d, want %d", gw.Generation, updated.Generation)
		}
		return nil
	})
}

// stormResult is what a storm run measured.
type stormResult struct {
	took      time.Duration // from the Gateway update to the last successful patch's answer
	patches   int64         // patch calls answered
	failed    int64
	conflicts int64            // answered 409 Conflict (a resourceVersion precondition failed)
	stats     quietpatch.Stats // the controller's, at the end; zero for the plain client
	samples   []StormSample
	cpu       cpuSpent // CPU of the benchmark process and the control plane during the run
}

func (r stormResult) routesPerSecond(n int) float64 { return float64(n) / r.took.Seconds() }

// runPlain is the plain client's storm: flip the Gateway, wait until the
// informer shows it, then patch every storm route with workers goroutines
// (floor: compute, build the same merge patch, send it with the status
// writer's dynamic client), again for those whose patch failed.
func (s *storm) runPlain(ctx context.Context, workers int) (stormResult, error) {
	var rec recorder
	start := time.Now()
	cpu0 := readCPUTimes(s.w.cp)
	if err := s.flip(ctx); err != nil {
		return stormResult{}, err
	}
	for round := 0; ; round++ {
		failed := rec.failed.Load()
		todo := s.list()
		if round > 0 {
			todo = s.changed()
		}
		_ = s.w.floorWith(ctx, s.dyn, todo, workers, &rec)
		if err := ctx.Err(); err != nil {
			return stormResult{}, err
		}
		newFailed := rec.failed.Load() - failed
		if newFailed == 0 {
			break
		}
		if round == 2 {
			return stormResult{}, fmt.Errorf("%d patches still failing after %d rounds, first error: %v", newFailed, round+1, rec.err())
		}
		if err := s.settle(ctx, int(newFailed)); err != nil {
			return stormResult{}, err
		}
	}
	res := stormResult{took: unixTime(rec.lastOK.Load()).Sub(start), patches: rec.done(), failed: rec.failed.Load(),
		cpu: cpu0.until(readCPUTimes(s.w.cp))}
	return res, s.waitConverged(ctx)
}

// settle waits until the informer shows at most left storm routes not
// converged.
func (s *storm) settle(ctx context.Context, left int) error {
	return poll(ctx, 200*time.Millisecond, "successful patches in the informer cache", func() error {
		if n := len(s.changed()); n > left {
			return fmt.Errorf("%d storm routes not converged, want at most %d", n, left)
		}
		return nil
	})
}

// removable is a shared informer whose event handlers can all be removed
// again: a Controller registers its handlers (its Source's and its
// Dependencies') for good, and the storm's informers outlive each
// Controller.
type removable struct {
	cache.SharedIndexInformer
	mu   sync.Mutex
	regs []cache.ResourceEventHandlerRegistration
}

func (r *removable) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	reg, err := r.SharedIndexInformer.AddEventHandler(h)
	if err == nil {
		r.mu.Lock()
		r.regs = append(r.regs, reg)
		r.mu.Unlock()
	}
	return reg, err
}

func (r *removable) removeHandlers() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, reg := range r.regs {
		_ = r.SharedIndexInformer.RemoveEventHandler(reg)
	}
	r.regs = nil
}

// controllerRun says how runController runs a storm.
type controllerRun struct {
	workers int                   // Config.Workers: 0 adaptive
	sample  time.Duration         // sampling period of the controller's state; 0: none
	during  func(context.Context) // runs from the flip until the storm converged, if set
	// alongside, if set, runs from the moment the Gateway's change is in
	// the informer cache (start: when its update was sent) alongside the
	// storm; the run ends only once it returned, and its error ends the
	// run. BenchmarkFreshChange edits routes with it. In a cold run, start
	// is the moment the controller is ready (synced and leading).
	alongside func(ctx context.Context, start time.Time) error
	// cold makes the run a first convergence: the Gateway flips while no
	// controller runs, then a controller starts on an informer of its own
	// (as a restarted process lists the routes again) and converges every
	// route; its duration runs from the moment the controller is ready
	// (caches synced, leading) to the last successful patch.
	cold bool
	// name names the run's profiles (QP_PERF_PROFILE).
	name string
	// seen, if set, is called with every route the controller's informer
	// delivers (added or updated), from a handler of its own.
	seen func(*gatewayv1.HTTPRoute)
}

// runController is the library's storm: quietpatch.New, as a user would
// build it, with its defaults (capacity 50,000,
// Interval 10 s) and run.workers, over the storm routes' informer,
// competing for a free Lease of its own; the status writer's patcher from
// statuspatch.NewMergePatcher; a Dependency on
// the Gateways maps the storm Gateway to every storm route, as the
// example's controller does (more than FreshFanout keys: a pass). Once
// the controller is up and idle the Gateway is flipped; the run ends when
// every route has its new status (and run.alongside returned), the
// controller is idle and stopped. With run.cold, the Gateway flips first
// and the controller starts afterwards (see controllerRun).
func (s *storm) runController(ctx context.Context, tb testing.TB, run controllerRun) (stormResult, error) {
	w := s.w
	var rec recorder
	patcher, err := statuspatch.NewMergePatcher(s.writer, routeGVR, fieldManager)
	if err != nil {
		return stormResult{}, err
	}
	inf := s.inf
	var coldStart func()
	if run.cold {
		if err := s.flip(ctx); err != nil {
			return stormResult{}, err
		}
		var startInf, stopInf func()
		inf, startInf, stopInf = s.newInformer()
		defer stopInf()
		coldStart = startInf
	}
	routes, gateways := &removable{SharedIndexInformer: inf}, &removable{SharedIndexInformer: w.gateways}
	defer routes.removeHandlers()
	defer gateways.removeHandlers()
	if run.seen != nil {
		seen := func(obj any) {
			if r, ok := obj.(*gatewayv1.HTTPRoute); ok {
				run.seen(r)
			}
		}
		if _, err := routes.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: seen, UpdateFunc: func(_, obj any) { seen(obj) },
		}); err != nil {
			return stormResult{}, err
		}
	}
	// The storm Gateway affects every storm route, as the example's
	// Dependency on Gateways maps it (through its index): more keys than
	// FreshFanout, so its events make a pass.
	stormRoutes := func(obj any) []types.NamespacedName {
		if gw, ok := obj.(*gatewayv1.Gateway); ok && gw.Name == s.name && gw.Namespace == w.set.InfraNamespace {
			return s.keys
		}
		return nil
	}
	// A Lease of its own for every run (free: the first claim is taken at
	// once), through the admin's client.
	leases, err := leader.NewLeaseClient(w.cp.AdminConfig())
	if err != nil {
		return stormResult{}, err
	}
	s.leases++
	cfg := quietpatch.Config{
		Name: "storm", Workers: run.workers,
		Leases:       leases,
		Lease:        leader.Config{Namespace: benchNamespace, Name: fmt.Sprintf("%s-%d", s.name, s.leases)},
		Dependencies: []quietpatch.Dependency{{Informer: gateways, Keys: stormRoutes}},
	}
	ctrl, err := quietpatch.New[*gatewayv1.HTTPRoute](source.FromInformer[*gatewayv1.HTTPRoute](routes), w.computerFuncs(nil), rec.wrap(patcher), cfg)
	if err != nil {
		return stormResult{}, err
	}

	var (
		samples  []StormSample
		start    time.Time
		sampling sync.WaitGroup
		dg       *diag
		cpu0     cpuTimes
	)
	sctx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	startSampling := func() {
		start = time.Now()
		cpu0 = readCPUTimes(w.cp)
		dg = startDiag(tb, w.cp, run.name)
		if run.sample == 0 && dg == nil {
			return
		}
		period := cmp.Or(run.sample, w.cfg.StormSample)
		sampling.Go(func() {
			t := time.NewTicker(period)
			defer t.Stop()
			for {
				st := ctrl.Stats()
				if run.sample > 0 {
					samples = append(samples, StormSample{
						T: time.Since(start), Limit: st.Dispatcher.Limit, InFlight: st.Dispatcher.InFlight, Latency: st.Dispatcher.Latency,
						Depth: st.Queue.Depth, Capacity: st.Capacity, Applied: rec.ok.Load(),
					})
				}
				dg.sample(st, rec.ok.Load())
				select {
				case <-sctx.Done():
					return
				case <-t.C:
				}
			}
		})
	}
	if run.cold {
		startSampling()
		coldStart()
	}

	runCtx, stop := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- ctrl.Run(runCtx) }()
	stopped := false
	halt := func() error {
		if stopped {
			return nil
		}
		stopped = true
		stop()
		return <-runErr
	}
	defer halt()

	if run.cold {
		// Ready: synced and leading. The first pass starts then.
		err = poll(ctx, 5*time.Millisecond, "the controller ready and leading", func() error {
			if err := ctrl.Ready(); err != nil {
				return err
			}
			if !ctrl.Stats().Leading {
				return errors.New("not leading yet")
			}
			return nil
		})
		if err != nil {
			return stormResult{}, err
		}
		tb.Logf("cold start of %d routes: ready (synced, leading) %v after the start", len(s.keys), time.Since(start).Round(time.Millisecond))
		start = time.Now()
	} else {
		// Up and idle: synced, a pass completed, nothing queued or in flight.
		err = poll(ctx, 50*time.Millisecond, "the controller up and idle", func() error {
			st := ctrl.Stats()
			switch {
			case ctrl.Ready() != nil:
				return ctrl.Ready()
			case st.Reconciler.Passes["completed"] == 0:
				return errors.New("no pass completed yet")
			case st.Queue.Depth > 0 || st.Dispatcher.InFlight > 0:
				return fmt.Errorf("%d patches queued, %d in flight", st.Queue.Depth, st.Dispatcher.InFlight)
			}
			return nil
		})
		if err != nil {
			return stormResult{}, err
		}
		if n := rec.done(); n > 0 {
			return stormResult{}, fmt.Errorf("the controller patched %d routes before the storm: they were not converged", n)
		}
		startSampling()
	}
	if run.during != nil {
		sampling.Go(func() { run.during(sctx) })
	}
	if !run.cold {
		if err := s.flip(ctx); err != nil {
			return stormResult{}, err
		}
	}
	alongside := make(chan error, 1)
	if run.alongside != nil {
		go func() { alongside <- run.alongside(ctx, start) }()
	} else {
		alongside <- nil
	}
	// Every route needs one successful patch (a second one would fail its
	// resourceVersion precondition, unless the route changed meanwhile);
	// then the informer must show them.
	err = poll(ctx, 20*time.Millisecond, "a successful patch per storm route", func() error {
		if n := rec.ok.Load(); n < int64(len(s.keys)) {
			return fmt.Errorf("%d of %d routes patched (%d failed, first error %v)", n, len(s.keys), rec.failed.Load(), rec.err())
		}
		return nil
	})
	if aerr := <-alongside; err == nil {
		err = aerr
	}
	stopSampling()
	sampling.Wait()
	dg.stop(tb)
	if err != nil {
		return stormResult{}, err
	}
	res := stormResult{samples: samples}
	if err := s.waitConverged(ctx); err != nil {
		return res, err
	}
	// Patches still queued or in flight then go out too (and fail their
	// precondition): wait for the queue to empty before counting.
	err = poll(ctx, 50*time.Millisecond, "the controller idle after the storm", func() error {
		if st := ctrl.Stats(); st.Queue.Depth > 0 || st.Dispatcher.InFlight > 0 {
			return fmt.Errorf("%d patches queued, %d in flight", st.Queue.Depth, st.Dispatcher.InFlight)
		}
		return nil
	})
	// The last successful patch, once every route converged and nothing is
	// left to send: the storm's end, the fresh changes' patches included.
	res.took = unixTime(rec.lastOK.Load()).Sub(start)
	res.patches, res.failed, res.conflicts = rec.done(), rec.failed.Load(), rec.conflicts.Load()
	res.stats = ctrl.Stats()
	res.cpu = cpu0.until(readCPUTimes(w.cp))
	if err != nil {
		return res, err
	}
	return res, halt()
}

// newInformer returns a new informer over the storm routes, the function
// that starts it and the one that stops it: what a restarted process lists
// and watches.
func (s *storm) newInformer() (inf cache.SharedIndexInformer, start, stop func()) {
	f := gatewayinformers.NewSharedInformerFactoryWithOptions(s.w.gw, 0,
		gatewayinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = stormLabel + "=" + s.name }))
	inf = f.Gateway().V1().HTTPRoutes().Informer()
	done := make(chan struct{})
	var once sync.Once
	return inf, func() { f.Start(done) }, func() {
		once.Do(func() { close(done) })
		f.Shutdown()
	}
}

// plainModes are the plain client's concurrencies in BenchmarkStorm.
var plainModes = []int{1, 4, 16, 64}

// stormMode is one run of BenchmarkStorm: the plain client with workers
// goroutines, or a controller (workers 0: adaptive), in a storm or, cold,
// in a first convergence.
type stormMode struct {
	name    string
	plain   bool
	cold    bool
	workers int
}

// defaultStormModes are BenchmarkStorm's runs (QP_PERF_STORM_MODES), in
// order: the plain client around the controller's runs, so that a drift of
// the machine's load affects both.
const defaultStormModes = "plain-1,plain-4,plain-16,converge-adaptive,adaptive,plain-64"

// parseStormModes reads a comma-separated list of modes: plain-N, or
// adaptive or fixed-N, prefixed by converge- for a first convergence.
func parseStormModes(s string) ([]stormMode, error) {
	var out []stormMode
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		m := stormMode{name: f}
		if n, ok := strings.CutPrefix(f, "plain-"); ok {
			v, err := strconv.Atoi(n)
			if err != nil || v < 1 || v > 1024 {
				return nil, fmt.Errorf("mode %q: plain-N needs N in [1, 1024]", f)
			}
			m.plain, m.workers = true, v
			out = append(out, m)
			continue
		}
		rest, cold := strings.CutPrefix(f, "converge-")
		dm, err := parseModes(rest)
		if err != nil || len(dm) != 1 {
			return nil, fmt.Errorf("mode %q is neither plain-N nor [converge-]adaptive or [converge-]fixed-N", f)
		}
		m.cold, m.workers = cold, dm[0].workers
		out = append(out, m)
	}
	return out, nil
}

// BenchmarkStorm measures a storm: a change that alters the status of every
// one of QP_PERF_STORM_ROUTES routes (10,000; 50,000 for the large run) at
// once — their Gateway's allowedRoutes flips, so they all go from Accepted
// to NotAllowedByListeners, or back — and a first convergence, the same
// change while no controller runs, then a controller starting. Each mode
// handles one flip, each in the other direction than the one before,
// starting from converged statuses; both directions cost one status patch
// per route. The modes (QP_PERF_STORM_MODES, in order; default
// defaultStormModes):
//
//   - adaptive, fixed-N: quietpatch.New as a user builds it — defaults
//     (adaptive in-flight limit, capacity 50,000 keys a lane, Interval
//     10 s), or Workers N, the storm routes' informer as its Source, a
//     Dependency on the Gateways (the storm Gateway's events make a pass),
//     a free Lease of its own (admin client, default timings) —, with its
//     status client from statuspatch.NewMergePatcher under a
//     ServiceAccount that may only patch HTTPRoute statuses (no client
//     rate limit), running, leading and idle when the Gateway flips;
//   - converge-adaptive, converge-fixed-N: the first convergence — the
//     Gateway flips while no controller runs, then the same controller
//     starts on an informer of its own (a restarted process) and competes
//     for a free Lease; measured from the moment it is ready (synced,
//     leading);
//   - plain-1, plain-4, plain-16, plain-64: the plain client at those
//     concurrencies: N goroutines computing each route's status and sending
//     the same merge patch, with the same resourceVersion precondition and
//     identity, nothing else.
//
// In every controller run, 20 routes spread over the backlog change their
// spec 1 s into it (BenchmarkFreshChange's edits), and are restored after.
//
// Reported: routes/s, from the Gateway update (the controller's ready, in
// a first convergence) to the answer of the last successful patch. For the
// controller also fresh-p95-s and fresh-max-s (each edit to its correct
// status on the API server), and in fractions of N: superseded/N (keys
// added while they waited already: coalesced, no slot taken), unchanged/N
// (keys the dispatcher served and dropped because the status was right by
// then — the events of the controller's own writes end so: about one per
// route, each a cache read and a compute, no call), and extra/N (patch
// calls beyond one per route, counted once the queue is empty after the
// storm: patches built from an informer that had not yet seen the route's
// previous patch, which fail their resourceVersion precondition); the
// in-flight limit's median (limit-median) and the queue's capacity. The
// adaptive storm's state is sampled every QP_PERF_STORM_SAMPLE (100 ms)
// into StormCSVFile and StormPlotFile in QP_PLOTS_DIR
// ($TMPDIR/quietpatch-perf if unset). Every run logs the CPU the benchmark
// process, kube-apiserver and etcd spent; QP_PERF_PROFILE=dir writes
// profiles of each controller run (see profileEnv).
//
// Goals: adaptive and converge-adaptive ≥ 0.9 × the plain client at its
// best concurrency of the same run; fresh-p95-s ≤ 1 in both.
func BenchmarkStorm(b *testing.B) {
	w := shared.get(b)
	s := storms.get(b, w)
	ctx := benchContext(b, 90*time.Minute)
	n := len(s.keys)
	frac := func(v int64) float64 { return float64(v) / float64(n) }
	for _, m := range w.cfg.StormModes {
		b.Run(m.name, func(b *testing.B) {
			if m.plain {
				res, err := s.runPlain(ctx, m.workers)
				if err != nil {
					b.Fatal(err)
				}
				b.Logf("%s: %d routes in %v, %d patches answered (%d failed); %v; %s", m.name, n, res.took.Round(time.Millisecond),
					res.patches, res.failed, res.cpu, res.cpu.perPatch(int64(n)))
				b.ReportMetric(res.routesPerSecond(n), "routes/s")
				return
			}
			run := controllerRun{workers: m.workers, cold: m.cold, name: "storm-" + m.name}
			if !m.cold && m.workers == 0 {
				run.sample = w.cfg.StormSample
			}
			fr, err := s.runFresh(ctx, b, freshChanges, freshDelay, run)
			if err != nil {
				b.Fatal(err)
			}
			res, st := fr.storm, fr.storm.stats
			b.Logf("%s: %d routes in %v, %d patches answered (%d failed); %v; %s", m.name, n, res.took.Round(time.Millisecond),
				res.patches, res.failed, res.cpu, res.cpu.perPatch(int64(n)))
			b.Logf("%s: queue %+v, capacity %d; reconciler %+v; dispatcher %+v", m.name, st.Queue, st.Capacity, st.Reconciler, st.Dispatcher)
			b.Logf("%s: %v; %s", m.name, fr, fr.perChange())
			lat := fr.latencies()
			b.ReportMetric(res.routesPerSecond(n), "routes/s")
			b.ReportMetric(lat.quantile(0.95).Seconds(), "fresh-p95-s")
			b.ReportMetric(lat.quantile(1).Seconds(), "fresh-max-s")
			b.ReportMetric(frac(st.Queue.Coalesced), "superseded/N")
			b.ReportMetric(frac(st.Dispatcher.Dropped["unchanged"]), "unchanged/N")
			b.ReportMetric(frac(res.patches-int64(n)), "extra/N")
			if len(res.samples) == 0 {
				return
			}
			var lim limitSampler
			for _, smp := range res.samples {
				lim.limits = append(lim.limits, smp.Limit)
			}
			b.ReportMetric(lim.median(), "limit-median")
			b.ReportMetric(float64(st.Capacity), "capacity")
			dir := w.cfg.PlotsDir
			if dir == "" {
				dir = filepath.Join(os.TempDir(), "quietpatch-perf")
			}
			written, err := WriteStorm(dir, res.samples)
			if err != nil {
				b.Error(err)
			}
			b.Logf("storm samples and plot: %v", written)
		})
	}
}
