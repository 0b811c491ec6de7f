package examplee2e_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/e2e/examplee2e"
	"github.com/quietpatch/quietpatch/examples/httproute-status/fixtures"
	"github.com/quietpatch/quietpatch/examples/httproute-status/routestatus"
)

// Sizes and timings, chosen so that each test takes well under a minute on
// two busy cores while the write traffic is still far above one patch per
// interval.
const (
	interval = 2 * time.Second // --reconcile-interval
	kubeQPS  = 100             // --kube-qps: 200 patches per interval at most
	burst    = 200             // --kube-burst
	workers  = 4               // --workers: the API server's sweet spot on 2 cores
)

// baseConfig is the Deployment configuration the tests share. The lease is
// long enough that a busy machine does not make leadership flap; failover is
// the demo's subject.
func baseConfig(t *testing.T, binary string, rbac *examplee2e.RBAC) examplee2e.Config {
	return examplee2e.Config{
		Binary:            binary,
		Dir:               t.TempDir(),
		RBAC:              rbac,
		ReconcileInterval: interval,
		LeaseDuration:     10 * time.Second,
		RetryPeriod:       500 * time.Millisecond,
		PatchTimeout:      5 * time.Second,
		Workers:           workers,
		KubeQPS:           kubeQPS,
		KubeBurst:         burst,
	}
}

// deploy starts a Deployment, stopped when the test ends; if the test
// failed, the replicas' last log lines are logged first.
func deploy(t *testing.T, ctx context.Context, cp *cluster.ControlPlane, cfg examplee2e.Config) *examplee2e.Deployment {
	t.Helper()
	d, err := examplee2e.Deploy(ctx, cp, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, r := range d.Replicas() {
				t.Logf("replica %s (pid %d), log %s:\n%s", r.Identity, r.PID(), r.LogPath, r.LogTail(30))
			}
		}
		if err := d.Stop(); err != nil {
			t.Errorf("stopping %s: %v", cfg.ServiceAccount, err)
		}
	})
	return d
}

// install creates the objects and registers the deletion of the set's
// routes at the end of the test (before the Deployments registered later
// are stopped, since cleanups run last-in first-out) so that the next test
// starts from an empty route list.
func install(t *testing.T, ctx context.Context, cp *cluster.ControlPlane, set *fixtures.Set, objs []runtime.Object) {
	t.Helper()
	begin := time.Now()
	if err := examplee2e.Install(ctx, cp, objs, 8, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("installed %d objects (%d routes) in %v", len(objs), len(set.Routes), time.Since(begin).Round(time.Millisecond))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var apps []string
		for _, ns := range set.Namespaces {
			apps = append(apps, ns.Name)
		}
		if err := examplee2e.DeleteRoutes(ctx, cp, apps...); err != nil {
			t.Errorf("deleting routes: %v", err)
		}
	})
}

