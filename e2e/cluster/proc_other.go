//go:build !linux

package cluster

import (
	"errors"
	"syscall"
)

// supported reports whether the harness can run child processes here: it
// relies on Linux's process groups and parent-death signal.
const supported = false

func sysProcAttr() *syscall.SysProcAttr { return nil }

func signalGroup(int, syscall.Signal) error { return errors.ErrUnsupported }

func groupAlive(int) bool { return false }
