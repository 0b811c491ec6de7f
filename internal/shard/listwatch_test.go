package shard_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/quietpatch/quietpatch/internal/shard"
)

// fakeLW is a ListerWatcher of ConfigMaps that filters nothing: it lists
// its objects and hands out watchers the test feeds. It records the
// options it was called with.
type fakeLW struct {
	*cache.ListWatch
	noWatchList bool

	mu       sync.Mutex
	objs     []*corev1.ConfigMap
	opts     []metav1.ListOptions
	watchers []*watch.FakeWatcher
	watching chan *watch.FakeWatcher
}

func newFakeLW(objs ...*corev1.ConfigMap) *fakeLW {
	f := &fakeLW{objs: objs, watching: make(chan *watch.FakeWatcher, 16)}
	f.ListWatch = &cache.ListWatch{
		ListWithContextFunc: func(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.opts = append(f.opts, o)
			list := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}}
			for _, cm := range f.objs {
				list.Items = append(list.Items, *cm.DeepCopy())
			}
			return list, nil
		},
		WatchFuncWithContext: func(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.opts = append(f.opts, o)
			w := watch.NewFakeWithChanSize(16, false)
			f.watchers = append(f.watchers, w)
			f.watching <- w
			return w, nil
		},
	}
	return f
}

func (f *fakeLW) IsWatchListSemanticsUnSupported() bool { return f.noWatchList }

func (f *fakeLW) options() []metav1.ListOptions {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.opts)
}

// plainLW is the fake without IsWatchListSemanticsUnSupported.
type plainLW struct{ *cache.ListWatch }

// configMaps returns n ConfigMaps in r and n outside it, named in-<i> and
// out-<i>.
func configMaps(t *testing.T, r shard.Range, n int) (in, out []*corev1.ConfigMap) {
	t.Helper()
	g := rand.New(rand.NewPCG(7, uint64(r.Index)))
	for len(in) < n || len(out) < n {
		uid := randomUID(g)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", UID: uid, ResourceVersion: "5"}}
		switch {
		case r.Contains(uid) && len(in) < n:
			cm.Name = fmt.Sprintf("in-%d", len(in))
			in = append(in, cm)
		case !r.Contains(uid) && len(out) < n:
			cm.Name = fmt.Sprintf("out-%d", len(out))
			out = append(out, cm)
		}
	}
	return in, out
}

func cmNames(cms []*corev1.ConfigMap) []string {
	var ns []string
	for _, cm := range cms {
		ns = append(ns, cm.Name)
	}
	slices.Sort(ns)
	return ns
}

func interleave(a, b []*corev1.ConfigMap) []*corev1.ConfigMap {
	var out []*corev1.ConfigMap
	for i := range max(len(a), len(b)) {
		if i < len(a) {
			out = append(out, a[i])
		}
		if i < len(b) {
			out = append(out, b[i])
		}
	}
	return out
}

func TestListKeepsTheRangesObjectsAndSendsTheSelector(t *testing.T) {
	rs, _ := shard.Split(4)
	r := rs[2]
	in, out := configMaps(t, r, 20)
	for _, tc := range []struct {
		label      string
		objs       []*corev1.ConfigMap
		unfiltered int
	}{
		{"server filtered", in, 0},
		{"server did not filter", interleave(in, out), 1},
		{"nothing in range", out, 1},
		{"empty", nil, 0},
	} {
		t.Run(tc.label, func(t *testing.T) {
			f := newFakeLW(tc.objs...)
			var told atomic.Int32
			lw := shard.ListWatch(f, r, func() { told.Add(1) })
			for range 3 { // the second and later lists tell no more
				list, err := lw.List(metav1.ListOptions{ResourceVersion: "0", LabelSelector: "a=b"})
				if err != nil {
					t.Fatal(err)
				}
				items := list.(*corev1.ConfigMapList).Items
				var got []string
				for _, it := range items {
					got = append(got, it.Name)
					if !r.Contains(it.UID) {
						t.Errorf("kept %s, outside %s", it.Name, r)
					}
				}
				slices.Sort(got)
				want := []string(nil)
				for _, cm := range tc.objs {
					if r.Contains(cm.UID) {
						want = append(want, cm.Name)
					}
				}
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Errorf("list kept %v, want %v", got, want)
				}
				if rv := list.(*corev1.ConfigMapList).ResourceVersion; rv != "10" {
					t.Errorf("list resourceVersion %q, want the server's 10", rv)
				}
			}
			for _, o := range f.options() {
				if o.ShardSelector != r.Selector() || o.LabelSelector != "a=b" || o.ResourceVersion != "0" {
					t.Errorf("options passed down %+v, want the caller's with ShardSelector %q", o, r.Selector())
				}
			}
			if n := told.Load(); int(n) != tc.unfiltered {
				t.Errorf("unfiltered called %d times, want %d", n, tc.unfiltered)
			}
		})
	}
}

