package shard_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: informers and
// filtered watches alike.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
