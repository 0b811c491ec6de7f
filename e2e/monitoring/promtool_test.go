package monitoring

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

func promtool(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := Promtool(ctx, dir, args...)
	if errors.Is(err, ErrPromtoolMissing) {
		t.Fatal(err)
	}
	return out, err
}

func TestPromtoolCheckRules(t *testing.T) {
	dir := monitoringDir(t)
	out, err := promtool(t, dir, "check", "rules", "--lint=all", "--lint-fatal", RulesFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(strings.TrimSpace(out))
}

func TestPromtoolTestRules(t *testing.T) {
	dir := monitoringDir(t)
	out, err := promtool(t, dir, "test", "rules", RulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(strings.TrimSpace(out))
}

// rulesTest is the part of a promtool unit test file this package reads.
type rulesTest struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			EvalTime  string           `json:"eval_time"`
			Alertname string           `json:"alertname"`
			ExpAlerts []map[string]any `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

func alerts(t *testing.T, dir string) []Rule {
	t.Helper()
	rules, err := LoadRules(filepath.Join(dir, RulesFile))
	if err != nil {
		t.Fatal(err)
	}
	var out []Rule
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no alerts", RulesFile)
	}
	return out
}

// TestRulesTestsCoverEveryAlert checks what promtool does not: every alert
// has a case where it fires and one where it does not, and every case names
// an alert that exists (promtool passes an empty expectation for an alert
// name that matches no rule).
func TestRulesTestsCoverEveryAlert(t *testing.T) {
	dir := monitoringDir(t)
	b, err := os.ReadFile(filepath.Join(dir, RulesTestFile))
	if err != nil {
		t.Fatal(err)
	}
	var rt rulesTest
	if err := yaml.Unmarshal(b, &rt); err != nil {
		t.Fatal(err)
	}
	if len(rt.RuleFiles) != 1 || rt.RuleFiles[0] != RulesFile {
		t.Errorf("rule_files = %v, want [%s]", rt.RuleFiles, RulesFile)
	}
	firing, quiet := map[string]int{}, map[string]int{}
	for _, tc := range rt.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				firing[a.Alertname]++
			} else {
				quiet[a.Alertname]++
			}
		}
	}
	known := map[string]bool{}
	for _, a := range alerts(t, dir) {
		known[a.Alert] = true
		if firing[a.Alert] == 0 {
			t.Errorf("alert %s: no test case where it fires", a.Alert)
		}
		if quiet[a.Alert] == 0 {
			t.Errorf("alert %s: no test case where it does not fire", a.Alert)
		}
		for _, ann := range []string{"summary", "description", "runbook"} {
			if strings.TrimSpace(a.Annotations[ann]) == "" {
				t.Errorf("alert %s: no %s annotation", a.Alert, ann)
			}
		}
		if s := a.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("alert %s: severity %q, want warning or critical", a.Alert, s)
		}
	}
	for name := range firing {
		if !known[name] {
			t.Errorf("%s tests alert %s, which %s does not have", RulesTestFile, name, RulesFile)
		}
	}
	for name := range quiet {
		if !known[name] {
			t.Errorf("%s tests alert %s, which %s does not have", RulesTestFile, name, RulesFile)
		}
	}
}

// reasonMatcher matches the reason matcher of a selector of
// quietpatch_dispatch_dropped_total.
var reasonMatcher = regexp.MustCompile(`(quietpatch_dispatch_dropped_total\{[^}]*\breason)\s*=~?\s*"[^"]*"`)

// countEveryDrop widens the reason matchers of dispatch drops to every
// reason, or reports that expr selects no dispatch drops.
func countEveryDrop(expr string) (string, bool) {
	out := reasonMatcher.ReplaceAllString(expr, `$1=~".+"`)
	return out, out != expr
}

func TestCountEveryDrop(t *testing.T) {
	for in, want := range map[string]string{
		`rate(quietpatch_dispatch_dropped_total{reason="error"}[5m])`:                   `rate(quietpatch_dispatch_dropped_total{reason=~".+"}[5m])`,
		`x{reason="a"} + quietpatch_dispatch_dropped_total{job="j", reason=~"a|b"} > 0`: `x{reason="a"} + quietpatch_dispatch_dropped_total{job="j", reason=~".+"} > 0`,
		`quietpatch_queue_dropped_total{reason="full"}`:                                 ``,
	} {
		got, ok := countEveryDrop(in)
		if !ok {
			got = ""
		}
		if got != want {
			t.Errorf("countEveryDrop(%s) = %q, want %q", in, got, want)
		}
	}
}

// normalDrops are the dispatcher's drop reasons no alert may count: they
// happen in a healthy pipeline (unchanged: one per event of our own
// writes; deleted; released and shutdown: the Lease given up on purpose).
var normalDrops = []string{"unchanged", "deleted", "released", "shutdown"}

// TestAlertsIgnoreNormalDrops checks that every alert selecting
// quietpatch_dispatch_dropped_total names the reasons it counts, none of
// them a normal one; promtool's tests hold cases with many normal drops,
// which TestPromtoolTestsCatchBrokenAlerts checks an alert counting every
// reason fails.
func TestAlertsIgnoreNormalDrops(t *testing.T) {
	for _, a := range alerts(t, monitoringDir(t)) {
		sels, err := Selectors(a.Expr)
		if err != nil {
			t.Errorf("alert %s: %v", a.Alert, err)
			continue
		}
		for _, s := range sels {
			if s.Name != "quietpatch_dispatch_dropped_total" {
				continue
			}
			var reasons []string
			for _, m := range s.Matchers {
				switch {
				case m.Label != "reason":
				case m.Op == "=":
					reasons = append(reasons, m.Value)
				case m.Op == "=~" && !strings.ContainsAny(m.Value, `.*+?()[]{}\^$`):
					reasons = append(reasons, strings.Split(m.Value, "|")...)
				default:
					t.Errorf("alert %s: %s{%s}: name the reasons counted (= or a plain alternation)", a.Alert, s.Name, m)
				}
			}
			if len(reasons) == 0 {
				t.Errorf("alert %s counts every reason of %s, the normal ones %v included", a.Alert, s.Name, normalDrops)
			}
			for _, r := range reasons {
				if slices.Contains(normalDrops, r) {
					t.Errorf("alert %s counts %s drops of reason %s, which a healthy pipeline has", a.Alert, s.Name, r)
				}
			}
		}
	}
}

// TestPromtoolTestsCatchBrokenAlerts breaks each alert in a copy of the
// rules and checks that promtool's unit tests then fail on that alert: an
// expression that never fires (the firing case must notice), a `for:` of
// zero (the case that checks it is still pending must) and, for an alert
// on dispatch drops, one that counts every reason (the case with normal
// drops must).
func TestPromtoolTestsCatchBrokenAlerts(t *testing.T) {
	dir := monitoringDir(t)
	testFile, err := os.ReadFile(filepath.Join(dir, RulesTestFile))
	if err != nil {
		t.Fatal(err)
	}
	mutations := []struct {
		name    string
		applies func(r Rule) bool
		mutate  func(r *Rule)
	}{
		{"never fires", nil, func(r *Rule) { r.Expr = "vector(1) < 0" }},
		{"no for duration", nil, func(r *Rule) { r.For = "0s" }},
		{"counts every drop reason",
			func(r Rule) bool { _, ok := countEveryDrop(r.Expr); return ok },
			func(r *Rule) { r.Expr, _ = countEveryDrop(r.Expr) }},
	}
	for _, a := range alerts(t, dir) {
		for _, m := range mutations {
			if m.applies != nil && !m.applies(a) {
				continue
			}
			t.Run(a.Alert+"/"+m.name, func(t *testing.T) {
				rules, err := LoadRules(filepath.Join(dir, RulesFile))
				if err != nil {
					t.Fatal(err)
				}
				for gi := range rules.Groups {
					for ri := range rules.Groups[gi].Rules {
						if r := &rules.Groups[gi].Rules[ri]; r.Alert == a.Alert {
							m.mutate(r)
						}
					}
				}
				b, err := yaml.Marshal(rules)
				if err != nil {
					t.Fatal(err)
				}
				tmp := t.TempDir()
				for name, content := range map[string][]byte{RulesFile: b, RulesTestFile: testFile} {
					if err := os.WriteFile(filepath.Join(tmp, name), content, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				// The mutated copy itself must be valid, or the failure
				// would prove nothing.
				if _, err := promtool(t, tmp, "check", "rules", RulesFile); err != nil {
					t.Fatalf("mutated rules are invalid: %v", err)
				}
				out, err := promtool(t, tmp, "test", "rules", RulesTestFile)
				if err == nil {
					t.Fatalf("promtool test rules passed with %s broken (%s):\n%s", a.Alert, m.name, out)
				}
				if !strings.Contains(out, "alertname: "+a.Alert+",") {
					t.Fatalf("promtool test rules failed, but not on %s:\n%s", a.Alert, out)
				}
			})
		}
	}
}

// grafanaVariable matches Grafana's template variables: ${name...}, $name,
// [[name]].
var grafanaVariable = regexp.MustCompile(`\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*|\[\[[^\]]*\]\]`)

// expandGrafana replaces Grafana's variables by values promtool accepts:
// intervals by durations, every other variable (they stand in label
// matchers' strings) by ".*".
func expandGrafana(expr string) string {
	return grafanaVariable.ReplaceAllStringFunc(expr, func(v string) string {
		name := strings.Trim(v, "${}[]")
		name, _, _ = strings.Cut(name, ":")
		switch name {
		case "__rate_interval", "__interval", "__range":
			return "5m"
		case "__interval_ms", "__range_ms":
			return "300000"
		case "__range_s":
			return "300"
		}
		return ".*"
	})
}

func TestExpandGrafana(t *testing.T) {
	for in, want := range map[string]string{
		`rate(x{job=~"$job"}[$__rate_interval])`:   `rate(x{job=~".*"}[5m])`,
		`x{a="${pipeline:regex}", b="[[b]]"}`:      `x{a=".*", b=".*"}`,
		`increase(y[$__range]) / $__range_s`:       `increase(y[5m]) / 300`,
		`max_over_time(z[${__interval}]) > bool 1`: `max_over_time(z[5m]) > bool 1`,
	} {
		if got := expandGrafana(in); got != want {
			t.Errorf("expandGrafana(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestDashboardQueriesParse has promtool's parser check every PromQL
// expression of the dashboard (Grafana's variables expanded), as recording
// rules of a scratch rules file.
func TestDashboardQueriesParse(t *testing.T) {
	dir := monitoringDir(t)
	qs, err := Queries(dir)
	if err != nil {
		t.Fatal(err)
	}
	var rules []Rule
	for i, q := range qs {
		if q.File != DashboardFile {
			continue
		}
		rules = append(rules, Rule{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: expandGrafana(q.Expr)})
	}
	if len(rules) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	b, err := yaml.Marshal(RuleGroups{Groups: []RuleGroup{{Name: "dashboard", Rules: rules}}})
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	if err := os.WriteFile(filepath.Join(tmp, "dashboard-rules.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := promtool(t, tmp, "check", "rules", "dashboard-rules.yaml")
	if err != nil {
		// Name the queries by where they are in the dashboard.
		var where strings.Builder
		for i, q := range qs {
			if q.File == DashboardFile {
				fmt.Fprintf(&where, "  dashboard:query_%d = %s: %s\n", i, q.Where, q.Expr)
			}
		}
		t.Fatalf("%v\nqueries:\n%s", err, where.String())
	}
	t.Logf("%d dashboard queries: %s", len(rules), strings.TrimSpace(out))
}
