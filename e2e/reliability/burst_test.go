package reliability_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gwinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/e2e/examplee2e"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/conditions"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
	"github.com/quietpatch/quietpatch/statuspatch/source"
)

// TestBurstWritesEachAffectedGatewayOnce counts, on the real API server,
// the status writes a burst of route edits costs a Gateway status
// controller built as a user would build it (issue 32, point 4: one write
// per affected object per burst).
//
// The controller: quietpatch.New over a typed Gateway informer, a
// conditions.Computer whose Fields computes status.listeners — each
// listener's attachedRoutes from an HTTPRoute cache indexed by parent
// Gateway, its conditions with conditions.Merge —, and
// Config.Dependencies = the HTTPRoute informer, whose Keys maps a route to
// the Gateways its parentRefs name (before and after an update: a move
// affects both). Its MergePatcher is wrapped in burstPatcher, which counts
// every call by Gateway and outcome and keeps the VersionPatcher (the
// dispatcher's echo and hold logic needs the version of each write). It
// runs under a ServiceAccount granted only what it uses, with its own
// Lease.
//
// Two worlds of burstGateways Gateways (one listener each) with
// burstRoutesPerGateway routes each converge first (every attachedRoutes
// right, then no write for burstQuiet). Each world then gets the same
// burst of burstEdits — 10 moves of a route to another Gateway, 3 deletes,
// 5 adds — touching 11 Gateways, 9 of which end with another
// attachedRoutes (two swap a route): world "a" one edit after the other
// (each sent once the previous one is answered, and no sooner than
// burstPace after it: ~120 ms in all, as in the issue), world "b" all at
// once. A burst starts right after a periodic pass, so that no pass
// (which queues what it finds changed at once, unsettled) falls inside
// it. Once every Gateway is right again and no write came for burstQuiet:
//
//   - the writes are at most ⌈1.2 × the Gateways whose attachedRoutes
//     changed⌉;
//   - none is a 409 (nor any other failure);
//   - each carries its Gateway's final attachedRoutes (no intermediate
//     state written) — unless the burst outlasted burstSettleBound, which
//     lets a batch go before the burst's last edits;
//   - none goes to a Gateway no edit touched.
//
// The figures are logged as one markdown table row per burst. Measured
// here (2 cores): with settling and holds, 9 writes for either burst (0.82
// per affected Gateway, one each, written 50–100 ms after the burst's
// end), no 409; on the code before them (branch surface), 26–28 writes
// one after another (2.4–2.5 per affected Gateway, 4 for one, about half
// with an intermediate attachedRoutes), and all at once 10–20 writes with
// 1–4 409s (the Gateway a 409 left stale waited for the next pass).
func TestBurstWritesEachAffectedGatewayOnce(t *testing.T) {
	cp := shared.controlPlane(t)
	ctx := testContext(t, 2*time.Minute)
	ns, err := cp.NewNamespace(ctx, "burst-")
	if err != nil {
		t.Fatal(err)
	}
	worlds := []*burstWorld{newBurstWorld("a"), newBurstWorld("b")}
	installBurstWorlds(t, ctx, cp, ns, worlds)
	c := startBurstController(t, ctx, cp, ns)

	begin := time.Now()
	if err := c.waitConverged(ctx, cp, ns, worlds, burstInterval+burstQuiet+burstSlack); err != nil {
		t.Fatalf("first convergence: %v", err)
	}
	first := c.patcher.take()
	t.Logf("first convergence: %d Gateways, %d writes in %v", len(worlds)*burstGateways, len(first), time.Since(begin).Round(time.Millisecond))

	t.Logf("| burst | edits | sent in | Gateways affected | changed | writes | writes/affected | writes/changed | max per Gateway | 409s | converged after the burst |")
	t.Logf("|---|---|---|---|---|---|---|---|---|---|---|")
	for i, concurrent := range []bool{false, true} {
		name := map[bool]string{false: "one-after-another", true: "all-at-once"}[concurrent]
		t.Run(name, func(t *testing.T) {
			c.burst(t, ctx, cp, ns, worlds, worlds[i], concurrent)
		})
	}
}

