package leader

import (
	"errors"

	"github.com/quietpatch/quietpatch/internal/base"
)

// Sentinel errors. Errors returned by this package wrap one of these (or a
// Kubernetes API error, which k8s.io/apimachinery/pkg/api/errors classifies).
var (
	// ErrNotRunning is wrapped by the errors of [Claimer.Ready] and
	// [Claimer.Relinquish] before [Claimer.Run] was called and after it
	// returned.
	ErrNotRunning = errors.New("leader: claimer not running")

	// ErrLeaseNotFound is wrapped by the error [Claimer.Run] returns when
	// the Lease is missing or was deleted and Config.RequireExisting is set.
	ErrLeaseNotFound = errors.New("leader: lease not found")

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
	return errors.Is(err, ErrTransitionsExhausted) || base.Permanent(err)
}
