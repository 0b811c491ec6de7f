package controllerruntime_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	qpcr "github.com/quietpatch/quietpatch/integrations/controllerruntime"
)

// stubRunner is a Runner whose Run, once its context is cancelled, keeps
// running until release is closed — a pipeline whose patch calls in
// flight have not been answered yet.
type stubRunner struct {
	started chan struct{}
	release chan struct{}
	err     error
	seq     *atomic.Int64
	ended   int64 // seq value when Run returned
}

func newStubRunner(seq *atomic.Int64) *stubRunner {
	return &stubRunner{started: make(chan struct{}), release: make(chan struct{}), seq: seq}
}

func (s *stubRunner) Run(ctx context.Context) error {
	close(s.started)
	<-ctx.Done()
	<-s.release
	s.ended = s.seq.Add(1)
	return s.err
}

// offlineManager is a manager that needs no API server: nothing in it
// reads the API (no informer, no leader election), and it serves nothing.
func offlineManager(t *testing.T, grace time.Duration) manager.Manager {
	t.Helper()
	mgr, err := manager.New(&rest.Config{Host: "http://127.0.0.1:1"}, manager.Options{
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		GracefulShutdownTimeout: &grace,
	})
	if err != nil {
		t.Fatal(err)
	}
	return mgr
}

// The manager starts the Runnable without leader election and, on stop,
// returns from Start only after the Runner's Run has returned.
func TestRunnableManagerWaitsForRun(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var seq atomic.Int64
	runner := newStubRunner(&seq)
	r := qpcr.NewRunnable(runner)
	if r.NeedLeaderElection() {
		t.Fatal("NeedLeaderElection() = true, want false: the pipeline runs on every replica")
	}
	mgr := offlineManager(t, -1) // wait as long as it takes
	if err := mgr.Add(r); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int64, 1)
	errc := make(chan error, 1)
	go func() {
		err := mgr.Start(ctx)
		done <- seq.Add(1)
		errc <- err
	}()
	select {
	case <-runner.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the manager did not start the Runnable within 10s (is it waiting for leader election?)")
	}
	cancel()
	// The Runner is still stopping: the manager must not return.
	select {
	case <-done:
		t.Fatal("mgr.Start returned while the Runner's Run was still running")
	case <-time.After(300 * time.Millisecond):
	}
	close(runner.release)
	var returned int64
	select {
	case returned = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("mgr.Start did not return within 10s of Run returning")
	}
	if err := <-errc; err != nil {
		t.Errorf("mgr.Start: %v", err)
	}
	if runner.ended == 0 || runner.ended > returned {
		t.Errorf("Run returned at step %d, mgr.Start at step %d: want Run first", runner.ended, returned)
	}
}

// With a GracefulShutdownTimeout shorter than the pipeline's stop, the
// manager gives up waiting and says so: the interplay documented in the
// package documentation.
func TestRunnableGracefulShutdownTimeoutTooShort(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var seq atomic.Int64
	runner := newStubRunner(&seq)
	mgr := offlineManager(t, 100*time.Millisecond)
	if err := mgr.Add(qpcr.NewRunnable(runner)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- mgr.Start(ctx) }()
	<-runner.started
	cancel()
	var err error
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second):
		t.Fatal("mgr.Start did not return within 10s with a 100ms GracefulShutdownTimeout")
	}
	if err == nil || !strings.Contains(err.Error(), "grace period") {
		t.Errorf("mgr.Start = %v, want the manager's grace period error", err)
	}
	if runner.ended != 0 {
		t.Error("Run returned before it was released")
	}
	close(runner.release) // the pipeline finishes on its own; goleak waits for it
}

type funcRunner func(context.Context) error

func (f funcRunner) Run(ctx context.Context) error { return f(ctx) }

func TestRunnableStart(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	boom := errors.New("lease loop: forbidden")
	tests := []struct {
		name    string
		runErr  error
		wantErr error
	}{
		{"stopped", nil, nil},
		{"failed", boom, boom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := qpcr.NewRunnable(funcRunner(func(ctx context.Context) error { return tt.runErr }))
			if err := r.Start(context.Background()); !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Errorf("Start = %v, want %v", err, tt.wantErr)
			}
			if err := r.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "started twice") {
				t.Errorf("second Start = %v, want an error saying it was started twice", err)
			}
		})
	}
	if err := (&qpcr.Runnable{}).Start(context.Background()); err == nil || !strings.Contains(err.Error(), "NewRunnable") {
		t.Errorf("zero Runnable: Start = %v, want an error pointing at NewRunnable", err)
	}
}
