package outcome

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"

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
	// Fenced: 403 from the fence, a ValidatingAdmissionPolicy whose
	// denial message contains [FenceMessage]: the write named a writer
	// that no longer holds its Lease, and was not done.
	Fenced Outcome = "fenced"
	// Abandoned: 504 Timeout, the API server gave the request up at its
	// deadline — the timeout parameter the client sent, or the server's
	// default. The server may still finish a write that had reached
	// storage before the deadline: not answered.
	Abandoned Outcome = "abandoned"
	// Timeout: the request's deadline passed on the client, or the
	// connection timed out, or the server answered 500 ServerTimeout.
	Timeout Outcome = "timeout"
	// Canceled: the request's context was cancelled before it ended.
	Canceled Outcome = "canceled"
	// Failed: any other failure (5xx, connection refused or reset, a
	// client error before anything was sent).
	Failed Outcome = "error"
)

// FenceMessage marks a denial by the fence: the message of the
// ValidatingAdmissionPolicy that checks the writer named in a status
// write's field manager against its Lease's holder (the HTTPRoute
// example's deploy/fence) starts with it, and [Of] tells [Fenced] from
// [Forbidden] by it.
const FenceMessage = "quietpatch: fenced:"

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
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), FenceMessage):
		return Fenced
	case apierrors.IsForbidden(err):
		return Forbidden
	case apierrors.IsUnauthorized(err):
		return Unauthorized
	case apierrors.IsTooManyRequests(err):
		return Throttled
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsMethodNotSupported(err),
		apierrors.IsNotAcceptable(err), apierrors.IsUnsupportedMediaType(err), apierrors.IsRequestEntityTooLargeError(err):
		return Invalid
	case apierrors.IsTimeout(err):
		return Abandoned
	case errors.Is(err, context.DeadlineExceeded), apierrors.IsServerTimeout(err),
		errors.As(err, &netErr) && netErr.Timeout():
		return Timeout
	case errors.Is(err, context.Canceled):
		return Canceled
	}
	return Failed
}

// Answered reports whether err, the error of one write request, is an answer
// from the API server that settles the write: nil (the write was done), or an
// API status that says the write was refused and not done — 4xx codes such
// as conflict, not found, forbidden, fenced, unauthorized, invalid and
// throttled, but not 408 or a timeout status. Anything else — a client-side
// deadline or cancel, a broken or refused connection, a 5xx, a 504 (the
// server abandoned the request: it may still finish a storage write begun
// before its deadline), a timeout status —
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
	case Conflict, NotFound, Forbidden, Fenced, Unauthorized, Invalid, Throttled:
		return true
	case Abandoned, Timeout, Canceled:
		return false
	}
	code := int(st.Status().Code)
	return code >= 400 && code < 500 && code != http.StatusRequestTimeout
}
