package snippets_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// ownPackages maps the names the docs give this repository's packages to
// their folders, relative to the repository's root.
var ownPackages = map[string]string{
	"quietpatch":        ".",
	"leader":            "leader",
	"ewma":              "ewma",
	"statuspatch":       "statuspatch",
	"conditions":        "statuspatch/conditions",
	"source":            "statuspatch/source",
	"statuspatchtest":   "statuspatch/statuspatchtest",
	"outcome":           "statuspatch/outcome",
	"shard":             "internal/shard",
	"controllerruntime": "integrations/controllerruntime",
	"otelprom":          "integrations/otelprom",
}

const modulePath = "github.com/quietpatch/quietpatch"

// mention matches pkg.Identifier, optionally .Member, with the path that
// may precede pkg ("statuspatch/conditions.New"). A pkg preceded by a dot
// or a word character is a field or part of a word, not a package.
var mention = regexp.MustCompile(`(^|[^\w.])((?:[\w.-]+/)*)(\w+)\.([A-Z]\w*)(?:\.([A-Z]\w*))?`)

// TestDocIdentifiersExist checks that every pkg.Identifier (and
// pkg.Type.Member) that README.md, the examples' READMEs, docs/*.md and
// the packages' doc comments name, for a package of this repository,
// exists there: a renamed or removed identifier must take its mentions
// with it.
func TestDocIdentifiersExist(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	var texts []docText
	for _, pattern := range []string{"README.md", "docs/*.md", "examples/*/README.md", "integrations/*/examples/*/README.md"} {
		files, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			rel, _ := filepath.Rel(root, f)
			texts = append(texts, docText{rel, 1, string(b)})
		}
	}
	for _, dir := range libraryDirs(t, root) {
		texts = append(texts, commentTexts(t, root, dir)...)
	}
	api := &apiIndex{root: root, pkgs: map[string]*pkgAPI{}}
	checked := 0
	for _, d := range texts {
		for i, line := range strings.Split(d.text, "\n") {
			for _, m := range mention.FindAllStringSubmatch(line, -1) {
				prefix, pkg, id, member := m[2], m[3], m[4], m[5]
				dir, ok := ownPackages[pkg]
				if !ok || (prefix != "" && !strings.HasSuffix(importPath(dir), "/"+prefix+pkg) && importPath(dir) != prefix+pkg) {
					continue // another package, or a path that is not ours
				}
				checked++
				where := fmt.Sprintf("%s:%d", d.where, d.line+i)
				p := api.pkg(t, dir)
				if !p.has(id) {
					t.Errorf("%s: %s.%s does not exist in package %s", where, pkg, id, importPath(dir))
					continue
				}
				if member != "" && p.isType(id) && !api.hasMember(t, dir, id, member) {
					t.Errorf("%s: %s.%s.%s: %s has no field or method %s", where, pkg, id, member, id, member)
				}
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked %d mentions: the extraction is broken", checked)
	}
	t.Logf("%d mentions of the repository's identifiers checked", checked)
}

type docText struct {
	where string
	line  int
	text  string
}

func importPath(dir string) string {
	if dir == "." {
		return modulePath
	}
	return modulePath + "/" + dir
}

// libraryDirs are the folders of the packages whose docs users read: the
// library's (every package of the root module but examples and tests) and
// the integrations'.
func libraryDirs(t *testing.T, root string) []string {
	dirs := []string{"integrations/controllerruntime", "integrations/otelprom"}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if rel != "." {
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
		}
		if gos, _ := filepath.Glob(filepath.Join(path, "*.go")); len(gos) > 0 {
			dirs = append(dirs, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// commentTexts returns the comments of the non-test files in dir.
func commentTexts(t *testing.T, root, dir string) []docText {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, filepath.Join(root, dir), notTest, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var out []docText
	for _, p := range pkgs {
		for name, f := range p.Files {
			rel, _ := filepath.Rel(root, name)
			for _, cg := range f.Comments {
				for _, c := range cg.List {
					out = append(out, docText{rel, fset.Position(c.Pos()).Line, c.Text})
				}
			}
		}
	}
	return out
}

func notTest(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }

// apiIndex holds the exported declarations of the repository's packages,
// parsed on first use.
type apiIndex struct {
	root string
	pkgs map[string]*pkgAPI
}

type pkgAPI struct {
	names   map[string]bool          // exported top-level names
	types   map[string]*ast.TypeSpec // by name
	methods map[string][]string      // methods by receiver type
	imports map[string]string        // import name -> path, over the package's files
}

func (p *pkgAPI) has(id string) bool    { return p.names[id] }
func (p *pkgAPI) isType(id string) bool { return p.types[id] != nil }

func (a *apiIndex) pkg(t *testing.T, dir string) *pkgAPI {
	if p := a.pkgs[dir]; p != nil {
		return p
	}
	p := &pkgAPI{names: map[string]bool{}, types: map[string]*ast.TypeSpec{}, methods: map[string][]string{}, imports: map[string]string{}}
	a.pkgs[dir] = p
	pkgs, err := parser.ParseDir(token.NewFileSet(), filepath.Join(a.root, dir), notTest, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	for _, pk := range pkgs {
		for _, f := range pk.Files {
			for _, im := range f.Imports {
				path, _ := strconv.Unquote(im.Path.Value)
				name := filepath.Base(path)
				if im.Name != nil {
					name = im.Name.Name
				}
				p.imports[name] = path
			}
			for _, decl := range f.Decls {
				switch d := decl.(type) {
				case *ast.FuncDecl:
					if d.Recv == nil {
						p.names[d.Name.Name] = true
						continue
					}
					recv := d.Recv.List[0].Type
					if s, ok := recv.(*ast.StarExpr); ok {
						recv = s.X
					}
					switch r := recv.(type) {
					case *ast.IndexExpr:
						recv = r.X
					case *ast.IndexListExpr:
						recv = r.X
					}
					if id, ok := recv.(*ast.Ident); ok {
						p.methods[id.Name] = append(p.methods[id.Name], d.Name.Name)
					}
				case *ast.GenDecl:
					for _, spec := range d.Specs {
						switch s := spec.(type) {
						case *ast.TypeSpec:
							p.names[s.Name.Name], p.types[s.Name.Name] = true, s
						case *ast.ValueSpec:
							for _, n := range s.Names {
								p.names[n.Name] = true
							}
						}
					}
				}
			}
		}
	}
	return p
}

// hasMember reports whether type id of the package in dir has a field or
// method member, its own or promoted from an embedded type, or through an
// alias.
func (a *apiIndex) hasMember(t *testing.T, dir, id, member string) bool {
	p := a.pkg(t, dir)
	if slices.Contains(p.methods[id], member) {
		return true
	}
	ts := p.types[id]
	if ts == nil {
		return false
	}
	// follow resolves a type expression of the package to (dir, name) when
	// it names a type of this repository.
	follow := func(e ast.Expr) (string, string, bool) {
		if s, ok := e.(*ast.StarExpr); ok {
			e = s.X
		}
		switch x := e.(type) {
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		}
		switch x := e.(type) {
		case *ast.Ident:
			return dir, x.Name, true
		case *ast.SelectorExpr:
			pkg, ok := x.X.(*ast.Ident)
			if !ok {
				return "", "", false
			}
			path := p.imports[pkg.Name]
			if path == modulePath {
				return ".", x.Sel.Name, true
			}
			if rel, ok := strings.CutPrefix(path, modulePath+"/"); ok {
				return rel, x.Sel.Name, true
			}
		}
		return "", "", false
	}
	if ts.Assign != 0 {
		d, n, ok := follow(ts.Type)
		return ok && a.hasMember(t, d, n, member)
	}
	var fields *ast.FieldList
	switch x := ts.Type.(type) {
	case *ast.StructType:
		fields = x.Fields
	case *ast.InterfaceType:
		fields = x.Methods
	}
	if fields == nil {
		return false
	}
	for _, f := range fields.List {
		for _, n := range f.Names {
			if n.Name == member {
				return true
			}
		}
		if len(f.Names) == 0 { // embedded
			if d, n, ok := follow(f.Type); ok && (n == member || a.hasMember(t, d, n, member)) {
				return true
			}
		}
	}
	return false
}
