package shard

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/internal/leases"
	"github.com/quietpatch/quietpatch/leader"
)

// groupHarness runs groups against one fake API and one fake clock. Each
// group's loop waits on the clock between rounds, so the clock's waiters
// tell when every loop is idle.
type groupHarness struct {
	t   *testing.T
	api *fakeLeases
	clk *clocktesting.FakeClock

	mu      sync.Mutex
	running int
}

func newGroupHarness(t *testing.T) *groupHarness {
	return &groupHarness{t: t, api: newFakeLeases(), clk: clocktesting.NewFakeClock(t0)}
}

type groupRun struct {
	g      *group
	id     string
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// newGroup returns the group of the replica id.
func (gh *groupHarness) newGroup(id string, shards int) *group {
	gh.t.Helper()
	g, err := newGroup(gh.api.cs.CoordinationV1(), leaseConfig(gh.t, id, gh.clk), shards)
	if err != nil {
		gh.t.Fatalf("newGroup: %v", err)
	}
	return g
}

func (gh *groupHarness) start(id string, shards int) *groupRun {
	gh.t.Helper()
	g := gh.newGroup(id, shards)
	ctx, cancel := context.WithCancel(context.Background())
	r := &groupRun{g: g, id: id, cancel: cancel, done: make(chan struct{})}
	gh.mu.Lock()
	gh.running++
	gh.mu.Unlock()
	go func() {
		defer close(r.done)
		r.err = g.run(ctx)
	}()
	gh.t.Cleanup(func() { r.stop(gh) })
	gh.settle()
	return r
}

// stop cancels Run and waits for it to return.
func (r *groupRun) stop(gh *groupHarness) error {
	select {
	case <-r.done:
		return r.err
	default:
	}
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		gh.t.Fatalf("%s: run did not return", r.id)
	}
	gh.mu.Lock()
	gh.running--
	gh.mu.Unlock()
	return r.err
}

// settle waits until every running Group waits on the clock.
func (gh *groupHarness) settle() {
	gh.t.Helper()
	gh.mu.Lock()
	n := gh.running
	gh.mu.Unlock()
	waitFor(gh.t, "the groups to go idle", func() bool { return gh.clk.Waiters() >= n })
}

// step advances the clock by d in RetryPeriod steps, letting every loop
// go round at each.
func (gh *groupHarness) step(d time.Duration) {
	gh.t.Helper()
	for d > 0 {
		s := min(d, 2*time.Second)
		gh.clk.Step(s)
		d -= s
		gh.settle()
	}
}

func (gh *groupHarness) lease(name string) *coordv1.Lease {
	gh.t.Helper()
	l, err := gh.api.cs.CoordinationV1().Leases(testNS).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		gh.t.Fatal(err)
	}
	return l
}

// putLease creates or updates the Lease name with holder, duration and
// renewTime, as another replica would.
func (gh *groupHarness) putLease(name, holder string, dur int32, renew time.Time) {
	gh.t.Helper()
	spec := coordv1.LeaseSpec{LeaseDurationSeconds: &dur, RenewTime: &metav1.MicroTime{Time: renew}}
	if holder != "" {
		spec.HolderIdentity = &holder
	}
	leases := gh.api.cs.CoordinationV1().Leases(testNS)
	if l := gh.lease(name); l != nil {
		l.Spec = spec
		if _, err := leases.Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
			gh.t.Fatal(err)
		}
		return
	}
	if _, err := leases.Create(context.Background(), &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{}); err != nil {
		gh.t.Fatal(err)
	}
}

func TestGroupKeepsItsMemberLease(t *testing.T) {
	gh := newGroupHarness(t)
	a := gh.start("a", 4)
	if want := testName + "-member-"; !strings.HasPrefix(memberLease(testName, "a"), want) || len(memberLease(testName, "a")) != len(want)+8 {
		t.Errorf("MemberLease() = %q, want %s<8 hex digits>", memberLease(testName, "a"), want)
	}
	l := gh.lease(memberLease(testName, "a"))
	if l == nil {
		t.Fatal("no member Lease after the first round")
	}
	if leases.Holder(l) != "a" || leases.Duration(l) != 15*time.Second || !l.Spec.RenewTime.Time.Equal(t0) || l.Spec.AcquireTime == nil {
		t.Errorf("member Lease spec %+v, want holder a, 15s, renewed at t0", l.Spec)
	}
	rv := l.ResourceVersion
	gh.step(4 * time.Second) // LeaseDuration-RenewGrace is 5s: not yet
	if got := gh.lease(memberLease(testName, "a")); got.ResourceVersion != rv {
		t.Errorf("renewed at %v, before its period", gh.clk.Now().Sub(t0))
	}
	gh.step(2 * time.Second)
	l2 := gh.lease(memberLease(testName, "a"))
	if l2.ResourceVersion == rv || !l2.Spec.RenewTime.Time.Equal(t0.Add(6*time.Second)) || !l2.Spec.AcquireTime.Time.Equal(l.Spec.AcquireTime.Time) {
		t.Errorf("after 6s: member Lease %+v (rv %s), want renewed at 6s, acquired at t0", l2.Spec, l2.ResourceVersion)
	}
	if v := a.g.view(); !slices.Equal(v.Members, []string{"a"}) || !slices.Equal(v.Holders, []string{"", "", "", ""}) {
		t.Errorf("View() = %+v", v)
	}
	if err := a.g.healthy(); err != nil {
		t.Errorf("Healthy() = %v", err)
	}
	if err := a.stop(gh); err != nil {
		t.Errorf("Run returned %v, want nil", err)
	}
	if l := gh.lease(memberLease(testName, "a")); l != nil {
		t.Errorf("member Lease still there after Run returned: %+v", l.Spec)
	}
}

