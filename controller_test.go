package quietpatch_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/internal/pipeline"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch/conditions"
	"github.com/quietpatch/quietpatch/statuspatch/source"
	"github.com/quietpatch/quietpatch/statuspatch/statuspatchtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// FreshFanout is the most keys one event puts in the fresh lane (see
// Controller.Enqueue).
const FreshFanout = 16

// item is a test object: its desired status is its generation; its
// current status is what it holds.
type item struct {
	name       string
	gen, state int64
}

// items is a Source whose cache syncs when the test says so; it records
// the keys Get was asked for (the keys the dispatcher served).
type items struct {
	mu     sync.Mutex
	objs   map[string]*item
	gets   []string
	synced atomic.Bool
}

func newItems(n int) *items {
	s := &items{objs: map[string]*item{}}
	for i := range n {
		name := string(rune('a' + i))
		s.objs[name] = &item{name: name, gen: 1}
	}
	return s
}

func (s *items) List() ([]*item, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*item, 0, len(s.objs))
	for _, o := range s.objs {
		out = append(out, o)
	}
	return out, nil
}

func (s *items) Get(key types.NamespacedName) (*item, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gets = append(s.gets, key.Name)
	o, ok := s.objs[key.Name]
	return o, ok, nil
}

// served returns the names Get was asked for so far, sorted.
func (s *items) served() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(slices.Values(s.gets))
}

// reset forgets the names Get was asked for.
func (s *items) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gets = nil
}

// settle makes every status the desired one.
func (s *items) settle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, o := range s.objs {
		s.objs[n] = &item{name: n, gen: o.gen, state: o.gen}
	}
}

// bump changes the desired status of name (a new generation), replacing
// the object as an informer's cache does.
func (s *items) bump(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.objs[name]
	s.objs[name] = &item{name: name, gen: o.gen + 1, state: o.state}
}

// apply is the patcher's write: name's status becomes the desired one.
func (s *items) apply(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o, ok := s.objs[name]; ok {
		s.objs[name] = &item{name: name, gen: o.gen, state: o.gen}
	}
}

func (s *items) HasSynced() bool { return s.synced.Load() }

var itemComputer = pipeline.ComputerFuncs[*item, int64, string]{
	KeyFunc:     func(o *item) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: o.name} },
	CurrentFunc: func(o *item) int64 { return o.state },
	DesiredFunc: func(o *item) (int64, error) { return o.gen, nil },
	EqualFunc:   func(a, b int64) bool { return a == b },
	PatchFunc:   func(o *item, _ int64) (string, error) { return o.name, nil },
}

