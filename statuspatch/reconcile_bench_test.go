package statuspatch_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"

	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/conditions"
)

// benchObj is an object of the benchmarks and the memory test: an
// HTTPRoute-like object with two conditions in its status.
type benchObj struct {
	Key   types.NamespacedName
	RV    string
	Gen   int64
	Conds []metav1.Condition
}

// benchComputer builds the desired status into a buffer it reuses, so that
// computing allocates nothing: any allocation measured per unchanged object
// is the library's. The reconciler calls it from one goroutine at a time,
// which makes the reuse safe; Patch copies what it keeps.
type benchComputer struct {
	buf   [2]metav1.Condition
	equal func(a, b []metav1.Condition) bool
}

func (c *benchComputer) Key(o *benchObj) types.NamespacedName   { return o.Key }
func (c *benchComputer) Current(o *benchObj) []metav1.Condition { return o.Conds }
func (c *benchComputer) Desired(o *benchObj) ([]metav1.Condition, error) {
	c.buf[0] = metav1.Condition{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted",
		Message: "Route is accepted", ObservedGeneration: o.Gen}
	c.buf[1] = metav1.Condition{Type: "ResolvedRefs", Status: metav1.ConditionTrue, Reason: "ResolvedRefs",
		Message: "All references resolved", ObservedGeneration: o.Gen}
	return c.buf[:], nil
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
// cache costs nothing the benchmark should measure.
type sliceSource[O any] struct{ objs []O }

func (s sliceSource[O]) List() ([]O, error) { return s.objs, nil }
func (s sliceSource[O]) Get(types.NamespacedName) (O, bool, error) {
	var zero O
	return zero, false, nil
}

// staticLeader is a leader.Observer that always holds epoch 1.
type staticLeader struct{}

func (staticLeader) Identity() string { return "me" }
func (staticLeader) Current() leader.Claim {
	return leader.Claim{Holder: "me", Expiry: time.Now().Add(time.Hour), Epoch: 1}
}
func (staticLeader) Subscribe() (<-chan leader.Claim, func()) { return nil, func() {} }

// BenchmarkReconcile measures reconcile passes over 100,000 objects with two
// conditions each. One op is one pass; ns/object and allocs/object divide by
// the objects of the passes.
//
//   - unchanged-typed: nothing changed, typed comparison (conditions.Equal).
//   - unchanged-gocmp: nothing changed, conditions.CmpEqual with
//     IgnoreTransitionTime (conditions are in the same order, so SortByType,
//     which costs several times more, is not needed to get the typed
//     comparison's answers).
//   - changed: every object changed, the queue holds them all (drained
//     between passes, outside the timer).
func BenchmarkReconcile(b *testing.B) {
	const n = 100_000
	gocmp := conditions.CmpEqual[[]metav1.Condition](conditions.IgnoreTransitionTime())
	cases := []struct {
		name    string
		changed bool
		equal   func(a, b []metav1.Condition) bool
	}{
		{"unchanged-typed", false, conditions.Equal},
		{"unchanged-gocmp", false, gocmp},
		{"changed", true, conditions.Equal},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			q, err := statuspatch.NewPatchQueue(statuspatch.QueueConfig[statuspatch.Patch[benchPatch]]{Capacity: n, Key: statuspatch.PatchKey[benchPatch]})
			if err != nil {
				b.Fatal(err)
			}
			rec, err := statuspatch.NewReconciler(statuspatch.ReconcilerConfig[*benchObj, []metav1.Condition, benchPatch]{
				Source:   sliceSource[*benchObj]{benchObjs(n, c.changed)},
				Computer: &benchComputer{equal: c.equal},
				Queue:    q,
				Leader:   staticLeader{},
			})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			var before, after runtime.MemStats
			var mallocs uint64
			passes := 0
			for b.Loop() {
				b.StopTimer()
				runtime.ReadMemStats(&before)
				b.StartTimer()
				res, err := rec.ReconcileAll(ctx)
				b.StopTimer()
				runtime.ReadMemStats(&after)
				mallocs += after.Mallocs - before.Mallocs
				if err != nil || res.Visited != n || (res.Changed == n) != c.changed {
					b.Fatalf("pass: %+v, %v", res, err)
				}
				for {
					it, ok, _ := q.TryReceive()
					if !ok {
						break
					}
					q.Done(it)
				}
				passes++
				b.StartTimer()
			}
			objects := float64(passes) * n
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/objects, "ns/object")
			b.ReportMetric(float64(mallocs)/objects, "allocs/object")
		})
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

// memComputer is benchComputer with a JSON payload.
type memComputer struct{ benchComputer }

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

