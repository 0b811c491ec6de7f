//go:build linux

package main

import (
	"fmt"
	"syscall"
)

// stopWithParent asks the kernel to send this process SIGTERM when its parent
// dies (prctl PR_SET_PDEATHSIG), so that a parent that ends without passing
// the signal on — `go run` killed by SIGTERM, make killed by SIGKILL — still
// gets the control plane stopped. The kernel keeps the setting on the calling
// OS thread and checks every thread of this process when the parent exits;
// the Go runtime does not end that thread (no goroutine here locks one), so
// the setting lasts as long as the process.
func stopWithParent() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0); errno != 0 {
		return fmt.Errorf("prctl(PR_SET_PDEATHSIG, SIGTERM): %w", errno)
	}
	return nil
}
