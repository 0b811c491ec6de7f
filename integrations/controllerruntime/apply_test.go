package controllerruntime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/quietpatch/quietpatch"
	qpcr "github.com/quietpatch/quietpatch/integrations/controllerruntime"
	examplev1 "github.com/quietpatch/quietpatch/integrations/controllerruntime/examples/widget/api/v1"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/conditions"
)

const applyInterval = 250 * time.Millisecond

// statsOf is what the test reads of a writer.
type statsOf func() quietpatch.Stats

// startWriter runs one status writer as a controller of its own: a
// manager (its cache, of the objects of namespace ns only), a Source over
// it, comp and patcher in a pipeline competing for the Lease leaseNS/name,
// until ctx ends (the cleanup waits for the manager to stop).
func startWriter[O client.Object, P any](t *testing.T, ctx context.Context, cfg *rest.Config, obj O, ns, leaseNS, name string,
	comp statuspatch.StatusComputer[O, conditions.Status, P], patcher statuspatch.Patcher[P]) statsOf {
	t.Helper()
	mgr, err := manager.New(cfg, manager.Options{Scheme: testScheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}})
	if err != nil {
		t.Fatal(err)
	}
	src, err := qpcr.NewSource(ctx, mgr.GetCache(), obj)
	if err != nil {
		t.Fatal(err)
	}
	leases, err := leader.NewLeaseClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := quietpatch.New(src, comp, patcher, quietpatch.Config{
		Name:     name,
		Interval: applyInterval,
		Leases:   leases,
		Lease:    leader.Config{Namespace: leaseNS, Name: name, LeaseDuration: testLeaseDuration},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Add(qpcr.NewRunnable(ctrl)); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: mgr.Start: %v", name, err)
		}
	})
	return ctrl.Stats
}

// failed counts the patch calls of st that did not succeed, by outcome.
func failed(st quietpatch.Stats) map[string]int64 {
	out := map[string]int64{}
	for o, n := range st.Dispatcher.Patches {
		if o != "ok" && n > 0 {
			out[string(o)] = n
		}
	}
	return out
}

