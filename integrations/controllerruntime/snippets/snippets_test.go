package snippets_test

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// snippetPackages are the packages whose documentation's Go snippets must
// compile, relative to the repository's root.
var snippetPackages = []string{
	".", "leader", "ewma", "statuspatch", "statuspatch/conditions", "statuspatch/source",
	"statuspatch/outcome", "integrations/controllerruntime", "integrations/otelprom",
}

// snippetImports maps the package names snippets use to import paths.
var snippetImports = map[string]string{
	"context":           "context",
	"errors":            "errors",
	"slog":              "log/slog",
	"runtime":           "k8s.io/apimachinery/pkg/runtime",
	"ctrl":              "sigs.k8s.io/controller-runtime",
	"fmt":               "fmt",
	"time":              "time",
	"http":              "net/http",
	"metav1":            "k8s.io/apimachinery/pkg/apis/meta/v1",
	"corev1":            "k8s.io/api/core/v1",
	"schema":            "k8s.io/apimachinery/pkg/runtime/schema",
	"types":             "k8s.io/apimachinery/pkg/types",
	"dynamic":           "k8s.io/client-go/dynamic",
	"dynamicinformer":   "k8s.io/client-go/dynamic/dynamicinformer",
	"kubernetes":        "k8s.io/client-go/kubernetes",
	"rest":              "k8s.io/client-go/rest",
	"cache":             "k8s.io/client-go/tools/cache",
	"manager":           "sigs.k8s.io/controller-runtime/pkg/manager",
	"client":            "sigs.k8s.io/controller-runtime/pkg/client",
	"metrics":           "sigs.k8s.io/controller-runtime/pkg/metrics",
	"watch":             "k8s.io/apimachinery/pkg/watch",
	"unstructured":      "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured",
	"quietpatch":        "github.com/quietpatch/quietpatch",
	"leader":            "github.com/quietpatch/quietpatch/leader",
	"ewma":              "github.com/quietpatch/quietpatch/ewma",
	"statuspatch":       "github.com/quietpatch/quietpatch/statuspatch",
	"conditions":        "github.com/quietpatch/quietpatch/statuspatch/conditions",
	"source":            "github.com/quietpatch/quietpatch/statuspatch/source",
	"outcome":           "github.com/quietpatch/quietpatch/statuspatch/outcome",
	"controllerruntime": "github.com/quietpatch/quietpatch/integrations/controllerruntime",
	"v1":                "github.com/quietpatch/quietpatch/integrations/controllerruntime/examples/widget/api/v1",
	"otelprom":          "github.com/quietpatch/quietpatch/integrations/otelprom",
	"prometheus":        "github.com/prometheus/client_golang/prometheus",
	"promhttp":          "github.com/prometheus/client_golang/prometheus/promhttp",
}

// snippetPrelude declares what the docs' snippets may name without
// declaring: the Widget type of the root package's documentation.
const snippetPrelude = `
type Widget struct {
	metav1.TypeMeta   ` + "`json:\",inline\"`" + `
	metav1.ObjectMeta ` + "`json:\"metadata,omitempty\"`" + `
	Status struct {
		ObservedGeneration int64              ` + "`json:\"observedGeneration,omitempty\"`" + `
		Conditions         []metav1.Condition ` + "`json:\"conditions,omitempty\"`" + `
	} ` + "`json:\"status,omitempty\"`" + `
}

func widgetConditions(*Widget) ([]metav1.Condition, error) { return nil, nil }
`

type snippet struct {
	where string // file:line
	code  string
}

