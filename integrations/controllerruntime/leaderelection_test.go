package controllerruntime_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/quietpatch/quietpatch"
	qpcr "github.com/quietpatch/quietpatch/integrations/controllerruntime"
	examplev1 "github.com/quietpatch/quietpatch/integrations/controllerruntime/examples/widget/api/v1"
	"github.com/quietpatch/quietpatch/leader"
)

// With the managers' own leader election on, the pipeline runs on the
// replica whose manager is not elected too, and can be the one that writes:
// the two leaderships are independent. The managers' election is settled
// beforehand: their Lease is created in the name of manager a (a lock of
// a known identity), so manager b, started first, waits, while its
// pipeline takes quietpatch's Lease; manager a, started next, finds the
// Lease in its own name and is elected at once.
func TestManagerLeaderElectionOn(t *testing.T) {
	_, cfg := testEnv(t)
	admin := adminClient(t, cfg)
	const ns, leaseNS = "leader-election", "quietpatch-system"
	const managerLease, managerA = "widget-manager", "manager-a" // the managers' Lease: not quietpatch's
	createNamespace(t, admin, ns)
	createNamespace(t, admin, leaseNS)
	createWidgets(t, admin, ns, 1, func(int) int32 { return 1 })
	now, holder, seconds := metav1.NowMicro(), managerA, int32(60)
	if err := admin.Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: leaseNS, Name: managerLease},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds, AcquireTime: &now, RenewTime: &now},
	}); err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	type replica struct {
		mgr  manager.Manager
		ctrl *widgetController
		done chan error
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// newReplica builds a replica; a non-nil lock is its manager's.
	newReplica := func(identity string, lock resourcelock.Interface) *replica {
		grace := 30 * time.Second
		mgr, err := manager.New(cfg, manager.Options{
			Scheme:                              testScheme(),
			Metrics:                             metricsserver.Options{BindAddress: "0"},
			LeaderElection:                      true,
			LeaderElectionID:                    managerLease,
			LeaderElectionNamespace:             leaseNS,
			LeaderElectionResourceLockInterface: lock,
			LeaderElectionReleaseOnCancel:       true,
			GracefulShutdownTimeout:             &grace,
		})
		if err != nil {
			t.Fatal(err)
		}
		ctrl, err := qpcr.Add(ctx, mgr, &examplev1.Widget{}, newComputer(t), qpcr.Options{
			Config: quietpatch.Config{
				Name:     "widgets-le",
				Interval: testInterval,
				Lease:    leader.Config{Namespace: leaseNS, Name: "widget-status-le", Identity: identity, LeaseDuration: testLeaseDuration},
			},
			Registerer: prometheus.NewRegistry(), // two pipelines named alike in one process
		})
		if err != nil {
			t.Fatal(err)
		}
		return &replica{mgr: mgr, ctrl: ctrl, done: make(chan error, 1)}
	}
	b := newReplica("replica-b", nil)
	go func() { b.done <- b.mgr.Start(ctx) }()
	replicas := []*replica{b}
	defer func() {
		cancel()
		for _, r := range replicas {
			if err := <-r.done; err != nil {
				t.Errorf("mgr.Start: %v", err)
			}
		}
	}()
	poll(t, 30*time.Second, 20*time.Millisecond, "b's pipeline leads", func() (bool, string, error) {
		return b.ctrl.Ready() == nil && b.ctrl.Stats().Leading, fmt.Sprintf("ready: %v; claim %+v", b.ctrl.Ready(), b.ctrl.Stats().Claim), nil
	})
	a := newReplica("replica-a", &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: leaseNS, Name: managerLease},
		Client:     kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: managerA},
	})
	go func() { a.done <- a.mgr.Start(ctx) }()
	replicas = append(replicas, a)
	select {
	case <-a.mgr.Elected():
	case <-time.After(30 * time.Second):
		t.Fatal("manager a was not elected within 30s")
	}

	poll(t, 30*time.Second, 20*time.Millisecond, "both pipelines ready, one leading", func() (bool, string, error) {
		ea, eb := a.ctrl.Ready(), b.ctrl.Ready()
		la, lb := a.ctrl.Stats().Leading, b.ctrl.Stats().Leading
		return ea == nil && eb == nil && la != lb, fmt.Sprintf("ready a: %v, b: %v; leading a: %v, b: %v", ea, eb, la, lb), nil
	})
	poll(t, 10*time.Second, 20*time.Millisecond, "b leads quietpatch", func() (bool, string, error) {
		return b.ctrl.Stats().Leading, fmt.Sprintf("claim %+v", b.ctrl.Stats().Claim), nil
	})
	quiesce(t, b.ctrl)
	okA, okB := a.ctrl.Stats().Dispatcher.Patches["ok"], b.ctrl.Stats().Dispatcher.Patches["ok"]
	if err := admin.Patch(ctx, &examplev1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "w-0000"}},
		client.RawPatch(types.MergePatchType, []byte(`{"spec":{"size":300}}`))); err != nil {
		t.Fatal(err)
	}
	poll(t, 10*time.Second, 20*time.Millisecond, "the changed Widget converges", func() (bool, string, error) {
		var w examplev1.Widget
		if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: "w-0000"}, &w); err != nil {
			return false, "", err
		}
		ok, why := converged(&w)
		return ok, why, nil
	})
	select {
	case <-b.mgr.Elected():
		t.Fatal("manager b was elected: the test no longer shows the pipeline writing on a replica whose manager is not the leader")
	default:
	}
	// The API server commits the write before its answer reaches the
	// dispatcher, which counts it then: wait for the count, then for the
	// leading pipeline to be idle (a second write would show).
	var dA, dB int64
	poll(t, 10*time.Second, 20*time.Millisecond, "the write is counted", func() (bool, string, error) {
		dA, dB = a.ctrl.Stats().Dispatcher.Patches["ok"]-okA, b.ctrl.Stats().Dispatcher.Patches["ok"]-okB
		return dA+dB > 0, fmt.Sprintf("a %d, b %d", dA, dB), nil
	})
	quiesce(t, b.ctrl)
	dA, dB = a.ctrl.Stats().Dispatcher.Patches["ok"]-okA, b.ctrl.Stats().Dispatcher.Patches["ok"]-okB
	t.Logf("manager leader a; quietpatch leader b; the change was written by a: %d patches, b: %d", dA, dB)
	if dA != 0 || dB != 1 {
		t.Errorf("patches after the hand-over: a %d, b %d; want 0 and 1", dA, dB)
	}
}
