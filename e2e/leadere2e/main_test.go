package leadere2e

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quietpatch/quietpatch/e2e/cluster"
)

// sharedPlane is the control plane all tests of the package share: started
// by the first test that asks for it, stopped by TestMain.
type sharedPlane struct {
	once sync.Once
	cp   *cluster.ControlPlane
	err  error
}

func (s *sharedPlane) get(t *testing.T) *cluster.ControlPlane {
	t.Helper()
	s.once.Do(func() {
		begin := time.Now()
		// Leases need no CRDs: skip installing the Gateway API.
		s.cp, s.err = cluster.Start(context.Background(), cluster.Options{SkipGatewayAPI: true})
		if s.err == nil {
			t.Logf("shared control plane started in %v", time.Since(begin).Round(time.Millisecond))
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

// shared is set only through its sync.Once; TestMain stops it.
var shared sharedPlane

func TestMain(m *testing.M) {
	code := m.Run()
	if err := shared.stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the shared control plane:", err)
		code = 1
	}
	if code == 0 {
		// After the control plane is gone, so that client connections to
		// it have closed.
		if err := goleak.Find(
			// Started by klog's init; lives for the process.
			goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
			goleak.IgnoreAnyFunction("k8s.io/klog/v2.(*flushDaemon).run"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