// Sizes and timings of TestBurstWritesEachAffectedGatewayOnce.
const (
	burstController       gatewayv1.GatewayController = "quietpatch.io/e2e-burst"
	burstGateways                                     = 14 // per world
	burstRoutesPerGateway                             = 3
	burstListener                                     = "http"
	// burstInterval is the controller's Config.Interval: short, so that
	// the wait for a pass before each burst is short.
	burstInterval = 3 * time.Second
	// burstSettleBound is the longest the keys of a burst's events wait
	// before they are served: 5 × pipeline.DefaultSettle (50 ms) on
	// branch knee, none before. Not the constant itself: the test also
	// runs on the code before it.
	burstSettleBound = 250 * time.Millisecond
	// burstHoldBound is how long a key is held for the event of our own
	// write (pipeline.holdBound).
	burstHoldBound = time.Second
	// burstPace is the least time between two edits sent one after
	// another: 18 edits span at least 119 ms, as the reported burst's
	// 123 ms, however fast the client goes (here it sends them in ~50 ms,
	// which makes them easier to settle, and easier to coalesce without).
	burstPace = 7 * time.Millisecond
	// burstQuiet: converged means right, and no write for this long.
	burstQuiet = time.Second
	// burstSlack is for two loaded cores.
	burstSlack = 5 * time.Second
	// burstMaxWritesPerChanged is the goal: writes per Gateway whose
	// attachedRoutes changed.
	burstMaxWritesPerChanged = 1.2
)

// burstEdit is one route edit: a move (From and To), a delete (To -1) or
// an add (From -1) of route Route; From and To are Gateway indices.
type burstEdit struct {
	Route    string
	From, To int
}

// burstEdits is the burst: 10 moves, 3 deletes, 5 adds. Gateways 0 and 1
// swap a route (affected, unchanged); 2–10 change (4 is touched four
// times, 6 four times, 2 three times); 11–13 are not touched. The order
// spreads the edits of one Gateway over the burst.
var burstEdits = []burstEdit{
	{"r-02-2", 2, 4},
	{"r-05-1", 5, 6},
	{"r-00-0", 0, 1},
	{"r-02-0", 2, 3},
	{"r-08-0", 8, -1},
	{"r-03-0", 3, 4},
	{"n-0", -1, 9},
	{"r-06-0", 6, 7},
	{"r-01-0", 1, 0},
	{"r-05-0", 5, 4},
	{"r-09-0", 9, -1},
	{"n-2", -1, 10},
	{"r-02-1", 2, 3},
	{"r-06-2", 6, 8},
	{"n-4", -1, 8},
	{"r-06-1", 6, -1},
	{"n-1", -1, 9},
	{"n-3", -1, 4},
}

// The burst's shape, checked against burstEdits so that an edit of the
// table does not silently change what the test measures.
const (
	burstWantAffected = 11
	burstWantChanged  = 9
)

// burstWorld is one set of Gateways and routes, and the model of which
// route attaches to which Gateway.
type burstWorld struct {
	prefix  string
	parents map[string]int // route name (without prefix) → Gateway index
}

func newBurstWorld(prefix string) *burstWorld {
	w := &burstWorld{prefix: prefix, parents: map[string]int{}}
	for g := range burstGateways {
		for i := range burstRoutesPerGateway {
			w.parents[fmt.Sprintf("r-%02d-%d", g, i)] = g
		}
	}
	return w
}

func (w *burstWorld) gateway(i int) string     { return fmt.Sprintf("%s-gw-%02d", w.prefix, i) }
func (w *burstWorld) route(name string) string { return w.prefix + "-" + name }

// attached is the truth: every Gateway's attachedRoutes by name.
func (w *burstWorld) attached() map[string]int32 {
	out := map[string]int32{}
	for g := range burstGateways {
		out[w.gateway(g)] = 0
	}
	for _, g := range w.parents {
		out[w.gateway(g)]++
	}
	return out
}

