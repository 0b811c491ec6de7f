package controllerruntime_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/quietpatch/quietpatch"
	qpcr "github.com/quietpatch/quietpatch/integrations/controllerruntime"
	examplev1 "github.com/quietpatch/quietpatch/integrations/controllerruntime/examples/widget/api/v1"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
)

// With the managers' own leader election on, the pipeline runs on the
// replica whose manager is not elected too, and can be the one that writes:
// the two leaderships are independent.
func TestManagerLeaderElectionOn(t *testing.T) {
	_, cfg := testEnv(t)
	admin := adminClient(t, cfg)
	const ns, leaseNS = "leader-election", "quietpatch-system"
	createNamespace(t, admin, ns)
	createNamespace(t, admin, leaseNS)
	createWidgets(t, admin, ns, 1, func(int) int32 { return 1 })

	type replica struct {
		mgr  manager.Manager
		ctrl *widgetController
		done chan error
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	newReplica := func(identity string) *replica {
		grace := 30 * time.Second
		mgr, err := manager.New(cfg, manager.Options{
			Scheme:                        testScheme(),
			Metrics:                       metricsserver.Options{BindAddress: "0"},
			LeaderElection:                true,
			LeaderElectionID:              "widget-manager", // the manager's Lease: not quietpatch's
			LeaderElectionNamespace:       leaseNS,
			LeaderElectionReleaseOnCancel: true,
			GracefulShutdownTimeout:       &grace,
		})
		if err != nil {
			t.Fatal(err)
		}
		ctrl, err := qpcr.Add(ctx, mgr, &examplev1.Widget{}, newComputer(t), qpcr.Options{
			Config: quietpatch.Config{
				Options: statuspatch.Options{Name: "widgets-le", Interval: testInterval},
				Lease:   leader.Config{Namespace: leaseNS, Name: "widget-status-le", Identity: identity, LeaseDuration: testLeaseDuration},
			},
			Registerer: prometheus.NewRegistry(), // two pipelines named alike in one process
		})
		if err != nil {
			t.Fatal(err)
		}
		return &replica{mgr: mgr, ctrl: ctrl, done: make(chan error, 1)}
	}
	a, b := newReplica("replica-a"), newReplica("replica-b")
	go func() { a.done <- a.mgr.Start(ctx) }()
	select {
	case <-a.mgr.Elected():
	case <-time.After(30 * time.Second):
		t.Fatal("manager a was not elected within 30s")
	}
	go func() { b.done <- b.mgr.Start(ctx) }()
	defer func() {
		cancel()
		for _, r := range []*replica{a, b} {
			if err := <-r.done; err != nil {
				t.Errorf("mgr.Start: %v", err)
			}
		}
	}()

	poll(t, 30*time.Second, 20*time.Millisecond, "both pipelines ready, one leading", func() (bool, string, error) {
		ea, eb := a.ctrl.Ready(), b.ctrl.Ready()
		la, lb := a.ctrl.Stats().Leading, b.ctrl.Stats().Leading
		return ea == nil && eb == nil && la != lb, fmt.Sprintf("ready a: %v, b: %v; leading a: %v, b: %v", ea, eb, la, lb), nil
	})
	// Hand quietpatch's Lease to b, whose manager is not elected.
	if a.ctrl.Stats().Leading {
		if err := a.ctrl.Claimer().Relinquish(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
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
