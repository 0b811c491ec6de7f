package controllerruntime

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Runner is what a [Runnable] runs: a *quietpatch.Controller, whose Run
// blocks until its context is cancelled and it has stopped in the safe
// order (reconciler, dispatcher with its calls in flight, then the Lease).
type Runner interface {
	// Run runs until ctx is cancelled or a part fails, and returns once
	// everything it started has stopped.
	Run(ctx context.Context) error
}

// Runnable runs a [Runner] as a controller-runtime [manager.Runnable] on
// every replica: NeedLeaderElection is false, because quietpatch competes
// for a Lease of its own, whose epochs fence the patches of an earlier
// leader. The manager starts it after its caches have synced, together with
// its other runnables that need no leader election.
//
// Start returns only after the Runner's Run has returned: when the manager
// stops, it cancels Start's context, and Run stops the reconciler, lets the
// patch calls in flight run to the API server's answer, and vacates the
// Lease (or lets it run out when a call got no answer). The manager waits
// for Start to return for at most its GracefulShutdownTimeout (see the
// package documentation for how long that must be).
//
// A Runnable is started once; a second Start returns an error.
type Runnable struct {
	runner  Runner
	stop    func(context.Context) error // cleanup after Run; nil means none
	started atomic.Bool
}

var (
	_ manager.Runnable               = (*Runnable)(nil)
	_ manager.LeaderElectionRunnable = (*Runnable)(nil)
)

// NewRunnable returns a Runnable that runs r; add it to a manager with
// mgr.Add. [Add] does this for you.
func NewRunnable(r Runner) *Runnable { return &Runnable{runner: r} }

// Start runs the Runner until ctx is cancelled and returns its error; a nil
// error when it stopped because ctx was cancelled. It blocks until Run has
// returned, then releases what [Add] set up for the Runner (its
// OpenTelemetry MeterProvider, if Add created one).
func (r *Runnable) Start(ctx context.Context) (err error) {
	if r.runner == nil {
		return errors.New("controllerruntime: Runnable has no Runner (use NewRunnable)")
	}
	if !r.started.CompareAndSwap(false, true) {
		return errors.New("controllerruntime: Runnable started twice")
	}
	err = r.runner.Run(ctx)
	if r.stop != nil {
		// The context is cancelled by now: give the cleanup its own.
		if serr := r.stop(context.WithoutCancel(ctx)); serr != nil {
			err = errors.Join(err, fmt.Errorf("controllerruntime: after Run: %w", serr))
		}
	}
	return err
}

// NeedLeaderElection returns false: the Runnable runs on every replica,
// whether the manager's own leader election is enabled or not, and
// quietpatch's Lease decides which replica writes.
func (r *Runnable) NeedLeaderElection() bool { return false }