// apply applies edits to the model; it returns the Gateways they touched
// and those whose attachedRoutes changed.
func (w *burstWorld) apply(edits []burstEdit) (affected, changed map[string]bool) {
	before := w.attached()
	affected = map[string]bool{}
	for _, e := range edits {
		if e.From >= 0 {
			affected[w.gateway(e.From)] = true
		}
		if e.To >= 0 {
			affected[w.gateway(e.To)] = true
			w.parents[e.Route] = e.To
		} else {
			delete(w.parents, e.Route)
		}
	}
	changed = map[string]bool{}
	for gw, n := range w.attached() {
		if before[gw] != n {
			changed[gw] = true
		}
	}
	return affected, changed
}

// httpRoute is route name of w attached to Gateway g.
func (w *burstWorld) httpRoute(ns, name string, g int) *gatewayv1.HTTPRoute {
	return &gatewayv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: w.route(name)},
		Spec: gatewayv1.HTTPRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{
			ParentRefs: []gatewayv1.ParentReference{{Name: gatewayv1.ObjectName(w.gateway(g))}},
		}},
	}
}

// send makes edit e of w on the API server.
func (w *burstWorld) send(ctx context.Context, routes burstRoutes, ns string, e burstEdit) error {
	var err error
	switch {
	case e.From < 0:
		_, err = routes.Create(ctx, w.httpRoute(ns, e.Route, e.To), metav1.CreateOptions{})
	case e.To < 0:
		err = routes.Delete(ctx, w.route(e.Route), metav1.DeleteOptions{})
	default:
		patch := fmt.Sprintf(`{"spec":{"parentRefs":[{"name":%q}]}}`, w.gateway(e.To))
		_, err = routes.Patch(ctx, w.route(e.Route), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	}
	if err != nil {
		return fmt.Errorf("%s %s (%d → %d): %w", w.prefix, e.Route, e.From, e.To, err)
	}
	return nil
}

// burstRoutes is the HTTPRoute client of one namespace.
type burstRoutes interface {
	Create(context.Context, *gatewayv1.HTTPRoute, metav1.CreateOptions) (*gatewayv1.HTTPRoute, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*gatewayv1.HTTPRoute, error)
}

// installBurstWorlds creates the GatewayClass (named ns), every world's
// Gateways and routes.
func installBurstWorlds(t *testing.T, ctx context.Context, cp *cluster.ControlPlane, ns string, worlds []*burstWorld) {
	t.Helper()
	gw := cp.AdminGatewayClient().GatewayV1()
	if _, err := gw.GatewayClasses().Create(ctx, &gatewayv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: ns}, Spec: gatewayv1.GatewayClassSpec{ControllerName: burstController},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	work := make(chan func() error)
	for range 8 {
		wg.Go(func() {
			for f := range work {
				if err := f(); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, w := range worlds {
		for g := range burstGateways {
			work <- func() error {
				_, err := gw.Gateways(ns).Create(ctx, &gatewayv1.Gateway{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: w.gateway(g)},
					Spec: gatewayv1.GatewaySpec{GatewayClassName: gatewayv1.ObjectName(ns), Listeners: []gatewayv1.Listener{
						{Name: burstListener, Port: 80, Protocol: gatewayv1.HTTPProtocolType},
					}},
				}, metav1.CreateOptions{})
				return err
			}
		}
		for name, g := range w.parents {
			work <- func() error {
				_, err := gw.HTTPRoutes(ns).Create(ctx, w.httpRoute(ns, name, g), metav1.CreateOptions{})
				return err
			}
		}
	}
	close(work)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// burstControllerRun is the controller under test and what the test
// reads of it.
type burstControllerRun struct {
	patcher *burstPatcher
	ctrl    *quietpatch.Controller[*gatewayv1.Gateway, conditions.Status, statuspatch.MergePatch]
}

// byGateway is the name of the HTTPRoute index by parent Gateway.
const byGateway = "gateway"

// parentGateways returns the Gateways route's parentRefs name.
func parentGateways(route *gatewayv1.HTTPRoute) []types.NamespacedName {
	var out []types.NamespacedName
	for _, ref := range route.Spec.ParentRefs {
		if ref.Group != nil && *ref.Group != gatewayv1.GroupName || ref.Kind != nil && *ref.Kind != "Gateway" {
			continue
		}
		ns := route.Namespace
		if ref.Namespace != nil {
			ns = string(*ref.Namespace)
		}
		out = append(out, types.NamespacedName{Namespace: ns, Name: string(ref.Name)})
	}
	return out
}

// startBurstController builds the Gateway status controller as a user
// would, under ServiceAccount "burst" of ns with the rights it needs, and
// runs it until the test ends.
func startBurstController(t *testing.T, ctx context.Context, cp *cluster.ControlPlane, ns string) *burstControllerRun {
	t.Helper()
	rc, err := cp.ConfigFor(ctx, ns, "burst")
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Grant(ctx, ns, "burst",
		rbacv1.PolicyRule{APIGroups: []string{gatewayv1.GroupName}, Resources: []string{"gateways", "httproutes"}, Verbs: []string{"get", "list", "watch"}},
		rbacv1.PolicyRule{APIGroups: []string{gatewayv1.GroupName}, Resources: []string{"gateways/status"}, Verbs: []string{"patch"}},
		rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update"}},
	); err != nil {
		t.Fatal(err)
	}
	// Explicit client limits, well above what a burst needs: client-go's
	// defaults (5/s, burst 10) would pace the writes themselves.
	rc.QPS, rc.Burst = 200, 400
	client, err := gwclient.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	factory := gwinformers.NewSharedInformerFactoryWithOptions(client, 0, gwinformers.WithNamespace(ns))
	gateways := factory.Gateway().V1().Gateways().Informer()
	routes := factory.Gateway().V1().HTTPRoutes().Informer()
	if err := routes.AddIndexers(cache.Indexers{byGateway: func(obj any) ([]string, error) {
		var keys []string
		for _, k := range parentGateways(obj.(*gatewayv1.HTTPRoute)) {
			keys = append(keys, k.String())
		}
		return keys, nil
	}}); err != nil {
		t.Fatal(err)
	}
	comp, err := conditions.New(conditions.Config[*gatewayv1.Gateway]{
		Conditions: func(gw *gatewayv1.Gateway) ([]metav1.Condition, error) {
			return []metav1.Condition{
				{Type: string(gatewayv1.GatewayConditionAccepted), Status: metav1.ConditionTrue, Reason: string(gatewayv1.GatewayReasonAccepted)},
				{Type: string(gatewayv1.GatewayConditionProgrammed), Status: metav1.ConditionTrue, Reason: string(gatewayv1.GatewayReasonProgrammed)},
			}, nil
		},
		Fields: burstListeners(routes.GetIndexer()),
	})
	if err != nil {
		t.Fatal(err)
	}
	merge, err := statuspatch.NewMergePatcher(rc, gatewayv1.SchemeGroupVersion.WithResource("gateways"), "quietpatch-e2e-burst")
	if err != nil {
		t.Fatal(err)
	}
	leases, err := leader.NewLeaseClient(rc)
	if err != nil {
		t.Fatal(err)
	}
	c := &burstControllerRun{patcher: &burstPatcher{next: merge}}
	if c.ctrl, err = quietpatch.New(source.FromInformer[*gatewayv1.Gateway](gateways), comp, c.patcher, quietpatch.Config{
		Name:     "burst",
		Interval: burstInterval,
		Leases:   leases,
		Lease: leader.Config{Namespace: ns, Name: "burst", Identity: "burst-0",
			LeaseDuration: 5 * time.Second, RetryPeriod: 250 * time.Millisecond},
		Dependencies: []quietpatch.Dependency{{Informer: routes, Keys: func(obj any) []types.NamespacedName {
			if r, ok := obj.(*gatewayv1.HTTPRoute); ok {
				return parentGateways(r)
			}
			return nil
		}}},
	}); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		factory.Shutdown()
	})
	factory.Start(runCtx.Done())
	wg.Go(func() {
		if err := c.ctrl.Run(runCtx); err != nil {
			t.Errorf("Gateway status controller: %v", err)
		}
	})
	return c
}

// burstListeners is the Config.Fields of the controller: status.listeners,
// one entry per listener of the spec with its attachedRoutes — the routes
// whose parentRefs name the Gateway and the listener or no section (the
// listener's default allowedRoutes, the Gateway's namespace, holds every
// route here; no route controller runs, so the routes' Accepted is not
// looked at) — and its conditions, merged into the entry's current ones.
func burstListeners(routes cache.Indexer) func(*gatewayv1.Gateway) (map[string]any, error) {
	return func(gw *gatewayv1.Gateway) (map[string]any, error) {
		now := metav1.NewTime(time.Now().Truncate(time.Second))
		attached, err := routes.ByIndex(byGateway, types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}.String())
		if err != nil {
			return nil, err
		}
		out := make([]gatewayv1.ListenerStatus, 0, len(gw.Spec.Listeners))
		for i := range gw.Spec.Listeners {
			l := &gw.Spec.Listeners[i]
			var n int32
			for _, o := range attached {
				for _, ref := range o.(*gatewayv1.HTTPRoute).Spec.ParentRefs {
					if string(ref.Name) == gw.Name && (ref.SectionName == nil || *ref.SectionName == l.Name) {
						n++
						break
					}
				}
			}
			var current []metav1.Condition
			for j := range gw.Status.Listeners {
				if gw.Status.Listeners[j].Name == l.Name {
					current = gw.Status.Listeners[j].Conditions
				}
			}
			conds := conditions.Merge(current, []metav1.Condition{
				{Type: string(gatewayv1.ListenerConditionAccepted), Status: metav1.ConditionTrue, Reason: string(gatewayv1.ListenerReasonAccepted), ObservedGeneration: gw.Generation},
				{Type: string(gatewayv1.ListenerConditionProgrammed), Status: metav1.ConditionTrue, Reason: string(gatewayv1.ListenerReasonProgrammed), ObservedGeneration: gw.Generation},
				{Type: string(gatewayv1.ListenerConditionResolvedRefs), Status: metav1.ConditionTrue, Reason: string(gatewayv1.ListenerReasonResolvedRefs), ObservedGeneration: gw.Generation},
			}, nil, now)
			if err := conditions.Validate(conds); err != nil {
				return nil, fmt.Errorf("listeners[%d]: %w", i, err)
			}
			group := gatewayv1.Group(gatewayv1.GroupName)
			out = append(out, gatewayv1.ListenerStatus{
				Name:           l.Name,
				SupportedKinds: []gatewayv1.RouteGroupKind{{Group: &group, Kind: "HTTPRoute"}},
				AttachedRoutes: n,
				Conditions:     conds,
			})
		}
		return map[string]any{"listeners": out}, nil
	}
}

// burstPatcher counts the status writes of a Patcher by Gateway and
// outcome, with the attachedRoutes each carried. It forwards PatchVersion:
// without it the dispatcher could not tell its own writes' events (echo)
// nor hold a key whose cache is older than its last write.
type burstPatcher struct {
	next statuspatch.VersionPatcher[statuspatch.MergePatch]

	mu       sync.Mutex
	inFlight int
	last     time.Time // the last call's end
	writes   []burstWrite
}

var _ statuspatch.VersionPatcher[statuspatch.MergePatch] = (*burstPatcher)(nil)

// burstWrite is one patch call.
type burstWrite struct {
	Gateway  string
	Outcome  outcome.Outcome
	Attached int32 // status.listeners[0].attachedRoutes in the patch; -1 if none
	End      time.Time
}

func (p *burstPatcher) Patch(ctx context.Context, mp statuspatch.MergePatch) error {
	_, err := p.PatchVersion(ctx, mp)
	return err
}

func (p *burstPatcher) PatchVersion(ctx context.Context, mp statuspatch.MergePatch) (string, error) {
	p.mu.Lock()
	p.inFlight++
	p.mu.Unlock()
	rv, err := p.next.PatchVersion(ctx, mp)
	w := burstWrite{Gateway: mp.Name, Outcome: outcome.Of(err), Attached: -1, End: time.Now()}
	var status struct {
		Listeners []gatewayv1.ListenerStatus `json:"listeners"`
	}
	if json.Unmarshal(mp.Status, &status) == nil && len(status.Listeners) > 0 {
		w.Attached = status.Listeners[0].AttachedRoutes
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inFlight--
	p.last = w.End
	p.writes = append(p.writes, w)
	return rv, err
}

// take returns the calls recorded since the last take, and forgets them.
func (p *burstPatcher) take() []burstWrite {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.writes
	p.writes = nil
	return out
}

// quiet reports whether no call is in flight and none ended for d.
func (p *burstPatcher) quiet(d time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inFlight == 0 && time.Since(p.last) >= d
}

// waitConverged waits, at most within, until every Gateway of worlds has,
// on the API server, the attachedRoutes of its model, and no write came
// for burstQuiet.
func (c *burstControllerRun) waitConverged(ctx context.Context, cp *cluster.ControlPlane, ns string, worlds []*burstWorld, within time.Duration) error {
	want := map[string]int32{}
	for _, w := range worlds {
		maps.Copy(want, w.attached())
	}
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	return examplee2e.Poll(ctx, 50*time.Millisecond, func(ctx context.Context) error {
		list, err := cp.AdminGatewayClient().GatewayV1().Gateways(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var wrong []string
		for _, gw := range list.Items {
			n, ok := want[gw.Name]
			if !ok {
				continue
			}
			if len(gw.Status.Listeners) != 1 || gw.Status.Listeners[0].AttachedRoutes != n {
				wrong = append(wrong, fmt.Sprintf("%s: %v, want %d", gw.Name, attachedOf(&gw), n))
			}
		}
		switch {
		case len(wrong) > 0:
			return fmt.Errorf("%d Gateways wrong: %s", len(wrong), strings.Join(wrong, "; "))
		case len(list.Items) < len(want):
			return fmt.Errorf("%d Gateways listed, want %d", len(list.Items), len(want))
		case !c.patcher.quiet(burstQuiet):
			return fmt.Errorf("every Gateway right; a write in the last %v", burstQuiet)
		}
		return nil
	})
}

// attachedOf returns the attachedRoutes of gw's listener statuses.
func attachedOf(gw *gatewayv1.Gateway) []int32 {
	var out []int32
	for _, l := range gw.Status.Listeners {
		out = append(out, l.AttachedRoutes)
	}
	return out
}

// passes is the number of periodic passes the controller made.
func (c *burstControllerRun) passes() int64 {
	var n int64
	for _, v := range c.ctrl.Stats().Reconciler.Passes {
		n += v
	}
	return n
}

// burst sends burstEdits to world w — one after the other, or all at once
// —, waits until every Gateway converged, and checks and logs the writes.
func (c *burstControllerRun) burst(t *testing.T, ctx context.Context, cp *cluster.ControlPlane, ns string, worlds []*burstWorld, w *burstWorld, concurrent bool) {
	affected, changed := w.apply(burstEdits)
	if len(affected) != burstWantAffected || len(changed) != burstWantChanged {
		t.Fatalf("burstEdits affect %d Gateways, change %d; the test is written for %d and %d", len(affected), len(changed), burstWantAffected, burstWantChanged)
	}
	final := w.attached()

	// Start right after a pass: none falls inside the burst.
	passCtx, cancel := context.WithTimeout(ctx, burstInterval+burstSlack)
	defer cancel()
	n0 := c.passes()
	if err := examplee2e.Poll(passCtx, 5*time.Millisecond, func(context.Context) error {
		if c.passes() == n0 {
			return errors.New("no pass yet")
		}
		return nil
	}); err != nil {
		t.Fatalf("waiting for a periodic pass: %v", err)
	}
	if stray := c.patcher.take(); len(stray) > 0 {
		t.Errorf("%d writes after the convergence, before the burst: %+v", len(stray), stray)
	}
	s0 := c.ctrl.Stats().Dispatcher

	routes := cp.AdminGatewayClient().GatewayV1().HTTPRoutes(ns)
	start := time.Now()
	if concurrent {
		var (
			wg   sync.WaitGroup
			errs = make([]error, len(burstEdits))
			fire = make(chan struct{})
		)
		for i, e := range burstEdits {
			wg.Go(func() {
				<-fire
				errs[i] = w.send(ctx, routes, ns, e)
			})
		}
		start = time.Now()
		close(fire)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
	} else {
		for i, e := range burstEdits {
			time.Sleep(time.Until(start.Add(time.Duration(i) * burstPace)))
			if err := w.send(ctx, routes, ns, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	end := time.Now()
	sent := end.Sub(start)

	within := burstSettleBound + burstHoldBound + burstInterval + burstQuiet + burstSlack
	if err := c.waitConverged(ctx, cp, ns, worlds, within); err != nil {
		t.Fatalf("after the burst (%d edits sent in %v): not converged within %v: %v", len(burstEdits), sent.Round(time.Millisecond), within, err)
	}
	writes := c.patcher.take()
	s1 := c.ctrl.Stats().Dispatcher

	// The figures.
	per := map[string]int{}
	var (
		conflicts, failed, unaffected, intermediate int
		lastEnd                                     time.Time
		firstEnd                                    = end.Add(time.Hour)
	)
	for _, wr := range writes {
		per[wr.Gateway]++
		lastEnd = later(lastEnd, wr.End)
		if wr.End.Before(firstEnd) {
			firstEnd = wr.End
		}
		switch {
		case wr.Outcome == outcome.Conflict:
			conflicts++
		case wr.Outcome != outcome.OK:
			failed++
		}
		if !affected[wr.Gateway] {
			unaffected++
		} else if wr.Outcome == outcome.OK && wr.Attached != final[wr.Gateway] {
			intermediate++
		}
	}
	maxGW, maxN := "", 0
	for _, gw := range slices.Sorted(maps.Keys(per)) {
		if per[gw] > maxN {
			maxGW, maxN = gw, per[gw]
		}
	}
	bound := int(math.Ceil(burstMaxWritesPerChanged * float64(len(changed))))
	converged := time.Duration(0)
	if len(writes) > 0 {
		converged = lastEnd.Sub(end)
	}
	mode := map[bool]string{false: "one after another", true: "all at once"}[concurrent]
	t.Logf("| %s | %d | %d ms | %d | %d | %d | %.2f | %.2f | %d (%s) | %d | %d ms |",
		mode, len(burstEdits), sent.Milliseconds(), len(affected), len(changed), len(writes),
		float64(len(writes))/float64(len(affected)), float64(len(writes))/float64(len(changed)),
		maxN, maxGW, conflicts, converged.Milliseconds())
	var perList []string
	for _, gw := range slices.Sorted(maps.Keys(per)) {
		perList = append(perList, fmt.Sprintf("%s:%d", strings.TrimPrefix(gw, w.prefix+"-"), per[gw]))
	}
	t.Logf("%s: writes per Gateway %s; answered %d to %d ms after the burst's first edit; %d with an intermediate attachedRoutes, %d failed other than 409; dispatcher: held %d, echoes %d, dropped unchanged %d",
		mode, strings.Join(perList, " "), firstEnd.Sub(start).Milliseconds(), lastEnd.Sub(start).Milliseconds(), intermediate, failed,
		s1.Dropped["held"]-s0.Dropped["held"], s1.Echoes-s0.Echoes, s1.Dropped["unchanged"]-s0.Dropped["unchanged"])

	if len(writes) > bound {
		t.Errorf("%d writes for %d Gateways whose attachedRoutes changed (%d touched): want at most ⌈%.1f × %d⌉ = %d",
			len(writes), len(changed), len(affected), burstMaxWritesPerChanged, len(changed), bound)
	}
	if conflicts > 0 {
		t.Errorf("%d writes answered 409 Conflict: want none of our own making", conflicts)
	}
	if failed > 0 {
		t.Errorf("%d writes failed (not a 409)", failed)
	}
	if unaffected > 0 {
		t.Errorf("%d writes to Gateways no edit touched", unaffected)
	}
	if intermediate > 0 {
		if sent < burstSettleBound {
			t.Errorf("%d writes carried an attachedRoutes other than their Gateway's final one, though the burst (%v) was shorter than the settle bound (%v)",
				intermediate, sent.Round(time.Millisecond), burstSettleBound)
		} else {
			t.Logf("%d writes carried an intermediate attachedRoutes: the burst (%v) outlasted the settle bound (%v)",
				intermediate, sent.Round(time.Millisecond), burstSettleBound)
		}
	}
	for gw := range changed {
		if per[gw] == 0 {
			t.Errorf("%s changed and was not written", gw) // converged: cannot be
		}
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
