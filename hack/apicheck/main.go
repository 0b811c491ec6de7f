// Command apicheck keeps quietpatch's releases honest (make apicheck, part
// of make test; make api and make release). Run from the repository's root:
//
//	apicheck            check: the version file, CHANGELOG.md, and the API of
//	                    the checkout against the last release's snapshot
//	apicheck -release   the same for cutting the release in the version file:
//	                    stricter (see allowed), then writes the snapshot
//	                    and moves CHANGELOG.md's Unreleased entries under
//	                    "## <version> - <date>"
//
// The API is that of the library-facing modules (the root,
// integrations/controllerruntime, integrations/otelprom), less examples,
// internal and main packages. A snapshot is one file per package in
// hack/apicheck/api/v<version>/ (not in the root module: its zip would
// carry them to every consumer), written with gcexportdata in the format of
// golang.org/x/exp/cmd/apidiff -w (the package path on the first line), so
// `go tool apidiff api/v0.1.0/leader.export github.com/quietpatch/quietpatch/leader`
// (run in hack/apicheck) reads it too. The changes are found by
// golang.org/x/exp/apidiff; the rule of which are allowed is in allowed,
// and docs/releasing.md says it in words.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/exp/apidiff"
	"golang.org/x/tools/go/gcexportdata"
	"golang.org/x/tools/go/packages"
)

// apiDir holds the snapshots, api/v<version>/, relative to the
// repository's root: in this module, so that the root module's zip, which
// every consumer downloads, does not carry them.
const apiDir = "hack/apicheck/api"

// modulePath is the root module's path.
const modulePath = "github.com/quietpatch/quietpatch"

// apiModules are the modules whose API the releases promise, relative to
// the repository's root.
var apiModules = []string{".", "integrations/controllerruntime", "integrations/otelprom"}

func main() {
	root := flag.String("root", ".", "the repository's root")
	release := flag.Bool("release", false, "cut the release named in the version file: check, write the API snapshot, move the changelog's Unreleased entries")
	date := flag.String("date", time.Now().UTC().Format(time.DateOnly), "the release date, with -release")
	flag.Parse()
	if err := run(os.Stdout, *root, *release, *date); err != nil {
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		os.Exit(1)
	}
}

func run(out *os.File, root string, release bool, date string) error {
	next, err := readVersion(root)
	if err != nil {
		return err
	}
	clog, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		return err
	}
	released, err := snapshots(root)
	if err != nil {
		return err
	}
	if err := checkChangelog(string(clog), released, next, release); err != nil {
		return fmt.Errorf("CHANGELOG.md: %w", err)
	}
	if len(released) == 0 {
		fmt.Fprintf(out, "apicheck: version %s; no release yet (no snapshot in "+apiDir+"): no API to compare with\n", next)
	} else {
		base := released[len(released)-1]
		if base == next && release {
			return fmt.Errorf("version %s is released already (%s/v%s exists): raise the version file", next, apiDir, next)
		}
		changes, err := compare(root, apiModules, base)
		if err != nil {
			return err
		}
		for _, c := range changes {
			kind := "compatible"
			if !c.Compatible {
				kind = "INCOMPATIBLE"
			}
			fmt.Fprintf(out, "  %s: %s\n", kind, c.Message)
		}
		incompatible := slices.ContainsFunc(changes, func(c apidiff.Change) bool { return !c.Compatible })
		compatible := slices.ContainsFunc(changes, func(c apidiff.Change) bool { return c.Compatible })
		if err := allowed(base, next, incompatible, compatible, release); err != nil {
			return err
		}
		fmt.Fprintf(out, "apicheck: version %s against the release v%s: %d API changes, allowed\n", next, base, len(changes))
	}
	if !release {
		return nil
	}
	if err := writeSnapshot(root, apiModules, next); err != nil {
		return err
	}
	cut, err := cutChangelog(string(clog), next, date)
	if err != nil {
		return fmt.Errorf("CHANGELOG.md: %w", err)
	}
	if err := os.WriteFile(filepath.Join(root, "CHANGELOG.md"), []byte(cut), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(out, "apicheck: wrote %s/v%s/ and the CHANGELOG.md section %s\n", apiDir, next, next)
	return nil
}

// readVersion reads the version file: the version of the release being
// prepared, X.Y.Z.
func readVersion(root string) (version, error) {
	b, err := os.ReadFile(filepath.Join(root, "version"))
	if err != nil {
		return version{}, err
	}
	v, err := parseVersion(strings.TrimSpace(string(b)))
	if err != nil {
		return version{}, fmt.Errorf("the version file: %w", err)
	}
	return v, nil
}

