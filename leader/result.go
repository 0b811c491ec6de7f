package leader

import (
	"context"
	"errors"
	"net"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// result is the class of one Lease API request's result: the result
// attribute of quietpatch.leader.requests. The values are those every
// quietpatch instrument uses for an API request's outcome.
type result string

const (
	resultOK           result = "ok"
	resultConflict     result = "conflict"     // 409, AlreadyExists included
	resultNotFound     result = "not_found"    // 404
	resultForbidden    result = "forbidden"    // 403
	resultUnauthorized result = "unauthorized" // 401
	resultInvalid      result = "invalid"      // 400, 405, 406, 413, 415, 422
	resultThrottled    result = "throttled"    // 429
	resultTimeout      result = "timeout"      // deadline, 504, Timeout status, net timeout
	resultCanceled     result = "canceled"     // context cancelled
	resultError        result = "error"        // anything else
)

func results() []result {
	return []result{resultOK, resultConflict, resultNotFound, resultForbidden, resultUnauthorized,
		resultInvalid, resultThrottled, resultTimeout, resultCanceled, resultError}
}

// resultOf classifies err, the error of one API request, by the API status
// it carries or its context and network errors. A nil error is ok.
func resultOf(err error) result {
	var netErr net.Error
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
	case apierrors.IsTooManyRequests(err):
		return resultThrottled
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsMethodNotSupported(err),
		apierrors.IsNotAcceptable(err), apierrors.IsUnsupportedMediaType(err), apierrors.IsRequestEntityTooLargeError(err):
		return resultInvalid
	case errors.Is(err, context.DeadlineExceeded), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err),
		errors.As(err, &netErr) && netErr.Timeout():
		return resultTimeout
	case errors.Is(err, context.Canceled):
		return resultCanceled
	}
	return resultError
}
