package controllerruntime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/quietpatch/quietpatch"
	qpcr "github.com/quietpatch/quietpatch/integrations/controllerruntime"
	examplev1 "github.com/quietpatch/quietpatch/integrations/controllerruntime/examples/widget/api/v1"
	"github.com/quietpatch/quietpatch/integrations/controllerruntime/examples/widget/readiness"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/conditions"
)

func newComputer(t *testing.T) *conditions.Computer[*examplev1.Widget] {
	t.Helper()
	c, err := conditions.New(conditions.Config[*examplev1.Widget]{Conditions: readiness.Conditions})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Add and its parts reject what cannot work with an error that names it.
// The cases that reach the cache use the envtest API server.
func TestAddErrors(t *testing.T) {
	_, cfg := testEnv(t)
	ctx := context.Background()
	newMgr := func(t *testing.T, opts manager.Options) manager.Manager {
		t.Helper()
		if opts.Scheme == nil {
			opts.Scheme = testScheme()
		}
		opts.Metrics = metricsserver.Options{BindAddress: "0"}
		mgr, err := manager.New(cfg, opts)
		if err != nil {
			t.Fatal(err)
		}
		return mgr
	}
	lease := leader.Config{Namespace: "quietpatch-system", Name: "errors"}
	reg := func() prometheus.Registerer { return prometheus.NewRegistry() }
	comp := newComputer(t)

	tests := []struct {
		name   string
		add    func(t *testing.T) error
		is     error
		saying string
	}{
		{"nil manager", func(t *testing.T) error {
			_, err := qpcr.Add(ctx, nil, &examplev1.Widget{}, comp, qpcr.Options{})
			return err
		}, nil, "mgr must not be nil"},
		{"nil computer", func(t *testing.T) error {
			_, err := qpcr.Add[*examplev1.Widget, conditions.Status](ctx, newMgr(t, manager.Options{}), &examplev1.Widget{}, nil, qpcr.Options{})
			return err
		}, nil, "StatusComputer must not be nil"},
		{"no Lease", func(t *testing.T) error {
			_, err := qpcr.Add(ctx, newMgr(t, manager.Options{}), &examplev1.Widget{}, comp, qpcr.Options{Registerer: reg()})
			return err
		}, quietpatch.ErrInvalidConfig, "Namespace"},
		{"kind not in the scheme", func(t *testing.T) error {
			_, err := qpcr.Add(ctx, newMgr(t, manager.Options{Scheme: runtime.NewScheme()}), &examplev1.Widget{}, comp,
				qpcr.Options{Config: quietpatch.Config{Lease: lease}, Registerer: reg()})
			return err
		}, nil, "no kind is registered"},
		{"negative burst", func(t *testing.T) error {
			_, err := qpcr.Add(ctx, newMgr(t, manager.Options{}), &examplev1.Widget{}, comp,
				qpcr.Options{Config: quietpatch.Config{Lease: lease}, PatchQPS: 10, PatchBurst: -1})
			return err
		}, nil, "PatchBurst must be >= 0"},
		{"patcher without client", func(t *testing.T) error {
			_, err := qpcr.NewStatusPatcher(nil, &examplev1.Widget{}, "m")
			return err
		}, nil, "the cluster must not be nil"},
		{"patcher without field manager", func(t *testing.T) error {
			_, err := qpcr.NewStatusPatcher(testCluster(t, cfg), &examplev1.Widget{}, "")
			return err
		}, nil, "fieldManager must not be empty"},
		{"patcher with a long field manager", func(t *testing.T) error {
			_, err := qpcr.NewStatusPatcher(testCluster(t, cfg), &examplev1.Widget{}, strings.Repeat("m", 129))
			return err
		}, nil, "at most 128 characters, got 129"},
		{"meter provider without registry", func(t *testing.T) error {
			_, err := qpcr.NewMeterProvider(nil)
			return err
		}, nil, "reg must not be nil"},
		{"checks without name", func(t *testing.T) error {
			return qpcr.AddChecks(newMgr(t, manager.Options{}), "", nil)
		}, nil, "name must not be empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.add(t)
			if err == nil {
				t.Fatal("no error")
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %q does not wrap %q", err, tt.is)
			}
			if !strings.Contains(err.Error(), tt.saying) {
				t.Errorf("error %q does not say %q", err, tt.saying)
			}
		})
	}
}

// Options.Patcher replaces the default patcher, and Lease.Identity
// defaults to leader.DefaultIdentity: $POD_NAME and a random suffix.
func TestAddOptions(t *testing.T) {
	_, cfg := testEnv(t)
	admin := adminClient(t, cfg)
	createNamespace(t, admin, "options")
	createNamespace(t, admin, "quietpatch-system")
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		// client-go's and controller-runtime's process-wide workers.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*clientConnReadLoop).run"),
	)
	createWidgets(t, admin, "options", 1, func(int) int32 { return 1 })
	mgr, err := manager.New(rest.CopyConfig(cfg), manager.Options{Scheme: testScheme(), Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	own := patcherFunc(func(_ context.Context, p statuspatch.MergePatch) error {
		if p.Namespace == "options" {
			calls.Add(1)
		}
		return nil // writes nothing
	})
	t.Setenv("POD_NAME", "pod-7")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctrl, err := qpcr.Add(ctx, mgr, &examplev1.Widget{}, newComputer(t), qpcr.Options{
		Config: quietpatch.Config{
			Name:     "options",
			Interval: testInterval,
			Lease:    leader.Config{Namespace: "quietpatch-system", Name: "options", LeaseDuration: testLeaseDuration},
		},
		Patcher:    own,
		Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctrl.Ready(); !errors.Is(err, quietpatch.ErrNotSynced) {
		t.Errorf("Ready() before the manager starts = %v, want ErrNotSynced", err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	poll(t, 30*time.Second, 20*time.Millisecond, "the own Patcher is called", func() (bool, string, error) {
		return calls.Load() > 0, fmt.Sprintf("Ready: %v; Stats: %+v", ctrl.Ready(), ctrl.Stats().Dispatcher), nil
	})
	// The patcher was called under our claim: its holder is the identity.
	if st := ctrl.Stats(); !strings.HasPrefix(st.Claim.Holder, "pod-7_") || len(st.Claim.Holder) != len("pod-7_")+8 {
		t.Errorf("the claim's holder = %q (leading: %v), want pod-7_ and 8 hex digits (leader.DefaultIdentity)", st.Claim.Holder, st.Leading)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("mgr.Start: %v", err)
	}
	var w examplev1.Widget
	if err := admin.Get(context.Background(), types.NamespacedName{Namespace: "options", Name: "w-0000"}, &w); err != nil {
		t.Fatal(err)
	}
	if len(w.Status.Conditions) != 0 {
		t.Errorf("the Widget has conditions %v: written by something other than the own Patcher", w.Status.Conditions)
	}
}

// patcherFunc is a Patcher of merge patches made of a func.
type patcherFunc func(context.Context, statuspatch.MergePatch) error

func (f patcherFunc) Patch(ctx context.Context, p statuspatch.MergePatch) error { return f(ctx, p) }
