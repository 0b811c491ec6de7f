//go:build linux

package examplee2e

import "syscall"

// supported reports whether replicas can be run here.
const supported = true

// sysProcAttr puts a replica in its own process group, so that Kill and Stop
// reach everything it started, and has the kernel SIGKILL it when the thread
// that forked it dies (see cluster.Spawner).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// signalGroup sends sig to the process group led by pid.
func signalGroup(pid int, sig syscall.Signal) error {
	return syscall.Kill(-pid, sig)
}
