package monitoring

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// PromtoolBinary is the name of promtool in the binary directory.
const PromtoolBinary = "promtool"

// BinDirEnv names the environment variable that overrides where promtool is
// looked up; it is the one the e2e harness uses for kube-apiserver and etcd.
const BinDirEnv = "QP_BIN_DIR"

// ErrPromtoolMissing is wrapped by FindPromtool when there is no promtool
// binary to run.
var ErrPromtoolMissing = errors.New("monitoring: promtool not found")

// FindPromtool returns the path of the promtool binary: $QP_BIN_DIR/promtool
// if QP_BIN_DIR is set, otherwise e2e/.bin/promtool of the repository (found
// as Dir finds it, whatever QP_MONITORING_DIR says), where e2e/hack/build-tools.sh (`make tools`) links it.
func FindPromtool() (string, error) {
	dir := os.Getenv(BinDirEnv)
	if dir == "" {
		root, err := repoRoot()
		if err != nil {
			return "", fmt.Errorf("%w: %v", ErrPromtoolMissing, err)
		}
		dir = filepath.Join(root, "e2e", ".bin")
	}
	p := filepath.Join(dir, PromtoolBinary)
	st, err := os.Stat(p)
	if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%w: no executable %s in %s; run `make tools` in the repository root (or `bash e2e/hack/build-tools.sh`), or point %s at a directory holding it",
			ErrPromtoolMissing, PromtoolBinary, dir, BinDirEnv)
	}
	return p, nil
}

// Promtool runs promtool with args in dir and returns its combined output.
// The error, if any, includes that output.
func Promtool(ctx context.Context, dir string, args ...string) (string, error) {
	bin, err := FindPromtool()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("monitoring: promtool %v: %w\n%s", args, err, out.String())
	}
	return out.String(), nil
}
