package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Shared is a control plane that the tests of one package share, since a
// cold start takes seconds: the first Get starts it with Options, every later
// Get returns the same one (or fails the same way), and Stop — passed to
// RunShared from TestMain — stops it after the last test.
//
//	var shared = cluster.Shared{Options: cluster.Options{SkipGatewayAPI: true}}
//
//	func TestMain(m *testing.M) { cluster.RunShared(m, shared.Stop) }
//
//	func TestSomething(t *testing.T) {
//		cp := shared.Get(t)
//		...
//	}
//
// The zero value starts with zero Options. A Shared is safe for concurrent
// use and must not be copied after first use.
type Shared struct {
	// Options are passed to Start; set them before the first Get.
	Options Options

	once sync.Once
	cp   *ControlPlane
	err  error
}

// Get returns the shared control plane, starting it on the first call (t
// logs how long that took). If it could not be started, Get fails t with the
// error, then and on every later call.
func (s *Shared) Get(t testing.TB) *ControlPlane {
	t.Helper()
	s.once.Do(func() {
		begin := time.Now()
		s.cp, s.err = Start(context.Background(), s.Options)
		if s.err == nil {
			t.Logf("shared control plane started in %v: %+v", time.Since(begin).Round(time.Millisecond), s.cp.Timings())
		}
	})
	if s.err != nil {
		t.Fatalf("shared control plane: %v", s.err)
	}
	return s.cp
}

// Stop stops the control plane if Get started one; a Get after Stop fails
// with ErrStopped instead of starting another.
func (s *Shared) Stop() error {
	s.once.Do(func() { s.err = ErrStopped })
	if s.cp == nil {
		return nil
	}
	return s.cp.Stop()
}

// RunShared is the TestMain of a package whose tests share state that outlives
// them (a Shared control plane, a built binary, a temporary directory): it
// runs the tests and benchmarks, then each teardown in order (all of them,
// even after a failure), and — if everything passed — checks with goleak that
// no goroutine the package started is still running, ignoring klog's flush
// daemon, which lives for the process. It exits the process with the
// result: 1 if a test, a teardown or the leak check failed. It does not
// return.
//
// Work that must come before the tests (silencing a logger, say) goes in
// TestMain before the call.
func RunShared(m *testing.M, teardown ...func() error) {
	code := m.Run()
	var errs []error
	for _, f := range teardown {
		errs = append(errs, f())
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, "tearing down what the tests shared:", err)
		code = 1
	}
	if code == 0 {
		// After the teardown, so that client connections to the stopped
		// control plane have closed.
		if err := goleak.Find(leakOptions()...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// leakOptions ignore the goroutines that live for the whole process by
// design: klog's flush daemon, started by its init.
func leakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreAnyFunction("k8s.io/klog/v2.(*flushDaemon).run"),
	}
}
