package monitoring

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated files (dashboard.json, prometheusrule.yaml, metric-names.txt) instead of comparing them")

// monitoringDir returns Dir or fails the test.
func monitoringDir(t *testing.T) string {
	t.Helper()
	dir, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// checkGenerated compares the file with want, or writes want into it under
// -update.
func checkGenerated(t *testing.T, name string, want []byte) {
	t.Helper()
	path := filepath.Join(monitoringDir(t), name)
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (generate it with `go test ./monitoring -update` in e2e/)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is out of date: run `go test ./monitoring -update` in e2e/ and review the diff", path)
	}
}
