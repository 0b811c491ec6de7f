package monitoring

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/quietpatch/quietpatch/e2e/cluster"
)

// Files of the monitoring directory (Dir).
const (
	// RulesFile is the plain Prometheus rules file (`rule_files:`).
	RulesFile = "rules.yaml"
	// RulesTestFile holds the unit tests of RulesFile for `promtool test rules`.
	RulesTestFile = "rules_test.yaml"
	// PrometheusRuleFile is the prometheus-operator manifest carrying the
	// groups of RulesFile (kind PrometheusRule, monitoring.coreos.com/v1).
	PrometheusRuleFile = "prometheusrule.yaml"
	// DashboardFile is the Grafana dashboard (JSON model).
	DashboardFile = "dashboard.json"
	// MetricNamesFile lists the names MetricNames returns, one a line; the
	// package's tests keep it up to date.
	MetricNamesFile = "metric-names.txt"
)

// RootModulePath is the module path of the library; Dir finds the
// repository by its go.mod.
const RootModulePath = "github.com/quietpatch/quietpatch"

// DirEnv names the environment variable that overrides the monitoring
// directory Dir returns.
const DirEnv = "QP_MONITORING_DIR"

// ErrNotFound is wrapped by Dir when the repository cannot be found.
var ErrNotFound = errors.New("monitoring: directory not found")

// Dir returns the directory holding the example's dashboard and rules:
// $QP_MONITORING_DIR if set, otherwise examples/httproute-status/deploy/monitoring
// in the repository whose root go.mod declares RootModulePath, found by
// walking up from the working directory and, failing that, from this
// source file.
func Dir() (string, error) {
	if d := os.Getenv(DirEnv); d != "" {
		return d, nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "examples", "httproute-status", "deploy", "monitoring"), nil
}

// repoRoot returns the directory of the go.mod declaring RootModulePath,
// found by walking up from the working directory and, failing that, from
// this source file.
func repoRoot() (string, error) {
	root, err := cluster.FindModule(RootModulePath, "")
	if err != nil {
		return "", fmt.Errorf("%w: %v; set %s", ErrNotFound, err, DirEnv)
	}
	return root, nil
}

// Query is one PromQL expression of the rules or the dashboard.
type Query struct {
	// File is the base name of the file: RulesFile or DashboardFile.
	File string
	// Where says which rule, panel, variable or annotation holds it, e.g.
	// `alert QuietpatchNoLeader` or `panel 12 "Patches/s by outcome" target A`.
	Where string
	// Expr is the expression as written: PromQL, with Grafana's variables
	// ($pipeline, $__rate_interval) unexpanded in the dashboard's.
	Expr string
	// Variable is set for a dashboard variable's query, which is not PromQL
	// but Grafana's label_values(selector, label) or query_result(expr);
	// Expr then holds the selector or expression inside.
	Variable bool
}

// RuleGroups is the content of a Prometheus rules file, as far as this
// package reads it.
type RuleGroups struct {
	Groups []RuleGroup `json:"groups"`
}

// RuleGroup is one group of a rules file.
type RuleGroup struct {
	Name  string `json:"name"`
	Rules []Rule `json:"rules"`
}

// Rule is one alerting or recording rule.
type Rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// LoadRules reads a rules file.
func LoadRules(path string) (*RuleGroups, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var g RuleGroups
	if err := yaml.Unmarshal(b, &g); err != nil {
		return nil, fmt.Errorf("monitoring: %s: %w", path, err)
	}
	return &g, nil
}

// Queries returns every PromQL expression of the rules file and the
// dashboard in dir: rule expressions, panel targets (rows' panels
// included), annotation queries and variable queries.
func Queries(dir string) ([]Query, error) {
	rules, err := LoadRules(filepath.Join(dir, RulesFile))
	if err != nil {
		return nil, err
	}
	var out []Query
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			where := "alert " + r.Alert
			if r.Record != "" {
				where = "record " + r.Record
			}
			out = append(out, Query{File: RulesFile, Where: where, Expr: r.Expr})
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, DashboardFile))
	if err != nil {
		return nil, err
	}
	dq, err := dashboardQueries(b)
	if err != nil {
		return nil, fmt.Errorf("monitoring: %s: %w", DashboardFile, err)
	}
	return append(out, dq...), nil
}

