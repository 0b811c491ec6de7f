package examplee2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/quietpatch/quietpatch/e2e/cluster"
)

// ExamplesModule is the module path of the examples module.
const ExamplesModule = "github.com/quietpatch/quietpatch/examples"

// ControllerPackage is the controller command, relative to the examples module.
const ControllerPackage = "./httproute-status"

// ControllerBinary is the file name BuildController writes.
const ControllerBinary = "httproute-status"

// ExamplesDir returns the directory of the examples module: the go.mod of
// module ExamplesModule found in a sibling "examples" directory of a parent
// of the working directory or of this source file.
func ExamplesDir() (string, error) {
	dir, err := cluster.FindModule(ExamplesModule, "examples")
	if err != nil {
		return "", fmt.Errorf("examplee2e: %w", err)
	}
	return dir, nil
}

// DeployDir is the example's deploy directory (RBAC manifests) inside the
// examples module.
func DeployDir(examplesDir string) string {
	return filepath.Join(examplesDir, "httproute-status", "deploy")
}

// ShardsDeployDir is the directory of the RBAC a deployment with
// --shards > 1 needs on top of DeployDir's (a kustomize component): load
// both and Merge them.
func ShardsDeployDir(examplesDir string) string {
	return filepath.Join(DeployDir(examplesDir), "shards")
}

// BuildController builds the controller command of the examples module
// (go build, so the build cache makes a rebuild quick) into
// outDir/ControllerBinary and returns its path and how long the build took.
func BuildController(ctx context.Context, examplesDir, outDir string) (string, time.Duration, error) {
	begin := time.Now()
	out := filepath.Join(outDir, ControllerBinary)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, ControllerPackage)
	cmd.Dir = examplesDir
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Run(); err != nil {
		return "", 0, fmt.Errorf("examplee2e: go build %s in %s: %w\n%s", ControllerPackage, examplesDir, err, output.Bytes())
	}
	return out, time.Since(begin), nil
}

// WriteKubeconfig writes a kubeconfig file for cfg's server, CA and bearer
// token (as cluster.ControlPlane.ConfigFor returns them), readable only by
// its owner.
func WriteKubeconfig(path string, cfg *rest.Config) error {
	if cfg.BearerToken == "" {
		return fmt.Errorf("%w: WriteKubeconfig needs a rest.Config with a BearerToken", ErrInvalidConfig)
	}
	const name = "quietpatch-e2e"
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	kc.CurrentContext = name
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("examplee2e: writing kubeconfig: %w", err)
	}
	return os.Chmod(path, 0o600)
}
