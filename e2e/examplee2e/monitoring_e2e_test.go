package examplee2e_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/quietpatch/quietpatch/e2e/examplee2e"
	"github.com/quietpatch/quietpatch/e2e/monitoring"
)

// absentWhenFollowing lists the series of the dashboard and the rules that a
// healthy follower (a replica that never held the Lease) may lack, each
// with the reason. A leader that converged its routes must serve every one:
// there is no allow-list for it. Counters and gauges are observable and
// served from the start, with a zero-valued series per attribute value, so
// only histograms can be missing: they have no series before their first
// recording.
var absentWhenFollowing = map[string]string{
	"quietpatch_dispatch_duration_seconds_bucket":  "recorded per patch call; a follower makes none",
	"quietpatch_queue_wait_seconds_bucket":         "recorded when a patch leaves the queue; a follower queues nothing",
	"quietpatch_reconcile_duration_seconds_bucket": "recorded per pass; a follower's reconciler makes no pass",
}

// absentWhenUnsharded lists the series of the dashboard, the rules and
// doc.go's table that only a sharded pipeline (quietpatch.NewSharded with
// K > 1) reports: the shard group's. A scrape without any of them is of an
// unsharded pipeline, which may lack them all; a scrape with one must have
// every one.
var absentWhenUnsharded = map[string]string{
	"quietpatch_shard_held":        "the shard group's: an unsharded pipeline has none",
	"quietpatch_shard_running":     "the shard group's: an unsharded pipeline has none",
	"quietpatch_shard_members":     "the shard group's: an unsharded pipeline has none",
	"quietpatch_shard_moves_total": "the shard group's: an unsharded pipeline has none",
	"quietpatch_shard_objects":     "the shard group's: an unsharded pipeline has none",
	"quietpatch_shard_unfiltered":  "the shard group's: an unsharded pipeline has none",
}

// unshardedAllowed returns allowed, plus absentWhenUnsharded when m has
// none of the shard group's families.
func unshardedAllowed(m examplee2e.Metrics, allowed map[string]string) map[string]string {
	for n := range absentWhenUnsharded {
		if m.Has(monitoring.FamilyName(n)) {
			return allowed
		}
	}
	out := maps.Clone(absentWhenUnsharded)
	maps.Copy(out, allowed)
	return out
}

// kinds maps the instrument kinds of doc.go's table to the metric types of
// a scrape.
var kinds = map[string]dto.MetricType{
	"counter":   dto.MetricType_COUNTER,
	"gauge":     dto.MetricType_GAUGE,
	"histogram": dto.MetricType_HISTOGRAM,
}

