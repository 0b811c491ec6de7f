package quietpatch_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The library's packages — not its tests — depend on client-go,
// apimachinery, go-cmp and the OpenTelemetry metric API only (and what
// those depend on). Test-only modules in go.mod (the OTel SDK and the
// Prometheus exporter for benchmarks, goleak) must never reach a program
// that imports quietpatch.
func TestLibraryDependenciesStayLean(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := []string{
		"github.com/prometheus/", "go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters",
		"go.uber.org/goleak", "sigs.k8s.io/controller-runtime", "k8s.io/kubernetes", "go.etcd.io/",
	}
	seen := map[string]bool{}
	for _, mod := range strings.Fields(string(out)) {
		seen[mod] = true
		for _, f := range forbidden {
			if strings.HasPrefix(mod, f) {
				t.Errorf("the library depends on %s", mod)
			}
		}
	}
	for _, want := range []string{"k8s.io/client-go", "k8s.io/apimachinery", "github.com/google/go-cmp", "go.opentelemetry.io/otel/metric"} {
		if !seen[want] {
			t.Errorf("the library does not depend on %s any more: update this test", want)
		}
	}
}
