package controllerruntime_test

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/quietpatch/quietpatch"
	qpcr "github.com/quietpatch/quietpatch/integrations/controllerruntime"
	examplev1 "github.com/quietpatch/quietpatch/integrations/controllerruntime/examples/widget/api/v1"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// TestAddCaches runs Add in a manager of its own for each way a
// kubebuilder user restricts the manager's cache, all against one envtest
// API server. Each case has three namespaces of its own, <case>-a, -b and
// -c, with four Widgets each (w-0000 … w-0003; the even ones labelled
// nscache=in), one of those in the cache's view already converged. It
// checks that the Widgets in the cache's view converge, through the
// pass on gaining the Lease, and that one edited afterwards converges
// through its event (the Interval is an hour); that the Source lists
// exactly the objects controller-runtime's cache lists, each once, and Get
// finds them — the cache's own objects, not copies — and nothing else;
// that the Widgets outside the view keep an empty status; and that the
// dispatcher, and the API server, count exactly one patch per Widget in
// the view that needed one.
func TestAddCaches(t *testing.T) {
	_, cfg := testEnv(t)
	admin := adminClient(t, cfg)
	createNamespace(t, admin, "quietpatch-system")
	sel := k8slabels.SelectorFromSet(k8slabels.Set{"nscache": "in"})
	labelled := func(w *examplev1.Widget) bool { return w.Labels["nscache"] == "in" }

	type namespaces struct{ a, b, c string }
	tests := []struct {
		name string
		// all: the cache holds every Widget of the cluster.
		all   bool
		cache func(ns namespaces) cache.Options
		// inView reports whether the cache holds w; for a cache of all
		// namespaces, that includes other tests' Widgets.
		inView func(ns namespaces, w *examplev1.Widget) bool
	}{
		{"cluster-wide", true,
			func(namespaces) cache.Options { return cache.Options{} },
			func(namespaces, *examplev1.Widget) bool { return true }},
		{"DefaultNamespaces one", false,
			func(ns namespaces) cache.Options {
				return cache.Options{DefaultNamespaces: map[string]cache.Config{ns.a: {}}}
			},
			func(ns namespaces, w *examplev1.Widget) bool { return w.Namespace == ns.a }},
		{"DefaultNamespaces two", false,
			func(ns namespaces) cache.Options {
				return cache.Options{DefaultNamespaces: map[string]cache.Config{ns.a: {}, ns.b: {}}}
			},
			func(ns namespaces, w *examplev1.Widget) bool { return w.Namespace == ns.a || w.Namespace == ns.b }},
		{"DefaultNamespaces all and one labelled", false,
			// The cache of all namespaces excludes a by a field selector
			// (controller-runtime's defaulting): no Widget is held twice.
			func(ns namespaces) cache.Options {
				return cache.Options{DefaultNamespaces: map[string]cache.Config{cache.AllNamespaces: {}, ns.a: {LabelSelector: sel}}}
			},
			func(ns namespaces, w *examplev1.Widget) bool { return w.Namespace != ns.a || labelled(w) }},
		{"ByObject Namespaces", false,
			func(ns namespaces) cache.Options {
				return cache.Options{ByObject: map[client.Object]cache.ByObject{
					&examplev1.Widget{}: {Namespaces: map[string]cache.Config{ns.b: {}}},
				}}
			},
			func(ns namespaces, w *examplev1.Widget) bool { return w.Namespace == ns.b }},
		{"ByObject Namespaces and Label", false,
			func(ns namespaces) cache.Options {
				return cache.Options{ByObject: map[client.Object]cache.ByObject{
					&examplev1.Widget{}: {Namespaces: map[string]cache.Config{ns.a: {}, ns.c: {}}, Label: sel},
				}}
			},
			func(ns namespaces, w *examplev1.Widget) bool {
				return (w.Namespace == ns.a || w.Namespace == ns.c) && labelled(w)
			}},
		{"DefaultLabelSelector", false,
			func(namespaces) cache.Options { return cache.Options{DefaultLabelSelector: sel} },
			func(_ namespaces, w *examplev1.Widget) bool { return labelled(w) }},
		{"ByObject Field", false,
			func(ns namespaces) cache.Options {
				return cache.Options{ByObject: map[client.Object]cache.ByObject{
					&examplev1.Widget{}: {Field: fields.ParseSelectorOrDie("metadata.namespace=" + ns.a + ",metadata.name!=w-0001")},
				}}
			},
			func(ns namespaces, w *examplev1.Widget) bool { return w.Namespace == ns.a && w.Name != "w-0001" }},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := fmt.Sprintf("nscache-%d", i)
			ns := namespaces{p + "-a", p + "-b", p + "-c"}
			testCache(t, cfg, admin, p, tt.cache(ns), tt.all, func(w *examplev1.Widget) bool { return tt.inView(ns, w) }, ns.a, ns.b, ns.c)
		})
	}
}

