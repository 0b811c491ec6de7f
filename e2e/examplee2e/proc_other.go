//go:build !linux

package examplee2e

import (
	"errors"
	"syscall"
)

// supported reports whether replicas can be run here: the harness relies on
// Linux's process groups and parent-death signal.
const supported = false

func sysProcAttr() *syscall.SysProcAttr { return nil }

func signalGroup(int, syscall.Signal) error { return errors.ErrUnsupported }
