package monitoring

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDocumentedInstruments: the table in docs/metrics.md, the
// naming scheme this package checks the dashboard and rules against, and
// the exporter's naming rule agree, family by family and kind by kind.
func TestDocumentedInstruments(t *testing.T) {
	ins, err := DocumentedInstruments()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]kind{"counter": counter, "gauge": gauge, "histogram": histogram}
	documented := map[string]bool{}
	for _, in := range ins {
		if documented[in.Prometheus] {
			t.Errorf("%s: %s is listed twice", RootDocFile, in.Prometheus)
		}
		documented[in.Prometheus] = true
		if want := PrometheusName(in.Name, in.Kind, in.Unit); in.Prometheus != want {
			t.Errorf("%s: %s (%s, unit %s) is listed as %s; the exporter names it %s", RootDocFile, in.Name, in.Kind, in.Unit, in.Prometheus, want)
		}
		k, ok := kinds[in.Kind]
		if !ok {
			t.Errorf("%s: %s has kind %q, want counter, gauge or histogram", RootDocFile, in.Name, in.Kind)
			continue
		}
		inst, ok := scheme[in.Prometheus]
		switch {
		case !ok:
			t.Errorf("%s lists %s, which the naming scheme (names_test.go) lacks", RootDocFile, in.Prometheus)
			continue
		case inst.kind != k:
			t.Errorf("%s lists %s as a %s; the naming scheme has another kind", RootDocFile, in.Prometheus, in.Kind)
		}
		if diff := cmp.Diff(schemeLabels(inst), in.Attributes); diff != "" {
			t.Errorf("%s: the labels of %s and their values differ between the naming scheme and the table (-scheme +%s):\n%s",
				RootDocFile, in.Prometheus, RootDocFile, diff)
		}
	}
	for _, fam := range slices.Sorted(maps.Keys(scheme)) {
		if !documented[fam] {
			t.Errorf("the naming scheme has %s, which the table in %s lacks", fam, RootDocFile)
		}
	}
}

// schemeLabels returns the labels of an instrument of the scheme as
// Instrument.Attributes has them: pipeline included, values sorted.
func schemeLabels(inst instrument) map[string][]string {
	out := map[string][]string{}
	if inst.pipeline {
		out["pipeline"] = nil
	}
	for l, vs := range inst.labels {
		if vs != nil {
			vs = slices.Sorted(slices.Values(vs))
		}
		out[l] = vs
	}
	return out
}

func TestParseInstrumentTable(t *testing.T) {
	const src = `// Package x.
//
// # Metrics
//
//	name          kind       unit   attributes               Prometheus name
//	x.queue.wait  histogram  s      pipeline                 x_queue_wait_seconds
//	x.queue.drop  counter    {p}    pipeline, reason: full   x_queue_drop_total
//	                                closed
//	x.queue.seen  counter    {p}    pipeline, reason (as     x_queue_seen_total
//	                                drop)
//	x.calls       counter    {c}    outcome: ok error        x_calls_total
//	x.lease.reqs  counter    {r}    lease attributes, op:    x_lease_reqs_total
//	                                get renew; result (as outcome)
//	x.is_leader   gauge      (none) identity                 x_is_leader
//
// After the table.
//
//	name  not a table  Prometheus name
package x
`
	got, err := ParseInstrumentTable([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	pipeline := map[string][]string{"pipeline": nil}
	reasons := map[string][]string{"pipeline": nil, "reason": {"closed", "full"}}
	want := []Instrument{
		{"x.queue.wait", "histogram", "s", "x_queue_wait_seconds", pipeline},
		{"x.queue.drop", "counter", "{p}", "x_queue_drop_total", reasons},
		{"x.queue.seen", "counter", "{p}", "x_queue_seen_total", reasons},
		{"x.calls", "counter", "{c}", "x_calls_total", map[string][]string{"outcome": {"error", "ok"}}},
		{"x.lease.reqs", "counter", "{r}", "x_lease_reqs_total", map[string][]string{
			"k8s_namespace_name": nil, "k8s_lease_name": nil, "op": {"get", "renew"}, "result": {"error", "ok"}}},
		{"x.is_leader", "gauge", "(none)", "x_is_leader", map[string][]string{"identity": nil}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseInstrumentTable (-want +got):\n%s", diff)
	}
	md := "# Metrics\n\n```text\n" + strings.ReplaceAll(src[strings.Index(src, "//\tname"):strings.Index(src, "//\n// After")], "//\t", "") + "```\n\nAfter the table.\n"
	if got, err := ParseInstrumentTable([]byte(md)); err != nil {
		t.Errorf("the table in Markdown: %v", err)
	} else if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseInstrumentTable of the Markdown table (-want +got):\n%s", diff)
	}
	const header = "//\tname  kind  unit  attributes  Prometheus name\n"
	for label, bad := range map[string]string{
		"no table":             "// Package x.\npackage x\n",
		"header only":          header + "package x\n",
		"short row":            header + "//\tx.a counter\n",
		"no attributes":        header + "//\tx.a counter {p} x_a_total\n",
		"continuation first":   header + "//\t    closed\n",
		"no values":            header + "//\tx.a counter {p} reason: x_a_total\n",
		"unresolved reference": header + "//\tx.a counter {p} reason (as b) x_a_total\n",
		"unreadable attribute": header + "//\tx.a counter {p} two words x_a_total\n",
	} {
		if _, err := ParseInstrumentTable([]byte(bad)); !errors.Is(err, ErrNoTable) {
			t.Errorf("%s: err = %v, want ErrNoTable", label, err)
		}
	}
}

func TestPrometheusName(t *testing.T) {
	for _, tc := range []struct{ name, kind, unit, want string }{
		{"quietpatch.queue.enqueued", "counter", "{patch}", "quietpatch_queue_enqueued_total"},
		{"quietpatch.queue.wait", "histogram", "s", "quietpatch_queue_wait_seconds"},
		{"quietpatch.dispatch.latency.peak_ewma", "gauge", "s", "quietpatch_dispatch_latency_peak_ewma_seconds"},
		{"quietpatch.leader.is_leader", "gauge", "(none)", "quietpatch_leader_is_leader"},
	} {
		if got := PrometheusName(tc.name, tc.kind, tc.unit); got != tc.want {
			t.Errorf("PrometheusName(%s, %s, %s) = %s, want %s", tc.name, tc.kind, tc.unit, got, tc.want)
		}
	}
}
