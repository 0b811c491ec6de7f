package quietpatch_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/internal/pipeline"
	"github.com/quietpatch/quietpatch/internal/shard"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/source"
)

// leaseAPI is a fake clientset whose Leases behave like the API server's
// where the shard group relies on it: every write gets a new
// resourceVersion (observed liveness watches it change) and an update with
// a stale one is a conflict (two claimers cannot both win).
func leaseAPI() *fake.Clientset {
	kube := fake.NewClientset()
	gvr := coordv1.SchemeGroupVersion.WithResource("leases")
	var mu sync.Mutex
	rv := 0
	tracker := kube.Tracker()
	kube.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := a.(k8stesting.CreateAction).GetObject().(*coordv1.Lease).DeepCopy()
		mu.Lock()
		defer mu.Unlock()
		rv++
		l.ResourceVersion, l.Namespace = strconv.Itoa(rv), a.GetNamespace()
		if err := tracker.Create(gvr, l, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, l.DeepCopy(), nil
	})
	kube.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := a.(k8stesting.UpdateAction).GetObject().(*coordv1.Lease).DeepCopy()
		mu.Lock()
		defer mu.Unlock()
		cur, err := tracker.Get(gvr, a.GetNamespace(), l.Name)
		if err != nil {
			return true, nil, err
		}
		if l.ResourceVersion != cur.(*coordv1.Lease).ResourceVersion {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), l.Name, errors.New("stale resourceVersion"))
		}
		rv++
		l.ResourceVersion = strconv.Itoa(rv)
		if err := tracker.Update(gvr, l, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, l.DeepCopy(), nil
	})
	return kube
}

func holderOf(t *testing.T, kube *fake.Clientset, name string) string {
	t.Helper()
	l, err := kube.CoordinationV1().Leases("ns").Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Error(err)
		return ""
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// configMapLW is the ListerWatcher of the ConfigMaps in objs: a fake
// clientset, which does not honour ShardSelector, so every shard filters
// client-side.
func configMapLW(t *testing.T, n int) (cache.ListerWatcher, map[string]types.UID) {
	t.Helper()
	objs := fake.NewClientset()
	uids := map[string]types.UID{}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range n {
		uid := types.UID(fmt.Sprintf("%08x-%04x-%04x", r.Uint32(), r.Uint32()&0xffff, r.Uint32()&0xffff))
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("cm-%02d", i), UID: uid}}
		if _, err := objs.CoreV1().ConfigMaps("ns").Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		uids["ns/"+cm.Name] = uid
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return objs.CoreV1().ConfigMaps("ns").List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return objs.CoreV1().ConfigMaps("ns").Watch(ctx, o)
		},
	}
	return cache.ToListWatcherWithWatchListSemantics(lw, objs), uids
}

// configMapComputer wants every ConfigMap patched, and never sees a
// status: each pass patches every object again.
var configMapComputer = pipeline.ComputerFuncs[*corev1.ConfigMap, string, string]{
	KeyFunc: func(o *corev1.ConfigMap) types.NamespacedName {
		return types.NamespacedName{Namespace: o.Namespace, Name: o.Name}
	},
	CurrentFunc: func(o *corev1.ConfigMap) string { return o.Data["status"] },
	DesiredFunc: func(*corev1.ConfigMap) (string, error) { return "done", nil },
	EqualFunc:   func(a, b string) bool { return a == b },
	PatchFunc:   func(o *corev1.ConfigMap, _ string) (string, error) { return o.Namespace + "/" + o.Name, nil },
}

const testShards = 4

// patchLog records who patched what, and checks at each patch that the
// writer holds the shard Lease of the object.
type patchLog struct {
	t    *testing.T
	kube *fake.Clientset
	uids map[string]types.UID
	mu   sync.Mutex
	by   map[string]map[string]int // identity -> key -> patches
	bad  []string
}

func (p *patchLog) patcher(id string) statuspatch.Patcher[string] {
	return pipeline.PatcherFunc[string](func(_ context.Context, key string) error {
		i := shard.Of(p.uids[key], testShards)
		lease := fmt.Sprintf("lease-shard-%d-of-%d", i, testShards)
		holder := holderOf(p.t, p.kube, lease)
		p.mu.Lock()
		defer p.mu.Unlock()
		if holder != id {
			p.bad = append(p.bad, fmt.Sprintf("%s patched %s (shard %d), whose Lease %s holds", id, key, i, holder))
		}
		if p.by[id] == nil {
			p.by[id] = map[string]int{}
		}
		p.by[id][key]++
		return nil
	})
}

