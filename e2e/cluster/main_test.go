package cluster

import (
	"context"
	"testing"
	"time"
)

// shared is the control plane that tests without special needs share; it is
// started by the first test that asks for it and stopped by TestMain.
var shared Shared

func TestMain(m *testing.M) { RunShared(m, shared.Stop) }

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
