package pipeline

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"

	"github.com/quietpatch/quietpatch/internal/queue"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch/conditions"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// benchObj is an object of the benchmarks and the memory test: an
// HTTPRoute-like object with two conditions in its status.
type benchObj struct {
	Key   types.NamespacedName
	RV    string
	Gen   int64
	Conds []metav1.Condition
	buf   [2]metav1.Condition // the desired status, computed in place
}

// benchComputer builds the desired status into a buffer of the object
// it reuses, so that computing allocates nothing: any allocation measured
// per unchanged object is the library's. The reconciler and the
// dispatcher never compute one object twice at once, which makes the
// reuse safe; Patch copies what it keeps.
type benchComputer struct {
	equal func(a, b []metav1.Condition) bool
}

func (c *benchComputer) Key(o *benchObj) types.NamespacedName   { return o.Key }
func (c *benchComputer) Current(o *benchObj) []metav1.Condition { return o.Conds }
func (c *benchComputer) Desired(o *benchObj) ([]metav1.Condition, error) {
	o.buf[0] = metav1.Condition{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted",
		Message: "Route is accepted", ObservedGeneration: o.Gen}
	o.buf[1] = metav1.Condition{Type: "ResolvedRefs", Status: metav1.ConditionTrue, Reason: "ResolvedRefs",
		Message: "All references resolved", ObservedGeneration: o.Gen}
	return o.buf[:], nil
}
func (c *benchComputer) Equal(a, b []metav1.Condition) bool { return c.equal(a, b) }

// benchPatch is a small typed payload: the benchmark measures the library,
// not JSON encoding.
type benchPatch struct {
	RV  string
	Gen int64
}

func (c *benchComputer) Patch(o *benchObj, desired []metav1.Condition) (benchPatch, error) {
	return benchPatch{RV: o.RV, Gen: desired[0].ObservedGeneration}, nil
}

// benchObjs returns n objects; changed ones carry conditions of an older
// generation. Current conditions have a transition time that desired ones
// lack, so a comparison must ignore it; they are in the order the
// controller writes them, as the API server keeps list order.
func benchObjs(n int, changed bool) []*benchObj {
	at := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	objs := make([]*benchObj, n)
	for i := range objs {
		gen := int64(1)
		current := gen
		if changed {
			current = 0
		}
		objs[i] = &benchObj{
			Key: types.NamespacedName{Namespace: "ns" + strconv.Itoa(i%100), Name: "route-" + strconv.Itoa(i)},
			RV:  strconv.Itoa(1000 + i), Gen: gen,
			Conds: []metav1.Condition{
				{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", Message: "Route is accepted", ObservedGeneration: current, LastTransitionTime: at},
				{Type: "ResolvedRefs", Status: metav1.ConditionTrue, Reason: "ResolvedRefs", Message: "All references resolved", ObservedGeneration: current, LastTransitionTime: at},
			},
		}
	}
	return objs
}

// sliceSource lists the same slice every time, as a lister over a warm
// cache costs nothing the benchmarks should measure, and gets objects from
// a map.
type sliceSource struct {
	objs  []*benchObj
	byKey map[types.NamespacedName]*benchObj
}

func newSliceSource(objs []*benchObj) sliceSource {
	s := sliceSource{objs: objs, byKey: make(map[types.NamespacedName]*benchObj, len(objs))}
	for _, o := range objs {
		s.byKey[o.Key] = o
	}
	return s
}

func (s sliceSource) List() ([]*benchObj, error) { return s.objs, nil }
func (s sliceSource) Get(k types.NamespacedName) (*benchObj, bool, error) {
	o, ok := s.byKey[k]
	return o, ok, nil
}

// staticLeader is a Leader that always holds epoch 1.
type staticLeader struct{}

func (staticLeader) Identity() string { return "me" }
func (staticLeader) Current() leader.Claim {
	return leader.Claim{Holder: "me", Expiry: time.Now().Add(time.Hour), Epoch: 1}
}
func (staticLeader) Subscribe() (<-chan leader.Claim, func()) {
	ch := make(chan leader.Claim)
	var once sync.Once
	return ch, func() { once.Do(func() { close(ch) }) }
}

type benchReconciler = Reconciler[*benchObj, []metav1.Condition, benchPatch]

func newBenchReconciler(tb testing.TB, objs []*benchObj, equal func(a, b []metav1.Condition) bool, meter metric.Meter) *benchReconciler {
	tb.Helper()
	opts := Options{Capacity: len(objs) + 1}
	q, err := newQueue(opts)
	if err != nil {
		tb.Fatal(err)
	}
	rec, err := NewReconciler(newSliceSource(objs), &benchComputer{equal: equal}, q, staticLeader{}, opts, NewMetrics(meter, opts))
	if err != nil {
		tb.Fatal(err)
	}
	return rec
}

// BenchmarkPass measures reconcile passes over 10,000 unchanged objects
// with two conditions each. One op is one pass; ns/object divides by the
// objects, allocs/op must be 0.
//
//   - typed: conditions.Equal.
//   - gocmp: conditions.CmpEqual with IgnoreTransitionTime (conditions
//     are in the same order, so SortByType, which costs several times
//     more, is not needed to get the typed comparison's answers).
func BenchmarkPass(b *testing.B) {
	const n = 10_000
	for _, c := range []struct {
		name  string
		equal func(a, b []metav1.Condition) bool
	}{
		{"typed", conditions.Equal},
		{"gocmp", conditions.CmpEqual[[]metav1.Condition](conditions.IgnoreTransitionTime())},
	} {
		b.Run(c.name, func(b *testing.B) {
			rec := newBenchReconciler(b, benchObjs(n, false), c.equal, nil)
			ctx := context.Background()
			b.ReportAllocs()
			passes := 0
			for b.Loop() {
				if res, err := rec.ReconcileAll(ctx); err != nil || res.Unchanged != n {
					b.Fatalf("pass: %+v, %v", res, err)
				}
				passes++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(passes*n), "ns/object")
		})
	}
}

// BenchmarkServe measures the dispatcher serving keys of changed objects
// with a Patcher that does nothing: get the key, read the claim, get the
// object, compute and compare, build the patch, make the call. One op is
// a batch of 1,000 keys; ns/key divides by them.
func BenchmarkServe(b *testing.B) {
	const n = 1_000
	for _, w := range []int{1, 4} {
		b.Run("workers="+strconv.Itoa(w), func(b *testing.B) {
			objs := benchObjs(n, true)
			src := newSliceSource(objs)
			comp := &benchComputer{equal: conditions.Equal}
			opts := Options{Capacity: n, Workers: w}
			q, err := newQueue(opts)
			if err != nil {
				b.Fatal(err)
			}
			var served atomic.Int64
			batch := make(chan struct{}, 1)
			patcher := PatcherFunc[benchPatch](func(context.Context, benchPatch) error {
				if served.Add(1)%n == 0 {
					batch <- struct{}{}
				}
				return nil
			})
			d, err := NewDispatcher(q, src, comp, patcher, staticLeader{}, opts, nil)
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- d.Run(ctx) }()
			defer func() { cancel(); <-done }()
			b.ReportAllocs()
			batches := 0
			for b.Loop() {
				for _, o := range objs {
					if err := q.Add(o.Key, queue.LanePass); err != nil {
						b.Fatal(err)
					}
				}
				<-batch
				batches++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(batches*n), "ns/key")
			if st := d.Stats(); st.Patches[outcome.OK] != int64(batches*n) {
				b.Fatalf("stats %+v, want %d ok", st, batches*n)
			}
		})
	}
}

