package statuspatch_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test of the package leaves a goroutine behind:
// queue producers and consumers, reconciler and dispatcher loops alike.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