// patched reports whether id patched every key of the shards in held
// since the last reset.
func (p *patchLog) patched(id string, held []int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, uid := range p.uids {
		if slices.Contains(held, shard.Of(uid, testShards)) && p.by[id][key] == 0 {
			return false
		}
	}
	return true
}

func (p *patchLog) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.by = map[string]map[string]int{}
}

func (p *patchLog) violations() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.bad)
}

func shardedConfig(kube *fake.Clientset, id string) quietpatch.Config {
	return quietpatch.Config{
		Name: "test", Interval: 200 * time.Millisecond,
		Leases: kube.CoordinationV1(),
		Lease: leader.Config{Namespace: "ns", Name: "lease", Identity: id,
			LeaseDuration: 2 * time.Second, RenewGrace: time.Second, RetryPeriod: 50 * time.Millisecond},
		Shards: testShards,
	}
}

// waitShards polls cond with a deadline derived from the Lease settings:
// a claim runs out in LeaseDuration (2s); a rebalance takes a few.
func waitShards(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * 2 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestShardedReplicasSplitTheShards(t *testing.T) {
	kube := leaseAPI()
	lw, uids := configMapLW(t, 40)
	per := map[int]int{}
	for _, uid := range uids {
		per[shard.Of(uid, testShards)]++
	}
	if len(per) != testShards {
		t.Fatalf("objects per shard %v: a shard has none", per)
	}
	log := &patchLog{t: t, kube: kube, uids: uids, by: map[string]map[string]int{}}
	reps := map[string]*quietpatch.Sharded[*corev1.ConfigMap, string, string]{}
	stops := map[string]func() error{}
	for _, id := range []string{"a", "b"} {
		s, err := quietpatch.NewSharded(lw, configMapComputer, log.patcher(id), shardedConfig(kube, id))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Ready(); !errors.Is(err, quietpatch.ErrNotSynced) {
			t.Errorf("Ready before Run = %v, want ErrNotSynced", err)
		}
		reps[id] = s
		stops[id] = runInBackground(t, s)
	}
	a, b := reps["a"], reps["b"]
	waitShards(t, "each replica holding 2 shards, running no other", func() bool {
		sa, sb := a.Stats(), b.Stats()
		return len(sa.Held) == 2 && len(sb.Held) == 2 && len(sa.Running) == 2 && len(sb.Running) == 2 &&
			sa.Acquired >= 2 && sb.Acquired >= 2 // the coordinator notes a claim at its next step
	})
	sa, sb := a.Stats(), b.Stats()
	if all := slices.Sorted(slices.Values(append(slices.Clone(sa.Held), sb.Held...))); !slices.Equal(all, []int{0, 1, 2, 3}) {
		t.Errorf("held %v and %v, want all four shards once", sa.Held, sb.Held)
	}
	if sa.Shards != testShards || !slices.Equal(sa.Members, []string{"a", "b"}) {
		t.Errorf("a's stats: %d shards, members %v", sa.Shards, sa.Members)
	}
	for id, st := range map[string]quietpatch.Stats{"a": sa, "b": sb} {
		want := 0
		for _, i := range st.Running {
			want += per[i]
		}
		if st.Objects != int64(want) {
			t.Errorf("%s caches %d objects, its shards %v have %d", id, st.Objects, st.Running, want)
		}
		if st.Acquired < 2 {
			t.Errorf("%s acquired %d shards, holds %v", id, st.Acquired, st.Held)
		}
		for _, i := range st.Held {
			if h := holderOf(t, kube, fmt.Sprintf("lease-shard-%d-of-4", i)); h != id {
				t.Errorf("%s holds shard %d, its Lease names %q", id, i, h)
			}
			if !st.PerShard[i].Leading {
				t.Errorf("%s: PerShard[%d] not leading", id, i)
			}
		}
	}
	log.reset()
	waitShards(t, "every object patched by its shard's holder", func() bool {
		sa, sb := a.Stats(), b.Stats()
		return log.patched("a", sa.Held) && log.patched("b", sb.Held)
	})
	if err := a.Ready(); err != nil {
		t.Errorf("a.Ready() = %v", err)
	}
	if err := a.Run(context.Background()); !errors.Is(err, quietpatch.ErrAlreadyStarted) {
		t.Errorf("second Run = %v, want ErrAlreadyStarted", err)
	}

	// b stops: it gives its shards up, a takes them all.
	bHeld := len(b.Stats().Held)
	if err := stops["b"](); err != nil {
		t.Errorf("b's Run returned %v, want nil", err)
	}
	if st := b.Stats(); st.GivenUp < int64(bHeld) || len(st.Running) != 0 || len(st.Held) != 0 {
		t.Errorf("b stopped: given up %d (held %d), running %v, held %v", st.GivenUp, bHeld, st.Running, st.Held)
	}
	if l, err := kube.CoordinationV1().Leases("ns").List(context.Background(), metav1.ListOptions{}); err == nil {
		for _, x := range l.Items {
			if x.Spec.HolderIdentity != nil && *x.Spec.HolderIdentity == "b" {
				t.Errorf("Lease %s still names b after its Run returned", x.Name)
			}
		}
	}
	waitShards(t, "a holding all four shards", func() bool {
		st := a.Stats()
		return len(st.Held) == testShards && st.Acquired >= testShards
	})
	log.reset()
	waitShards(t, "a patching every object", func() bool { return log.patched("a", []int{0, 1, 2, 3}) })
	if st := a.Stats(); st.Acquired < testShards || !slices.Equal(st.Members, []string{"a"}) {
		t.Errorf("a: acquired %d, members %v", st.Acquired, st.Members)
	}
	if err := stops["a"](); err != nil {
		t.Errorf("a's Run returned %v, want nil", err)
	}
	if v := log.violations(); len(v) > 0 {
		t.Errorf("patches by a replica not holding the shard:\n%v", v)
	}
}

// A Controller is a Runner of one shard: shard 0 of 1, held while it
// leads, under the Lease named as configured.
func TestControllerIsOneShard(t *testing.T) {
	kube := leaseAPI()
	lw, uids := configMapLW(t, 10)
	var mu sync.Mutex
	patched := map[string]bool{}
	inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	cfg := shardedConfig(kube, "a")
	cfg.Shards = 0
	var r quietpatch.Runner
	r, err := quietpatch.New(source.FromInformer[*corev1.ConfigMap](inf), configMapComputer, pipeline.PatcherFunc[string](func(_ context.Context, key string) error {
		mu.Lock()
		defer mu.Unlock()
		patched[key] = true
		return nil
	}), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ictx, stopInformer := context.WithCancel(context.Background())
	infDone := make(chan struct{})
	go func() { defer close(infDone); inf.RunWithContext(ictx) }()
	defer func() { stopInformer(); <-infDone }()
	stop := runInBackground(t, r)
	waitShards(t, "the Lease held and every object patched", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return holderOf(t, kube, "lease") == "a" && len(patched) == len(uids) && r.Leading()
	})
	st := r.Stats()
	if st.Shards != 1 || !slices.Equal(st.Held, []int{0}) || !slices.Equal(st.Running, []int{0}) || !slices.Equal(st.Members, []string{"a"}) || !st.Leading {
		t.Errorf("stats: %d shards, held %v, running %v, members %v, leading %v", st.Shards, st.Held, st.Running, st.Members, st.Leading)
	}
	l, err := kube.CoordinationV1().Leases("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 || l.Items[0].Name != "lease" {
		var names []string
		for _, x := range l.Items {
			names = append(names, x.Name)
		}
		t.Errorf("Leases %v, want only lease", names)
	}
	if err := stop(); err != nil {
		t.Errorf("Run returned %v", err)
	}
}

func TestNewShardedRejectsInvalidConfig(t *testing.T) {
	kube := leaseAPI()
	lw, _ := configMapLW(t, 1)
	nop := pipeline.PatcherFunc[string](func(context.Context, string) error { return nil })
	for _, tc := range []struct {
		label  string
		mutate func(*quietpatch.Config)
		lw     cache.ListerWatcher
		field  string
	}{
		{"too many shards", func(c *quietpatch.Config) { c.Shards = shard.MaxShards + 1 }, lw, "Shards"},
		{"negative shards", func(c *quietpatch.Config) { c.Shards = -1 }, lw, "Shards"},
		{"no shards: New's", func(c *quietpatch.Config) { c.Shards = 0 }, lw, "Shards"},
		{"one shard: New's", func(c *quietpatch.Config) { c.Shards = 1 }, lw, "Shards"},
		{"nil ListerWatcher", func(*quietpatch.Config) {}, nil, "ListerWatcher"},
		{"bad lease", func(c *quietpatch.Config) { c.Lease.RenewGrace = time.Minute }, lw, "Lease.RenewGrace"},
	} {
		t.Run(tc.label, func(t *testing.T) {
			cfg := shardedConfig(kube, "a")
			tc.mutate(&cfg)
			_, err := quietpatch.NewSharded(tc.lw, configMapComputer, nop, cfg)
			checkField(t, err, tc.field)
		})
	}
	t.Run("O not a runtime.Object", func(t *testing.T) {
		_, err := quietpatch.NewSharded(lw, itemComputer, nop, shardedConfig(kube, "a"))
		checkField(t, err, "O")
	})
	t.Run("New rejects Shards 2", func(t *testing.T) {
		cfg := baseConfig(kube)
		cfg.Shards = 2
		_, err := quietpatch.New(newItems(1), itemComputer, nop, cfg)
		checkField(t, err, "Shards")
	})
}

func checkField(t *testing.T, err error, field string) {
	t.Helper()
	var ce *quietpatch.ConfigError
	if !errors.As(err, &ce) || !errors.Is(err, quietpatch.ErrInvalidConfig) {
		t.Fatalf("err = %v, want a *ConfigError", err)
	}
	if ce.Field != field {
		t.Errorf("err %v names %s, want %s", err, ce.Field, field)
	}
}

// Replicas started together see each other before either takes a shard:
// neither ever runs more than its share (the plan waits for the group's
// second list of the Leases).
func TestShardedReplicasStartedTogetherTakeOnlyTheirShare(t *testing.T) {
	kube := leaseAPI()
	lw, _ := configMapLW(t, 8)
	log := &patchLog{t: t, kube: kube, by: map[string]map[string]int{}}
	var reps []*quietpatch.Sharded[*corev1.ConfigMap, string, string]
	for _, id := range []string{"a", "b"} {
		s, err := quietpatch.NewSharded(lw, configMapComputer, log.patcher(id), shardedConfig(kube, id))
		if err != nil {
			t.Fatal(err)
		}
		reps = append(reps, s)
	}
	for _, s := range reps {
		runInBackground(t, s)
	}
	most := map[int]int{}
	waitShards(t, "each replica holding 2 shards", func() bool {
		done := true
		for i, s := range reps {
			st := s.Stats()
			most[i] = max(most[i], len(st.Running))
			done = done && len(st.Held) == 2
		}
		return done
	})
	for i, n := range most {
		if n > 2 {
			t.Errorf("replica %d ran %d shards at once, more than its share of 2", i, n)
		}
	}
}

// stuckLW is a ListerWatcher of ConfigMaps whose watches, once stick is
// called, end, and whose watch requests then block until release,
// whatever their context — as a client-go v0.37 reflector sleeping out its
// back-off after a refused or 429'd watch-list request does.
type stuckLW struct {
	objs    *fake.Clientset
	mu      sync.Mutex
	stuck   bool
	watches []watch.Interface
	blocked chan struct{} // receives once per blocked watch request
	release chan struct{}
}

func (s *stuckLW) lw() cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return s.objs.CoreV1().ConfigMaps("ns").List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			s.mu.Lock()
			stuck := s.stuck
			s.mu.Unlock()
			if stuck {
				s.blocked <- struct{}{}
				<-s.release
				return nil, io.EOF // a watch closed normally: nothing logged
			}
			w, err := s.objs.CoreV1().ConfigMaps("ns").Watch(ctx, o)
			if err == nil {
				s.mu.Lock()
				s.watches = append(s.watches, w)
				s.mu.Unlock()
			}
			return w, err
		},
	}, s.objs)
}