// TestMemoryBounded: 100,000 objects, all changed, 20 passes, the patcher
// stalled. The library's live heap stays at what the queue's capacity
// holds, after one pass as after twenty. It is compared with the best a
// careful user writes without the library — a keyed client-go workqueue
// controller that compares before it enqueues (what controller-runtime does
// too): its queue deduplicates keys, so it is bounded as well, by the
// number of objects rather than by a capacity, and holds more. The seed's
// behaviour (one patch per object per pass into an unbounded queue) is
// logged for reference.
func TestMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates a few hundred MB; skipped with -short")
	}
	const (
		n        = 100_000
		passes   = 20
		capacity = 1_000
	)
	objs := benchObjs(n, true)

	// The library: bounded queue, dispatcher stalled in its first call.
	ours := func() (after1, after20 int64) {
		base := liveHeap()
		q, err := statuspatch.NewPatchQueue(statuspatch.QueueConfig[statuspatch.Patch[[]byte]]{Capacity: capacity, Key: statuspatch.PatchKey[[]byte]})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := statuspatch.NewReconciler(statuspatch.ReconcilerConfig[*benchObj, []metav1.Condition, []byte]{
			Source: sliceSource[*benchObj]{objs}, Computer: &memComputer{benchComputer{equal: conditions.Equal}},
			Queue: q, Leader: staticLeader{},
		})
		if err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		stalled := statuspatch.PatcherFunc[[]byte](func(ctx context.Context, _ []byte) error {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-release:
				return nil
			}
		})
		d, err := statuspatch.NewDispatcher(statuspatch.DispatcherConfig[[]byte]{Queue: q, Patcher: stalled, Leader: staticLeader{}, PatchTimeout: time.Hour})
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
				if res.Changed != capacity && res.Changed != capacity+1 {
					t.Errorf("first pass queued %d patches, want the capacity (+1 taken by the stalled worker)", res.Changed)
				}
				after1 = liveHeap() - base
			}
		}
		after20 = liveHeap() - base
		runtime.KeepAlive(rec)
		return after1, after20
	}

	// The fair baseline: a keyed workqueue fed by a compare-then-enqueue
	// pass, its one worker stalled on the first key.
	keyed := func() (after1, after20 int64) {
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
		after20 = liveHeap() - base
		return after1, after20
	}

	// The seed, for reference: every pass queues one patch per object,
	// changed or not, into an unbounded queue nobody drains.
	seed := func() (after20 int64) {
		base := liveHeap()
		var unbounded [][]statuspatch.Patch[[]byte]
		for range passes {
			for _, o := range objs {
				if len(unbounded) == 0 || len(unbounded[len(unbounded)-1]) == 4096 {
					unbounded = append(unbounded, make([]statuspatch.Patch[[]byte], 0, 4096))
				}
				last := &unbounded[len(unbounded)-1]
				*last = append(*last, statuspatch.Patch[[]byte]{Key: o.Key.String(), Epoch: 1, Payload: memPayload(o)})
			}
		}
		after20 = liveHeap() - base
		runtime.KeepAlive(unbounded)
		return after20
	}

	ours1, ours20 := ours()
	keyed1, keyed20 := keyed()
	seed20 := seed()
	mb := func(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/(1<<20)) }
	t.Logf("live heap growth, %d objects all changed, patcher stalled:", n)
	t.Logf("  library (capacity %d):     after 1 pass %s, after %d passes %s", capacity, mb(ours1), passes, mb(ours20))
	t.Logf("  keyed workqueue baseline:  after 1 pass %s, after %d passes %s", mb(keyed1), passes, mb(keyed20))
	t.Logf("  seed (unbounded, for reference): after %d passes %s", passes, mb(seed20))

	if ours20 > ours1+1<<20 {
		t.Errorf("library heap grew from %s after one pass to %s after %d: not bounded", mb(ours1), mb(ours20), passes)
	}
	if ours20 >= keyed20 {
		t.Errorf("library holds %s, the keyed workqueue %s: want less than the best alternative", mb(ours20), mb(keyed20))
	}
}

// A pass over unchanged objects allocates nothing in the library.
func TestReconcileUnchangedDoesNotAllocate(t *testing.T) {
	objs := benchObjs(1000, false)
	q, err := statuspatch.NewPatchQueue(statuspatch.QueueConfig[statuspatch.Patch[benchPatch]]{Capacity: 1, Key: statuspatch.PatchKey[benchPatch]})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := statuspatch.NewReconciler(statuspatch.ReconcilerConfig[*benchObj, []metav1.Condition, benchPatch]{
		Source: sliceSource[*benchObj]{objs}, Computer: &benchComputer{equal: conditions.Equal},
		Queue: q, Leader: staticLeader{},
	})
	if err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(20, func() {
		if res, err := rec.ReconcileAll(context.Background()); err != nil || res.Unchanged != len(objs) {
			t.Fatalf("pass: %+v, %v", res, err)
		}
	})
	if allocs != 0 {
		t.Errorf("a pass over %d unchanged objects allocates %v times, want 0", len(objs), allocs)
	}
}