// condition returns the condition of type typ in a status, from the JSON
// of the object's status.conditions.
func conditionOf(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

// TestApplyTwoWritersOwnTheirConditions: two controllers, each with its own
// Lease, cache and field manager, write the conditions of the same
// Widgets — one Ready (size <= 100), the other Even (size a multiple of
// 20) — by server-side apply (conditions.Applier, statuspatch's
// ApplyPatcher) on the real API server. The Widget CRD's conditions
// are listType=map keyed by type. Each writer keeps its own condition and
// never the other's, no call fails (no 409: nothing to retry), and once
// converged nothing is written over several intervals — no resourceVersion
// moves. A control on a CRD whose conditions are an atomic list shows what
// the same two writers do there: they take the list from each other
// without end, which is why the docs say to apply only map lists.
func TestApplyTwoWritersOwnTheirConditions(t *testing.T) {
	_, cfg := testEnv(t)
	admin := adminClient(t, cfg)
	ctx := context.Background()
	const ns, leaseNS, n = "apply", "quietpatch-apply", 20
	createNamespace(t, admin, ns)
	createNamespace(t, admin, leaseNS)

	// The CRD's conditions are a map list keyed by type.
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	if err := admin.Get(ctx, types.NamespacedName{Name: "widgets.example.com"}, crd); err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	conds, _, _ := unstructured.NestedMap(versions[0].(map[string]any), "schema", "openAPIV3Schema", "properties", "status", "properties", "conditions")
	if conds["x-kubernetes-list-type"] != "map" || fmt.Sprint(conds["x-kubernetes-list-map-keys"]) != "[type]" {
		t.Fatalf("the Widget CRD's status.conditions: list type %v, keys %v; want map keyed by type", conds["x-kubernetes-list-type"], conds["x-kubernetes-list-map-keys"])
	}

	createWidgets(t, admin, ns, n, func(i int) int32 { return int32(10 * i) }) // 0, 10, … 190
	sized := func(w *examplev1.Widget) (metav1.Condition, error) {
		if w.Spec.Size > 100 {
			return metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "TooLarge", Message: fmt.Sprint(w.Spec.Size)}, nil
		}
		return metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Sized", Message: fmt.Sprint(w.Spec.Size)}, nil
	}
	even := func(w *examplev1.Widget) (metav1.Condition, error) {
		if w.Spec.Size%20 != 0 {
			return metav1.Condition{Type: "Even", Status: metav1.ConditionFalse, Reason: "Odd", Message: fmt.Sprint(w.Spec.Size)}, nil
		}
		return metav1.Condition{Type: "Even", Status: metav1.ConditionTrue, Reason: "Even", Message: fmt.Sprint(w.Spec.Size)}, nil
	}
	gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	writers := map[string]statsOf{}
	for _, w := range []struct {
		typ  string
		cond func(*examplev1.Widget) (metav1.Condition, error)
	}{{"Ready", sized}, {"Even", even}} {
		applier, err := conditions.NewApplier(conditions.Config[*examplev1.Widget]{
			Conditions: func(o *examplev1.Widget) ([]metav1.Condition, error) {
				c, err := w.cond(o)
				return []metav1.Condition{c}, err
			},
			OwnedTypes: []string{w.typ},
		}, conditions.ApplyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		patcher, err := statuspatch.NewApplyPatcher(cfg, gvr, "Widget", "example.com/"+strings.ToLower(w.typ))
		if err != nil {
			t.Fatal(err)
		}
		writers[w.typ] = startWriter(t, ctx, cfg, &examplev1.Widget{}, ns, leaseNS, "apply-"+strings.ToLower(w.typ), applier, patcher)
	}

	// converged lists the Widgets from the API server and says whether
	// each holds exactly the two conditions the writers compute.
	converged := func() (bool, string, map[string]string, error) {
		var list examplev1.WidgetList
		if err := admin.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, "", nil, err
		}
		rvs := map[string]string{}
		bad := ""
		for i := range list.Items {
			w := &list.Items[i]
			rvs[w.Name] = w.ResourceVersion
			for _, want := range []func(*examplev1.Widget) (metav1.Condition, error){sized, even} {
				c, _ := want(w)
				got := conditionOf(w.Status.Conditions, c.Type)
				if got == nil || got.Status != c.Status || got.Reason != c.Reason || got.ObservedGeneration != w.Generation {
					if bad == "" {
						bad = fmt.Sprintf("%s (size %d, generation %d): %s %+v, want %s/%s", w.Name, w.Spec.Size, w.Generation, c.Type, got, c.Status, c.Reason)
					}
				}
			}
			if len(w.Status.Conditions) != 2 && bad == "" {
				bad = fmt.Sprintf("%s: %d conditions, want Ready and Even", w.Name, len(w.Status.Conditions))
			}
		}
		return bad == "" && len(list.Items) == n, bad, rvs, nil
	}
	waitConverged := func(what string) map[string]string {
		t.Helper()
		var rvs map[string]string
		took := poll(t, 60*time.Second, 50*time.Millisecond, what, func() (bool, string, error) {
			ok, why, r, err := converged()
			rvs = r
			return ok, why, err
		})
		t.Logf("%s in %s", what, took.Round(time.Millisecond))
		return rvs
	}
	counts := func() (ok map[string]int64, passes map[string]int64) {
		ok, passes = map[string]int64{}, map[string]int64{}
		for typ, st := range writers {
			s := st()
			ok[typ], passes[typ] = s.Dispatcher.Patches["ok"], s.Reconciler.Passes["completed"]
			if f := failed(s); len(f) > 0 {
				t.Errorf("the %s writer's calls that failed: %v, want none (no conflict to retry)", typ, f)
			}
		}
		return ok, passes
	}

	rvs := waitConverged("both writers' conditions on every Widget")
	ok0, passes0 := counts()
	for typ, k := range ok0 {
		if k < n {
			t.Errorf("the %s writer made %d successful applies, want at least one per Widget (%d)", typ, k, n)
		}
	}

	// Idle: several intervals, passes made, nothing written.
	poll(t, 30*time.Second, applyInterval/2, "both writers make 4 more passes", func() (bool, string, error) {
		_, p := counts()
		return p["Ready"] >= passes0["Ready"]+4 && p["Even"] >= passes0["Even"]+4, fmt.Sprintf("passes %v, from %v", p, passes0), nil
	})
	ok1, _ := counts()
	if !maps.Equal(ok0, ok1) {
		t.Errorf("idle, converged: applies went from %v to %v, want no write", ok0, ok1)
	}
	if _, _, idle, err := converged(); err != nil || !maps.Equal(rvs, idle) {
		t.Errorf("idle, converged: resourceVersions changed (%v): before %v, after %v", err, rvs, idle)
	}

	// Five Widgets change so that both conditions flip: both writers
	// apply their own, nothing conflicts.
	for i := 0; i < 10; i += 2 { // sizes 0, 20, … 80: Ready and Even
		w := &examplev1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("w-%04d", i)}}
		if err := admin.Patch(ctx, w, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"size":215}}`))); err != nil {
			t.Fatal(err)
		}
	}
	waitConverged("both writers follow 5 changed Widgets")
	ok2, _ := counts()
	for typ := range ok2 {
		if d := ok2[typ] - ok1[typ]; d < 5 {
			t.Errorf("the %s writer made %d applies for 5 changed Widgets, want at least 5", typ, d)
		}
	}
	t.Logf("applies: converging %v, idle %v, 5 changes %v; calls failed: none", ok0, ok1, ok2)

	// managedFields: each field manager owns its own condition, Applied.
	var w examplev1.Widget
	if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: "w-0000"}, &w); err != nil {
		t.Fatal(err)
	}
	owners := map[string]string{}
	for _, mf := range w.ManagedFields {
		if mf.Subresource != "status" || mf.FieldsV1 == nil {
			continue
		}
		fields := string(mf.FieldsV1.Raw)
		for _, typ := range []string{"Ready", "Even"} {
			if strings.Contains(fields, `k:{\"type\":\"`+typ+`\"}`) {
				owners[typ] += fmt.Sprintf("%s(%s) ", mf.Manager, mf.Operation)
			}
		}
	}
	if owners["Ready"] != "example.com/ready(Apply) " || owners["Even"] != "example.com/even(Apply) " {
		t.Errorf("owners of the conditions of w-0000: %v; want Ready by example.com/ready, Even by example.com/even, each alone, by Apply", owners)
	}

	t.Run("atomic list: the writers take the list from each other", func(t *testing.T) {
		atomicControl(t, ctx, cfg, admin, leaseNS)
	})
	t.Run("merge patches: conflicts, measured", func(t *testing.T) {
		mergeContrast(t, ctx, cfg, admin, leaseNS, map[string]func(*examplev1.Widget) (metav1.Condition, error){"Ready": sized, "Even": even})
	})
}

