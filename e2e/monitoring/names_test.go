package monitoring

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

type kind int

const (
	counter kind = iota
	gauge
	histogram
)

// instrument is one metric family of quietpatch's naming scheme: the
// OpenTelemetry instrument quietpatch.<component>.<name> as the OTel
// Prometheus exporter writes it (UnderscoreEscapingWithSuffixes: counters
// get _total, unit s gets _seconds, histograms give _bucket/_sum/_count).
type instrument struct {
	kind     kind
	pipeline bool                // carries the pipeline label of a pipeline (statuspatch instruments), which $pipeline filters
	labels   map[string][]string // further labels; nil values: any value
}

var (
	lease          = map[string][]string{"k8s_namespace_name": nil, "k8s_lease_name": nil}
	dropReasons    = []string{"full", "closed"}
	passResults    = []string{"completed", "halted", "not_leader", "error", "canceled", "closed"}
	objectResults  = []string{"unchanged", "changed", "error"}
	patchOutcomes  = []string{"ok", "conflict", "not_found", "forbidden", "fenced", "unauthorized", "invalid", "throttled", "abandoned", "timeout", "canceled", "error"}
	dispatchDrops  = []string{"unchanged", "deleted", "error", "not_leader", "stale_epoch", "claim_ending", "held", "released", "shutdown"}
	leaseOps       = []string{"get", "create", "acquire", "renew", "vacate", "watch"}
	transitionDirs = []string{"acquired", "lost"}
	moveDirs       = []string{"acquired", "given_up", "lost"}
)