// A pass over unchanged objects allocates nothing in the library; with
// an OpenTelemetry SDK meter, what a pass records does not grow with the
// objects.
func TestReconcileUnchangedDoesNotAllocate(t *testing.T) {
	allocs := func(n int, meter metric.Meter) float64 {
		rec := newBenchReconciler(t, benchObjs(n, false), conditions.Equal, meter)
		return testing.AllocsPerRun(20, func() {
			if res, err := rec.ReconcileAll(context.Background()); err != nil || res.Unchanged != n {
				t.Fatalf("pass: %+v, %v", res, err)
			}
		})
	}
	if a := allocs(1000, nil); a != 0 {
		t.Errorf("a pass over 1000 unchanged objects allocates %v times, want 0", a)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer func() { _ = provider.Shutdown(context.Background()) }()
	meter := provider.Meter("test")
	if few, many := allocs(10, meter), allocs(1000, meter); few != many {
		t.Errorf("with a meter, a pass allocates %v times over 10 objects and %v over 1000, want the same", few, many)
	}
}

// TestMemoryBounded: 20,000 objects, all changed, 10 passes, the patcher
// stalled. The library's live heap stays at what the lanes hold, after
// one pass as after ten. It is compared with the best a careful user
// writes without the library — a keyed client-go workqueue controller that
// compares before it enqueues (what controller-runtime does too): its
// queue deduplicates keys, so it is bounded as well, by the number of
// objects rather than by a capacity, and holds more. The seed's behaviour
// (one patch per object per pass into an unbounded queue) is logged for
// reference.
func TestMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates tens of MB; skipped with -short")
	}
	const (
		n        = 20_000
		passes   = 10
		capacity = 500
	)
	objs := benchObjs(n, true)

	// The library: bounded lanes, the dispatcher stalled in its call.
	ours := func() (after1, afterAll int64) {
		src := newSliceSource(objs) // the cache, not the library's
		base := liveHeap()
		opts := Options{Capacity: capacity, PatchTimeout: time.Hour}
		q, err := newQueue(opts)
		if err != nil {
			t.Fatal(err)
		}
		comp := &memComputer{benchComputer{equal: conditions.Equal}}
		rec, err := NewReconciler(src, comp, q, staticLeader{}, opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		stalled := PatcherFunc[[]byte](func(ctx context.Context, _ []byte) error {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-release:
				return nil
			}
		})
		d, err := NewDispatcher(q, src, comp, stalled, staticLeader{}, opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		defer func() {
			close(release) // a stop lets the call in flight finish
			cancel()
			<-done
		}()
		for p := 1; p <= passes; p++ {
			res, _ := rec.ReconcileAll(ctx)
			if p == 1 {
				if res.Changed < capacity || res.Changed > capacity+1 {
					t.Errorf("first pass queued %d keys, want the capacity (+1 taken by the stalled call)", res.Changed)
				}
				after1 = liveHeap() - base
			}
		}
		afterAll = liveHeap() - base
		runtime.KeepAlive(rec)
		return after1, afterAll
	}

	// The fair baseline: a keyed workqueue fed by a compare-then-enqueue
	// pass, its one worker stalled on the first key.
	keyed := func() (after1, afterAll int64) {
		base := liveHeap()
		wq := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
		defer wq.ShutDown()
		stall := make(chan struct{})
		defer close(stall)
		go func() {
			if _, shutdown := wq.Get(); !shutdown {
				<-stall
			}
		}()
		comp := &benchComputer{equal: conditions.Equal}
		for p := 1; p <= passes; p++ {
			for _, o := range objs {
				desired, _ := comp.Desired(o)
				if !comp.Equal(comp.Current(o), desired) {
					wq.Add(o.Key.String())
				}
			}
			if p == 1 {
				after1 = liveHeap() - base
			}
		}
		afterAll = liveHeap() - base
		return after1, afterAll
	}

	// The seed, for reference: every pass queues one patch per object,
	// changed or not, into an unbounded queue nobody drains.
	type seedPatch struct {
		key     string
		epoch   int64
		payload []byte
	}
	seed := func() (afterAll int64) {
		base := liveHeap()
		var unbounded [][]seedPatch
		for range passes {
			for _, o := range objs {
				if len(unbounded) == 0 || len(unbounded[len(unbounded)-1]) == 4096 {
					unbounded = append(unbounded, make([]seedPatch, 0, 4096))
				}
				last := &unbounded[len(unbounded)-1]
				*last = append(*last, seedPatch{key: o.Key.String(), epoch: 1, payload: memPayload(o)})
			}
		}
		afterAll = liveHeap() - base
		runtime.KeepAlive(unbounded)
		return afterAll
	}

	ours1, oursAll := ours()
	keyed1, keyedAll := keyed()
	seedAll := seed()
	mb := func(b int64) string { return fmt.Sprintf("%.2f MB", float64(b)/(1<<20)) }
	t.Logf("live heap growth, %d objects all changed, patcher stalled:", n)
	t.Logf("  library (capacity %d):     after 1 pass %s, after %d passes %s", capacity, mb(ours1), passes, mb(oursAll))
	t.Logf("  keyed workqueue baseline:  after 1 pass %s, after %d passes %s", mb(keyed1), passes, mb(keyedAll))
	t.Logf("  seed (unbounded, for reference): after %d passes %s", passes, mb(seedAll))

	if oursAll > ours1+1<<20 {
		t.Errorf("library heap grew from %s after one pass to %s after %d: not bounded", mb(ours1), mb(oursAll), passes)
	}
	if oursAll >= keyedAll {
		t.Errorf("library holds %s, the keyed workqueue %s: want less than the best alternative", mb(oursAll), mb(keyedAll))
	}
}

// memPayload builds a JSON merge patch body like the seed's: one per object.
func memPayload(o *benchObj) []byte {
	b := make([]byte, 0, 128)
	b = append(b, `{"metadata":{"resourceVersion":"`...)
	b = append(b, o.RV...)
	b = append(b, `"},"status":{"conditions":[{"type":"Accepted","status":"True"}]}}`...)
	return b
}

// memComputer is benchComputer with a JSON payload, computing into a new
// slice: its reconciler and dispatcher may compute one object at once.
type memComputer struct{ benchComputer }

func (c *memComputer) Desired(o *benchObj) ([]metav1.Condition, error) {
	var b benchObj
	b.Gen = o.Gen
	d, err := c.benchComputer.Desired(&b)
	return slices.Clone(d), err
}

func (c *memComputer) Patch(o *benchObj, _ []metav1.Condition) ([]byte, error) {
	return memPayload(o), nil
}

// liveHeap returns the bytes of live heap after a full collection.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
