//go:build !linux

package main

// stopWithParent does nothing where there is no parent-death signal; the
// control plane itself needs Linux (cluster.ErrUnsupported).
func stopWithParent() error { return nil }
