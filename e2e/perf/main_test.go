package perf

import (
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/quietpatch/quietpatch/e2e/cluster"
)

// TestMain silences client-go's logging, runs the tests and benchmarks,
// stops the shared world (informers, control plane) that the
// first benchmark set up, then checks that nothing the package started is
// still running.
func TestMain(m *testing.M) {
	// client-go logs every request the stall benchmarks cancel; the
	// benchmarks count outcomes themselves.
	klog.SetLogger(logr.Discard())
	cluster.RunShared(m, storms.close, shared.close)
}
