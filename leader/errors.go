package leader

import (
	"errors"

	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// Sentinel errors. Errors returned by this package wrap one of these (or a
// Kubernetes API error, which k8s.io/apimachinery/pkg/api/errors classifies).
var (
	// ErrNotStarted is reported by [Claimer.Healthy] and
	// [Claimer.Relinquish] before [Claimer.Run] was called.
	ErrNotStarted = errors.New("leader: claimer not started")

	// ErrStopped is wrapped by [Claimer.Healthy] and returned by
	// [Claimer.Relinquish] after [Claimer.Run] has returned. Healthy joins
	// it with the error Run returned.
	ErrStopped = errors.New("leader: claimer stopped")

	// ErrLeaseNotFound is wrapped by the error [Claimer.Run] returns when
	// the Lease is missing or was deleted and Config.RequireExisting is set.
	ErrLeaseNotFound = errors.New("leader: lease not found")

	// ErrNegativeBackoff is returned by [Claimer.Relinquish] for a negative
	// back-off.
	ErrNegativeBackoff = errors.New("leader: relinquish back-off must be >= 0")

	// ErrTransitionsExhausted is wrapped by the error [Claimer.Run] returns
	// when spec.leaseTransitions has reached the largest int32 and cannot
	// be incremented for a new epoch. Delete the Lease to start over.
	ErrTransitionsExhausted = errors.New("leader: spec.leaseTransitions cannot be incremented further")
)

// fatal reports whether a request error cannot go away by retrying the same
// request: the claimer's credentials or permissions are wrong, or the server
// rejects the request itself. Run returns such errors instead of retrying
// them forever behind a healthy-looking process.
func fatal(err error) bool {
	return errors.Is(err, ErrTransitionsExhausted) || outcome.Permanent(err)
}
