package monitoring

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// kustomize renders a kustomization with `kubectl kustomize`, skipping the
// test when kubectl is not on PATH.
func kustomize(t *testing.T, dir string) []map[string]any {
	t.Helper()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not on PATH; the kustomizations are not rendered")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, kubectl, "kustomize", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr.String())
	}
	var objs []map[string]any
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		if obj != nil {
			objs = append(objs, obj)
		}
	}
	return objs
}

func TestKustomizeMonitoring(t *testing.T) {
	dir := monitoringDir(t)
	objs := kustomize(t, dir)
	dashboard, err := os.ReadFile(filepath.Join(dir, DashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, o := range objs {
		kind, _ := o["kind"].(string)
		kinds[kind] = true
		meta, _ := o["metadata"].(map[string]any)
		if ns := meta["namespace"]; ns != "quietpatch-system" {
			t.Errorf("%s %v: namespace %v, want quietpatch-system", kind, meta["name"], ns)
		}
		switch kind {
		case "PrometheusRule", "PodMonitor":
			if o["apiVersion"] != "monitoring.coreos.com/v1" {
				t.Errorf("%s: apiVersion %v", kind, o["apiVersion"])
			}
		case "ConfigMap":
			labels, _ := meta["labels"].(map[string]any)
			if labels["grafana_dashboard"] != "1" {
				t.Errorf("dashboard ConfigMap labels %v: want grafana_dashboard: \"1\"", labels)
			}
			data, _ := o["data"].(map[string]any)
			if len(data) != 1 {
				t.Fatalf("dashboard ConfigMap data has %d keys, want 1", len(data))
			}
			for key, v := range data {
				if !strings.HasSuffix(key, ".json") || v != string(dashboard) {
					t.Errorf("dashboard ConfigMap key %s does not hold %s", key, DashboardFile)
				}
			}
		default:
			t.Errorf("unexpected %s", kind)
		}
	}
	for _, k := range []string{"PrometheusRule", "PodMonitor", "ConfigMap"} {
		if !kinds[k] {
			t.Errorf("kubectl kustomize %s renders no %s", dir, k)
		}
	}
}

// TestKustomizeDeployNeedsNoOperator checks that the controller's own
// kustomization does not pull in the operator's kinds, so that `kubectl
// apply -k deploy` works on a cluster without the prometheus-operator.
func TestKustomizeDeployNeedsNoOperator(t *testing.T) {
	for _, o := range kustomize(t, filepath.Dir(monitoringDir(t))) {
		if v, _ := o["apiVersion"].(string); strings.HasPrefix(v, "monitoring.coreos.com/") {
			t.Errorf("deploy/kustomization.yaml renders %s %v, which needs the prometheus-operator's CRDs", o["kind"], o["metadata"])
		}
	}
}