// recv reads the next event, failing after a while.
func recv(t *testing.T, w watch.Interface) (watch.Event, bool) {
	t.Helper()
	select {
	case e, ok := <-w.ResultChan():
		return e, ok
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
		return watch.Event{}, false
	}
}

func TestWatchDropsEventsOutsideTheRange(t *testing.T) {
	rs, _ := shard.Split(3)
	r := rs[0]
	in, out := configMaps(t, r, 10)
	f := newFakeLW()
	var told atomic.Int32
	lw := shard.ListWatch(f, r, func() { told.Add(1) })
	w, err := lw.Watch(metav1.ListOptions{ResourceVersion: "10", AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	fw := <-f.watching
	if o := f.options()[0]; o.ShardSelector != r.Selector() || o.ResourceVersion != "10" || !o.AllowWatchBookmarks {
		t.Errorf("watch options %+v, want the caller's with ShardSelector %q", o, r.Selector())
	}
	bookmark := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "11"}} // no UID: hashes anywhere
	status := &metav1.Status{Status: metav1.StatusFailure, Reason: metav1.StatusReasonExpired}
	var want []string
	go func() {
		for i := range in {
			fw.Add(out[i])
			fw.Add(in[i])
			fw.Modify(out[i])
			fw.Modify(in[i])
			fw.Delete(out[i])
			fw.Delete(in[i])
		}
		fw.Action(watch.Bookmark, bookmark)
		fw.Error(status)
		fw.Stop()
	}()
	for i := range in {
		for _, typ := range []watch.EventType{watch.Added, watch.Modified, watch.Deleted} {
			want = append(want, fmt.Sprintf("%s %s", typ, in[i].Name))
		}
	}
	want = append(want, "BOOKMARK 11", "ERROR Expired")
	var got []string
	for {
		e, ok := recv(t, w)
		if !ok {
			break
		}
		switch o := e.Object.(type) {
		case *corev1.ConfigMap:
			if e.Type == watch.Bookmark {
				got = append(got, fmt.Sprintf("%s %s", e.Type, o.ResourceVersion))
			} else {
				got = append(got, fmt.Sprintf("%s %s", e.Type, o.Name))
			}
		case *metav1.Status:
			got = append(got, fmt.Sprintf("%s %s", e.Type, o.Reason))
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("events\n got %v\nwant %v", got, want)
	}
	if n := told.Load(); n != 1 {
		t.Errorf("unfiltered called %d times over %d strays, want once", n, 3*len(out))
	}
}

// A watch stopped with an event still to hand over — its reader gone, as
// a stopped informer's — leaves no goroutine behind (watch.Filter's would
// stay blocked on the send).
func TestStoppedWatchLeavesNoGoroutine(t *testing.T) {
	rs, _ := shard.Split(2)
	in, _ := configMaps(t, rs[0], 1)
	f := newFakeLW()
	w, err := shard.ListWatch(f, rs[0], nil).Watch(metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fw := <-f.watching
	fw.Add(in[0]) // taken by the filter, never read
	filtering := func() bool {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:goruntime.Stack(buf, true)])
		return strings.Contains(stacks, "shard.(*filtered).WatchWithContext") || strings.Contains(stacks, "watch.(*filteredWatch).loop")
	}
	if !filtering() {
		t.Fatal("no filtering goroutine found: the check is broken")
	}
	w.Stop()
	for deadline := time.Now().Add(10 * time.Second); filtering(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the goroutine filtering the stopped watch is still there")
		}
	}
}

