package examplee2e

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors.
var (
	// ErrExited: a replica process exited (its log's tail is in the message).
	ErrExited = errors.New("examplee2e: controller replica exited")
	// ErrStopped: the Deployment was stopped; it cannot start replicas again.
	ErrStopped = errors.New("examplee2e: deployment stopped")
	// ErrNoRBAC: the deploy directory holds no ClusterRole or Role (yet).
	ErrNoRBAC = errors.New("examplee2e: no RBAC manifests found")
	// ErrUnsupported: running replicas needs Linux (process groups,
	// parent-death signal).
	ErrUnsupported = errors.New("examplee2e: only Linux is supported")
	// ErrInvalidConfig is wrapped by errors about a Config field.
	ErrInvalidConfig = errors.New("examplee2e: invalid config")
)

// permanent marks an error that ends Poll at once.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent wraps err so that Poll returns it at once instead of trying
// again.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanent{err}
}

// Poll calls cond every interval until it returns nil, returns an error
// made with Permanent, or ctx ends. Each call gets a context bounded by ctx
// and 10 s. On ctx's end it returns an error wrapping ctx.Err() and the last
// error cond returned, so a timeout says what was still not true.
func Poll(ctx context.Context, interval time.Duration, cond func(context.Context) error) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := cond(cctx)
		cancel()
		if err == nil {
			return nil
		}
		var p permanent
		if errors.As(err, &p) {
			return p.err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w; last: %w", ctx.Err(), err)
		case <-t.C:
		}
	}
}
