package routestatus

import "errors"

// Sentinel errors. Errors returned by this package wrap one of these, so
// callers can test for them with errors.Is; the wrapping text names the field
// or path that was wrong.
var (
	// ErrInvalidOptions is wrapped by NewComputer when Options are invalid.
	ErrInvalidOptions = errors.New("routestatus: invalid options")

	// ErrInvalidStatus is wrapped by Validate (and so by MergePatch) when a
	// status would be rejected by the HTTPRoute CRD schema.
	ErrInvalidStatus = errors.New("routestatus: invalid status")

	// ErrNilRoute is returned by MergePatch when the route is nil.
	ErrNilRoute = errors.New("routestatus: nil HTTPRoute")

	// ErrNoResourceVersion is returned by MergePatch when the route has no
	// metadata.resourceVersion: without it the patch would carry no
	// optimistic-concurrency precondition.
	ErrNoResourceVersion = errors.New("routestatus: HTTPRoute has no resourceVersion")

	// ErrUnsupportedObject is wrapped by Snapshot.Add and NewSnapshot when
	// given an object of a type a Lookup does not serve.
	ErrUnsupportedObject = errors.New("routestatus: unsupported object type")
)