// Across lists and watches, one call; none when the server filters.
func TestUnfilteredIsCalledOnceAcrossListsAndWatches(t *testing.T) {
	rs, _ := shard.Split(2)
	r := rs[1]
	in, out := configMaps(t, r, 5)
	for _, tc := range []struct {
		label string
		list  []*corev1.ConfigMap
		watch []*corev1.ConfigMap
		want  int32
	}{
		{"everything in range", in, in, 0},
		{"strays in list and watch", interleave(in, out), out, 1},
		{"strays in watch only", in, interleave(out, in), 1},
	} {
		t.Run(tc.label, func(t *testing.T) {
			f := newFakeLW(tc.list...)
			var told atomic.Int32
			lw := shard.ListWatch(f, r, func() { told.Add(1) })
			for range 2 {
				if _, err := lw.List(metav1.ListOptions{}); err != nil {
					t.Fatal(err)
				}
				w, err := lw.Watch(metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				fw := <-f.watching
				go func() {
					for _, cm := range tc.watch {
						fw.Modify(cm)
					}
					fw.Stop()
				}()
				for {
					if _, ok := recv(t, w); !ok {
						break
					}
				}
			}
			if n := told.Load(); n != tc.want {
				t.Errorf("unfiltered called %d times, want %d", n, tc.want)
			}
		})
	}
	// A nil unfiltered is fine.
	f := newFakeLW(interleave(in, out)...)
	if _, err := shard.ListWatch(f, r, nil).List(metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestWatchListSemanticsArePassedOn(t *testing.T) {
	rs, _ := shard.Split(2)
	type wl interface{ IsWatchListSemanticsUnSupported() bool }
	for _, unsupported := range []bool{true, false} {
		f := newFakeLW()
		f.noWatchList = unsupported
		got, ok := shard.ListWatch(f, rs[0], nil).(wl)
		if !ok {
			t.Fatal("the ListerWatcher does not tell its watch-list semantics")
		}
		if got.IsWatchListSemanticsUnSupported() != unsupported {
			t.Errorf("IsWatchListSemanticsUnSupported() = %v, wrapped one says %v", !unsupported, unsupported)
		}
	}
	// One that does not tell is taken as supporting them, as the reflector does.
	if got := shard.ListWatch(plainLW{newFakeLW().ListWatch}, rs[0], nil).(wl); got.IsWatchListSemanticsUnSupported() {
		t.Error("a ListerWatcher that does not tell became one without watch-list semantics")
	}
}

func TestInformerHoldsExactlyTheRange(t *testing.T) {
	rs, _ := shard.Split(3)
	r := rs[1]
	in, out := configMaps(t, r, 30)
	f := newFakeLW(interleave(in[:20], out[:20])...)
	f.noWatchList = true // list, then watch: the fake serves no watch-list stream
	var told atomic.Int32
	inf := cache.NewSharedIndexInformer(shard.ListWatch(f, r, func() { told.Add(1) }), &corev1.ConfigMap{}, 0, cache.Indexers{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	defer func() { cancel(); <-done }()
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	if !cache.WaitForCacheSync(sctx.Done(), inf.HasSynced) {
		t.Fatal("not synced")
	}
	fw := <-f.watching
	for i := 20; i < 30; i++ {
		fw.Add(out[i])
		fw.Add(in[i])
	}
	fw.Delete(in[0])
	fw.Delete(out[0])
	// A marker, last: once it is in the cache, everything before it was handled.
	fw.Add(in[0])
	want := cmNames(in)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := slices.Sorted(slices.Values(inf.GetStore().ListKeys()))
		for i := range got {
			got[i] = got[i][len("ns/"):]
		}
		if slices.Equal(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cache holds %v, want %v", got, want)
		}
		time.Sleep(time.Millisecond)
	}
	if n := told.Load(); n != 1 {
		t.Errorf("unfiltered called %d times, want 1", n)
	}
	for _, o := range f.options() {
		if o.ShardSelector != r.Selector() {
			t.Errorf("the reflector's options reached the server without the selector: %+v", o)
		}
	}
}