func TestGroupsSeeEachOther(t *testing.T) {
	gh := newGroupHarness(t)
	a := gh.start("a", 2)
	b := gh.start("b", 2)
	gh.step(2 * time.Second)
	for _, r := range []*groupRun{a, b} {
		if v := r.g.view(); !slices.Equal(v.Members, []string{"a", "b"}) {
			t.Errorf("%s sees members %v, want [a b]", r.id, v.Members)
		}
	}
	// b leaves: its Lease goes at once, a counts one fewer at its next list.
	if err := b.stop(gh); err != nil {
		t.Fatal(err)
	}
	gh.step(2 * time.Second)
	if v := a.g.view(); !slices.Equal(v.Members, []string{"a"}) {
		t.Errorf("after b left, a sees %v", v.Members)
	}
}

// A member is alive while its Lease changes, on the observer's clock: its
// renewTime, in the future or the past, does not matter.
func TestGroupMembersLiveByObservedTime(t *testing.T) {
	for _, tc := range []struct {
		label string
		renew time.Time
	}{
		{"renewTime far in the future", t0.Add(time.Hour)},
		{"renewTime far in the past", t0.Add(-time.Hour)},
	} {
		t.Run(tc.label, func(t *testing.T) {
			gh := newGroupHarness(t)
			gh.putLease(memberLease(testName, "x"), "x", 10, tc.renew)
			gh.putLease(testName+"-member-00000000", "y", 10, t0) // not y's name: not a member
			a := gh.start("a", 2)
			if v := a.g.view(); !slices.Equal(v.Members, []string{"a", "x"}) {
				t.Fatalf("members %v, want [a x]", v.Members)
			}
			gh.step(8 * time.Second)
			gh.putLease(memberLease(testName, "x"), "x", 10, tc.renew) // x renews at 8s, a lists it at 10s
			gh.step(8 * time.Second)                                   // 16s
			if v := a.g.view(); !slices.Equal(v.Members, []string{"a", "x"}) {
				t.Errorf("at 16s, x's change seen at 10s for 10s: members %v, want [a x]", v.Members)
			}
			gh.step(4 * time.Second) // 20s: 10s after a saw x's last change
			if v := a.g.view(); !slices.Equal(v.Members, []string{"a"}) {
				t.Errorf("at 20s, x unchanged for 10s: members %v, want [a]", v.Members)
			}
		})
	}
}

func TestGroupHolders(t *testing.T) {
	gh := newGroupHarness(t)
	g := gh.newGroup("a", 4)
	if g.shardLease(2) != testName+"-shard-2-of-4" {
		t.Errorf("ShardLease(2) = %q", g.shardLease(2))
	}
	gh.putLease(g.shardLease(0), "x", 10, t0.Add(time.Hour))
	gh.putLease(g.shardLease(1), "", 10, t0)                  // vacated
	gh.putLease(g.shardLease(2), "y", 30, t0.Add(-time.Hour)) // long ago by its clock
	gh.putLease(testName+"-shard-3-of-5", "z", 30, t0)        // another K
	gh.putLease("other-shard-3-of-4", "z", 30, t0)            // another group
	a := gh.start("a", 4)
	if v := a.g.view(); !slices.Equal(v.Holders, []string{"x", "", "y", ""}) {
		t.Errorf("holders %q, want [x  y  ]", v.Holders)
	}
	gh.step(10 * time.Second) // x's claim unchanged for its 10s: free
	if v := a.g.view(); !slices.Equal(v.Holders, []string{"", "", "y", ""}) {
		t.Errorf("after 10s: holders %q, want [ _ y _]", v.Holders)
	}
	gh.putLease(a.g.shardLease(3), "a", 10, t0)
	gh.step(2 * time.Second)
	if v := a.g.view(); !slices.Equal(v.Holders, []string{"", "", "y", "a"}) {
		t.Errorf("holders %q, want [_ _ y a]", v.Holders)
	}
}

