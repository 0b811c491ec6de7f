package shard

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quietpatch/quietpatch/leader"
)

// The group's namespace and name, the Leases' resource, the fake clocks'
// start.
var (
	testNS, testName = "ns", "lease"
	leaseGVR, t0     = coordv1.SchemeGroupVersion.WithResource("leases"), time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
)

// fakeLeases is a fake clientset whose Leases get a new resourceVersion at
// every write (the group tells a Lease alive by its changes) and refuse an
// update of a stale one (409), as the API server does.
type fakeLeases struct {
	cs *fake.Clientset
	mu sync.Mutex
	rv int
}

func newFakeLeases() *fakeLeases {
	f := &fakeLeases{cs: fake.NewClientset()}
	tracker := f.cs.Tracker()
	write := func(act k8stesting.Action) (bool, runtime.Object, error) {
		obj := act.(interface{ GetObject() runtime.Object }).GetObject().(*coordv1.Lease).DeepCopy()
		f.mu.Lock()
		defer f.mu.Unlock()
		var err error
		if act.GetVerb() == "update" {
			cur, gerr := tracker.Get(leaseGVR, act.GetNamespace(), obj.Name)
			switch {
			case gerr != nil:
				return true, nil, gerr
			case cur.(*coordv1.Lease).ResourceVersion != obj.ResourceVersion:
				return true, nil, apierrors.NewConflict(leaseGVR.GroupResource(), obj.Name, errors.New("stale resourceVersion"))
			}
			f.rv++
			obj.ResourceVersion = strconv.Itoa(f.rv)
			err = tracker.Update(leaseGVR, obj, act.GetNamespace())
		} else {
			f.rv++
			obj.ResourceVersion, obj.Namespace = strconv.Itoa(f.rv), act.GetNamespace()
			err = tracker.Create(leaseGVR, obj, act.GetNamespace())
		}
		if err != nil {
			return true, nil, err
		}
		return true, obj.DeepCopy(), nil
	}
	f.cs.PrependReactor("create", "leases", write)
	f.cs.PrependReactor("update", "leases", write)
	return f
}

// prepend adds a reactor in front of the chain, locked: groups may run.
func (f *fakeLeases) prepend(verb string, fn k8stesting.ReactionFunc) {
	f.cs.Lock()
	defer f.cs.Unlock()
	f.cs.PrependReactor(verb, "leases", fn)
}

// leaseConfig is the Lease configuration of the replica id in the tests,
// completed: the defaults spelled out, on clk.
func leaseConfig(t *testing.T, id string, clk *clocktesting.FakeClock) leader.Config {
	t.Helper()
	cfg, err := leader.Config{Namespace: testNS, Name: testName, Identity: id, LeaseDuration: 15 * time.Second,
		RenewGrace: 10 * time.Second, RetryPeriod: 2 * time.Second, CallTimeout: 5 * time.Second, Clock: clk}.Complete()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// waitFor polls cond every 200 µs until it holds, for 10 s at most.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for start := time.Now(); !cond(); time.Sleep(200 * time.Microsecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// fakePipeline is a shard's pipeline whose claim the test sets.
type fakePipeline struct {
	claim   atomic.Pointer[leader.Claim]
	objects int64
}

func (p *fakePipeline) Run(ctx context.Context) error { <-ctx.Done(); return nil }

func (p *fakePipeline) Claim() leader.Claim {
	if c := p.claim.Load(); c != nil {
		return *c
	}
	return leader.Claim{}
}

func (p *fakePipeline) Objects() int64 { return p.objects }

func (p *fakePipeline) Enqueue(...types.NamespacedName) {}
func (p *fakePipeline) Resync()                         {}
func (p *fakePipeline) Ready() error                    { return nil }
func (p *fakePipeline) Live() error                     { return nil }
