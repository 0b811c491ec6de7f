package leader

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/metric/noop"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// TestRequestResults: the result attribute of quietpatch.leader.requests
// takes the values of every quietpatch instrument's outcome, classified by
// outcome.Of (whose own test has the table).
func TestRequestResults(t *testing.T) {
	in := newInstruments(noop.Meter{}, "ns", "lease")
	gr := schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	in.request(opRenew, apierrors.NewConflict(gr, "l", errors.New("rv")))
	in.request(opRenew, fmt.Errorf("renew: %w", context.DeadlineExceeded))
	in.request(opGet, nil)
	got := in.calls.Snapshot()
	want := map[request]int64{{opRenew, outcome.Conflict}: 1, {opRenew, outcome.Timeout}: 1, {opGet, outcome.OK}: 1}
	if !maps.Equal(got, want) {
		t.Errorf("requests %v, want %v", got, want)
	}
	var results []string
	for _, r := range in.calls.Keys() {
		if r.op == opGet {
			results = append(results, string(r.result))
		}
	}
	if got, want := strings.Join(results, " "), "ok conflict not_found forbidden fenced unauthorized invalid throttled abandoned timeout canceled error"; got != want {
		t.Errorf("results %s, want %s", got, want)
	}
}

// TestNoStatuspatchImport: leader sits below statuspatch (statuspatch
// imports leader), so leader must not depend on any statuspatch package
// but the vocabulary at the bottom, statuspatch/outcome; of the module's
// other packages it may use internal/... only (the machinery below it).
func TestNoStatuspatchImport(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list leader's dependencies: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps .: %v\n%s", err, out)
	}
	const module = "github.com/quietpatch/quietpatch"
	for _, pkg := range strings.Fields(string(out)) {
		if pkg != module && !strings.HasPrefix(pkg, module+"/") {
			continue // not the module's
		}
		switch {
		case pkg == module+"/leader", pkg == module+"/statuspatch/outcome", strings.HasPrefix(pkg, module+"/internal/"):
		default:
			t.Errorf("leader depends on %s", pkg)
		}
	}
}
