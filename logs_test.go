package quietpatch_test

import (
	"bufio"
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

// logLevels are slog's levels by the names docs/logs.md uses, in order.
var logLevels = []string{"debug", "info", "warn", "error"}

// logMethods maps the *slog.Logger methods that log to the index of
// their message argument and their level ("" : the argument before the
// message).
var logMethods = map[string]struct {
	msg   int
	level string
}{
	"Debug": {0, "debug"}, "Info": {0, "info"}, "Warn": {0, "warn"}, "Error": {0, "error"},
	"DebugContext": {1, "debug"}, "InfoContext": {1, "info"}, "WarnContext": {1, "warn"}, "ErrorContext": {1, "error"},
	"Log": {2, ""}, "LogAttrs": {2, ""},
}

// logRecord is a message the library logs at a level (or, for a call
// whose level is a variable, at one of a few levels): the attribute keys
// of its calls. Records are keyed by recordKey.
type logRecord struct {
	msg    string
	levels []string
	keys   []string
	where  []string
}

// recordKey is "<levels> <message>".
func recordKey(levels []string, msg string) string { return strings.Join(levels, ", ") + " " + msg }

// listed reports whether the table lists r: logged at info or above.
func (r logRecord) listed() bool {
	return slices.ContainsFunc(r.levels, func(l string) bool { return l != "debug" })
}

// TestLogsTableMatchesTheCode checks docs/logs.md against the library's
// code: every slog call of the root module's packages (the library) at
// info, warn or error level has a row with its message, its levels and
// exactly its attribute keys, and every row names such a call. The calls
// are found with go/ast: a method of *slog.Logger's logging set whose
// message is a constant; a level or an attribute that cannot be read from
// the code fails the test, so that no record escapes the table.
func TestLogsTableMatchesTheCode(t *testing.T) {
	code := codeLogRecords(t, ".")
	if len(code) < 20 {
		t.Fatalf("found %d log messages in the code: the extraction is broken", len(code))
	}
	table := tableLogRecords(t, "docs/logs.md")
	var missing []string
	for k, rec := range code {
		if !rec.listed() {
			continue // debug only: not listed
		}
		row, ok := table[k]
		if !ok {
			missing = append(missing, fmt.Sprintf("| %s | `%s` | %s | |", strings.Join(rec.levels, ", "), rec.msg, keyList(rec.keys)))
			t.Errorf("%s: %q at %s is not in docs/logs.md", strings.Join(rec.where, ", "), rec.msg, strings.Join(rec.levels, ", "))
			continue
		}
		if !slices.Equal(row.keys, rec.keys) {
			t.Errorf("docs/logs.md: %q at %s has the attributes %s (%s), the table says %s", rec.msg, strings.Join(rec.levels, ", "), keyList(rec.keys), strings.Join(rec.where, ", "), keyList(row.keys))
		}
	}
	for k, row := range table {
		if rec, ok := code[k]; !ok || !rec.listed() {
			t.Errorf("docs/logs.md lists %q at %s, which the library does not log (at that level, or at info or above)", row.msg, strings.Join(row.levels, ", "))
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		t.Logf("rows to add to docs/logs.md (fill in the last column):\n%s", strings.Join(missing, "\n"))
	}
}

func keyList(keys []string) string {
	if len(keys) == 0 {
		return "—"
	}
	return "`" + strings.Join(keys, "`, `") + "`"
}

// tableRow matches a row of docs/logs.md's table: | level | `message` | attributes | ... |.
var tableRow = regexp.MustCompile("^\\| ([a-z, ]+) \\| `([^`]+)` \\| ([^|]*) \\|")

func tableLogRecords(t *testing.T, path string) map[string]logRecord {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]logRecord{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		m := tableRow.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		rec := logRecord{msg: m[2]}
		for _, l := range strings.Split(m[1], ",") {
			l = strings.TrimSpace(l)
			if !slices.Contains(logLevels, l) {
				t.Fatalf("%s:%d: level %q: want %s", path, n, l, strings.Join(logLevels, ", "))
			}
			rec.levels = append(rec.levels, l)
		}
		if attrs := strings.TrimSpace(m[3]); attrs != "—" {
			for _, k := range strings.Split(attrs, ",") {
				k = strings.Trim(strings.TrimSpace(k), "`")
				rec.keys = append(rec.keys, k)
			}
		}
		slices.Sort(rec.keys)
		k := recordKey(rec.levels, rec.msg)
		if _, dup := out[k]; dup {
			t.Errorf("%s:%d: %q at %s listed twice", path, n, rec.msg, m[1])
		}
		out[k] = rec
	}
	if len(out) == 0 {
		t.Fatalf("%s: no table rows found", path)
	}
	return out
}

// codeLogRecords returns the log records of the packages of the module in
// root, by recordKey.
func codeLogRecords(t *testing.T, root string) map[string]logRecord {
	out := map[string]logRecord{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if path != root {
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
		}
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, path, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
		if err != nil {
			return err
		}
		for _, p := range pkgs {
			consts := stringConsts(p)
			for _, f := range p.Files {
				logCalls(t, fset, f, consts, out)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for k, rec := range out {
		slices.Sort(rec.keys)
		rec.keys = slices.Compact(rec.keys)
		out[k] = rec
	}
	return out
}

// stringConsts returns the package's string constants.
func stringConsts(p *ast.Package) map[string]string {
	out := map[string]string{}
	for _, f := range p.Files {
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						if s, ok := stringLit(vs.Values[i]); ok {
							out[n.Name] = s
						}
					}
				}
			}
		}
	}
	return out
}