// testCache is one case of TestAddCaches: the Widgets of namespaces (and
// any other Widget of the cluster inView accepts) under a manager whose
// cache has opts; all tells that it holds every Widget.
func testCache(t *testing.T, cfg *rest.Config, admin client.Client, name string, opts cache.Options, all bool, inView func(*examplev1.Widget) bool, namespaces ...string) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		// client-go's and controller-runtime's process-wide workers.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*clientConnReadLoop).run"),
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	comp := newComputer(t)
	sizes := []int32{40, 140, 60, 160} // Ready True, False, True, False
	for _, ns := range namespaces {
		createNamespace(t, admin, ns)
		for j, size := range sizes {
			w := &examplev1.Widget{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("w-%04d", j)},
				Spec:       examplev1.WidgetSpec{Size: size},
			}
			if j%2 == 0 {
				w.Labels = map[string]string{"nscache": "in"}
			}
			if err := admin.Create(ctx, w); err != nil {
				t.Fatal(err)
			}
		}
	}
	mine := func(w *examplev1.Widget) bool { return slices.Contains(namespaces, w.Namespace) }

	// All Widgets of the cluster, in the view and not.
	widgets := func() (in, out map[types.NamespacedName]*examplev1.Widget) {
		t.Helper()
		var list examplev1.WidgetList
		if err := admin.List(ctx, &list); err != nil {
			t.Fatal(err)
		}
		in, out = map[types.NamespacedName]*examplev1.Widget{}, map[types.NamespacedName]*examplev1.Widget{}
		for i := range list.Items {
			w := &list.Items[i]
			switch {
			case inView(w):
				in[client.ObjectKeyFromObject(w)] = w
			case mine(w):
				out[client.ObjectKeyFromObject(w)] = w
			}
		}
		return in, out
	}
	needsPatch := func(w *examplev1.Widget) bool {
		desired, err := comp.Desired(w)
		if err != nil {
			t.Fatal(err)
		}
		return !comp.Equal(comp.Current(w), desired)
	}

	// One Widget of the view (the first of ours) converged beforehand: it
	// needs no patch.
	in, out := widgets()
	var first *examplev1.Widget
	for _, k := range slices.SortedFunc(maps.Keys(in), compareKeys) {
		if mine(in[k]) {
			first = in[k]
			break
		}
	}
	if first == nil || (len(out) == 0) != all {
		t.Fatalf("the case is not a test: %d of our Widgets in the view, %d out of it", len(in), len(out))
	}
	pre, err := qpcr.NewStatusPatcher(testCluster(t, cfg), &examplev1.Widget{}, "nscache-test")
	if err != nil {
		t.Fatal(err)
	}
	desired, err := comp.Desired(first)
	if err != nil {
		t.Fatal(err)
	}
	mp, err := comp.Patch(first, desired)
	if err != nil {
		t.Fatal(err)
	}
	if err := pre.Patch(ctx, mp); err != nil {
		t.Fatal(err)
	}
	in, out = widgets()
	needed := 0
	for _, w := range in {
		if needsPatch(w) {
			needed++
		}
	}
	if needsPatch(in[client.ObjectKeyFromObject(first)]) || needed == 0 {
		t.Fatalf("%d of %d Widgets in the view need a patch, %s among them", needed, len(in), first.Name)
	}
	t.Logf("%d Widgets in the cache's view (%d need a patch), %d of ours out of it", len(in), needed, len(out))
	before, err := statusPatches(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}

	mgr, err := manager.New(cfg, manager.Options{Scheme: testScheme(), Metrics: metricsserver.Options{BindAddress: "0"}, Cache: opts})
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := qpcr.Add(ctx, mgr, &examplev1.Widget{}, comp, qpcr.Options{
		Config: quietpatch.Config{
			// An hour: one pass, on gaining the Lease; what follows comes
			// from events.
			Name:     name,
			Interval: time.Hour,
			Lease:    leader.Config{Namespace: "quietpatch-system", Name: name, LeaseDuration: testLeaseDuration},
		},
		Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	// A Source over the manager's informer of Widgets, as the one Add
	// built for the pipeline (NewSource over the same cache).
	src, err := qpcr.NewSource(ctx, mgr.GetCache(), &examplev1.Widget{})
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

	// patches waits until the dispatcher and the API server have counted
	// want patches since the start, and checks that they are exactly that
	// many, all successful.
	patches := func(want int) {
		t.Helper()
		var st quietpatch.Stats
		poll(t, 30*time.Second, 20*time.Millisecond, "the dispatcher counts the patches", func() (bool, string, error) {
			st = ctrl.Stats()
			return sumInts(st.Dispatcher.Patches) >= int64(want) && st.Queue.Depth == 0 && st.Dispatcher.InFlight == 0,
				fmt.Sprintf("patches %v, depth %d, in flight %d; want %d patches", st.Dispatcher.Patches, st.Queue.Depth, st.Dispatcher.InFlight, want), nil
		})
		var after map[string]float64
		poll(t, 10*time.Second, 20*time.Millisecond, "the API server counts the patches", func() (bool, string, error) {
			var err error
			after, err = statusPatches(ctx, cfg)
			return sum(after)-sum(before) >= float64(want), fmt.Sprintf("status PATCHes: before %v, after %v", before, after), err
		})
		if got := st.Dispatcher.Patches["ok"]; got != int64(want) || sumInts(st.Dispatcher.Patches) != int64(want) {
			t.Errorf("dispatcher patches %v, want %d, all ok", st.Dispatcher.Patches, want)
		}
		if ok, all := after["200"]-before["200"], sum(after)-sum(before); ok != float64(want) || all != float64(want) {
			t.Errorf("the API server answered %v status PATCHes, %v of them 200, want %d (before %v, after %v)", all, ok, want, before, after)
		}
	}
	// viewConverged waits until every Widget in the view has its status,
	// at the API server and in the Source.
	viewConverged := func(what string, in map[types.NamespacedName]*examplev1.Widget) {
		t.Helper()
		poll(t, 30*time.Second, 50*time.Millisecond, what, func() (bool, string, error) {
			now, _ := widgets()
			for k := range in {
				w, ok := now[k]
				if !ok {
					return false, "", fmt.Errorf("%s is gone", k)
				}
				if needsPatch(w) {
					return false, fmt.Sprintf("%s: status %+v", k, w.Status), nil
				}
			}
			objs, err := src.List()
			for _, o := range objs {
				if needsPatch(o) {
					return false, fmt.Sprintf("the Source's %s/%s has status %+v", o.Namespace, o.Name, o.Status), err
				}
			}
			return true, "", err
		})
	}

	viewConverged("the Widgets in the view converge", in)
	patches(needed)

	t.Run("Source", func(t *testing.T) {
		objs, err := src.List()
		if err != nil {
			t.Fatal(err)
		}
		listed := map[types.NamespacedName]*examplev1.Widget{}
		for _, o := range objs {
			k := client.ObjectKeyFromObject(o)
			if listed[k] != nil {
				t.Errorf("List returns %s twice", k)
			}
			listed[k] = o
		}
		var fromCache examplev1.WidgetList
		if err := mgr.GetCache().List(ctx, &fromCache); err != nil {
			t.Fatal(err)
		}
		cached := map[types.NamespacedName]bool{}
		for i := range fromCache.Items {
			cached[client.ObjectKeyFromObject(&fromCache.Items[i])] = true
		}
		want := slices.SortedFunc(maps.Keys(in), compareKeys)
		if got := slices.SortedFunc(maps.Keys(listed), compareKeys); !slices.Equal(got, want) {
			t.Errorf("the Source lists %d Widgets %v, want the %d in the view %v", len(got), got, len(want), want)
		}
		if got := slices.SortedFunc(maps.Keys(cached), compareKeys); !slices.Equal(got, want) {
			t.Errorf("controller-runtime's cache lists %d Widgets %v, want %d %v", len(got), got, len(want), want)
		}
		for k, o := range listed {
			got, found, err := src.Get(k)
			if err != nil || !found {
				t.Fatalf("Get(%s) = %v, %v, want the object", k, found, err)
			}
			if got != o {
				t.Errorf("Get(%s) returns another object than List: a copy, not the cache's", k)
			}
		}
		for k := range out {
			if got, found, err := src.Get(k); found || err != nil {
				t.Errorf("Get(%s), out of the view, = %v, %v, %v; want not found", k, got, found, err)
			}
		}
	})

	t.Run("event", func(t *testing.T) {
		// One Widget in the view and one out of it change size: Ready
		// flips. Only the one in the view is patched, on its event.
		edit := func(k types.NamespacedName) {
			t.Helper()
			if err := admin.Patch(ctx, &examplev1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}},
				client.RawPatch(types.MergePatchType, []byte(`{"spec":{"size":150}}`))); err != nil {
				t.Fatal(err)
			}
		}
		passes := ctrl.Stats().Reconciler.Passes["completed"]
		for k := range out {
			edit(k)
			break
		}
		k := client.ObjectKeyFromObject(first)
		edit(k)
		var w examplev1.Widget
		if err := admin.Get(ctx, k, &w); err != nil {
			t.Fatal(err)
		}
		viewConverged("the edited Widget converges", map[types.NamespacedName]*examplev1.Widget{k: &w})
		patches(needed + 1)
		if got := ctrl.Stats().Reconciler.Passes["completed"]; got != passes {
			t.Errorf("%d passes completed, %d before the edit: the edit was not reconciled on its event", got, passes)
		}
	})

	_, out = widgets()
	for k, w := range out {
		if w.Status.ObservedGeneration != 0 || len(w.Status.Conditions) != 0 {
			t.Errorf("%s, out of the cache's view, has status %+v", k, w.Status)
		}
	}
}

