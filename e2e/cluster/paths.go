package cluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// ModulePath is the module path of the e2e module; the harness looks for its
// go.mod to find the default binary directory.
const ModulePath = "github.com/quietpatch/quietpatch/e2e"

// BinDirEnv names the environment variable that overrides where the
// kube-apiserver and etcd binaries are looked up.
const BinDirEnv = "QP_BIN_DIR"

// AssetsEnv names the environment variable of controller-runtime's envtest:
// a folder holding kube-apiserver and etcd (and kubectl), as
// `setup-envtest use -p path` prints it. When it is set, FindBinDir uses that
// folder before any other, and `make bins` links to it instead of building.
const AssetsEnv = "KUBEBUILDER_ASSETS"

// GatewayAPIModule is the Go module whose standard-channel CRDs the harness
// installs, and GatewayAPIVersion the version used when the running binary
// carries no build information naming it.
const (
	GatewayAPIModule  = "sigs.k8s.io/gateway-api"
	GatewayAPIVersion = "v1.6.3"
)

// Binary names inside the binary directory.
const (
	EtcdBinary      = "etcd"
	APIServerBinary = "kube-apiserver"
)

// FindBinDir returns the directory holding the kube-apiserver and etcd
// binaries, the first of:
//
//  1. $KUBEBUILDER_ASSETS (AssetsEnv), envtest's convention; a relative
//     path is taken from the working directory;
//  2. $QP_BIN_DIR (BinDirEnv);
//  3. the .bin directory next to the e2e module's go.mod (e2e/.bin, where
//     `make bins` links them), found by walking up from the working
//     directory and, failing that, from this source file.
//
// The first variable that is set (non-empty) decides: a folder it names that
// lacks a binary is an error, not a reason to look further. FindBinDir checks
// that both binaries are executable files; if not, the error wraps
// ErrBinariesMissing, names the missing file and says what to do.
func FindBinDir() (string, error) {
	if dir := os.Getenv(AssetsEnv); dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return "", fmt.Errorf("%w: %s=%s: %v", ErrBinariesMissing, AssetsEnv, dir, err)
		}
		if name := missingBinary(abs); name != "" {
			return "", fmt.Errorf("%w: %s=%s has no executable file %s; point %s at a folder holding %s and %s (as `setup-envtest use -p path` prints it), or unset it to use the binaries `make bins` builds",
				ErrBinariesMissing, AssetsEnv, dir, filepath.Join(abs, name), AssetsEnv, APIServerBinary, EtcdBinary)
		}
		return abs, nil
	}
	dir := os.Getenv(BinDirEnv)
	if dir == "" {
		mod, err := findModuleDir()
		if err != nil {
			return "", fmt.Errorf("%w: %v; set %s or %s, or run `make bins` in the repository root", ErrBinariesMissing, err, AssetsEnv, BinDirEnv)
		}
		dir = filepath.Join(mod, ".bin")
	}
	if name := missingBinary(dir); name != "" {
		return "", fmt.Errorf("%w: %s not found in %s; run `make bins` in the repository root (or `bash e2e/hack/build-binaries.sh`), or point %s or %s at a directory holding %s and %s",
			ErrBinariesMissing, name, dir, AssetsEnv, BinDirEnv, APIServerBinary, EtcdBinary)
	}
	return dir, nil
}

// missingBinary returns the name of the first of kube-apiserver and etcd that
// is not an executable file in dir (following symbolic links), or "".
func missingBinary(dir string) string {
	for _, name := range []string{APIServerBinary, EtcdBinary} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
			return name
		}
	}
	return ""
}

// findModuleDir locates the directory of the e2e module's go.mod.
func findModuleDir() (string, error) {
	return FindModule(ModulePath, "")
}

// FindModule walks up from the working directory and, failing that, from
// this source file, and returns the first directory d/sub whose go.mod
// declares module modulePath (sub "" means d itself). The tests, the demo
// and the benchmarks find the library, the examples and this module with
// it, wherever `go test` runs them from.
func FindModule(modulePath, sub string) (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	for _, start := range starts {
		for d := start; ; d = filepath.Dir(d) {
			cand := filepath.Join(d, sub)
			if ModulePathOf(filepath.Join(cand, "go.mod")) == modulePath {
				return cand, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", fmt.Errorf("no %s of module %s above %s", filepath.Join(sub, "go.mod"), modulePath, strings.Join(starts, " or "))
}

// ModulePathOf returns the module path the go.mod file gomod declares, or ""
// when it cannot be read or declares none.
func ModulePathOf(gomod string) string {
	f, err := os.Open(gomod)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module"); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// gatewayAPIVersion is the version of sigs.k8s.io/gateway-api linked into the
// running binary, or GatewayAPIVersion.
func gatewayAPIVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == GatewayAPIModule {
				if d.Replace != nil {
					d = d.Replace
				}
				if d.Version != "" && d.Version != "(devel)" {
					return d.Version
				}
			}
		}
	}
	return GatewayAPIVersion
}

// GatewayAPICRDDir returns the directory of the Gateway API standard-channel
// CRD manifests in the Go module cache (config/crd/standard of
// sigs.k8s.io/gateway-api at the version this binary links), downloading the
// module through the go command if it is not cached yet.
func GatewayAPICRDDir(ctx context.Context) (string, error) {
	ver := gatewayAPIVersion()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", GatewayAPIModule+"@"+ver)
	if mod, err := findModuleDir(); err == nil {
		cmd.Dir = mod
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var info struct {
		Dir   string
		Error string
	}
	if jerr := json.Unmarshal(out, &info); jerr != nil && err == nil {
		err = jerr
	}
	if err == nil && info.Error != "" {
		err = errors.New(info.Error)
	}
	if err != nil {
		return "", fmt.Errorf("cluster: locating %s@%s with `go mod download`: %v %s", GatewayAPIModule, ver, err, strings.TrimSpace(stderr.String()))
	}
	dir := filepath.Join(info.Dir, "config", "crd", "standard")
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return "", fmt.Errorf("cluster: %s@%s has no config/crd/standard directory at %s", GatewayAPIModule, ver, dir)
	}
	return dir, nil
}
