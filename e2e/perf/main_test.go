package perf

import (
	"fmt"
	"os"
	"testing"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	"k8s.io/klog/v2"
)

// TestMain silences client-go's logging, runs the tests and benchmarks,
// stops the shared world (informers, control plane) that the
// first benchmark set up, then checks that nothing the package started is
// still running.
func TestMain(m *testing.M) {
	// client-go logs every request the stall benchmarks cancel; the
	// benchmarks count outcomes themselves.
	klog.SetLogger(logr.Discard())
	code := m.Run()
	if err := shared.close(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the shared world:", err)
		code = 1
	}
	if code == 0 {
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