func generate(t *testing.T, cfg fixtures.Config) *fixtures.Set {
	t.Helper()
	set, err := fixtures.Generate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// TestRoutesConvergeThenStayQuiet: every fixture route reaches the status
// the fixtures expect, read back from the API server, and once it has, the
// controller sends no PATCH at all over three further intervals. At the
// end, the replicas' /metrics serve every metric the example's dashboard
// and alerting rules use and every instrument the root package documents
// (checkMonitoring).
func TestRoutesConvergeThenStayQuiet(t *testing.T) {
	cp, binary, rbac := shared.get(t)
	ctx := testContext(t, 4*time.Minute)
	const controller = "quietpatch.io/e2e-converge"
	set := generate(t, fixtures.Config{Routes: 600, Namespaces: 4, Prefix: "conv", ControllerName: controller})
	install(t, ctx, cp, set, set.Objects())
	want := examplee2e.ExpectFixtures(set)

	before, err := examplee2e.CountPatches(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	cfg := baseConfig(t, binary, rbac)
	cfg.Namespace, cfg.ServiceAccount, cfg.Replicas = "conv-system", "httproute-status", 2
	cfg.ControllerName = controller
	begin := time.Now()
	d := deploy(t, ctx, cp, cfg)
	ready := time.Since(begin)

	census, err := examplee2e.WaitConverged(ctx, cp.AdminGatewayClient(), want, 250*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	converged := time.Since(begin)
	checkLeastPrivilege(ctx, t, d, set.Routes[0])
	leader, err := d.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	initial, err := examplee2e.CountPatches(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d routes converged %v after start (replicas ready after %v); leader %s; PATCHes so far %s",
		census.Converged, converged.Round(time.Millisecond), ready.Round(time.Millisecond), leader.Identity, initial.Sub(before))
	if got := initial.Sub(before).OK; got < float64(len(set.Routes)) {
		t.Errorf("%v successful status PATCHes for %d routes that all needed a first status", got, len(set.Routes))
	}

	// Steady state: nothing changes, so nothing may be written.
	if err := examplee2e.Settle(ctx, []*examplee2e.Replica{leader}); err != nil {
		t.Fatal(err)
	}
	quiet, err := examplee2e.PatchesOver(ctx, cp, []*examplee2e.Replica{leader}, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("PATCHes over 3 further passes: %s", quiet)
	if quiet.Total != 0 {
		t.Errorf("%v status PATCHes over 3 intervals with nothing changed, want 0", quiet)
	}

	// The statuses are still right, and only the leader ever patched.
	routes, err := examplee2e.ListRoutes(ctx, cp.AdminGatewayClient())
	if err != nil {
		t.Fatal(err)
	}
	if err := want.Census(routes).Err(); err != nil {
		t.Error(err)
	}
	if h, err := d.Holder(ctx); err != nil || h != leader.Identity {
		t.Fatalf("lease holder is %q (%v), was %s: leadership moved during the test", h, err, leader.Identity)
	}
	var leaderScrape examplee2e.Metrics
	followers := map[string]examplee2e.Metrics{}
	for _, r := range d.Live() {
		m, err := r.Scrape(ctx)
		if err != nil {
			t.Fatal(err)
		}
		patches := m.Sum(examplee2e.MetricDispatchPatches)
		switch {
		case r == leader && patches < float64(len(set.Routes)):
			t.Errorf("leader %s made %v patch calls, want >= %d", r.Identity, patches, len(set.Routes))
		case r != leader && patches != 0:
			t.Errorf("follower %s made %v patch calls, want 0", r.Identity, patches)
		}
		if r == leader {
			leaderScrape = m
		} else {
			followers[r.Identity] = m
		}
	}

	// What the dashboard, the alerts and the docs name is what the
	// controller serves.
	checkMonitoring(t, leaderScrape, followers)
}

// checkLeastPrivilege: the replicas' identity may patch a route's status
// (the controller just did) but neither read a single route nor patch its
// spec: it holds the example's RBAC, nothing more.
func checkLeastPrivilege(ctx context.Context, t *testing.T, d *examplee2e.Deployment, route *gatewayv1.HTTPRoute) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", d.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gatewayclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	routes := gw.GatewayV1().HTTPRoutes(route.Namespace)
	_, getErr := routes.Get(ctx, route.Name, metav1.GetOptions{})
	_, patchErr := routes.Patch(ctx, route.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
	for what, err := range map[string]error{"get a route": getErr, "patch a route's spec": patchErr} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("the controller's identity could %s: err = %v, want Forbidden", what, err)
		}
	}
}

// TestTwoControllersShareRoutes: a second controller, with its own name,
// Lease and ServiceAccount, writes its own entries into the same routes at
// the same time. Every route ends with both controllers' entries, correct;
// no version of any route the API server stored ever lost an entry that an
// earlier version had; and the writes settle to zero.
func TestTwoControllersShareRoutes(t *testing.T) {
	cp, binary, rbac := shared.get(t)
	ctx := testContext(t, 4*time.Minute)
	const (
		ours  gatewayv1.GatewayController = "quietpatch.io/e2e-duo"
		other gatewayv1.GatewayController = "example.com/other"
	)
	set := generate(t, fixtures.Config{Routes: 400, Namespaces: 4, Prefix: "duo", ControllerName: ours})
	objs, want := withSecondController(set, other)
	install(t, ctx, cp, set, objs)

	// Watch every stored version of every route from before the
	// controllers start.
	routes, err := cp.AdminGatewayClient().GatewayV1().HTTPRoutes(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := watchEntries(ctx, t, cp, routes.ResourceVersion, want)

	// Both controllers start together.
	deployments := make([]*examplee2e.Deployment, 2)
	var wg sync.WaitGroup
	for i, c := range []struct {
		name gatewayv1.GatewayController
		ns   string // its own Lease: the deploy Role names one Lease per namespace
	}{{ours, "duo-ours"}, {other, "duo-other"}} {
		cfg := baseConfig(t, binary, rbac)
		cfg.Namespace, cfg.ServiceAccount, cfg.ControllerName = c.ns, "httproute-status", string(c.name)
		wg.Go(func() {
			d, err := examplee2e.Deploy(ctx, cp, cfg)
			if err != nil {
				t.Error(err)
				return
			}
			deployments[i] = d
		})
	}
	wg.Wait()
	for _, d := range deployments {
		if d == nil {
			continue
		}
		t.Cleanup(func() {
			if t.Failed() {
				for _, r := range d.Replicas() {
					t.Logf("replica %s, log %s:\n%s", r.Identity, r.LogPath, r.LogTail(30))
				}
			}
			_ = d.Stop()
		})
	}
	if t.Failed() {
		t.FailNow()
	}
	begin := time.Now()
	if _, err := examplee2e.WaitConverged(ctx, cp.AdminGatewayClient(), want, 250*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d routes carry both controllers' entries %v after both were ready", len(want), time.Since(begin).Round(time.Millisecond))

	// Writes settle: a window of two passes of each leader with no PATCH.
	var leaders []*examplee2e.Replica
	for _, d := range deployments {
		l, err := d.WaitLeader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leaders = append(leaders, l)
	}
	settled := time.Now()
	for window := 1; ; window++ {
		if err := examplee2e.Settle(ctx, leaders); err != nil {
			t.Fatal(err)
		}
		n, err := examplee2e.PatchesOver(ctx, cp, leaders, 2)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("window %d: PATCHes over 2 passes of each leader: %s", window, n)
		if n.Total == 0 {
			break
		}
		if ctx.Err() != nil || window == 10 {
			t.Fatalf("writes did not settle: %s in the last window", n)
		}
	}
	t.Logf("writes settled %v after convergence", time.Since(settled).Round(time.Millisecond))

	// Negative control: the watch must catch a lost entry. As the admin,
	// drop the other controller's entry from one route; the watch must
	// flag exactly that version, and the other controller must write the
	// entry back.
	victim := types.NamespacedName{Namespace: set.Routes[0].Namespace, Name: set.Routes[0].Name}
	lostAt := dropEntry(ctx, t, cp, victim, other)
	if err := examplee2e.Poll(ctx, 50*time.Millisecond, func(context.Context) error {
		if !w.flagged(victim, lostAt) {
			return fmt.Errorf("the watch has not flagged the entry dropped from %s at resourceVersion %s", victim, lostAt)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := examplee2e.WaitConverged(ctx, cp.AdminGatewayClient(), want, 250*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}

	res := w.stop(ctx, t, len(want))
	t.Logf("watched %d route versions (%d with entries of both controllers); the dropped entry was flagged and written back", res.events, res.both)
	for _, v := range res.violations {
		if v.nn == victim && v.rv == lostAt {
			continue
		}
		t.Error(v.msg)
	}
	if res.events < len(want) {
		t.Errorf("watched only %d route versions for %d routes that each got written", res.events, len(want))
	}
	for i, l := range leaders {
		m, err := l.Scrape(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s leader %s: patch outcomes %v", deployments[i].Config().ControllerName, l.Identity, m.ByLabel(examplee2e.MetricDispatchPatches, "outcome"))
	}
}

// withSecondController adds, for controller other, a GatewayClass and a
// Gateway "gateway-other" (a copy of the set's Gateway) and gives every
// route whose parent is the set's Gateway a second parentRef to the same
// listener of gateway-other. Routes with a Service (mesh) parent keep their
// one parentRef, which both controllers handle. Either way the other
// controller must reach the same reasons as ours.
func withSecondController(set *fixtures.Set, other gatewayv1.GatewayController) ([]runtime.Object, examplee2e.Expectations) {
	class := set.GatewayClass.DeepCopy()
	class.Name = set.Config.Prefix + "-other"
	class.Spec.ControllerName = other
	gw := set.Gateway.DeepCopy()
	gw.Name = "gateway-other"
	gw.Spec.GatewayClassName = gatewayv1.ObjectName(class.Name)

	want := examplee2e.Expectations{}
	for i, r := range set.Routes {
		ourRef := r.Spec.ParentRefs[0].DeepCopy()
		otherRef := ourRef.DeepCopy()
		if otherRef.Kind == nil || *otherRef.Kind == "Gateway" {
			otherRef.Name = gatewayv1.ObjectName(gw.Name)
			r.Spec.ParentRefs = append(r.Spec.ParentRefs, *otherRef)
		}
		e := set.Expected[i]
		w1, w2 := examplee2e.WantFor(set.Config.ControllerName, e), examplee2e.WantFor(other, e)
		w1.Parent, w2.Parent = ourRef, otherRef
		want[types.NamespacedName{Namespace: r.Namespace, Name: r.Name}] = []examplee2e.Want{w1, w2}
	}
	var objs []runtime.Object
	for _, o := range set.Objects() {
		objs = append(objs, o)
		switch o {
		case runtime.Object(set.GatewayClass):
			objs = append(objs, class)
		case runtime.Object(set.Gateway):
			objs = append(objs, gw)
		}
	}
	return objs, want
}

// entryWatch follows every stored version of the routes and records each
// time an entry (controller, parentRef) present in an earlier version of a
// route is missing from a later one, or a status the CRD's rules would
// reject.
type entryWatch struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	res      watchResult
	complete map[types.NamespacedName]bool // latest version meets every Want
}

type watchResult struct {
	events, both int
	violations   []violation
}

// violation is a route version that broke the rules.
type violation struct {
	nn  types.NamespacedName
	rv  string
	msg string
}

type entryKey struct {
	controller gatewayv1.GatewayController
	parent     string
}

func watchEntries(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, rv string, want examplee2e.Expectations) *entryWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &entryWatch{cancel: cancel, done: make(chan struct{}), complete: map[types.NamespacedName]bool{}}
	seen := map[types.NamespacedName]map[entryKey]bool{}
	check := func(r *gatewayv1.HTTPRoute) {
		nn := types.NamespacedName{Namespace: r.Namespace, Name: r.Name}
		wants, ok := want[nn]
		if !ok {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.res.events++
		w.complete[nn] = true
		for _, wt := range wants {
			if examplee2e.CheckRoute(r, wt) != nil {
				w.complete[nn] = false
			}
		}
		now := map[entryKey]bool{}
		controllers := map[gatewayv1.GatewayController]bool{}
		for _, p := range r.Status.Parents {
			now[entryKey{p.ControllerName, refKey(&p.ParentRef)}] = true
			controllers[p.ControllerName] = true
		}
		if len(controllers) >= 2 {
			w.res.both++
		}
		for k := range seen[nn] {
			if !now[k] && len(w.res.violations) < 20 {
				w.res.violations = append(w.res.violations, violation{nn, r.ResourceVersion,
					fmt.Sprintf("%s at resourceVersion %s lost the entry of %s for %s", nn, r.ResourceVersion, k.controller, k.parent)})
			}
		}
		if err := routestatus.Validate(r.Status); err != nil && len(w.res.violations) < 20 {
			w.res.violations = append(w.res.violations, violation{nn, r.ResourceVersion,
				fmt.Sprintf("%s at resourceVersion %s: invalid status: %v", nn, r.ResourceVersion, err)})
		}
		seen[nn] = now
	}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			wi, err := cp.AdminGatewayClient().GatewayV1().HTTPRoutes(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				if ctx.Err() == nil {
					w.addViolation(fmt.Sprintf("watch from %s: %v", rv, err))
				}
				return
			}
			for ev := range wi.ResultChan() {
				switch ev.Type {
				case watch.Added, watch.Modified:
					r := ev.Object.(*gatewayv1.HTTPRoute)
					rv = r.ResourceVersion
					check(r)
				case watch.Bookmark:
					if r, ok := ev.Object.(*gatewayv1.HTTPRoute); ok {
						rv = r.ResourceVersion
					}
				case watch.Error:
					err := apierrors.FromObject(ev.Object)
					if ctx.Err() == nil {
						// A gap (410 Gone) would hide versions: say so.
						w.addViolation(fmt.Sprintf("watch from %s: %v", rv, err))
					}
					wi.Stop()
					return
				}
			}
			wi.Stop()
		}
	}()
	t.Cleanup(func() { w.cancel(); <-w.done })
	return w
}

func (w *entryWatch) addViolation(msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.res.violations = append(w.res.violations, violation{msg: msg})
}

// flagged reports whether the watch recorded a violation for that version.
func (w *entryWatch) flagged(nn types.NamespacedName, rv string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range w.res.violations {
		if v.nn == nn && v.rv == rv {
			return true
		}
	}
	return false
}

// dropEntry removes controller's entries from the route's status as the
// admin and returns the resourceVersion written.
func dropEntry(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, nn types.NamespacedName, controller gatewayv1.GatewayController) string {
	t.Helper()
	routes := cp.AdminGatewayClient().GatewayV1().HTTPRoutes(nn.Namespace)
	var rv string
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		r, err := routes.Get(ctx, nn.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		r.Status.Parents = slices.DeleteFunc(r.Status.Parents, func(p gatewayv1.RouteParentStatus) bool { return p.ControllerName == controller })
		got, err := routes.UpdateStatus(ctx, r, metav1.UpdateOptions{FieldManager: "quietpatch-e2e-saboteur"})
		if err != nil {
			return err
		}
		rv = got.ResourceVersion
		return nil
	})
	if err != nil {
		t.Fatalf("dropping the entry of %s from %s: %v", controller, nn, err)
	}
	return rv
}

// stop waits until the watch has seen the final state — the latest
// version of every route meets its Wants — then ends it and returns what it
// saw.
func (w *entryWatch) stop(ctx context.Context, t *testing.T, routes int) watchResult {
	t.Helper()
	err := examplee2e.Poll(ctx, 50*time.Millisecond, func(context.Context) error {
		w.mu.Lock()
		defer w.mu.Unlock()
		n := 0
		for _, ok := range w.complete {
			if ok {
				n++
			}
		}
		if n < routes {
			return fmt.Errorf("the watch saw %d of %d routes in their final state", n, routes)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	w.cancel()
	<-w.done
	return w.res
}

// refKey identifies a parentRef by value.
func refKey(p *gatewayv1.ParentReference) string {
	s := func(v *string) string {
		if v == nil {
			return "<nil>"
		}
		return *v
	}
	var port string
	if p.Port != nil {
		port = fmt.Sprint(*p.Port)
	}
	return fmt.Sprintf("%s/%s/%s/%s/%s/%s", s((*string)(p.Group)), s((*string)(p.Kind)), s((*string)(p.Namespace)), p.Name, s((*string)(p.SectionName)), port)
}
