package controllerruntime_test

import (
	"os"
	"testing"

	"github.com/go-logr/logr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

func TestMain(m *testing.M) {
	// The managers' logs (and quietpatch's, which Add sends there) are
	// not needed: the tests check what they do.
	logf.SetLogger(logr.Discard())
	code := m.Run()
	stopTestEnv()
	os.Exit(code)
}
