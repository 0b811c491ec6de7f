package main

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/mod/modfile"
)

const integrationGoMod = `module example.com/root/sub

go 1.26.0

replace example.com/root => ../..

require (
	example.com/other v1.2.3
	example.com/root v0.0.0-00010101000000-000000000000
)
`

func TestRewriteGoMod(t *testing.T) {
	out, path, err := rewriteGoMod("go.mod", []byte(integrationGoMod), requires{"example.com/root": "v0.99.0-ci.1"})
	if err != nil {
		t.Fatal(err)
	}
	if path != "example.com/root/sub" {
		t.Errorf("module path %q, want example.com/root/sub", path)
	}
	f, err := modfile.Parse("go.mod", out, nil)
	if err != nil {
		t.Fatalf("%v in\n%s", err, out)
	}
	if len(f.Replace) != 0 {
		t.Errorf("replace kept:\n%s", out)
	}
	got := map[string]string{}
	for _, r := range f.Require {
		got[r.Mod.Path] = r.Mod.Version
	}
	want := map[string]string{"example.com/other": "v1.2.3", "example.com/root": "v0.99.0-ci.1"}
	if len(got) != len(want) || got["example.com/other"] != want["example.com/other"] || got["example.com/root"] != want["example.com/root"] {
		t.Errorf("requires %v, want %v", got, want)
	}
}

func TestRewriteGoModUnchangedWithoutRequires(t *testing.T) {
	out, _, err := rewriteGoMod("go.mod", []byte(integrationGoMod), requires{})
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != integrationGoMod {
		t.Errorf("go.mod changed:\n%s", out)
	}
}

func TestRewriteGoModUnknownRequire(t *testing.T) {
	if _, _, err := rewriteGoMod("go.mod", []byte(integrationGoMod), requires{"example.com/nope": "v1.0.0"}); err == nil {
		t.Error("no error for a path the go.mod does not require")
	}
}

func TestAddToList(t *testing.T) {
	list := filepath.Join(t.TempDir(), "list")
	for _, v := range []string{"v0.99.0-ci.1", "v0.2.0", "v0.99.0-ci.1", "v0.10.0"} {
		if err := addToList(list, v); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(list)
	if err != nil {
		t.Fatal(err)
	}
	if want := "v0.2.0\nv0.10.0\nv0.99.0-ci.1\n"; string(data) != want {
		t.Errorf("list %q, want %q", data, want)
	}
}
