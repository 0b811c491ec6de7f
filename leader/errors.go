package leader

import (
	"context"
	"errors"
	"net"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Sentinel errors. Errors returned by this package wrap one of these (or a
// Kubernetes API error, which k8s.io/apimachinery/pkg/api/errors classifies).
var (
	// ErrNotStarted is reported by [Claimer.Ready] and [Claimer.Relinquish]
	// before [Claimer.Run] was called.
	ErrNotStarted = errors.New("leader: claimer not started")

	// ErrStopped is wrapped by [Claimer.Ready] and returned by
	// [Claimer.Relinquish] after [Claimer.Run] has returned. Ready joins it
	// with the error Run returned.
	ErrStopped = errors.New("leader: claimer stopped")

	// ErrAlreadyStarted is returned by a second call of [Claimer.Run]: a
	// Claimer runs once.
	ErrAlreadyStarted = errors.New("leader: claimer already started")

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

// Outcome labels of the requests counter; see the package documentation.
const (
	resultOK           = "ok"
	resultConflict     = "conflict"
	resultNotFound     = "not_found"
	resultForbidden    = "forbidden"
	resultUnauthorized = "unauthorized"
	resultInvalid      = "invalid"
	resultTimeout      = "timeout"
	resultThrottled    = "throttled"
	resultError        = "error"
)

// classify maps a request error to the result label of the requests counter.
func classify(err error) string {
	switch {
	case err == nil:
		return resultOK
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err):
		return resultConflict
	case apierrors.IsNotFound(err):
		return resultNotFound
	case apierrors.IsForbidden(err):
		return resultForbidden
	case apierrors.IsUnauthorized(err):
		return resultUnauthorized
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsMethodNotSupported(err),
		apierrors.IsNotAcceptable(err), apierrors.IsUnsupportedMediaType(err), apierrors.IsRequestEntityTooLargeError(err):
		return resultInvalid
	case apierrors.IsTooManyRequests(err):
		return resultThrottled
	case errors.Is(err, context.DeadlineExceeded), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), isNetTimeout(err):
		return resultTimeout
	default:
		return resultError
	}
}

// fatal reports whether a request error cannot go away by retrying the same
// request: the claimer's credentials or permissions are wrong, or the server
// rejects the request itself. Run returns such errors instead of retrying
// them forever behind a ready process.
func fatal(err error) bool {
	if errors.Is(err, ErrTransitionsExhausted) {
		return true
	}
	switch classify(err) {
	case resultForbidden, resultUnauthorized, resultInvalid:
		return true
	}
	return false
}

func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
