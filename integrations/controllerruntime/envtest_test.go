package controllerruntime_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/quietpatch/quietpatch"
	qpcr "github.com/quietpatch/quietpatch/integrations/controllerruntime"
	examplev1 "github.com/quietpatch/quietpatch/integrations/controllerruntime/examples/widget/api/v1"
	"github.com/quietpatch/quietpatch/integrations/controllerruntime/examples/widget/readiness"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/conditions"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// Timing of the in-process pipeline: short, so that the test takes
// seconds, not minutes.
const (
	testInterval      = time.Second
	testLeaseDuration = 2 * time.Second
)

type widgetController = quietpatch.Controller[*examplev1.Widget, conditions.Status, statuspatch.MergePatch]

// TestManager runs one manager with the pipeline Add builds against the
// real API server (envtest) and checks, in order: 1,000 Widgets converge;
// no status patch is sent over 3 idle intervals; k changed Widgets give
// exactly k successful patches; the manager's /metrics serves quietpatch's
// families next to controller-runtime's, and its probes answer; stopping
// the manager returns only after the pipeline vacated its Lease.
func TestManager(t *testing.T) {
	_, cfg := testEnv(t)
	admin := adminClient(t, cfg)
	const (
		ns, leaseNS, leaseName = "converge", "quietpatch-system", "widget-status-inprocess"
		n                      = 1000
	)
	createNamespace(t, admin, ns)
	createNamespace(t, admin, leaseNS)
	start := time.Now()
	createWidgets(t, admin, ns, n, func(i int) int32 { return int32(i % 150) })
	t.Logf("created %d Widgets in %s", n, time.Since(start).Round(time.Millisecond))

	metricsAddr, probeAddr := freePort(t), freePort(t)
	grace := 30 * time.Second
	mgr, err := manager.New(cfg, manager.Options{
		Scheme:                  testScheme(),
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:  probeAddr,
		GracefulShutdownTimeout: &grace,
	})
	if err != nil {
		t.Fatal(err)
	}
	computer, err := conditions.New(conditions.Config[*examplev1.Widget]{Conditions: readiness.Conditions})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctrl, err := qpcr.Add(ctx, mgr, &examplev1.Widget{}, computer, qpcr.Options{
		Config: quietpatch.Config{
			Name:     "widgets",
			Interval: testInterval,
			Lease:    leader.Config{Namespace: leaseNS, Name: leaseName, LeaseDuration: testLeaseDuration},
		},
		FieldManager: "example.com/widget-status",
	})
	if err != nil {
		t.Fatal(err)
	}
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Start(ctx) }()
	stopped := false
	defer func() {
		if !stopped {
			cancel()
			<-mgrDone
		}
	}()

	t.Run("converge", func(t *testing.T) {
		took := poll(t, 120*time.Second, 100*time.Millisecond, "1,000 Widgets converge", func() (bool, string, error) {
			total, ok, example, err := countConverged(ctx, admin, ns)
			return err == nil && total == n && ok == n, fmt.Sprintf("%d of %d converged; e.g. %s", ok, total, example), err
		})
		// A write is counted when its answer reaches the dispatcher, after
		// the API server committed it: the last ones may still be on
		// their way back.
		var st quietpatch.Stats
		poll(t, 10*time.Second, 20*time.Millisecond, "the dispatcher counts every write", func() (bool, string, error) {
			st = ctrl.Stats()
			return st.Dispatcher.Patches["ok"] >= n, fmt.Sprintf("%d successful patches counted for %d Widgets converged", st.Dispatcher.Patches["ok"], n), nil
		})
		t.Logf("%d Widgets converged %s after the manager started: %d patches ok, %d passes completed, %d halted (capacity %d), conflicts %d",
			n, took.Round(time.Millisecond), st.Dispatcher.Patches["ok"], st.Reconciler.Passes["completed"], st.Reconciler.Halted, st.Capacity, st.Dispatcher.Patches["conflict"])
	})
	if t.Failed() {
		return
	}

	t.Run("idle", func(t *testing.T) {
		quiesce(t, ctrl)
		before, err := statusPatches(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		st0 := ctrl.Stats()
		waitPasses(t, ctrl, 3)
		after, err := statusPatches(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		st1 := ctrl.Stats()
		got := sum(after) - sum(before)
		unchanged := st1.Reconciler.Objects["unchanged"] - st0.Reconciler.Objects["unchanged"]
		t.Logf("3 idle passes: %d objects found unchanged, %v status PATCHes at the API server (before %v, after %v)", unchanged, got, before, after)
		if got != 0 {
			t.Errorf("%v status PATCHes over 3 idle intervals, want 0", got)
		}
		if unchanged < 3*n {
			t.Errorf("the passes looked at %d objects, want at least %d: the idle check proves nothing", unchanged, 3*n)
		}
	})

	t.Run("changed", func(t *testing.T) {
		quiesce(t, ctrl)
		const k = 10
		before, err := statusPatches(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		st0 := ctrl.Stats()
		var names []string
		for i := range k {
			name := fmt.Sprintf("w-%04d", i*97)
			names = append(names, name)
			// Half cross the threshold (Ready flips), half keep their
			// condition: only observedGeneration changes.
			size := int32(i*97%150) + 1
			if i%2 == 0 {
				size += 100
			}
			body := fmt.Sprintf(`{"spec":{"size":%d}}`, size)
			if err := admin.Patch(ctx, &examplev1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
				client.RawPatch(types.MergePatchType, []byte(body))); err != nil {
				t.Fatal(err)
			}
		}
		took := poll(t, 30*time.Second, 50*time.Millisecond, "the changed Widgets converge", func() (bool, string, error) {
			for _, name := range names {
				var w examplev1.Widget
				if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &w); err != nil {
					return false, "", err
				}
				if ok, why := converged(&w); !ok {
					return false, why, nil
				}
			}
			return true, "", nil
		})
		quiesce(t, ctrl)
		after, err := statusPatches(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		st1 := ctrl.Stats()
		ok := after["200"] - before["200"]
		all := sum(after) - sum(before)
		t.Logf("%d changed Widgets converged in %s: %v status PATCHes answered 200, %v in all (by code: before %v, after %v); dispatcher ok +%d, conflict +%d",
			k, took.Round(time.Millisecond), ok, all, before, after,
			st1.Dispatcher.Patches["ok"]-st0.Dispatcher.Patches["ok"], st1.Dispatcher.Patches["conflict"]-st0.Dispatcher.Patches["conflict"])
		if ok != k {
			t.Errorf("%v successful status PATCHes for %d changed Widgets, want exactly %d", ok, k, k)
		}
		// A pass that reads the cache in the few milliseconds between a
		// patch's answer and its watch event computes the patch again,
		// from the old resourceVersion: the precondition makes it a 409,
		// never a write. Those are the only others allowed.
		if other := all - ok - (after["409"] - before["409"]); other != 0 {
			t.Errorf("%v status PATCHes answered neither 200 nor 409", other)
		}
		if all > 2*k {
			t.Errorf("%v status PATCHes for %d changed Widgets", all, k)
		}
	})

	t.Run("metrics and probes", func(t *testing.T) {
		fams, err := scrapeURL(ctx, "http://"+metricsAddr+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		checkFamilies(t, fams, 1)
		for _, path := range []string{"/readyz", "/readyz/widgets", "/healthz", "/healthz/widgets"} {
			if code := httpStatus("http://" + probeAddr + path); code != 200 {
				t.Errorf("GET %s: %d, want 200", path, code)
			}
		}
	})

	t.Run("stop", func(t *testing.T) {
		start := time.Now()
		cancel()
		if err := <-mgrDone; err != nil {
			t.Errorf("mgr.Start: %v", err)
		}
		stopped = true
		took := time.Since(start)
		// No polling: when mgr.Start has returned, the pipeline has
		// stopped and vacated, because the Runnable returned only then.
		var lease coordinationv1.Lease
		if err := admin.Get(context.Background(), types.NamespacedName{Namespace: leaseNS, Name: leaseName}, &lease); err != nil {
			t.Fatal(err)
		}
		holder := ""
		if lease.Spec.HolderIdentity != nil {
			holder = *lease.Spec.HolderIdentity
		}
		t.Logf("manager stopped in %s; the Lease's holder is now %q", took.Round(time.Millisecond), holder)
		if holder != "" {
			t.Errorf("the Lease is still held by %q after mgr.Start returned: the manager did not wait for the pipeline to vacate", holder)
		}
		if err := ctrl.Ready(); err == nil {
			t.Error("Ready() is nil after the manager stopped")
		}
	})
}

// checkFamilies checks that a manager's /metrics has quietpatch's families
// and controller-runtime's, and that the leader gauge is leading.
func checkFamilies(t *testing.T, fams map[string]*dto.MetricFamily, leading float64) {
	t.Helper()
	var names []string
	for name := range fams {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, want := range []string{
		"quietpatch_queue_depth", "quietpatch_dispatch_patches_total", "quietpatch_leader_is_leader",
		"quietpatch_reconcile_passes_total", "rest_client_requests_total",
	} {
		if fams[want] == nil {
			t.Errorf("the manager's /metrics has no %s; it has %s", want, strings.Join(names, " "))
		}
	}
	var qp, cr []string
	for _, name := range names {
		switch {
		case strings.HasPrefix(name, "quietpatch_"):
			qp = append(qp, name)
		case strings.HasPrefix(name, "controller_runtime_"), strings.HasPrefix(name, "workqueue_"), strings.HasPrefix(name, "rest_client_"):
			cr = append(cr, name)
		}
	}
	t.Logf("/metrics: %d quietpatch families (%s); controller-runtime's: %s", len(qp), strings.Join(qp, " "), strings.Join(cr, " "))
	if f := fams["quietpatch_leader_is_leader"]; f != nil {
		var got []string
		for _, m := range f.GetMetric() {
			l := labels(m)
			got = append(got, fmt.Sprintf("%v%v", m.GetGauge().GetValue(), l))
			if m.GetGauge().GetValue() != leading {
				t.Errorf("quietpatch_leader_is_leader%v = %v, want %v", l, m.GetGauge().GetValue(), leading)
			}
		}
		if len(got) == 0 {
			t.Error("quietpatch_leader_is_leader has no series")
		}
	}
	if f := fams["quietpatch_dispatch_patches_total"]; f != nil && leading == 1 {
		var ok float64
		for _, m := range f.GetMetric() {
			if l := labels(m); l["outcome"] == "ok" && l["pipeline"] == "widgets" {
				ok += m.GetCounter().GetValue()
			}
		}
		if ok == 0 {
			t.Error(`quietpatch_dispatch_patches_total{outcome="ok",pipeline="widgets"} is 0 or missing on the leader`)
		}
	}
}

// quiesce waits until the pipeline is idle: two full passes completed with
// no object changed, nothing queued or in flight.
func quiesce(t *testing.T, ctrl *widgetController) {
	t.Helper()
	var last quietpatch.Stats
	calm := 0
	poll(t, 30*time.Second, 20*time.Millisecond, "the pipeline quiesces", func() (bool, string, error) {
		st := ctrl.Stats()
		switch {
		case st.Queue.Depth != 0 || st.Dispatcher.InFlight != 0 || st.Reconciler.Objects["changed"] != last.Reconciler.Objects["changed"]:
			calm = 0
			last = st
		case st.Reconciler.Passes["completed"] > last.Reconciler.Passes["completed"]:
			calm++
			last = st
		}
		return calm >= 2, fmt.Sprintf("depth %d, in flight %d, %d calm passes", st.Queue.Depth, st.Dispatcher.InFlight, calm), nil
	})
}

// waitPasses waits for n more completed passes.
func waitPasses(t *testing.T, ctrl *widgetController, n int64) {
	t.Helper()
	from := ctrl.Stats().Reconciler.Passes["completed"]
	poll(t, time.Duration(n+5)*testInterval*3, 20*time.Millisecond, fmt.Sprintf("%d passes", n), func() (bool, string, error) {
		got := ctrl.Stats().Reconciler.Passes["completed"] - from
		return got >= n, fmt.Sprintf("%d passes completed", got), nil
	})
}

// TestStatusPatcherPrecondition checks, on the real API server, that the
// StatusPatcher writes the status through the client and that its
// resourceVersion precondition turns a patch computed from an old object
// into a 409 Conflict, not a write.
func TestStatusPatcherPrecondition(t *testing.T) {
	_, cfg := testEnv(t)
	admin := adminClient(t, cfg)
	ctx := context.Background()
	createNamespace(t, admin, "precondition")
	w := &examplev1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "precondition", Name: "w"}, Spec: examplev1.WidgetSpec{Size: 1}}
	if err := admin.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	p, err := qpcr.NewStatusPatcher(testCluster(t, cfg), &examplev1.Widget{}, "test")
	if err != nil {
		t.Fatal(err)
	}
	mp, err := statuspatch.NewMergePatch(w, examplev1.WidgetStatus{ObservedGeneration: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Patch(ctx, mp); err != nil {
		t.Fatalf("first patch: %v", err)
	}
	var got examplev1.Widget
	if err := admin.Get(ctx, client.ObjectKeyFromObject(w), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.ObservedGeneration != 1 {
		t.Fatalf("status.observedGeneration = %d after the patch, want 1", got.Status.ObservedGeneration)
	}
	stale := mp // the same resourceVersion: the object changed since
	stale.Status = []byte(`{"observedGeneration":7}`)
	err = p.Patch(ctx, stale)
	if !apierrors.IsConflict(err) {
		t.Fatalf("patch with a stale resourceVersion: %v, want a 409 Conflict", err)
	}
	if o := outcome.Of(err); o != outcome.Conflict {
		t.Errorf("outcome.Of(%v) = %v, want conflict", err, o)
	}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(w), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.ObservedGeneration != 1 {
		t.Errorf("status.observedGeneration = %d after the stale patch, want 1 (unchanged)", got.Status.ObservedGeneration)
	}
	if err := p.Patch(ctx, statuspatch.MergePatch{Namespace: "precondition", Name: "w", Status: []byte(`{}`)}); !errors.Is(err, statuspatch.ErrInvalidPatch) {
		t.Errorf("patch without resourceVersion: %v, want ErrInvalidPatch", err)
	}
}