// TestSnippetsCompile compiles every Go snippet of README.md (```go
// blocks) and of the packages' documentation (indented blocks that start
// with "func "), each as a file of a module that requires this repository's
// modules. A snippet must be complete: a function declaring what it uses.
// An indented block that looks like Go statements but is not a function
// fails the test, so that no fragment creeps back.
func TestSnippetsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module")
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	snips := readmeSnippets(t, filepath.Join(root, "README.md"))
	for _, p := range snippetPackages {
		snips = append(snips, docSnippets(t, filepath.Join(root, p))...)
	}
	if len(snips) < 3 {
		t.Fatalf("found %d snippets: the extraction is broken", len(snips))
	}
	dir := t.TempDir()
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	mod := strings.Replace(string(gomod), "module github.com/quietpatch/quietpatch/integrations/controllerruntime", "module snippets", 1)
	mod = strings.Replace(mod, "replace github.com/quietpatch/quietpatch => ../..",
		fmt.Sprintf("replace github.com/quietpatch/quietpatch => %s\n\nreplace github.com/quietpatch/quietpatch/integrations/controllerruntime => %s\n\nrequire github.com/quietpatch/quietpatch/integrations/controllerruntime v0.0.0-00010101000000-000000000000\n\nreplace github.com/quietpatch/quietpatch/integrations/otelprom => %s\n\nrequire github.com/quietpatch/quietpatch/integrations/otelprom v0.0.0-00010101000000-000000000000\n",
			root, filepath.Join(root, "integrations/controllerruntime"), filepath.Join(root, "integrations/otelprom")), 1)
	write(t, filepath.Join(dir, "go.mod"), mod)
	sum, _ := os.ReadFile("../go.sum")
	write(t, filepath.Join(dir, "go.sum"), string(sum))
	for i, s := range snips { // a package each: snippets may share names
		pkg := fmt.Sprintf("s%02d", i)
		if err := os.Mkdir(filepath.Join(dir, pkg), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, pkg, "prelude.go"), "package "+pkg+"\n\nimport metav1 \"k8s.io/apimachinery/pkg/apis/meta/v1\"\n"+snippetPrelude)
		write(t, filepath.Join(dir, pkg, pkg+".go"),
			fmt.Sprintf("// %s\n\npackage %s\n\n%s\n%s\n", s.where, pkg, imports(t, s), s.code))
	}
	cmd := exec.Command("go", "build", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("snippets do not compile (files in %s name their source):\n%s", dir, out)
	}
	t.Logf("%d snippets compile", len(snips))
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// imports returns the import block for the packages s uses: the names it
// leaves unresolved (not declared in it, comments aside) that
// snippetImports knows.
func imports(t *testing.T, s snippet) string {
	f, err := parser.ParseFile(token.NewFileSet(), s.where, "package p\n"+s.code, 0)
	if err != nil {
		t.Fatalf("%s: the snippet does not parse: %v\n%s", s.where, err, s.code)
	}
	seen := map[string]bool{}
	var b strings.Builder
	b.WriteString("import (\n")
	for _, id := range f.Unresolved {
		if p, ok := snippetImports[id.Name]; ok && !seen[id.Name] {
			seen[id.Name] = true
			fmt.Fprintf(&b, "\t%s %q\n", id.Name, p)
		}
	}
	b.WriteString(")\n")
	return b.String()
}

func readmeSnippets(t *testing.T, path string) []snippet {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []snippet
	var cur *strings.Builder
	start := 0
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```go":
			cur, start = &strings.Builder{}, n
		case cur != nil && strings.TrimSpace(line) == "```":
			out = append(out, snippet{fmt.Sprintf("README.md:%d", start), cur.String()})
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	return out
}

// docSnippets returns the "func" code blocks of the doc comments of the
// package in dir; it fails on blocks that look like Go fragments.
func docSnippets(t *testing.T, dir string) []snippet {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var out []snippet
	for _, p := range pkgs {
		for name, f := range p.Files {
			for _, cg := range f.Comments {
				lines := strings.Split(cg.Text(), "\n")
				for i := 0; i < len(lines); i++ {
					if !strings.HasPrefix(lines[i], "\t") {
						continue
					}
					j := i
					var b strings.Builder
					for ; j < len(lines) && (strings.HasPrefix(lines[j], "\t") || lines[j] == ""); j++ {
						b.WriteString(strings.TrimPrefix(lines[j], "\t") + "\n")
					}
					code := b.String()
					where := fmt.Sprintf("%s:%d", filepath.Base(name), fset.Position(cg.Pos()).Line+i)
					switch {
					case strings.HasPrefix(code, "func "):
						out = append(out, snippet{where, code})
					case strings.Contains(code, ":=") || strings.Contains(code, "err != nil"):
						t.Errorf("%s/%s: a Go fragment in the docs; make it a complete func so that it compiles:\n%s", filepath.Base(dir), where, code)
					}
					i = j
				}
			}
		}
	}
	return out
}