// shardGroup returns the labels of the shard group's instruments: pipeline
// (the group's name, Config.Name, also the pipeline label of its shards'
// instruments, which add shard), identity, and extra.
func shardGroup(extra map[string][]string) map[string][]string {
	m := map[string][]string{"pipeline": nil, "identity": nil}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func withLease(extra map[string][]string) map[string][]string {
	m := map[string][]string{}
	for k, v := range lease {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// scheme is quietpatch's metric naming scheme, by Prometheus family name.
var scheme = map[string]instrument{
	"quietpatch_queue_enqueued_total":               {kind: counter, pipeline: true},
	"quietpatch_queue_dequeued_total":               {kind: counter, pipeline: true},
	"quietpatch_queue_superseded_total":             {kind: counter, pipeline: true},
	"quietpatch_queue_dropped_total":                {kind: counter, pipeline: true, labels: map[string][]string{"reason": dropReasons}},
	"quietpatch_queue_depth":                        {kind: gauge, pipeline: true},
	"quietpatch_queue_depth_peak_ewma":              {kind: gauge, pipeline: true},
	"quietpatch_queue_capacity":                     {kind: gauge, pipeline: true},
	"quietpatch_queue_wait_seconds":                 {kind: histogram, pipeline: true},
	"quietpatch_reconcile_passes_total":             {kind: counter, pipeline: true, labels: map[string][]string{"result": passResults}},
	"quietpatch_reconcile_duration_seconds":         {kind: histogram, pipeline: true, labels: map[string][]string{"result": passResults}},
	"quietpatch_reconcile_objects_total":            {kind: counter, pipeline: true, labels: map[string][]string{"result": objectResults}},
	"quietpatch_reconcile_halted_total":             {kind: counter, pipeline: true},
	"quietpatch_dispatch_patches_total":             {kind: counter, pipeline: true, labels: map[string][]string{"outcome": patchOutcomes}},
	"quietpatch_dispatch_duration_seconds":          {kind: histogram, pipeline: true, labels: map[string][]string{"outcome": patchOutcomes}},
	"quietpatch_dispatch_dropped_total":             {kind: counter, pipeline: true, labels: map[string][]string{"reason": dispatchDrops}},
	"quietpatch_dispatch_echoes_total":              {kind: counter, pipeline: true},
	"quietpatch_dispatch_in_flight":                 {kind: gauge, pipeline: true},
	"quietpatch_dispatch_limit":                     {kind: gauge, pipeline: true},
	"quietpatch_dispatch_latency_peak_ewma_seconds": {kind: gauge, pipeline: true},
	"quietpatch_dispatch_backoff_seconds":           {kind: gauge, pipeline: true},
	"quietpatch_dispatch_retry_after_total":         {kind: counter, pipeline: true},
	"quietpatch_leader_is_leader":                   {kind: gauge, labels: withLease(map[string][]string{"identity": nil})},
	"quietpatch_leader_epoch":                       {kind: gauge, labels: lease},
	"quietpatch_leader_transitions_total":           {kind: counter, labels: withLease(map[string][]string{"direction": transitionDirs})},
	"quietpatch_leader_requests_total":              {kind: counter, labels: withLease(map[string][]string{"operation": leaseOps, "result": patchOutcomes})},
	"quietpatch_shard_held":                         {kind: gauge, labels: shardGroup(nil)},
	"quietpatch_shard_running":                      {kind: gauge, labels: shardGroup(nil)},
	"quietpatch_shard_members":                      {kind: gauge, labels: shardGroup(nil)},
	"quietpatch_shard_moves_total":                  {kind: counter, labels: shardGroup(map[string][]string{"direction": moveDirs})},
	"quietpatch_shard_objects":                      {kind: gauge, labels: shardGroup(nil)},
	"quietpatch_shard_unfiltered":                   {kind: gauge, labels: shardGroup(nil)},
}

// targetLabels are the labels a scrape adds (Prometheus's job and instance,
// and what Kubernetes service discovery or a PodMonitor adds).
var targetLabels = []string{"job", "instance", "namespace", "pod", "container", "endpoint", "service"}

var (
	quietpatchName = regexp.MustCompile(`^quietpatch_(queue|reconcile|dispatch|leader|shard)_[a-z][a-z0-9_]*$`)
	runtimeName    = regexp.MustCompile(`^(go|process)_[a-z][a-z0-9_]*$`)
)

// checkName says what is wrong with a series name under the naming scheme,
// or returns "".
func checkName(name string) string {
	switch {
	case runtimeName.MatchString(name):
		return ""
	case !quietpatchName.MatchString(name):
		return "matches neither quietpatch_<queue|reconcile|dispatch|leader|shard>_<name> nor go_*/process_*"
	}
	fam := FamilyName(name)
	inst, ok := scheme[fam]
	if !ok {
		return fmt.Sprintf("family %s is not an instrument of the naming scheme", fam)
	}
	switch inst.kind {
	case counter:
		if name != fam || !strings.HasSuffix(name, "_total") {
			return "a counter is selected by its name ending in _total"
		}
	case gauge:
		if name != fam || strings.HasSuffix(name, "_total") {
			return "a gauge has no suffix"
		}
	case histogram:
		if name == fam || !strings.HasSuffix(fam, "_seconds") {
			return "a histogram (unit s, so _seconds) is selected as _bucket, _sum or _count"
		}
	}
	return ""
}

func TestMetricNames(t *testing.T) {
	names, err := MetricNames()
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatal("MetricNames returned no names")
	}
	if !slices.IsSorted(names) {
		t.Errorf("not sorted: %v", names)
	}
	for _, n := range names {
		if msg := checkName(n); msg != "" {
			t.Errorf("%s: %s", n, msg)
		}
	}
	// Every family of the scheme is on the dashboard or in an alert.
	used := map[string]bool{}
	for _, n := range names {
		used[FamilyName(n)] = true
	}
	for fam := range scheme {
		if !used[fam] {
			t.Errorf("%s is on neither the dashboard nor in an alert", fam)
		}
	}
	checkGenerated(t, MetricNamesFile, []byte(metricNamesFile(names)))
}

func metricNamesFile(names []string) string {
	var b strings.Builder
	b.WriteString("# Metric names the dashboard (dashboard.json) and the alerting rules\n")
	b.WriteString("# (rules.yaml) select, as series names (a histogram as name_bucket).\n")
	b.WriteString("# Generated by `go test ./monitoring -update` in e2e/; a /metrics scrape\n")
	b.WriteString("# of the controller must serve them (histograms once they have recorded:\n")
	b.WriteString("# a leader's have, after its first pass and patch). Checked against the\n")
	b.WriteString("# running controller by TestRoutesConvergeThenStayQuiet in e2e/examplee2e.\n")
	for _, n := range names {
		b.WriteString(n + "\n")
	}
	return b.String()
}

func TestCheckName(t *testing.T) {
	for name, ok := range map[string]bool{
		"quietpatch_queue_depth":                        true,
		"quietpatch_queue_enqueued_total":               true,
		"quietpatch_dispatch_duration_seconds_bucket":   true,
		"quietpatch_dispatch_duration_seconds_count":    true,
		"go_memstats_heap_inuse_bytes":                  true,
		"process_resident_memory_bytes":                 true,
		"quietpatch_dispatch_duration_seconds":          false, // histogram without suffix
		"quietpatch_queue_enqueued":                     false, // counter without _total
		"quietpatch_queue_depth_total":                  false, // not in the scheme
		"statuspatch_queue_depth":                       false, // the old prefix
		"quietpatch_leader_is_leader_ratio":             false, // the old name
		"quietpatch_queue_dropped_total_bucket":         false,
		"quietpatch_cache_hits_total":                   false, // unknown component
		"quietpatch_dispatch_latency_peak_ewma_seconds": true,
	} {
		if got := checkName(name) == ""; got != ok {
			t.Errorf("checkName(%s) accepts = %v, want %v (%s)", name, got, ok, checkName(name))
		}
	}
}

// TestSelectorLabels checks the label matchers of every query against the
// scheme: quietpatch metrics are matched only on their own labels or on
// target labels, with values they can have.
func TestSelectorLabels(t *testing.T) {
	qs, err := Queries(monitoringDir(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		sels, err := Selectors(q.Expr)
		if err != nil {
			t.Errorf("%s, %s: %v", q.File, q.Where, err)
			continue
		}
		for _, s := range sels {
			inst, ok := scheme[FamilyName(s.Name)]
			if !ok {
				continue
			}
			for _, m := range s.Matchers {
				if msg := checkMatcher(s.Name, inst, m); msg != "" {
					t.Errorf("%s, %s: %s{%s}: %s", q.File, q.Where, s.Name, m, msg)
				}
			}
		}
	}
}

func checkMatcher(name string, inst instrument, m Matcher) string {
	if slices.Contains(targetLabels, m.Label) {
		return ""
	}
	if m.Label == "pipeline" && inst.pipeline {
		return ""
	}
	if m.Label == "le" && strings.HasSuffix(name, "_bucket") {
		return ""
	}
	values, ok := inst.labels[m.Label]
	if !ok {
		return "has no such label"
	}
	if values == nil || strings.Contains(m.Value, "$") {
		return ""
	}
	var want []string
	switch m.Op {
	case "=", "!=":
		want = []string{m.Value}
	case "=~", "!~":
		if strings.ContainsAny(m.Value, `.*+?()[]{}\^$`) {
			return "" // not a plain alternation: cannot enumerate
		}
		want = strings.Split(m.Value, "|")
	}
	for _, v := range want {
		if !slices.Contains(values, v) {
			return fmt.Sprintf("%s=%q is not one of %v", m.Label, v, values)
		}
	}
	return ""
}

func TestCheckMatcher(t *testing.T) {
	patches := scheme["quietpatch_dispatch_patches_total"]
	for _, tc := range []struct {
		m  Matcher
		ok bool
	}{
		{Matcher{"outcome", "=", "ok"}, true},
		{Matcher{"outcome", "=~", "forbidden|unauthorized"}, true},
		{Matcher{"outcome", "=~", "forbidden|denied"}, false},
		{Matcher{"outcome", "=", "other"}, false},
		{Matcher{"reason", "=", "full"}, false},
		{Matcher{"pipeline", "=~", "$pipeline"}, true},
		{Matcher{"job", "=~", "$job"}, true},
		{Matcher{"outcome", "=~", "time.*"}, true},
	} {
		if got := checkMatcher("quietpatch_dispatch_patches_total", patches, tc.m) == ""; got != tc.ok {
			t.Errorf("checkMatcher(%s) accepts = %v, want %v", tc.m, got, tc.ok)
		}
	}
	if msg := checkMatcher("quietpatch_leader_epoch", scheme["quietpatch_leader_epoch"], Matcher{"pipeline", "=", "x"}); msg == "" {
		t.Error("the leader's instruments have no pipeline label")
	}
	moves := scheme["quietpatch_shard_moves_total"]
	if msg := checkMatcher("quietpatch_shard_moves_total", moves, Matcher{"direction", "=~", "given_up|lost"}); msg != "" {
		t.Errorf("shard moves given_up|lost: %s", msg)
	}
	if msg := checkMatcher("quietpatch_shard_moves_total", moves, Matcher{"direction", "=", "moved"}); msg == "" {
		t.Error("shard moves have no direction moved")
	}
}

func TestFamilyName(t *testing.T) {
	for in, want := range map[string]string{
		"quietpatch_dispatch_duration_seconds_bucket": "quietpatch_dispatch_duration_seconds",
		"quietpatch_dispatch_duration_seconds_sum":    "quietpatch_dispatch_duration_seconds",
		"quietpatch_dispatch_duration_seconds_count":  "quietpatch_dispatch_duration_seconds",
		"quietpatch_queue_enqueued_total":             "quietpatch_queue_enqueued_total",
		"quietpatch_queue_depth":                      "quietpatch_queue_depth",
		"_count":                                      "_count",
	} {
		if got := FamilyName(in); got != want {
			t.Errorf("FamilyName(%s) = %s, want %s", in, got, want)
		}
	}
}