func TestGroupChanged(t *testing.T) {
	gh := newGroupHarness(t)
	a := gh.start("a", 2)
	gh.putLease(memberLease(testName, "b"), "b", 10, t0)
	drain := func() bool {
		select {
		case <-a.g.changed:
			return true
		default:
			return false
		}
	}
	gh.step(2 * time.Second)
	if !drain() {
		t.Error("no signal after b joined")
	}
	gh.step(2 * time.Second)
	if drain() {
		t.Error("a signal after a list that changed nothing")
	}
	gh.putLease(a.g.shardLease(1), "b", 10, t0)
	gh.step(2 * time.Second)
	if !drain() {
		t.Error("no signal after b took shard 1")
	}
	// b goes, c comes: as many members as before, not the same ones.
	if err := gh.api.cs.CoordinationV1().Leases(testNS).Delete(context.Background(), memberLease(testName, "b"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gh.putLease(memberLease(testName, "c"), "c", 10, t0)
	gh.step(2 * time.Second)
	if v := a.g.view(); !slices.Equal(v.Members, []string{"a", "c"}) {
		t.Fatalf("members %v, want [a c]", v.Members)
	}
	if !drain() {
		t.Error("no signal after b left and c joined")
	}
}

func TestGroupLeavesOnlyItsOwnLease(t *testing.T) {
	gh := newGroupHarness(t)
	a := gh.start("a", 2)
	gh.putLease(memberLease(testName, "a"), "someone-else", 10, t0) // the name's hash collides
	if err := a.stop(gh); err != nil {
		t.Fatal(err)
	}
	if l := gh.lease(memberLease(testName, "a")); l == nil || leases.Holder(l) != "someone-else" {
		t.Errorf("another's member Lease deleted or changed: %+v", l)
	}
}

func TestGroupHealthAndFatalErrors(t *testing.T) {
	gh := newGroupHarness(t)
	var fail sync.Map
	gh.api.prepend("list", func(k8stesting.Action) (bool, runtime.Object, error) {
		if err, ok := fail.Load("list"); ok {
			return true, nil, err.(error)
		}
		return false, nil, nil
	})
	a := gh.start("a", 2)
	fail.Store("list", apierrors.NewServiceUnavailable("busy"))
	gh.step(2 * time.Second)
	if err := a.g.healthy(); !apierrors.IsServiceUnavailable(err) {
		t.Errorf("Healthy() = %v, want the list failure", err)
	}
	fail.Delete("list")
	gh.step(2 * time.Second)
	if err := a.g.healthy(); err != nil {
		t.Errorf("Healthy() = %v after a list succeeded", err)
	}
	fail.Store("list", apierrors.NewForbidden(leaseGVR.GroupResource(), "", errors.New("no")))
	gh.mu.Lock()
	gh.running-- // Run returns: it waits on the clock no more
	gh.mu.Unlock()
	gh.clk.Step(2 * time.Second)
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return on Forbidden")
	}
	if !apierrors.IsForbidden(a.err) {
		t.Errorf("Run returned %v, want Forbidden", a.err)
	}
	if l := gh.lease(memberLease(testName, "a")); l != nil {
		t.Error("member Lease left behind after a fatal error")
	}
}

func TestNewCoordinatorRejectsInvalidConfig(t *testing.T) {
	client := newFakeLeases().cs.CoordinationV1()
	lw := &cache.ListWatch{}
	build := func(int, leader.Config, coordinationv1client.LeasesGetter, cache.ListerWatcher) (*fakePipeline, error) {
		return nil, nil
	}
	for _, tc := range []struct {
		label  string
		mutate func(*Config)
		lw     cache.ListerWatcher
		field  string
	}{
		{"nil client", func(c *Config) { c.Leases = nil }, lw, "Leases"},
		{"nil ListerWatcher", func(*Config) {}, nil, "ListerWatcher"},
		{"no name", func(c *Config) { c.Lease.Name = "" }, lw, "Lease.Name"},
		{"renew grace too long", func(c *Config) { c.Lease.RenewGrace = time.Minute }, lw, "Lease.RenewGrace"},
		{"one shard", func(c *Config) { c.Shards = 1 }, lw, "Shards"},
		{"negative shards", func(c *Config) { c.Shards = -1 }, lw, "Shards"},
		{"too many shards", func(c *Config) { c.Shards = MaxShards + 1 }, lw, "Shards"},
		{"name too long for the shard Leases", func(c *Config) { c.Lease.Name = strings.Repeat("n", 245) }, lw, "Lease.Name"},
		{"a Lease client with client-go's rate limiter", func(c *Config) { c.Leases = throttledLeases(t) }, lw, "Leases"},
	} {
		t.Run(tc.label, func(t *testing.T) {
			cfg := Config{Shards: 2, Leases: client, Lease: leader.Config{Namespace: testNS, Name: testName, Identity: "a"}}
			tc.mutate(&cfg)
			_, err := NewCoordinator(cfg, tc.lw, build)
			var ce *base.ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, base.ErrInvalidConfig) {
				t.Fatalf("err = %v, want a *base.ConfigError", err)
			}
			if ce.Field != tc.field {
				t.Errorf("err %v names %s, want %s", err, ce.Field, tc.field)
			}
		})
	}
}

// throttledLeases is a Lease client with client-go's limiter at QPS 5.
func throttledLeases(t *testing.T) coordinationv1client.LeasesGetter {
	c, err := coordinationv1client.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1", QPS: 5, Burst: 10})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
