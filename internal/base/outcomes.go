package base

import "github.com/quietpatch/quietpatch/statuspatch/outcome"

// Outcomes returns every outcome.Outcome, in a fixed order: the values of
// the outcome attribute the instruments report.
func Outcomes() []outcome.Outcome {
	return []outcome.Outcome{outcome.OK, outcome.Conflict, outcome.NotFound, outcome.Forbidden, outcome.Fenced, outcome.Unauthorized,
		outcome.Invalid, outcome.Throttled, outcome.Abandoned, outcome.Timeout, outcome.Canceled, outcome.Failed}
}

// Permanent reports whether err, the error of one request, cannot go away
// by sending the same request again: the credentials or permissions are
// wrong (Unauthorized, Forbidden), or the server rejects the request itself
// (Invalid).
func Permanent(err error) bool {
	switch outcome.Of(err) {
	case outcome.Forbidden, outcome.Unauthorized, outcome.Invalid:
		return true
	}
	return false
}
