package outcome_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// timeoutNetError is a net.Error that timed out.
type timeoutNetError struct{}

func (timeoutNetError) Error() string   { return "i/o timeout" }
func (timeoutNetError) Timeout() bool   { return true }
func (timeoutNetError) Temporary() bool { return true }

var _ net.Error = timeoutNetError{}

func TestOfAndAnswered(t *testing.T) {
	gr := schema.GroupResource{Resource: "widgets"}
	cases := []struct {
		label    string
		err      error
		want     outcome.Outcome
		answered bool
	}{
		{"nil", nil, outcome.OK, true},
		{"409", apierrors.NewConflict(gr, "a", errors.New("x")), outcome.Conflict, true},
		{"409 wrapped", fmt.Errorf("patch: %w", apierrors.NewConflict(gr, "a", errors.New("x"))), outcome.Conflict, true},
		{"409 already exists", apierrors.NewAlreadyExists(gr, "a"), outcome.Conflict, true},
		{"404", apierrors.NewNotFound(gr, "a"), outcome.NotFound, true},
		{"403", apierrors.NewForbidden(gr, "a", errors.New("x")), outcome.Forbidden, true},
		{"401", apierrors.NewUnauthorized("x"), outcome.Unauthorized, true},
		{"422", apierrors.NewInvalid(schema.GroupKind{Kind: "Widget"}, "a", nil), outcome.Invalid, true},
		{"400", apierrors.NewBadRequest("x"), outcome.Invalid, true},
		{"405", apierrors.NewMethodNotSupported(gr, "patch"), outcome.Invalid, true},
		{"413", apierrors.NewRequestEntityTooLargeError("big"), outcome.Invalid, true},
		{"429", apierrors.NewTooManyRequests("x", 1), outcome.Throttled, true},
		{"403 fence", apierrors.NewForbidden(gr, "a", errors.New(`ValidatingAdmissionPolicy 'quietpatch-fence' with binding 'quietpatch-fence' denied request: `+outcome.FenceMessage+` the Lease ns/l is held by b, not a`)), outcome.Fenced, true},
		{"403 fence wrapped", fmt.Errorf("patch: %w", apierrors.NewForbidden(gr, "a", errors.New(outcome.FenceMessage+" x"))), outcome.Fenced, true},
		{"504", apierrors.NewTimeoutError("x", 1), outcome.Abandoned, false},
		{"504 of a proxy", apierrors.NewGenericServerResponse(504, "PATCH", gr, "a", "gateway timeout", 0, true), outcome.Abandoned, false},
		{"500 server timeout", apierrors.NewServerTimeout(gr, "patch", 1), outcome.Timeout, false},
		{"500", apierrors.NewInternalError(errors.New("etcd")), outcome.Failed, false},
		{"503", apierrors.NewServiceUnavailable("x"), outcome.Failed, false},
		{"deadline", context.DeadlineExceeded, outcome.Timeout, false},
		{"deadline wrapped", fmt.Errorf("Patch %q: %w", "https://x", context.DeadlineExceeded), outcome.Timeout, false},
		{"net timeout", &net.OpError{Op: "read", Err: timeoutNetError{}}, outcome.Timeout, false},
		{"canceled", context.Canceled, outcome.Canceled, false},
		{"connection refused", errors.New("connection refused"), outcome.Failed, false},
	}
	for _, c := range cases {
		if got := outcome.Of(c.err); got != c.want {
			t.Errorf("%s: Of(%v) = %s, want %s", c.label, c.err, got, c.want)
		}
		if got, want := base.Permanent(c.err), c.want == outcome.Forbidden || c.want == outcome.Unauthorized || c.want == outcome.Invalid; got != want {
			t.Errorf("%s: Permanent(%v) = %v, want %v", c.label, c.err, got, want)
		}
		if got := outcome.Answered(c.err); got != c.answered {
			t.Errorf("%s: Answered(%v) = %v, want %v", c.label, c.err, got, c.answered)
		}
	}
	if n := len(base.Outcomes()); n != 12 {
		t.Errorf("All() has %d outcomes, want 12", n)
	}
}

func ExampleAnswered() {
	gr := schema.GroupResource{Resource: "widgets"}
	for _, err := range []error{
		nil,
		apierrors.NewConflict(gr, "a", errors.New("the object has been modified")),
		context.DeadlineExceeded,
	} {
		fmt.Printf("%s answered=%v\n", outcome.Of(err), outcome.Answered(err))
	}
	// Output:
	// ok answered=true
	// conflict answered=true
	// timeout answered=false
}
