//go:build linux

package cluster

import "syscall"

// supported reports whether the harness can run child processes here.
const supported = true

// sysProcAttr puts each child in its own process group (so Stop can signal
// everything it started) and asks the kernel to SIGKILL it when the thread
// that started it dies — the spawner's locked thread, which lives until Stop
// or until the test process exits, however it exits.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// signalGroup sends sig to the process group led by pid.
func signalGroup(pid int, sig syscall.Signal) error {
	return syscall.Kill(-pid, sig)
}

// groupAlive reports whether any process of the group led by pid exists.
func groupAlive(pid int) bool {
	return syscall.Kill(-pid, 0) == nil
}