// stick ends every watch: the next watch requests block.
func (s *stuckLW) stick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stuck = true
	for _, w := range s.watches {
		w.Stop()
	}
}

// TestShardedRunDoesNotWaitForAStuckInformer: once ctx is done, Run returns
// within PatchTimeout + 2 × CallTimeout + 1 s, its documented bound, even
// though the shards' informers do not stop (their watch requests ignore
// their context).
func TestShardedRunDoesNotWaitForAStuckInformer(t *testing.T) {
	kube := leaseAPI()
	s := &stuckLW{objs: fake.NewClientset(), blocked: make(chan struct{}, testShards), release: make(chan struct{})}
	var release sync.Once
	defer release.Do(func() { close(s.release) })
	cfg := shardedConfig(kube, "a")
	r, err := quietpatch.NewSharded(s.lw(), configMapComputer, pipeline.PatcherFunc[string](func(context.Context, string) error { return nil }), cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := runInBackground(t, r)
	waitShards(t, "every shard held", func() bool { return len(r.Stats().Held) == testShards })
	s.stick()
	for range testShards {
		<-s.blocked
	}
	lease, err := cfg.Lease.Complete()
	if err != nil {
		t.Fatal(err)
	}
	bound := cmp.Or(cfg.PatchTimeout, quietpatch.DefaultPatchTimeout) + 2*lease.CallTimeout + time.Second
	begin := time.Now()
	done := make(chan error, 1)
	go func() { done <- stop() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		t.Logf("Run returned %v after its context was cancelled (bound %v)", time.Since(begin).Round(time.Millisecond), bound)
	case <-time.After(bound + bound/2):
		release.Do(func() { close(s.release) })
		<-done
		t.Errorf("Run returned only once the informers were released, %v after its context was cancelled (bound %v)", time.Since(begin).Round(time.Millisecond), bound)
	}
}