// mergeContrast runs the same two writers with merge patches and their
// resourceVersion precondition (conditions.Computer, each owning its
// type), on Widgets of their own, and logs how many calls conflicted: a
// writer's patch built from a view the other's write made stale gets a
// 409 and waits for the next pass. A figure, not a check: how many
// conflict depends on timing.
func mergeContrast(t *testing.T, ctx context.Context, cfg *rest.Config, admin client.Client, leaseNS string, writersOf map[string]func(*examplev1.Widget) (metav1.Condition, error)) {
	const ns, n = "apply-merge", 20
	createNamespace(t, admin, ns)
	createWidgets(t, admin, ns, n, func(i int) int32 { return int32(10 * i) })
	gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	stats := map[string]statsOf{}
	for typ, cond := range writersOf {
		comp, err := conditions.New(conditions.Config[*examplev1.Widget]{
			Conditions: func(o *examplev1.Widget) ([]metav1.Condition, error) {
				c, err := cond(o)
				return []metav1.Condition{c}, err
			},
			OwnedTypes: []string{typ},
		})
		if err != nil {
			t.Fatal(err)
		}
		patcher, err := statuspatch.NewMergePatcher(cfg, gvr, "example.com/merge-"+strings.ToLower(typ))
		if err != nil {
			t.Fatal(err)
		}
		stats[typ] = startWriter(t, wctx, cfg, &examplev1.Widget{}, ns, leaseNS, "merge-"+strings.ToLower(typ), comp, patcher)
	}
	took := poll(t, 60*time.Second, 50*time.Millisecond, "the merge writers converge", func() (bool, string, error) {
		var list examplev1.WidgetList
		if err := admin.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, "", err
		}
		for _, w := range list.Items {
			if len(w.Status.Conditions) != 2 {
				return false, fmt.Sprintf("%s: %d conditions", w.Name, len(w.Status.Conditions)), nil
			}
		}
		return len(list.Items) == n, "", nil
	})
	for typ, st := range stats {
		s := st()
		t.Logf("merge patches, %s writer: %d ok, %d conflicts (409, recomputed at the next pass); converged in %s",
			typ, s.Dispatcher.Patches["ok"], s.Dispatcher.Patches["conflict"], took.Round(time.Millisecond))
	}
	stop()
}

