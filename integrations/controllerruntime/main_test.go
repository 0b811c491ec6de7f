package controllerruntime_test

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	code := m.Run()
	stopTestEnv()
	os.Exit(code)
}
