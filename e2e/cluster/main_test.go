package cluster

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// shared is the control plane that tests without special needs share; it is
// started by the first test that asks for it and stopped by TestMain.
type sharedPlane struct {
	once sync.Once
	cp   *ControlPlane
	err  error
}

func (s *sharedPlane) get(t *testing.T) *ControlPlane {
	t.Helper()
	s.once.Do(func() {
		begin := time.Now()
		s.cp, s.err = Start(context.Background(), Options{})
		if s.err == nil {
			t.Logf("shared control plane started in %v: %+v", time.Since(begin).Round(time.Millisecond), s.cp.Timings())
		}
	})
	if s.err != nil {
		t.Fatalf("shared control plane: %v", s.err)
	}
	return s.cp
}

func (s *sharedPlane) stop() error {
	if s.cp == nil {
		return nil
	}
	return s.cp.Stop()
}

var shared sharedPlane

func TestMain(m *testing.M) {
	code := m.Run()
	if err := shared.stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the shared control plane:", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(goleakOptions()...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func goleakOptions() []goleak.Option {
	return []goleak.Option{
		// Started by klog's init; lives for the process.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreAnyFunction("k8s.io/klog/v2.(*flushDaemon).run"),
	}
}

// testContext is a context bounded by d and by the test's end.
func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond every 50 ms until it returns nil or d passes, then
// fails the test with the last error.
func eventually(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