func stringLit(e ast.Expr) (string, bool) {
	b, ok := e.(*ast.BasicLit)
	if !ok || b.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(b.Value)
	return s, err == nil
}

// logCalls adds the log calls of f to out.
func logCalls(t *testing.T, fset *token.FileSet, f *ast.File, consts map[string]string, out map[string]logRecord) {
	imports := map[string]string{}
	for _, im := range f.Imports {
		path, _ := strconv.Unquote(im.Path.Value)
		name := filepath.Base(path)
		if im.Name != nil {
			name = im.Name.Name
		}
		imports[name] = path
	}
	str := func(e ast.Expr) (string, bool) {
		if s, ok := stringLit(e); ok {
			return s, true
		}
		if id, ok := e.(*ast.Ident); ok {
			s, ok := consts[id.Name]
			return s, ok
		}
		return "", false
	}
	// attrKey returns the key of an slog.Attr constructor call.
	attrKey := func(e ast.Expr) (string, bool) {
		c, ok := e.(*ast.CallExpr)
		if !ok || len(c.Args) == 0 {
			return "", false
		}
		sel, ok := c.Fun.(*ast.SelectorExpr)
		if !ok {
			return "", false
		}
		if pkg, ok := sel.X.(*ast.Ident); !ok || imports[pkg.Name] != "log/slog" {
			return "", false
		}
		return str(c.Args[0])
	}
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			m, ok := logMethods[sel.Sel.Name]
			if !ok || len(call.Args) <= m.msg {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); ok && imports[pkg.Name] != "" && imports[pkg.Name] != "log/slog" {
				return true // a function of another package: http.Error
			}
			where := fset.Position(call.Pos()).String()
			msg, ok := str(call.Args[m.msg])
			if !ok {
				t.Errorf("%s: a log message that is not a constant: docs/logs.md cannot list it", where)
				return true
			}
			levels := []string{m.level}
			if m.level == "" {
				levels = levelsOf(fn.Body, call.Args[1])
				if len(levels) == 0 {
					t.Errorf("%s: %q: cannot tell the level of %s from the code", where, msg, exprKind(call.Args[1]))
					return true
				}
				slices.SortFunc(levels, func(a, b string) int { return slices.Index(logLevels, a) - slices.Index(logLevels, b) })
				levels = slices.Compact(levels)
			}
			key := recordKey(levels, msg)
			rec := out[key]
			rec.msg, rec.levels, rec.where = msg, levels, append(rec.where, where)
			args := call.Args[m.msg+1:]
			for i := 0; i < len(args); i++ {
				if k, ok := str(args[i]); ok { // "key", value
					rec.keys = append(rec.keys, k)
					i++
					continue
				}
				if k, ok := attrKey(args[i]); ok {
					rec.keys = append(rec.keys, k)
					continue
				}
				if id, ok := args[i].(*ast.Ident); ok && call.Ellipsis.IsValid() && i == len(args)-1 {
					keys := sliceKeys(fn.Body, id.Name, call.Pos(), attrKey)
					if len(keys) == 0 {
						t.Errorf("%s: %q: cannot read the attributes of %s from the code", where, msg, id.Name)
					}
					rec.keys = append(rec.keys, keys...)
					continue
				}
				t.Errorf("%s: %q: attribute %d is neither a constant key nor an slog attribute", where, msg, i)
			}
			out[key] = rec
			return true
		})
	}
}

func exprKind(e ast.Expr) string { return fmt.Sprintf("%T", e) }

// levelName maps slog's level constants to the table's names.
var levelName = map[string]string{"LevelDebug": "debug", "LevelInfo": "info", "LevelWarn": "warn", "LevelError": "error"}

// levelsOf returns the levels e may have: an slog.LevelX, or a variable
// of the function body assigned slog.LevelX constants.
func levelsOf(body *ast.BlockStmt, e ast.Expr) []string {
	if sel, ok := e.(*ast.SelectorExpr); ok {
		if l, ok := levelName[sel.Sel.Name]; ok {
			return []string{l}
		}
		return nil
	}
	id, ok := e.(*ast.Ident)
	if !ok {
		return nil
	}
	var out []string
	ast.Inspect(body, func(n ast.Node) bool {
		as, ok := n.(*ast.AssignStmt)
		if !ok {
			return true
		}
		for i, lhs := range as.Lhs {
			if l, ok := lhs.(*ast.Ident); ok && l.Name == id.Name && i < len(as.Rhs) {
				out = append(out, levelsOf(body, as.Rhs[i])...)
			}
		}
		return true
	})
	return out
}

// sliceKeys returns the keys of the slog attributes the function body
// puts in the slice variable name before the call at pos: in its composite
// literals and appends.
func sliceKeys(body *ast.BlockStmt, name string, pos token.Pos, attrKey func(ast.Expr) (string, bool)) []string {
	var out []string
	add := func(elts []ast.Expr) {
		for _, e := range elts {
			if k, ok := attrKey(e); ok {
				out = append(out, k)
			}
		}
	}
	ast.Inspect(body, func(n ast.Node) bool {
		as, ok := n.(*ast.AssignStmt)
		if !ok || as.Pos() > pos {
			return true
		}
		for i, lhs := range as.Lhs {
			if l, ok := lhs.(*ast.Ident); !ok || l.Name != name || i >= len(as.Rhs) {
				continue
			}
			switch rhs := as.Rhs[i].(type) {
			case *ast.CompositeLit:
				add(rhs.Elts)
			case *ast.CallExpr:
				if f, ok := rhs.Fun.(*ast.Ident); ok && f.Name == "append" && len(rhs.Args) > 1 {
					add(rhs.Args[1:])
				}
			}
		}
		return true
	})
	return out
}
