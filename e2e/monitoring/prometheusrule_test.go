package monitoring

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const prometheusRuleHeader = `# Generated from rules.yaml by ` + "`go test ./monitoring -update`" + ` in e2e/: edit
# rules.yaml (the plain Prometheus rules file, checked by promtool), not
# this file. The groups are the same, comments included.
#
# The prometheus-operator loads this into every Prometheus whose
# ruleSelector matches these labels and whose ruleNamespaceSelector matches
# the namespace: add the label your Prometheus selects, if any
# (kube-prometheus-stack: release: <helm release name>), in an overlay.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: quietpatch-httproute-status
  namespace: quietpatch-system
  labels:
    app.kubernetes.io/name: httproute-status
    app.kubernetes.io/part-of: quietpatch
spec:
`

// generatePrometheusRule returns the manifest: the header, then rules.yaml
// from its `groups:` line on, indented under spec.
func generatePrometheusRule(rules []byte) (string, bool) {
	lines := strings.Split(string(rules), "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "groups:") {
			start = i
			break
		}
	}
	if start < 0 {
		return "", false
	}
	var b strings.Builder
	b.WriteString(prometheusRuleHeader)
	for _, l := range lines[start:] {
		if l != "" {
			b.WriteString("  " + l)
		}
		b.WriteString("\n")
	}
	return strings.TrimRight(b.String(), "\n") + "\n", true
}

func TestPrometheusRuleUpToDate(t *testing.T) {
	dir := monitoringDir(t)
	rules, err := os.ReadFile(filepath.Join(dir, RulesFile))
	if err != nil {
		t.Fatal(err)
	}
	want, ok := generatePrometheusRule(rules)
	if !ok {
		t.Fatalf("%s has no top-level groups: line", RulesFile)
	}
	checkGenerated(t, PrometheusRuleFile, []byte(want))
}

// TestPrometheusRuleMatchesRules reads both files as data: the manifest is a
// monitoring.coreos.com/v1 PrometheusRule whose spec.groups equal the
// groups of rules.yaml, whatever the text says.
func TestPrometheusRuleMatchesRules(t *testing.T) {
	dir := monitoringDir(t)
	var rules, manifest map[string]any
	for name, into := range map[string]*map[string]any{RulesFile: &rules, PrometheusRuleFile: &manifest} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(b, into); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if got := manifest["apiVersion"]; got != "monitoring.coreos.com/v1" {
		t.Errorf("apiVersion = %v, want monitoring.coreos.com/v1", got)
	}
	if got := manifest["kind"]; got != "PrometheusRule" {
		t.Errorf("kind = %v, want PrometheusRule", got)
	}
	meta, _ := manifest["metadata"].(map[string]any)
	if meta["name"] == nil || meta["namespace"] != "quietpatch-system" {
		t.Errorf("metadata = %v, want a name and namespace quietpatch-system", meta)
	}
	spec, _ := manifest["spec"].(map[string]any)
	if len(spec) != 1 || !reflect.DeepEqual(spec["groups"], rules["groups"]) {
		t.Errorf("spec of %s is not exactly the groups of %s", PrometheusRuleFile, RulesFile)
	}
	if len(rules) != 1 {
		t.Errorf("%s has top-level keys other than groups: %v", RulesFile, rules)
	}
}
