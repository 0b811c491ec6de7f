package controllerruntime_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/quietpatch/quietpatch"
	qpcr "github.com/quietpatch/quietpatch/integrations/controllerruntime"
	examplev1 "github.com/quietpatch/quietpatch/integrations/controllerruntime/examples/widget/api/v1"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch/conditions"
)

// TestManagerDependency declares, in Options.Config.Dependencies, a
// Source over the manager's informer of ConfigMaps: the ConfigMap
// widget-limits of a namespace sets the largest Ready size of its Widgets,
// and the StatusComputer reads it with the Source's Get — the cache's own
// object, the one the informer stores, where the manager's client.Reader
// returns a fresh deep copy at each call. An edit of it
// re-reconciles exactly the Widgets of its namespace, through the fresh
// lane — no pass (the interval is an hour) — on the real API server.
func TestManagerDependency(t *testing.T) {
	_, cfg := testEnv(t)
	admin := adminClient(t, cfg)
	const ns, leaseNS, n = "dependency", "quietpatch-system", 5
	createNamespace(t, admin, ns)
	createNamespace(t, admin, leaseNS)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	limits := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "widget-limits"}, Data: map[string]string{"maxSize": "100"}}
	if err := admin.Create(ctx, limits); err != nil {
		t.Fatal(err)
	}
	createWidgets(t, admin, ns, n, func(i int) int32 { return int32(20 * (i + 1)) }) // 20 … 100

	mgr, err := manager.New(cfg, manager.Options{Scheme: testScheme(), Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	configMaps, err := qpcr.NewSource(ctx, mgr.GetCache(), &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	widgets, err := qpcr.NewSource(ctx, mgr.GetCache(), &examplev1.Widget{})
	if err != nil {
		t.Fatal(err)
	}
	var gets atomic.Int64 // the policy's reads by the StatusComputer
	maxSize := func(ns string) (int32, error) {
		gets.Add(1)
		cm, found, err := configMaps.Get(types.NamespacedName{Namespace: ns, Name: "widget-limits"})
		if err != nil || !found {
			return 0, fmt.Errorf("the ConfigMap widget-limits of %s: found %v, %v", ns, found, err)
		}
		v, err := strconv.ParseInt(cm.Data["maxSize"], 10, 32)
		return int32(v), err
	}
	computer, err := conditions.New(conditions.Config[*examplev1.Widget]{
		Conditions: func(w *examplev1.Widget) ([]metav1.Condition, error) {
			limit, err := maxSize(w.Namespace)
			if err != nil {
				return nil, err
			}
			if w.Spec.Size > limit {
				return []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "TooLarge",
					Message: fmt.Sprintf("size %d is above %d", w.Spec.Size, limit)}}, nil
			}
			return []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Sized", Message: "ok"}}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The Widgets of the limits' namespace, from the Widgets' cache
	// (no copies either).
	widgetsOf := func(obj any) []types.NamespacedName {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok || cm.Name != "widget-limits" {
			return nil
		}
		all, err := widgets.List()
		if err != nil {
			return nil
		}
		var keys []types.NamespacedName
		for _, w := range all {
			if w.Namespace == cm.Namespace {
				keys = append(keys, types.NamespacedName{Namespace: w.Namespace, Name: w.Name})
			}
		}
		return keys
	}
	ctrl, err := qpcr.Add(ctx, mgr, &examplev1.Widget{}, computer, qpcr.Options{
		Config: quietpatch.Config{
			Name:         "widgets-deps",
			Interval:     time.Hour,
			Lease:        leader.Config{Namespace: leaseNS, Name: "widget-status-deps", LeaseDuration: testLeaseDuration},
			Dependencies: []quietpatch.Dependency{{Informer: configMaps, Keys: widgetsOf}},
		},
		Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-mgrDone; err != nil {
			t.Errorf("mgr.Start: %v", err)
		}
	}()

	// ready returns the Ready status of each Widget, from the API server.
	ready := func() (map[string]string, error) {
		var list examplev1.WidgetList
		if err := admin.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		out := map[string]string{}
		for _, w := range list.Items {
			for _, c := range w.Status.Conditions {
				if c.Type == "Ready" {
					out[w.Name] = fmt.Sprintf("%s/%s", c.Status, c.Reason)
				}
			}
		}
		return out, nil
	}
	waitFor := func(what string, want map[string]string) {
		t.Helper()
		poll(t, 60*time.Second, 50*time.Millisecond, what, func() (bool, string, error) {
			got, err := ready()
			return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprintf("Ready: %v, want %v", got, want), err
		})
	}
	all := func(limit int32) map[string]string {
		out := map[string]string{}
		for i := range n {
			out[fmt.Sprintf("w-%04d", i)] = "True/Sized"
			if int32(20*(i+1)) > limit {
				out[fmt.Sprintf("w-%04d", i)] = "False/TooLarge"
			}
		}
		return out
	}
	waitFor("the Widgets converge under maxSize 100", all(100))
	passes := ctrl.Stats().Reconciler.Passes["completed"]

	// No copies: the Source's Get hands out the cache's object itself.
	key := types.NamespacedName{Namespace: ns, Name: "widget-limits"}
	a, _, errA := configMaps.Get(key)
	b, _, errB := configMaps.Get(key)
	if errA != nil || errB != nil || a == nil || a != b {
		t.Errorf("two Gets of the Source returned %p and %p (%v, %v): want the cache's one object", a, b, errA, errB)
	}
	inf, err := mgr.GetCache().GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	if stored, ok, err := inf.(toolscache.SharedIndexInformer).GetIndexer().GetByKey(key.String()); err != nil || !ok || stored != any(a) {
		t.Errorf("the Source's Get returned %p, the informer stores %p (%v, %v): want the same object", a, stored, ok, err)
	}
	if gets.Load() < n {
		t.Errorf("the StatusComputer read the policy %d times, want at least once per Widget (%d)", gets.Load(), n)
	}

	limits.Data["maxSize"] = "50"
	if err := admin.Update(ctx, limits); err != nil {
		t.Fatal(err)
	}
	took := poll(t, 20*time.Second, 20*time.Millisecond, "the Widgets follow maxSize 50", func() (bool, string, error) {
		got, err := ready()
		return fmt.Sprint(got) == fmt.Sprint(all(50)), fmt.Sprintf("Ready: %v", got), err
	})
	st := ctrl.Stats()
	t.Logf("the Widgets followed the ConfigMap in %s; passes completed %d (before the edit %d), queue: %+v",
		took.Round(time.Millisecond), st.Reconciler.Passes["completed"], passes, st.Queue)
	if st.Reconciler.Passes["completed"] != passes {
		t.Errorf("%d passes completed after the ConfigMap's edit, want %d: the Dependency's keys take the fresh lane, no pass",
			st.Reconciler.Passes["completed"], passes)
	}
}
