package pipeline

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test of the package leaves a goroutine behind:
// reconciler and dispatcher loops, and the calls they start.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
