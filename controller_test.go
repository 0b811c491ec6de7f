package quietpatch_test

import (
	"context"
	"errors"
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
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/conditions"
	"github.com/quietpatch/quietpatch/statuspatch/source"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// item is a test object: its desired status is its generation; its
// current status is what it holds.
type item struct {
	name       string
	gen, state int64
}

// items is a Source whose cache syncs when the test says so.
type items struct {
	mu     sync.Mutex
	objs   map[string]*item
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
	o, ok := s.objs[key.Name]
	return o, ok, nil
}

func (s *items) HasSynced() bool { return s.synced.Load() }

var itemComputer = statuspatch.ComputerFuncs[*item, int64, string]{
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
func runInBackground(t *testing.T, c interface{ Run(context.Context) error }) (stop func() error) {
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
		{"observer and lease client", func(c *quietpatch.Config) { c.Observer = staticObserver{} }, "Observer"},
		{"negative interval", func(c *quietpatch.Config) { c.Interval = -time.Second }, "Interval"},
		{"negative capacity", func(c *quietpatch.Config) { c.Capacity = -1 }, "Capacity"},
		{"negative workers", func(c *quietpatch.Config) { c.Workers = -1 }, "Workers"},
		{"too many workers", func(c *quietpatch.Config) { c.Workers = 1 << 20 }, "Workers"},
		{"negative sync timeout", func(c *quietpatch.Config) { c.SyncTimeout = -1 }, "SyncTimeout"},
		{"no lease name", func(c *quietpatch.Config) { c.Lease.Name = "" }, "Name"},
		{"renew grace too long", func(c *quietpatch.Config) { c.Lease.RenewGrace = time.Minute }, "RenewGrace"},
	} {
		t.Run(tc.label, func(t *testing.T) {
			cfg := baseConfig(kube)
			tc.mutate(&cfg)
			_, err := quietpatch.New(newItems(1), itemComputer, statuspatch.PatcherFunc[string](func(context.Context, string) error { return nil }), cfg)
			if !errors.Is(err, quietpatch.ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
			var se *statuspatch.ConfigError
			var le *leader.ConfigError
			switch {
			case errors.As(err, &se):
				if se.Field != tc.field {
					t.Errorf("err %v names %s, want %s", err, se.Field, tc.field)
				}
			case errors.As(err, &le):
				if le.Field != tc.field {
					t.Errorf("err %v names %s, want %s", err, le.Field, tc.field)
				}
			default:
				t.Errorf("err %v carries no field", err)
			}
		})
	}
}

// staticObserver always holds epoch 1.
type staticObserver struct{}

func (staticObserver) Identity() string { return "me" }
func (staticObserver) Current() leader.Claim {
	return leader.Claim{Holder: "me", Expiry: time.Now().Add(time.Hour), Epoch: 1}
}
func (staticObserver) Subscribe() (<-chan leader.Claim, func()) { return nil, func() {} }

// A replica whose cache is empty must not lead: Run competes for the Lease
// only once the Source has synced; Ready says so meanwhile.
func TestRunWaitsForTheSourceBeforeCompeting(t *testing.T) {
	kube := fake.NewClientset()
	src := newItems(2)
	var patched atomic.Int64
	c, err := quietpatch.New(src, itemComputer, statuspatch.PatcherFunc[string](func(context.Context, string) error {
		patched.Add(1)
		return nil
	}), baseConfig(kube))
	if err != nil {
		t.Fatal(err)
	}
	stop := runInBackground(t, c)
	// The claimer would create the Lease within milliseconds: give it a
	// good while to show it does not.
	time.Sleep(100 * time.Millisecond)
	if h := leaseHolder(t, kube); h != "" {
		t.Fatalf("the Lease is held by %q before the Source synced", h)
	}
	if err := c.Ready(); !errors.Is(err, quietpatch.ErrNotSynced) {
		t.Errorf("Ready before the sync = %v, want ErrNotSynced", err)
	}
	src.synced.Store(true)
	waitUntil(t, "the Lease acquired", func() bool { return leaseHolder(t, kube) == "me" })
	waitUntil(t, "both patches", func() bool { return patched.Load() == 2 })
	waitUntil(t, "Ready", func() bool { return c.Ready() == nil })
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if h := leaseHolder(t, kube); h != "" {
		t.Errorf("the Lease is held by %q after a clean stop; want it vacated", h)
	}
	st := c.Stats()
	if st.Dispatcher.Patches["ok"] != 2 || st.Reconciler.Objects["changed"] != 2 || st.Capacity != 1440 {
		t.Errorf("Stats %+v: want 2 ok patches, 2 changed objects, capacity 1440", st)
	}
}

func TestRunFailsWhenTheSourceNeverSyncs(t *testing.T) {
	kube := fake.NewClientset()
	cfg := baseConfig(kube)
	cfg.SyncTimeout = 50 * time.Millisecond
	c, err := quietpatch.New(newItems(1), itemComputer, statuspatch.PatcherFunc[string](func(context.Context, string) error { return nil }), cfg)
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
			c, err := quietpatch.New(src, itemComputer, statuspatch.PatcherFunc[string](func(ctx context.Context, _ string) error {
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
	patcher, err := statuspatch.NewDynamicStatusPatcher(dyn, gvr, "test")
	if err != nil {
		t.Fatal(err)
	}
	kube := fake.NewClientset()
	cfg := baseConfig(kube)
	cfg.Interval = time.Hour
	c, err := quietpatch.New(source.Informer[*unstructured.Unstructured](inf), computer, patcher, cfg)
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
	if _, err := dyn.Resource(gvr).Namespace("demo").Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the status after the change, well before the interval", func() bool { return readyStatus() == "False" })
	if n := c.Stats().Reconciler.Passes["completed"]; n != 1 {
		t.Errorf("%d full passes, want 1: the change was reconciled on its own", n)
	}
}

// With Capacity zero the queue's capacity follows what the dispatcher
// drains in an interval, within [DefaultMinCapacity, MaxCapacity].
func TestCapacityFollowsTheDrainRate(t *testing.T) {
	for _, tc := range []struct {
		label    string
		interval time.Duration
		workers  int
		latency  time.Duration
		initial  int // SuggestCapacity(interval, 6.9ms), at least 100
		want     int
	}{
		{"fast server: up to MaxCapacity", 500 * time.Millisecond, 64, time.Millisecond, 100, 3000},
		{"slow server: down to the minimum", time.Second, 1, 200 * time.Millisecond, 144, quietpatch.DefaultMinCapacity},
	} {
		t.Run(tc.label, func(t *testing.T) {
			kube := fake.NewClientset()
			src := newItems(3)
			src.synced.Store(true)
			cfg := baseConfig(kube)
			cfg.Interval, cfg.Workers, cfg.MaxCapacity = tc.interval, tc.workers, 3000
			c, err := quietpatch.New(src, itemComputer, statuspatch.PatcherFunc[string](func(ctx context.Context, _ string) error {
				select {
				case <-time.After(tc.latency):
				case <-ctx.Done():
				}
				return nil
			}), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Queue().Cap(); got != tc.initial {
				t.Fatalf("initial capacity %d, want %d", got, tc.initial)
			}
			stop := runInBackground(t, c)
			waitUntil(t, "a patch applied", func() bool { return c.Stats().Dispatcher.Patches["ok"] > 0 })
			waitUntil(t, "the capacity to follow", func() bool { return c.Queue().Cap() == tc.want })
			_ = stop()
		})
	}
}

// Caches of other resources in Config.WaitFor hold the competition for the
// Lease back as the Source's own does.
func TestRunWaitsForFurtherCaches(t *testing.T) {
	kube := fake.NewClientset()
	src := newItems(1)
	src.synced.Store(true)
	var other atomic.Bool
	cfg := baseConfig(kube)
	cfg.WaitFor = []cache.InformerSynced{other.Load}
	c, err := quietpatch.New(src, itemComputer, statuspatch.PatcherFunc[string](func(context.Context, string) error { return nil }), cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := runInBackground(t, c)
	time.Sleep(100 * time.Millisecond) // the claimer would create the Lease within milliseconds
	if h := leaseHolder(t, kube); h != "" {
		t.Fatalf("the Lease is held by %q before every cache synced", h)
	}
	other.Store(true)
	waitUntil(t, "the Lease acquired", func() bool { return leaseHolder(t, kube) == "me" })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