// atomicControl runs the two writers of TestApplyTwoWritersOwnTheirConditions
// on Gizmos, a CRD of the test's whose status.conditions is an atomic list:
// each apply takes the whole list, the other writer finds its condition
// gone and applies again, and so on. The writes go on without end: the
// check that passes above (no write once converged) would fail here.
func atomicControl(t *testing.T, ctx context.Context, cfg *rest.Config, admin client.Client, leaseNS string) {
	const ns, n = "apply-atomic", 3
	createNamespace(t, admin, ns)
	gvk := schema.GroupVersionKind{Group: "ssa.example.com", Version: "v1", Kind: "Gizmo"}
	createCRD(t, admin, gvk, "gizmos", "atomic")
	for i := range n {
		g := &unstructured.Unstructured{}
		g.SetGroupVersionKind(gvk)
		g.SetNamespace(ns)
		g.SetName(fmt.Sprintf("g-%d", i))
		if err := admin.Create(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	gvr := schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: "gizmos"}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var writers []statsOf
	for _, typ := range []string{"Ready", "Even"} {
		applier, err := conditions.NewApplier(conditions.Config[*unstructured.Unstructured]{
			Conditions: func(*unstructured.Unstructured) ([]metav1.Condition, error) {
				return []metav1.Condition{{Type: typ, Status: metav1.ConditionTrue, Reason: "Set"}}, nil
			},
			OwnedTypes: []string{typ},
		}, conditions.ApplyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		patcher, err := statuspatch.NewApplyPatcher(cfg, gvr, gvk.Kind, "example.com/"+strings.ToLower(typ))
		if err != nil {
			t.Fatal(err)
		}
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(gvk)
		writers = append(writers, startWriter(t, wctx, cfg, obj, ns, leaseNS, "atomic-"+strings.ToLower(typ), applier, patcher))
	}
	// Two converging writers make about one apply per object each; 10 per
	// object and writer is a fight.
	took := poll(t, 30*time.Second, 20*time.Millisecond, "the writers keep applying", func() (bool, string, error) {
		a, b := writers[0]().Dispatcher.Patches["ok"], writers[1]().Dispatcher.Patches["ok"]
		return a >= 10*n && b >= 10*n, fmt.Sprintf("applies %d and %d", a, b), nil
	})
	t.Logf("on an atomic list, the two writers made %d and %d applies to %d objects in %s, and go on",
		writers[0]().Dispatcher.Patches["ok"], writers[1]().Dispatcher.Patches["ok"], n, took.Round(time.Millisecond))
	stop()
}

// createCRD creates a namespaced CRD of kind gvk, plural resource, with a
// status subresource whose conditions are a list of listType, and waits
// until it is established.
func createCRD(t *testing.T, admin client.Client, gvk schema.GroupVersionKind, resource, listType string) {
	t.Helper()
	str := map[string]any{"type": "string"}
	conditionsSchema := map[string]any{
		"type": "array", "x-kubernetes-list-type": listType,
		"items": map[string]any{"type": "object", "required": []any{"type", "status"}, "properties": map[string]any{
			"type": str, "status": str, "reason": str, "message": str,
			"lastTransitionTime": map[string]any{"type": "string", "format": "date-time"},
			"observedGeneration": map[string]any{"type": "integer", "format": "int64"},
		}},
	}
	if listType == "map" {
		conditionsSchema["x-kubernetes-list-map-keys"] = []any{"type"}
	}
	spec := map[string]any{
		"group": gvk.Group, "scope": "Namespaced",
		"names": map[string]any{"kind": gvk.Kind, "listKind": gvk.Kind + "List", "plural": resource, "singular": strings.ToLower(gvk.Kind)},
		"versions": []any{map[string]any{
			"name": gvk.Version, "served": true, "storage": true,
			"subresources": map[string]any{"status": map[string]any{}},
			"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "properties": map[string]any{
				"status": map[string]any{"type": "object", "properties": map[string]any{"conditions": conditionsSchema}},
			}}},
		}},
	}
	raw, _ := json.Marshal(spec)
	var specObj map[string]any
	_ = json.Unmarshal(raw, &specObj)
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": resource + "." + gvk.Group},
		"spec":     specObj,
	}}
	if err := admin.Create(context.Background(), crd); err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, 50*time.Millisecond, "the CRD "+crd.GetName()+" is established", func() (bool, string, error) {
		if err := admin.Get(context.Background(), types.NamespacedName{Name: crd.GetName()}, crd); err != nil {
			return false, "", err
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		established := slices.ContainsFunc(conds, func(c any) bool {
			m, _ := c.(map[string]any)
			return m["type"] == "Established" && m["status"] == "True"
		})
		return established, fmt.Sprintf("conditions %v", conds), nil
	})
}