func compareKeys(a, b types.NamespacedName) int {
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
}

func sumInts(m map[outcome.Outcome]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// For a cluster-scoped resource (Namespaces), the Source holds what
// controller-runtime's cache does — cluster-wide,
// whatever DefaultNamespaces says (the cache hands out a multi-namespace
// informer then, over its cache of cluster-scoped objects), and only the
// objects DefaultLabelSelector selects.
func TestNewSourceClusterScoped(t *testing.T) {
	_, cfg := testEnv(t)
	admin := adminClient(t, cfg)
	createNamespace(t, admin, "nscache-cs-out")
	in := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "nscache-cs-in", Labels: map[string]string{"nscache": "in"}}}
	if err := admin.Create(context.Background(), in); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	sel := k8slabels.SelectorFromSet(k8slabels.Set{"nscache": "in"})
	tests := []struct {
		name    string
		opts    cache.Options
		indexer bool // whether the cache hands out a client-go SharedIndexInformer
	}{
		{"cluster-wide", cache.Options{}, true},
		{"DefaultLabelSelector", cache.Options{DefaultLabelSelector: sel}, true},
		{"DefaultNamespaces", cache.Options{DefaultNamespaces: map[string]cache.Config{"nscache-cs-out": {}}}, false},
		{"DefaultNamespaces and DefaultLabelSelector", cache.Options{DefaultNamespaces: map[string]cache.Config{"nscache-cs-out": {}, "default": {}}, DefaultLabelSelector: sel}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tt.opts.Scheme = testScheme()
			c, err := cache.New(cfg, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			inf, err := c.GetInformer(ctx, &corev1.Namespace{})
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := inf.(toolscache.SharedIndexInformer); ok != tt.indexer {
				t.Fatalf("the cache hands out a %T; SharedIndexInformer %v, want %v", inf, ok, tt.indexer)
			}
			src, err := qpcr.NewSource(ctx, c, &corev1.Namespace{})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- c.Start(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("cache.Start: %v", err)
				}
			}()
			if !c.WaitForCacheSync(ctx) {
				t.Fatal("the cache did not sync")
			}
			poll(t, 10*time.Second, 10*time.Millisecond, "the Source syncs", func() (bool, string, error) {
				return src.HasSynced(), "", nil
			})
			var list corev1.NamespaceList
			if err := c.List(ctx, &list); err != nil {
				t.Fatal(err)
			}
			var want, got []string
			for _, ns := range list.Items {
				want = append(want, ns.Name)
			}
			objs, err := src.List()
			if err != nil {
				t.Fatal(err)
			}
			for _, ns := range objs {
				got = append(got, ns.Name)
			}
			slices.Sort(want)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("the Source lists %v, controller-runtime's cache %v", got, want)
			}
			if _, found, err := src.Get(types.NamespacedName{Name: "nscache-cs-out"}); err != nil || found != (tt.opts.DefaultLabelSelector == nil) {
				t.Errorf("Get(nscache-cs-out) = %v, %v; want found %v", found, err, tt.opts.DefaultLabelSelector == nil)
			}
			if _, found, err := src.Get(types.NamespacedName{Name: in.Name}); err != nil || !found {
				t.Errorf("Get(%s) = %v, %v; want found", in.Name, found, err)
			}
			t.Logf("%T: %d Namespaces", inf, len(got))
		})
	}
}
