package base

import "sync/atomic"

// Lifecycle is the state of a Run that may be called once: not started,
// running, then stopped with the reason Run ended. The zero value is not
// started; it is safe for concurrent use and never blocks.
type Lifecycle struct {
	state atomic.Int32
	why   atomic.Pointer[error]
}

const (
	notStarted int32 = iota
	running
	stopped
)

// Start marks Run as running; a later call returns [ErrAlreadyStarted].
func (l *Lifecycle) Start() error {
	if !l.state.CompareAndSwap(notStarted, running) {
		return ErrAlreadyStarted
	}
	return nil
}

// Stop marks Run as stopped, for why (nil for a clean stop).
func (l *Lifecycle) Stop(why error) {
	l.why.Store(&why)
	l.state.Store(stopped)
}

// State reports whether Start was called, whether Run runs (started and
// not stopped), and why it stopped.
func (l *Lifecycle) State() (started, running bool, why error) {
	switch l.state.Load() {
	case notStarted:
		return false, false, nil
	case stopped:
		return true, false, *l.why.Load()
	}
	return true, true, nil
}