// dashboard is the part of Grafana's dashboard JSON model that holds queries.
type dashboard struct {
	Panels      []panel `json:"panels"`
	Annotations struct {
		List []struct {
			Name string `json:"name"`
			Expr string `json:"expr"`
		} `json:"list"`
	} `json:"annotations"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID      int    `json:"id"`
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's panels
}

var (
	labelValuesRE = regexp.MustCompile(`^\s*label_values\(\s*(.*?)\s*,\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$`)
	labelOnlyRE   = regexp.MustCompile(`^\s*label_values\(\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$`)
	queryResultRE = regexp.MustCompile(`^\s*query_result\((.*)\)\s*$`)
)

func dashboardQueries(b []byte) ([]Query, error) {
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, err
	}
	var out []Query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				if t.Expr != "" {
					out = append(out, Query{File: DashboardFile, Where: fmt.Sprintf("panel %d %q target %s", p.ID, p.Title, t.RefID), Expr: t.Expr})
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, a := range d.Annotations.List {
		if a.Expr != "" {
			out = append(out, Query{File: DashboardFile, Where: fmt.Sprintf("annotation %q", a.Name), Expr: a.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		// The query is a string, or an object holding it (newer Grafana).
		var q string
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				return nil, fmt.Errorf("variable %q: query is neither a string nor an object: %w", v.Name, err)
			}
			q = obj.Query
		}
		where := fmt.Sprintf("variable %q", v.Name)
		switch {
		case labelOnlyRE.MatchString(q):
			// label_values(label): no metric.
		case labelValuesRE.MatchString(q):
			out = append(out, Query{File: DashboardFile, Where: where, Expr: labelValuesRE.FindStringSubmatch(q)[1], Variable: true})
		case queryResultRE.MatchString(q):
			out = append(out, Query{File: DashboardFile, Where: where, Expr: queryResultRE.FindStringSubmatch(q)[1], Variable: true})
		default:
			return nil, fmt.Errorf("variable %q: query %q is not label_values(...) or query_result(...)", v.Name, q)
		}
	}
	return out, nil
}

// Names returns the sorted, distinct metric names the queries select. It
// fails when a selector names no single metric (a regular expression on
// __name__), since the list would then be incomplete.
func Names(queries []Query) ([]string, error) {
	var names []string
	for _, q := range queries {
		sels, err := Selectors(q.Expr)
		if err != nil {
			return nil, fmt.Errorf("%s, %s: %w", q.File, q.Where, err)
		}
		for _, s := range sels {
			if s.Name == "" {
				return nil, fmt.Errorf("%s, %s: a selector names no single metric: %q", q.File, q.Where, q.Expr)
			}
			names = append(names, s.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// MetricNames returns the sorted, distinct metric names that the example's
// Grafana dashboard and alerting rules select, read from the files in Dir.
// They are series names as the expressions write them: a histogram appears
// as name_bucket (or _sum, _count), a counter with its _total; FamilyName
// maps each to the metric family a /metrics scrape lists it under.
//
// quietpatch's counters and gauges are observable: a scrape serves them
// from the start, with a zero-valued series for every attribute value. A
// histogram has no series before its first recording, so a check against
// a scrape must scrape a replica that has recorded them (a leader after
// its first pass and patch) or excuse them, saying why; examplee2e's
// TestRoutesConvergeThenStayQuiet does both.
func MetricNames() ([]string, error) {
	dir, err := Dir()
	if err != nil {
		return nil, err
	}
	qs, err := Queries(dir)
	if err != nil {
		return nil, err
	}
	return Names(qs)
}

// FamilyName returns the name of the metric family a series name belongs
// to in the Prometheus text format: a histogram's name_bucket, name_sum and
// name_count belong to family name; every other name is its own family (a
// counter's family name ends in _total). Under quietpatch's naming scheme
// no counter or gauge ends in _bucket, _sum or _count, so this is exact
// for its metrics and for the Go runtime's and process's.
func FamilyName(series string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(series, suffix); ok && base != "" {
			return base
		}
	}
	return series
}
