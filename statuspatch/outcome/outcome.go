package outcome

import (
	"context"
	"errors"
	"net"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Outcome is the class of one API request's result. Its string is the value
// of the outcome (or result) attribute on quietpatch's instruments.
type Outcome string

// The outcomes, from [Of].
const (
	// OK: the request succeeded.
	OK Outcome = "ok"
	// Conflict: 409 Conflict (a resourceVersion precondition failed) or
	// 409 AlreadyExists.
	Conflict Outcome = "conflict"
	// NotFound: 404, the object is gone.
	NotFound Outcome = "not_found"
	// Forbidden: 403, RBAC (or an admission plugin) refused the request.
	Forbidden Outcome = "forbidden"
	// Unauthorized: 401, the credentials were refused.
	Unauthorized Outcome = "unauthorized"
	// Invalid: the server rejected the request itself (400, 405, 406,
	// 413, 415, 422): sending it again cannot help.
	Invalid Outcome = "invalid"
	// Throttled: 429 Too Many Requests (API Priority and Fairness, or
	// another limit).
	Throttled Outcome = "throttled"
	// Timeout: the request's deadline passed, or the server answered
	// with a timeout (504, or a Timeout/ServerTimeout status), or the
	// connection timed out.
	Timeout Outcome = "timeout"
	// Canceled: the request's context was cancelled before it ended.
	Canceled Outcome = "canceled"
	// Error: anything else (5xx, connection refused or reset, a client
	// error before anything was sent).
	Error Outcome = "error"
)

// All returns every Outcome, in a fixed order.
func All() []Outcome {
	return []Outcome{OK, Conflict, NotFound, Forbidden, Unauthorized, Invalid, Throttled, Timeout, Canceled, Error}
}

// Of classifies err, the error of one API request, by the API status it
// carries (k8s.io/apimachinery/pkg/api/errors) or its context and network
// errors. A nil error is [OK].
func Of(err error) Outcome {
	var netErr net.Error
	switch {
	case err == nil:
		return OK
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err):
		return Conflict
	case apierrors.IsNotFound(err):
		return NotFound
	case apierrors.IsForbidden(err):
		return Forbidden
	case apierrors.IsUnauthorized(err):
		return Unauthorized
	case apierrors.IsTooManyRequests(err):
		return Throttled
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsMethodNotSupported(err),
		apierrors.IsNotAcceptable(err), apierrors.IsUnsupportedMediaType(err), apierrors.IsRequestEntityTooLargeError(err):
		return Invalid
	case errors.Is(err, context.DeadlineExceeded), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err),
		errors.As(err, &netErr) && netErr.Timeout():
		return Timeout
	case errors.Is(err, context.Canceled):
		return Canceled
	}
	return Error
}

// Permanent reports whether err, the error of one request, cannot go away
// by sending the same request again: the credentials or permissions are
// wrong ([Unauthorized], [Forbidden]), or the server rejects the request
// itself ([Invalid]).
func Permanent(err error) bool {
	switch Of(err) {
	case Forbidden, Unauthorized, Invalid:
		return true
	}
	return false
}

// Answered reports whether err, the error of one write request, is an answer
// from the API server that settles the write: nil (the write was done), or an
// API status that says the write was refused and not done — 4xx codes such
// as conflict, not found, forbidden, unauthorized, invalid and throttled,
// but not 408 or a timeout status. Anything else — a client-side deadline
// or cancel, a broken or refused connection, a 5xx, a timeout status —
// leaves open whether the server executed, or will still execute, the
// write: Answered is false.
func Answered(err error) bool {
	if err == nil {
		return true
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return false
	}
	switch Of(err) {
	case Conflict, NotFound, Forbidden, Unauthorized, Invalid, Throttled:
		return true
	case Timeout, Canceled:
		return false
	}
	code := int(st.Status().Code)
	return code >= 400 && code < 500 && code != http.StatusRequestTimeout
}
