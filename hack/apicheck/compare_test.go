package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompareFindsIncompatibleChanges writes the snapshot of a small
// module, changes its API, and compares: the removed function and the
// changed signature are incompatible, the new function compatible, and
// allowed refuses the breaks under a patch bump.
func TestCompareFindsIncompatibleChanges(t *testing.T) {
	root := t.TempDir()
	write := func(name, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module "+modulePath+"\n\ngo 1.26\n")
	write("p/p.go", "package p\n\nfunc Keep(n int) int { return n }\n\nfunc Gone() {}\n\ntype Options struct{ Interval int }\n")
	write("examples/x/x.go", "package x\n\nfunc NotAPI() {}\n")
	write("cmd/c/main.go", "package main\n\nfunc main() {}\n")
	modules := []string{"."}
	if err := writeSnapshot(root, modules, v("0.1.0")); err != nil {
		t.Fatal(err)
	}
	// The root has no package here, examples and commands are not API:
	// only p is.
	if files, _ := filepath.Glob(filepath.Join(root, apiDir, "v0.1.0/*")); len(files) != 1 || filepath.Base(files[0]) != "p.export" {
		t.Fatalf("snapshot files %v, want [p.export]", files)
	}
	changes, err := compare(root, modules, v("0.1.0"))
	if err != nil || len(changes) != 0 {
		t.Fatalf("compare of the unchanged module: %v, %v; want no change", changes, err)
	}

	write("p/p.go", "package p\n\nfunc Keep(s string) string { return s }\n\nfunc Added() {}\n\ntype Options struct{ Interval, Capacity int }\n")
	write("examples/x/x.go", "package x\n")
	changes, err = compare(root, modules, v("0.1.0"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	incompatible, compatible := false, false
	for _, c := range changes {
		got = append(got, c.Message)
		incompatible = incompatible || !c.Compatible
		compatible = compatible || c.Compatible
	}
	for _, want := range []string{"p: Gone: removed", "p: Keep: changed from func(int) int to func(string) string", "p: Added: added", "p: Options.Capacity: added"} {
		found := false
		for _, g := range got {
			found = found || strings.HasSuffix(g, want)
		}
		if !found {
			t.Errorf("changes %q: none ends with %q", got, want)
		}
	}
	if err := allowed(v("0.1.0"), v("0.1.1"), incompatible, compatible, false); err == nil {
		t.Error("allowed: the breaks pass under 0.1.1")
	}
	if err := allowed(v("0.1.0"), v("0.2.0"), incompatible, compatible, false); err != nil {
		t.Errorf("allowed under 0.2.0: %v", err)
	}
}
