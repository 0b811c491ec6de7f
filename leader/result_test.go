package leader

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestResultOf: the result attribute of quietpatch.leader.requests has the
// values (and rules) of every quietpatch instrument's outcome.
func TestResultOf(t *testing.T) {
	gr := schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	timeout := &net.OpError{Op: "dial", Err: timeoutErr{}}
	for _, tc := range []struct {
		label string
		err   error
		want  string
	}{
		{label: "nil", err: nil, want: "ok"},
		{label: "409 conflict", err: apierrors.NewConflict(gr, "l", errors.New("rv")), want: "conflict"},
		{label: "409 already exists", err: apierrors.NewAlreadyExists(gr, "l"), want: "conflict"},
		{label: "404", err: apierrors.NewNotFound(gr, "l"), want: "not_found"},
		{label: "403", err: apierrors.NewForbidden(gr, "l", errors.New("rbac")), want: "forbidden"},
		{label: "401", err: apierrors.NewUnauthorized("no"), want: "unauthorized"},
		{label: "422", err: apierrors.NewInvalid(schema.GroupKind{Kind: "Lease"}, "l", nil), want: "invalid"},
		{label: "400", err: apierrors.NewBadRequest("no"), want: "invalid"},
		{label: "405", err: apierrors.NewMethodNotSupported(gr, "patch"), want: "invalid"},
		{label: "413", err: apierrors.NewRequestEntityTooLargeError("big"), want: "invalid"},
		{label: "429", err: apierrors.NewTooManyRequests("slow down", 1), want: "throttled"},
		{label: "deadline", err: fmt.Errorf("renew: %w", context.DeadlineExceeded), want: "timeout"},
		{label: "504", err: apierrors.NewTimeoutError("slow", 1), want: "timeout"},
		{label: "server timeout", err: apierrors.NewServerTimeout(gr, "get", 1), want: "timeout"},
		{label: "net timeout", err: timeout, want: "timeout"},
		{label: "canceled", err: fmt.Errorf("get: %w", context.Canceled), want: "canceled"},
		{label: "500", err: apierrors.NewInternalError(errors.New("etcd")), want: "error"},
		{label: "connection refused", err: &net.OpError{Op: "dial", Err: errors.New("refused")}, want: "error"},
	} {
		if got := resultOf(tc.err); string(got) != tc.want {
			t.Errorf("%s: resultOf(%v) = %q, want %q", tc.label, tc.err, got, tc.want)
		}
	}
	var all []string
	for _, r := range results() {
		all = append(all, string(r))
	}
	if got, want := strings.Join(all, " "), "ok conflict not_found forbidden unauthorized invalid throttled timeout canceled error"; got != want {
		t.Errorf("results() = %s, want %s", got, want)
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// TestNoStatuspatchImport: leader sits below statuspatch (statuspatch
// imports leader), so leader must not depend on any statuspatch package.
func TestNoStatuspatchImport(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list leader's dependencies: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps .: %v\n%s", err, out)
	}
	const forbidden = "github.com/quietpatch/quietpatch/statuspatch"
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == forbidden || strings.HasPrefix(pkg, forbidden+"/") {
			t.Errorf("leader depends on %s", pkg)
		}
	}
}