// leaseHolder reads the Lease's holder from the fake API; "" when absent or
// vacated.
func leaseHolder(t *testing.T, kube *fake.Clientset) string {
	t.Helper()
	l, err := kube.CoordinationV1().Leases("ns").Get(context.Background(), "lease", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// eventually polls cond until it holds or 10 s have passed, and leaves the
// verdict to the checks that follow.
func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond() && time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func baseConfig(kube *fake.Clientset) quietpatch.Config {
	return quietpatch.Config{
		Name:   "test",
		Leases: kube.CoordinationV1(),
		Lease:  leader.Config{Namespace: "ns", Name: "lease", Identity: "me", LeaseDuration: 15 * time.Second},
	}
}

// runInBackground starts Run and returns a function that cancels it and
// returns Run's error.
func runInBackground(t *testing.T, c quietpatch.Runner) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	kube := fake.NewClientset()
	for _, tc := range []struct {
		label  string
		mutate func(*quietpatch.Config)
		field  string
	}{
		{"no lease client", func(c *quietpatch.Config) { c.Leases = nil }, "Leases"},
		{"negative interval", func(c *quietpatch.Config) { c.Interval = -time.Second }, "Interval"},
		{"negative capacity", func(c *quietpatch.Config) { c.Capacity = -1 }, "Capacity"},
		{"negative workers", func(c *quietpatch.Config) { c.Workers = -1 }, "Workers"},
		{"too many workers", func(c *quietpatch.Config) { c.Workers = 1 << 20 }, "Workers"},
		{"negative sync timeout", func(c *quietpatch.Config) { c.SyncTimeout = -1 }, "SyncTimeout"},
		{"negative patch timeout", func(c *quietpatch.Config) { c.PatchTimeout = -1 }, "PatchTimeout"},
		{"no lease name", func(c *quietpatch.Config) { c.Lease.Name = "" }, "Lease.Name"},
		{"renew grace too long", func(c *quietpatch.Config) { c.Lease.RenewGrace = time.Minute }, "Lease.RenewGrace"},
		{"dependency without informer", func(c *quietpatch.Config) {
			c.Dependencies = []quietpatch.Dependency{{Informer: &fakeInformer{}}, {}}
		}, "Dependencies[1].Informer"},
	} {
		t.Run(tc.label, func(t *testing.T) {
			cfg := baseConfig(kube)
			tc.mutate(&cfg)
			_, err := quietpatch.New(newItems(1), itemComputer, pipeline.PatcherFunc[string](func(context.Context, string) error { return nil }), cfg)
			if !errors.Is(err, quietpatch.ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
			var ce *quietpatch.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("err %v carries no field", err)
			}
			if ce.Field != tc.field {
				t.Errorf("err %v names %s, want %s", err, ce.Field, tc.field)
			}
		})
	}
}

func TestRunFailsWhenTheSourceNeverSyncs(t *testing.T) {
	kube := fake.NewClientset()
	cfg := baseConfig(kube)
	cfg.SyncTimeout = 50 * time.Millisecond
	c, err := quietpatch.New(newItems(1), itemComputer, pipeline.PatcherFunc[string](func(context.Context, string) error { return nil }), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(context.Background()); !errors.Is(err, quietpatch.ErrNotSynced) || !strings.Contains(err.Error(), "SyncTimeout") {
		t.Errorf("Run = %v, want ErrNotSynced naming SyncTimeout", err)
	}
	if err := c.Run(context.Background()); !errors.Is(err, quietpatch.ErrAlreadyStarted) {
		t.Errorf("second Run = %v, want ErrAlreadyStarted", err)
	}
}

// On stop, a patch call in flight is not cancelled, and the Lease is
// vacated only after it was answered; a call that ended without an answer
// keeps the Lease named after us, to run out.
func TestStopVacatesOnlyAfterAnsweredCalls(t *testing.T) {
	for _, tc := range []struct {
		label  string
		result error
		vacate bool
	}{
		{"answered", nil, true},
		{"answered with a conflict", apierrors.NewConflict(schemaGR, "a", errors.New("changed")), true},
		{"no answer (server timeout)", apierrors.NewTimeoutError("gave up", 1), false},
	} {
		t.Run(tc.label, func(t *testing.T) {
			kube := fake.NewClientset()
			src := newItems(1)
			src.synced.Store(true)
			release := make(chan struct{})
			var inCall, cancelled atomic.Bool
			c, err := quietpatch.New(src, itemComputer, pipeline.PatcherFunc[string](func(ctx context.Context, _ string) error {
				inCall.Store(true)
				select {
				case <-release:
					return tc.result
				case <-ctx.Done():
					cancelled.Store(true)
					return ctx.Err()
				}
			}), baseConfig(kube))
			if err != nil {
				t.Fatal(err)
			}
			stop := runInBackground(t, c)
			waitUntil(t, "a call in flight", inCall.Load)
			stopped := make(chan error, 1)
			go func() { stopped <- stop() }()
			time.Sleep(50 * time.Millisecond) // Run must not return meanwhile
			select {
			case err := <-stopped:
				t.Fatalf("Run returned (%v) with a call in flight", err)
			default:
			}
			if h := leaseHolder(t, kube); h != "me" {
				t.Fatalf("the Lease is held by %q with a call in flight, want still me", h)
			}
			close(release)
			if err := <-stopped; err != nil {
				t.Fatalf("Run = %v", err)
			}
			if cancelled.Load() {
				t.Error("the call in flight was cancelled by the stop")
			}
			if h := leaseHolder(t, kube); (h == "") != tc.vacate {
				t.Errorf("after stop the Lease is held by %q; want vacated: %v", h, tc.vacate)
			}
		})
	}
}

var schemaGR = schema.GroupResource{Resource: "items"}

// A Source built from an informer gets the Controller's event handler: a
// change is reconciled at once, not at the next interval (an hour here).
func TestInformerEventsAreReconciledWithoutWaitingForTheInterval(t *testing.T) {
	gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"namespace": "demo", "name": "w", "generation": int64(1), "resourceVersion": "1"},
		"spec":     map[string]any{"size": int64(3)},
	}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{gvr: "WidgetList"}, w)
	informers := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	inf := informers.ForResource(gvr).Informer()
	computer, err := conditions.New(conditions.Config[*unstructured.Unstructured]{
		Conditions: func(u *unstructured.Unstructured) ([]metav1.Condition, error) {
			size, _, _ := unstructured.NestedInt64(u.Object, "spec", "size")
			status := metav1.ConditionTrue
			if size > 100 {
				status = metav1.ConditionFalse
			}
			return []metav1.Condition{{Type: "Ready", Status: status, Reason: "Sized"}}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	patcher := statuspatchtest.NewPatcher(dyn, gvr)
	kube := fake.NewClientset()
	cfg := baseConfig(kube)
	cfg.Interval = time.Hour
	c, err := quietpatch.New(source.FromInformer[*unstructured.Unstructured](inf), computer, patcher, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer informers.Shutdown()
	defer cancel()
	informers.Start(ctx.Done())
	stop := runInBackground(t, c)
	defer func() { _ = stop() }()
	readyStatus := func() string {
		u, err := dyn.Resource(gvr).Namespace("demo").Get(ctx, "w", metav1.GetOptions{})
		if err != nil {
			return ""
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		if len(conds) != 1 {
			return ""
		}
		s, _ := conds[0].(map[string]any)["status"].(string)
		return s
	}
	waitUntil(t, "the first status", func() bool { return readyStatus() == "True" })
	u, err := dyn.Resource(gvr).Namespace("demo").Get(ctx, "w", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(u.Object, int64(300), "spec", "size")
	u.SetGeneration(2)
	// A new resourceVersion, as the API server gives every write (the fake
	// keeps the one it is given): at our write's version, the edit would be
	// taken for that write's echo.
	u.SetResourceVersion("100")
	if _, err := dyn.Resource(gvr).Namespace("demo").Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the status after the change, well before the interval", func() bool { return readyStatus() == "False" })
	if n := c.Stats().Reconciler.Passes["completed"]; n != 1 {
		t.Errorf("%d full passes, want 1: the change was reconciled on its own", n)
	}
}

// fakeInformer is the cache of a dependency: the test syncs it and calls
// the handlers registered on it.
type fakeInformer struct {
	synced   atomic.Bool
	mu       sync.Mutex
	handlers []cache.ResourceEventHandler
}

func (f *fakeInformer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handlers = append(f.handlers, h)
	return nil, nil
}

func (f *fakeInformer) HasSynced() bool { return f.synced.Load() }

// handler returns the one handler registered.
func (f *fakeInformer) handler(t *testing.T) cache.ResourceEventHandler {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.handlers) != 1 {
		t.Fatalf("%d handlers registered on the dependency's informer, want 1", len(f.handlers))
	}
	return f.handlers[0]
}

// A Dependency's cache holds the competition for the Lease back as the
// Source's own does.
func TestRunWaitsForTheDependencies(t *testing.T) {
	kube := fake.NewClientset()
	src := newItems(1)
	src.synced.Store(true)
	dep := &fakeInformer{}
	cfg := baseConfig(kube)
	cfg.Dependencies = []quietpatch.Dependency{{Informer: dep, Keys: depKeys}}
	c, err := quietpatch.New(src, itemComputer, pipeline.PatcherFunc[string](func(context.Context, string) error { return nil }), cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := runInBackground(t, c)
	time.Sleep(100 * time.Millisecond) // the claimer would create the Lease within milliseconds
	if h := leaseHolder(t, kube); h != "" {
		t.Fatalf("the Lease is held by %q before every cache synced", h)
	}
	if err := c.Ready(); !errors.Is(err, quietpatch.ErrNotSynced) {
		t.Errorf("Ready before the dependency synced = %v, want ErrNotSynced", err)
	}
	dep.synced.Store(true)
	waitUntil(t, "the Lease acquired", func() bool { return leaseHolder(t, kube) == "me" })
	waitUntil(t, "Ready", func() bool { return c.Ready() == nil })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// dep is an object of a dependency: it names the items it affects.
type dep struct{ names []string }

func depKeys(obj any) []types.NamespacedName { return keysOf(obj.(*dep).names...) }

func keysOf(names ...string) []types.NamespacedName {
	ks := make([]types.NamespacedName, len(names))
	for i, n := range names {
		ks[i] = types.NamespacedName{Namespace: "ns", Name: n}
	}
	return ks
}

// itemNames returns the names of newItems' first n items.
func itemNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = string(rune('a' + i))
	}
	return out
}

// An event — of a Dependency, or given to Enqueue — puts its few keys in
// the fresh lane, exactly those; many keys, a full fresh lane or a
// Dependency without Keys make one pass instead, which queues only the
// objects that changed.
//
// Every status is settled but those of s and t. The dispatcher is held
// in a call patching s (Workers 1), so the queue shows what the event
// queued; s and t are what only a pass finds (s, held, is served again
// after its call).
func TestEventsEnqueueTheirKeysOrMakeAPass(t *testing.T) {
	many := itemNames(FreshFanout + 1) // a..q
	for _, tc := range []struct {
		label    string
		capacity int
		keys     func(any) []types.NamespacedName // the Dependency's Keys
		event    func(c *quietpatch.Controller[*item, int64, string], h cache.ResourceEventHandler)
		// fresh: the keys the event queues in the fresh lane; pass: it
		// makes a pass instead (or as well).
		fresh []string
		pass  bool
	}{
		{label: "a dependency's added object: its keys", keys: depKeys,
			event: func(_ *quietpatch.Controller[*item, int64, string], h cache.ResourceEventHandler) {
				h.OnAdd(&dep{[]string{"d", "b"}}, false)
			},
			fresh: []string{"b", "d"}},
		{label: "an update: the keys of the old and the new object, once each", keys: depKeys,
			event: func(_ *quietpatch.Controller[*item, int64, string], h cache.ResourceEventHandler) {
				h.OnUpdate(&dep{[]string{"a", "b"}}, &dep{[]string{"b", "c"}})
			},
			fresh: []string{"a", "b", "c"}},
		{label: "a deletion the informer learnt of late", keys: depKeys,
			event: func(_ *quietpatch.Controller[*item, int64, string], h cache.ResourceEventHandler) {
				h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/x", Obj: &dep{[]string{"e"}}})
			},
			fresh: []string{"e"}},
		{label: "an object that affects nothing", keys: depKeys,
			event: func(_ *quietpatch.Controller[*item, int64, string], h cache.ResourceEventHandler) {
				h.OnAdd(&dep{}, false)
			}},
		{label: "FreshFanout keys: still the fresh lane", keys: depKeys,
			event: func(_ *quietpatch.Controller[*item, int64, string], h cache.ResourceEventHandler) {
				h.OnAdd(&dep{many[:FreshFanout]}, false)
			},
			fresh: many[:FreshFanout]},
		{label: "more keys than FreshFanout: a pass", keys: depKeys,
			event: func(_ *quietpatch.Controller[*item, int64, string], h cache.ResourceEventHandler) {
				h.OnAdd(&dep{many}, false)
			},
			pass: true},
		{label: "Keys nil: every object, a pass", keys: nil,
			event: func(_ *quietpatch.Controller[*item, int64, string], h cache.ResourceEventHandler) {
				h.OnUpdate(&dep{[]string{"a"}}, &dep{[]string{"a"}})
			},
			pass: true},
		{label: "Enqueue, FreshFanout keys: the fresh lane", keys: depKeys,
			event: func(c *quietpatch.Controller[*item, int64, string], _ cache.ResourceEventHandler) {
				c.Enqueue(keysOf(many[:FreshFanout]...)...)
			},
			fresh: many[:FreshFanout]},
		{label: "Enqueue, more keys than FreshFanout: a pass", keys: depKeys,
			event: func(c *quietpatch.Controller[*item, int64, string], _ cache.ResourceEventHandler) {
				c.Enqueue(keysOf(many...)...)
			},
			pass: true},
		{label: "Enqueue, the fresh lane full: what fits, and a pass", capacity: 2, keys: depKeys,
			event: func(c *quietpatch.Controller[*item, int64, string], _ cache.ResourceEventHandler) {
				c.Enqueue(keysOf("a", "b", "c")...)
			},
			fresh: []string{"a", "b"}, pass: true},
	} {
		t.Run(tc.label, func(t *testing.T) {
			kube := fake.NewClientset()
			src := newItems(20) // a..t
			src.settle()
			src.synced.Store(true)
			dep := &fakeInformer{}
			dep.synced.Store(true)
			release := make(chan struct{})
			var blocked atomic.Bool
			cfg := baseConfig(kube)
			cfg.Interval, cfg.Workers, cfg.Capacity = time.Hour, 1, tc.capacity
			cfg.Dependencies = []quietpatch.Dependency{{Informer: dep, Keys: tc.keys}}
			c, err := quietpatch.New(src, itemComputer, pipeline.PatcherFunc[string](func(ctx context.Context, name string) error {
				if name == "s" {
					blocked.Store(true)
					select {
					case <-release:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				src.apply(name)
				return nil
			}), cfg)
			if err != nil {
				t.Fatal(err)
			}
			stop := runInBackground(t, c)
			waitUntil(t, "the first pass", func() bool { return c.Stats().Reconciler.Passes["completed"] == 1 })
			src.bump("s")
			src.bump("t")
			c.Enqueue(keysOf("s")...)
			waitUntil(t, "the dispatcher held in the call patching s", blocked.Load)
			src.reset()
			before := c.Stats().Queue

			tc.event(c, dep.handler(t))
			wantPasses, wantDepth := int64(1), len(tc.fresh)
			if tc.pass {
				wantPasses, wantDepth = 2, wantDepth+2
				waitUntil(t, "a pass", func() bool { return c.Stats().Reconciler.Passes["completed"] == wantPasses })
			}
			// The keys of events wait DefaultSettle for more events, then
			// enter the fresh lane.
			eventually(t, func() bool { q := c.Stats().Queue; return q.Fresh == len(tc.fresh) && q.Depth == wantDepth })
			q := c.Stats().Queue
			if q.Fresh != len(tc.fresh) || q.Depth != wantDepth || q.Enqueued-before.Enqueued != int64(wantDepth) {
				t.Errorf("after the event the queue holds %d keys, %d fresh, %d enqueued; want %d, %d fresh, %d enqueued",
					q.Depth, q.Fresh, q.Enqueued-before.Enqueued, wantDepth, len(tc.fresh), wantDepth)
			}

			close(release)
			want := slices.Clone(tc.fresh)
			if tc.pass {
				want = append(want, "s", "t")
			}
			slices.Sort(want)
			waitUntil(t, "the queue drained", func() bool {
				st := c.Stats()
				return st.Queue.Depth == 0 && st.Queue.Held == 0 && st.Dispatcher.InFlight == 0 && len(src.served()) >= len(want)
			})
			if got := src.served(); !slices.Equal(got, want) {
				t.Errorf("the dispatcher served %v, want %v", got, want)
			}
			if got := c.Stats().Reconciler.Passes["completed"]; got != wantPasses {
				t.Errorf("%d passes, want %d", got, wantPasses)
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A Source built from an Indexer (no informer: the application registers
// its own handlers) is accepted, and Enqueue reconciles what its handlers
// report, without waiting for the interval.
func TestIndexerSourceIsReconciledOnEnqueue(t *testing.T) {
	idx := cache.NewIndexer(func(obj any) (string, error) { return "ns/" + obj.(*item).name, nil }, cache.Indexers{})
	for _, n := range []string{"a", "b"} {
		if err := idx.Add(&item{name: n, gen: 1}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var patched []string
	kube := fake.NewClientset()
	cfg := baseConfig(kube)
	cfg.Interval = time.Hour
	c, err := quietpatch.New(source.FromIndexer[*item](idx, nil), itemComputer, pipeline.PatcherFunc[string](func(_ context.Context, name string) error {
		o, _, _ := idx.GetByKey("ns/" + name)
		if err := idx.Update(&item{name: name, gen: o.(*item).gen, state: o.(*item).gen}); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		patched = append(patched, fmt.Sprintf("%s@%d", name, o.(*item).gen))
		return nil
	}), cfg)
	if err != nil {
		t.Fatalf("New with an Indexer Source: %v", err)
	}
	stop := runInBackground(t, c)
	got := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Sorted(slices.Values(patched))
	}
	waitUntil(t, "the first pass's patches", func() bool { return len(got()) == 2 })
	if err := idx.Update(&item{name: "b", gen: 2, state: 1}); err != nil {
		t.Fatal(err)
	}
	c.Enqueue(types.NamespacedName{Namespace: "ns", Name: "b"})
	waitUntil(t, "the patch of b's change", func() bool { return len(got()) == 3 })
	if want := []string{"a@1", "b@1", "b@2"}; !slices.Equal(got(), want) {
		t.Errorf("patched %v, want %v", got(), want)
	}
	if n := c.Stats().Reconciler.Passes["completed"]; n != 1 {
		t.Errorf("%d full passes, want 1: the change was reconciled on its own", n)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// A 429 with Retry-After holds every call back for the window, then the
// dispatcher goes on: the key that waited while the only call was
// throttled is patched about a second later.
func TestRetryAfterHoldsThenResumes(t *testing.T) {
	kube := fake.NewClientset()
	src := newItems(2)
	src.synced.Store(true)
	var mu sync.Mutex
	var calls []time.Time
	cfg := baseConfig(kube)
	cfg.Interval, cfg.Workers = time.Hour, 1
	c, err := quietpatch.New(src, itemComputer, pipeline.PatcherFunc[string](func(context.Context, string) error {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, time.Now())
		if len(calls) == 1 {
			// The server's latency: the dispatcher waits for a permit
			// meanwhile, before the window opens.
			time.Sleep(50 * time.Millisecond)
			return apierrors.NewTooManyRequests("slow down", 1)
		}
		return nil
	}), cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := runInBackground(t, c)
	waitUntil(t, "the second call", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(calls) == 2
	})
	mu.Lock()
	gap := calls[1].Sub(calls[0])
	mu.Unlock()
	if gap < time.Second {
		t.Errorf("the second call came %v after the throttled one, inside its 1 s Retry-After window", gap)
	}
	st := c.Stats().Dispatcher
	if st.Patches["throttled"] != 1 || st.RetryAfters != 1 {
		t.Errorf("dispatcher stats %+v: want 1 throttled patch and 1 Retry-After window", st)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// eventItems is items with an informer's events: the test calls the
// handler New registers.
type eventItems struct {
	*items
	inf fakeInformer
}

func (s *eventItems) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return s.inf.AddEventHandler(h)
}

// itemPatcher applies each write and reports its version, "rv-<name>".
type itemPatcher struct{ s *items }

func (p itemPatcher) Patch(ctx context.Context, name string) error {
	_, err := p.PatchVersion(ctx, name)
	return err
}

func (p itemPatcher) PatchVersion(_ context.Context, name string) (string, error) {
	p.s.apply(name)
	return "rv-" + name, nil
}

// The event of our own write (the version the patch returned) is not
// served; an event at another version is.
func TestEchoesOfOurWritesAreNotServed(t *testing.T) {
	src := &eventItems{items: newItems(2)}
	src.synced.Store(true)
	cfg := baseConfig(fake.NewClientset())
	cfg.Interval, cfg.Workers = time.Hour, 1
	c, err := quietpatch.New(src, itemComputer, itemPatcher{src.items}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, c)
	waitUntil(t, "both written", func() bool { return c.Stats().Dispatcher.Patches["ok"] == 2 })
	src.reset()
	h := src.inf.handler(t)
	obj := func(name, rv string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetNamespace("ns")
		u.SetName(name)
		u.SetResourceVersion(rv)
		return u
	}
	h.OnUpdate(obj("a", "1"), obj("a", "rv-a")) // our write of a
	h.OnUpdate(obj("b", "1"), obj("b", "rv-x")) // someone else's
	waitUntil(t, "b served", func() bool { return slices.Contains(src.served(), "b") })
	if got := src.served(); !slices.Equal(got, []string{"b"}) {
		t.Errorf("served %v after the events, want [b]: a's was the echo of our write", got)
	}
	if n := c.Stats().Dispatcher.Echoes; n != 1 {
		t.Errorf("%d echoes, want 1", n)
	}
}
