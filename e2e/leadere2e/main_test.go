package leadere2e

import (
	"testing"

	"github.com/quietpatch/quietpatch/e2e/cluster"
)

// shared is the control plane all tests of the package share: started by the
// first test that asks for it, stopped by TestMain. Leases need no CRDs: it
// skips installing the Gateway API.
var shared = cluster.Shared{Options: cluster.Options{SkipGatewayAPI: true}}

func TestMain(m *testing.M) { cluster.RunShared(m, shared.Stop) }
