// Command modzip writes one module version into a module proxy laid out on
// disk (the layout GOPROXY=file://DIR serves): DIR/<module>/@v/<version>.info,
// .mod, .zip and the list file. hack/goget.sh uses it to publish the
// checkout's modules at a fake version, so that a scratch consumer can
// `go get` them exactly as it would a tagged release.
//
// The zip holds what `git archive` of a tag would: the module's files that
// git tracks or would track (git-ignored files stay out), less nested
// modules, with the repository's LICENSE added to a module in a
// subdirectory that has none (as the go command does). Each -require
// path=version sets that requirement and drops any replace of the path, in
// the go.mod put in the zip and in the .mod file alike: replace directives
// of a dependency are ignored by its consumers, so a release must require
// versions that resolve.
//
//	go run . -proxy DIR -dir ../../integrations/controllerruntime \
//	  -version v0.99.0-ci.1 -require github.com/quietpatch/quietpatch=v0.99.0-ci.1
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

type requires map[string]string

func (r requires) String() string { return fmt.Sprint(map[string]string(r)) }

func (r requires) Set(s string) error {
	path, version, ok := strings.Cut(s, "=")
	if !ok || path == "" || version == "" {
		return fmt.Errorf("want path=version, got %q", s)
	}
	r[path] = version
	return nil
}

func main() {
	proxy := flag.String("proxy", "", "folder of the on-disk module proxy (created if missing)")
	dir := flag.String("dir", ".", "the module's folder in a git checkout")
	version := flag.String("version", "", "the version to publish, canonical semver (e.g. v0.99.0-ci.1)")
	reqs := requires{}
	flag.Var(reqs, "require", "path=version: require this version of path and drop its replace (repeatable)")
	flag.Parse()
	if err := run(*proxy, *dir, *version, reqs); err != nil {
		fmt.Fprintln(os.Stderr, "modzip:", err)
		os.Exit(1)
	}
}

func run(proxy, dir, version string, reqs requires) error {
	if proxy == "" || version == "" {
		return errors.New("-proxy and -version are required")
	}
	if semver.Canonical(version) != version {
		return fmt.Errorf("version %q is not canonical semver", version)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	goModPath := filepath.Join(dir, "go.mod")
	data, err := os.ReadFile(goModPath)
	if err != nil {
		return err
	}
	gomod, modPath, err := rewriteGoMod(goModPath, data, reqs)
	if err != nil {
		return err
	}
	m := module.Version{Path: modPath, Version: version}
	if err := module.Check(m.Path, m.Version); err != nil {
		return err
	}

	files, err := moduleFiles(dir, gomod)
	if err != nil {
		return err
	}
	var zipBuf bytes.Buffer
	if err := zip.Create(&zipBuf, m, files); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, commitTime(dir)})
	if err != nil {
		return err
	}

	escPath, err := module.EscapePath(m.Path)
	if err != nil {
		return err
	}
	escVer, err := module.EscapeVersion(m.Version)
	if err != nil {
		return err
	}
	vdir := filepath.Join(proxy, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	for ext, content := range map[string][]byte{".info": info, ".mod": gomod, ".zip": zipBuf.Bytes()} {
		if err := os.WriteFile(filepath.Join(vdir, escVer+ext), content, 0o644); err != nil {
			return err
		}
	}
	if err := addToList(filepath.Join(vdir, "list"), version); err != nil {
		return err
	}
	fmt.Printf("modzip: %s@%s: %d files, zip %d bytes, in %s\n", m.Path, m.Version, len(files), zipBuf.Len(), vdir)
	return nil
}

// rewriteGoMod applies reqs to the go.mod and returns it and its module path.
func rewriteGoMod(name string, data []byte, reqs requires) ([]byte, string, error) {
	f, err := modfile.Parse(name, data, nil)
	if err != nil {
		return nil, "", err
	}
	if f.Module == nil {
		return nil, "", fmt.Errorf("%s: no module directive", name)
	}
	if len(reqs) == 0 {
		return data, f.Module.Mod.Path, nil // byte for byte, as a tag would have it
	}
	for path, version := range reqs {
		if !slices.ContainsFunc(f.Require, func(r *modfile.Require) bool { return r.Mod.Path == path }) {
			return nil, "", fmt.Errorf("%s: does not require %s", name, path)
		}
		if err := f.AddRequire(path, version); err != nil {
			return nil, "", err
		}
		for _, r := range f.Replace {
			if r.Old.Path == path {
				if err := f.DropReplace(path, r.Old.Version); err != nil {
					return nil, "", err
				}
			}
		}
	}
	f.Cleanup()
	out, err := f.Format()
	if err != nil {
		return nil, "", err
	}
	return out, f.Module.Mod.Path, nil
}

// moduleFiles lists the files of the module in dir that a git tag would
// carry: tracked, or untracked and not ignored, and present on disk. Files of
// nested modules are in the list; zip.Create omits them. go.mod is served
// from gomod.
func moduleFiles(dir string, gomod []byte) ([]zip.File, error) {
	out, err := git(dir, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", ".")
	if err != nil {
		return nil, err
	}
	var files []zip.File
	haveLicense := false
	for _, rel := range strings.Split(string(out), "\x00") {
		if rel == "" {
			continue
		}
		switch rel {
		case "go.mod":
			files = append(files, dataFile{name: rel, data: gomod})
			continue
		case "LICENSE":
			haveLicense = true
		}
		p := filepath.Join(dir, filepath.FromSlash(rel))
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			return nil, err
		}
		files = append(files, diskFile{name: rel, path: p, info: fi})
	}
	if !haveLicense {
		top, err := git(dir, "rev-parse", "--show-toplevel")
		if err != nil {
			return nil, err
		}
		if data, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(top)), "LICENSE")); err == nil {
			files = append(files, dataFile{name: "LICENSE", data: data})
		}
	}
	return files, nil
}

// commitTime is the committer time of HEAD, or now outside a repository.
func commitTime(dir string) time.Time {
	out, err := git(dir, "log", "-1", "--format=%cI")
	if err == nil {
		if t, err := time.Parse(time.RFC3339, strings.TrimSpace(string(out))); err == nil {
			return t.UTC()
		}
	}
	return time.Now().UTC().Truncate(time.Second)
}

func addToList(name, version string) error {
	data, err := os.ReadFile(name)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	versions := strings.Fields(string(data))
	if slices.Contains(versions, version) {
		return nil
	}
	versions = append(versions, version)
	semver.Sort(versions)
	return os.WriteFile(name, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}

func git(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

type diskFile struct {
	name, path string
	info       os.FileInfo
}

func (f diskFile) Path() string                 { return f.name }
func (f diskFile) Lstat() (os.FileInfo, error)  { return f.info, nil }
func (f diskFile) Open() (io.ReadCloser, error) { return os.Open(f.path) }

type dataFile struct {
	name string
	data []byte
}

func (f dataFile) Path() string                 { return f.name }
func (f dataFile) Lstat() (os.FileInfo, error)  { return dataInfo(f), nil }
func (f dataFile) Open() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(f.data)), nil }

type dataInfo dataFile

func (fi dataInfo) Name() string       { return filepath.Base(fi.name) }
func (fi dataInfo) Size() int64        { return int64(len(fi.data)) }
func (fi dataInfo) Mode() os.FileMode  { return 0o644 }
func (fi dataInfo) ModTime() time.Time { return time.Time{} }
func (fi dataInfo) IsDir() bool        { return false }
func (fi dataInfo) Sys() any           { return nil }