// snapshots returns the versions that have a snapshot in api/, in order.
func snapshots(root string) ([]version, error) {
	entries, err := os.ReadDir(filepath.Join(root, apiDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []version
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		v, err := parseVersion(e.Name())
		if err != nil || !strings.HasPrefix(e.Name(), "v") {
			return nil, fmt.Errorf("%s/%s: want a folder v<X.Y.Z>", apiDir, e.Name())
		}
		out = append(out, v)
	}
	slices.SortFunc(out, version.compare)
	return out, nil
}

// apiPackages loads the packages of the API modules from the checkout.
func apiPackages(root string, modules []string) ([]*packages.Package, error) {
	var out []*packages.Package
	for _, m := range modules {
		cfg := &packages.Config{
			Mode: packages.NeedName | packages.NeedTypes | packages.NeedModule,
			Dir:  filepath.Join(root, m),
			Env:  append(os.Environ(), "GOWORK=off"),
			Fset: token.NewFileSet(),
		}
		pkgs, err := packages.Load(cfg, "./...")
		if err != nil {
			return nil, fmt.Errorf("loading %s: %w", m, err)
		}
		for _, p := range pkgs {
			if len(p.Errors) > 0 {
				return nil, fmt.Errorf("loading %s: %v", p.PkgPath, p.Errors[0])
			}
			if inAPI(p.PkgPath, p.Name) {
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// inAPI reports whether a package is part of the API: not a command, an
// example, an internal package or a test helper.
func inAPI(path, name string) bool {
	if name == "main" || !strings.HasPrefix(path, modulePath) {
		return false
	}
	for _, part := range strings.Split(path, "/") {
		if part == "examples" || part == "internal" || part == "testdata" || part == "snippets" {
			return false
		}
	}
	return true
}

// snapshotName is the file of a package in a snapshot folder.
func snapshotName(path string) string {
	rel := strings.TrimPrefix(strings.TrimPrefix(path, modulePath), "/")
	if rel == "" {
		rel = "quietpatch"
	}
	return strings.ReplaceAll(rel, "/", ".") + ".export"
}

// writeSnapshot writes api/v<v>/ from the checkout.
func writeSnapshot(root string, modules []string, v version) error {
	dir := filepath.Join(root, apiDir, "v"+v.String())
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("%s/v%s exists already", apiDir, v)
	}
	pkgs, err := apiPackages(root, modules)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, p := range pkgs {
		f, err := os.Create(filepath.Join(dir, snapshotName(p.PkgPath)))
		if err != nil {
			return err
		}
		fmt.Fprintln(f, p.PkgPath) // apidiff -w's header: the path
		err1 := gcexportdata.Write(f, p.Fset, p.Types)
		if err2 := f.Close(); err1 == nil {
			err1 = err2
		}
		if err1 != nil {
			return fmt.Errorf("writing the snapshot of %s: %w", p.PkgPath, err1)
		}
	}
	return nil
}

// readSnapshot reads the packages of api/v<v>/.
func readSnapshot(root string, v version) ([]*types.Package, error) {
	files, err := filepath.Glob(filepath.Join(root, apiDir, "v"+v.String(), "*.export"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s/v%s holds no .export file", apiDir, v)
	}
	var out []*types.Package
	for _, name := range files {
		p, err := readExport(name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func readExport(name string) (*types.Package, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	path, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	return gcexportdata.Read(r, token.NewFileSet(), map[string]*types.Package{}, strings.TrimSuffix(path, "\n"))
}

// compare returns the API changes from the snapshot of base to the
// checkout: apidiff's for each package of both, a removed package as an
// incompatible change, an added one as a compatible change.
func compare(root string, modules []string, base version) ([]apidiff.Change, error) {
	old, err := readSnapshot(root, base)
	if err != nil {
		return nil, err
	}
	pkgs, err := apiPackages(root, modules)
	if err != nil {
		return nil, err
	}
	cur := map[string]*types.Package{}
	for _, p := range pkgs {
		cur[p.PkgPath] = p.Types
	}
	var out []apidiff.Change
	for _, o := range old {
		n, ok := cur[o.Path()]
		if !ok {
			out = append(out, apidiff.Change{Message: o.Path() + ": package removed", Compatible: false})
			continue
		}
		delete(cur, o.Path())
		for _, c := range apidiff.Changes(o, n).Changes {
			c.Message = o.Path() + ": " + c.Message
			out = append(out, c)
		}
	}
	for path := range cur {
		out = append(out, apidiff.Change{Message: path + ": package added", Compatible: true})
	}
	slices.SortStableFunc(out, func(a, b apidiff.Change) int { return strings.Compare(a.Message, b.Message) })
	return out, nil
}