// missingMonitoring returns what the scrape m lacks of the metrics the
// example's dashboard and alerting rules use (names, by their series name,
// a histogram as name_bucket), and of the instruments the root package's
// documentation lists (documented, by Prometheus family name): one line per
// missing or mistyped name, saying where it is used. A name of allowed
// (series name to reason) may be absent; it is reported only if present
// with the wrong type.
func missingMonitoring(m examplee2e.Metrics, names []string, documented []monitoring.Instrument, allowed map[string]string) []string {
	var out []string
	for _, n := range names {
		fam := monitoring.FamilyName(n)
		f := m[fam]
		switch {
		case f == nil || len(f.GetMetric()) == 0:
			if _, ok := allowed[n]; !ok {
				out = append(out, fmt.Sprintf("%s (dashboard/rules): no %s family in the scrape", n, fam))
			}
		case n != fam && f.GetType() != dto.MetricType_HISTOGRAM:
			out = append(out, fmt.Sprintf("%s (dashboard/rules): %s is a %s, not a histogram", n, fam, f.GetType()))
		}
	}
	for _, in := range documented {
		f := m[in.Prometheus]
		series := in.Prometheus
		if in.Kind == "histogram" {
			series += "_bucket"
		}
		switch {
		case f == nil || len(f.GetMetric()) == 0:
			if _, ok := allowed[series]; !ok {
				out = append(out, fmt.Sprintf("%s (doc.go: %s %s): not in the scrape", in.Prometheus, in.Kind, in.Name))
			}
		case f.GetType() != kinds[in.Kind]:
			out = append(out, fmt.Sprintf("%s (doc.go: %s %s): served as a %s", in.Prometheus, in.Kind, in.Name, f.GetType()))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// checkMonitoring fails the test naming every metric of the dashboard and
// the rules (monitoring.MetricNames) and every instrument of the root
// package's table (monitoring.DocumentedInstruments) that the scrape of
// the leader lacks, and, for followers, those absentWhenFollowing does not
// excuse.
func checkMonitoring(t *testing.T, leader examplee2e.Metrics, followers map[string]examplee2e.Metrics) {
	t.Helper()
	names, err := monitoring.MetricNames()
	if err != nil {
		t.Fatal(err)
	}
	documented, err := monitoring.DocumentedInstruments()
	if err != nil {
		t.Fatal(err)
	}
	for _, excuses := range []struct {
		name string
		m    map[string]string
	}{{"absentWhenFollowing", absentWhenFollowing}, {"absentWhenUnsharded", absentWhenUnsharded}} {
		for n, reason := range excuses.m {
			if !slices.Contains(names, n) {
				t.Errorf("%s excuses %s (%s), which neither the dashboard nor the rules use: remove it", excuses.name, n, reason)
			}
		}
	}
	ok := true
	if missing := missingMonitoring(leader, names, documented, unshardedAllowed(leader, nil)); len(missing) > 0 {
		ok = false
		t.Errorf("the leader's /metrics lacks %d metric(s) the dashboard, the rules or doc.go rely on:\n  %s", len(missing), strings.Join(missing, "\n  "))
	}
	for _, id := range slices.Sorted(maps.Keys(followers)) {
		m := followers[id]
		if missing := missingMonitoring(m, names, documented, unshardedAllowed(m, absentWhenFollowing)); len(missing) > 0 {
			ok = false
			t.Errorf("follower %s's /metrics lacks %d metric(s) the dashboard, the rules or doc.go rely on:\n  %s", id, len(missing), strings.Join(missing, "\n  "))
		}
		for _, n := range slices.Sorted(maps.Keys(absentWhenFollowing)) {
			if !m.Has(monitoring.FamilyName(n)) {
				t.Logf("follower %s has no %s, as expected: %s", id, n, absentWhenFollowing[n])
			}
		}
	}
	if ok {
		t.Logf("the leader serves all %d metric names of the dashboard and the rules and all %d instruments of doc.go; %d follower(s) serve them too, but for the histograms only a leader records",
			len(names), len(documented), len(followers))
	}
}

// TestMissingMonitoring checks missingMonitoring on a hand-written scrape.
func TestMissingMonitoring(t *testing.T) {
	m, err := examplee2e.ParseMetrics(strings.NewReader(`# TYPE quietpatch_queue_depth gauge
quietpatch_queue_depth{pipeline="p"} 0
# TYPE quietpatch_queue_enqueued_total counter
quietpatch_queue_enqueued_total{pipeline="p"} 0
# TYPE quietpatch_queue_wait_seconds histogram
quietpatch_queue_wait_seconds_bucket{pipeline="p",le="+Inf"} 1
quietpatch_queue_wait_seconds_sum{pipeline="p"} 0.1
quietpatch_queue_wait_seconds_count{pipeline="p"} 1
`))
	if err != nil {
		t.Fatal(err)
	}
	names := []string{
		"quietpatch_dispatch_duration_seconds_bucket", // absent: allowed below
		"quietpatch_dispatch_patches_total",           // absent
		"quietpatch_queue_depth",
		"quietpatch_queue_depth_bucket", // not a histogram
		"quietpatch_queue_enqueued_total",
		"quietpatch_queue_wait_seconds_bucket",
	}
	documented := []monitoring.Instrument{
		{Name: "quietpatch.queue.depth", Kind: "gauge", Prometheus: "quietpatch_queue_depth"},
		{Name: "quietpatch.queue.wait", Kind: "histogram", Unit: "s", Prometheus: "quietpatch_queue_wait_seconds"},
		{Name: "quietpatch.queue.enqueued", Kind: "gauge", Prometheus: "quietpatch_queue_enqueued_total"},                        // mistyped
		{Name: "quietpatch.dispatch.duration", Kind: "histogram", Unit: "s", Prometheus: "quietpatch_dispatch_duration_seconds"}, // allowed
		{Name: "quietpatch.dispatch.limit", Kind: "gauge", Prometheus: "quietpatch_dispatch_limit"},                              // absent
	}
	allowed := map[string]string{"quietpatch_dispatch_duration_seconds_bucket": "test"}
	got := missingMonitoring(m, names, documented, allowed)
	want := []string{
		"quietpatch_dispatch_limit (doc.go: gauge quietpatch.dispatch.limit): not in the scrape",
		"quietpatch_dispatch_patches_total (dashboard/rules): no quietpatch_dispatch_patches_total family in the scrape",
		"quietpatch_queue_depth_bucket (dashboard/rules): quietpatch_queue_depth is a GAUGE, not a histogram",
		"quietpatch_queue_enqueued_total (doc.go: gauge quietpatch.queue.enqueued): served as a COUNTER",
	}
	if !slices.Equal(got, want) {
		t.Errorf("missingMonitoring =\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if got := missingMonitoring(m, names, documented, nil); !slices.Contains(got, "quietpatch_dispatch_duration_seconds_bucket (dashboard/rules): no quietpatch_dispatch_duration_seconds family in the scrape") {
		t.Errorf("without the allow-list, the absent histogram is not reported: %v", got)
	}
}

// TestUnshardedAllowed: a scrape without the shard group's families may
// lack them all; one with any of them must have every one.
func TestUnshardedAllowed(t *testing.T) {
	plain, err := examplee2e.ParseMetrics(strings.NewReader("# TYPE quietpatch_queue_depth gauge\nquietpatch_queue_depth{pipeline=\"p\"} 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	sharded, err := examplee2e.ParseMetrics(strings.NewReader("# TYPE quietpatch_shard_held gauge\nquietpatch_shard_held{pipeline=\"p\",identity=\"a\"} 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"quietpatch_queue_depth", "quietpatch_shard_held", "quietpatch_shard_members"}
	if got := missingMonitoring(plain, names, nil, unshardedAllowed(plain, nil)); len(got) != 0 {
		t.Errorf("unsharded scrape: missing %v, want none", got)
	}
	want := []string{
		"quietpatch_queue_depth (dashboard/rules): no quietpatch_queue_depth family in the scrape",
		"quietpatch_shard_members (dashboard/rules): no quietpatch_shard_members family in the scrape",
	}
	if got := missingMonitoring(sharded, names, nil, unshardedAllowed(sharded, nil)); !slices.Equal(got, want) {
		t.Errorf("sharded scrape: missing\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}
