package examplee2e

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"

	"github.com/quietpatch/quietpatch/e2e/cluster"
)

// Prometheus names of the library's instruments as the controller exports
// them (dots become underscores, counters end in _total, seconds histograms
// in _seconds; see the statuspatch package documentation for what each
// means).
const (
	MetricQueueDepth        = "quietpatch_queue_depth"                // keys waiting
	MetricQueueDepthEWMA    = "quietpatch_queue_depth_peak_ewma"      // Peak-EWMA of depth
	MetricQueueCapacity     = "quietpatch_queue_capacity"             // capacity
	MetricQueueDropped      = "quietpatch_queue_dropped_total"        // by reason
	MetricQueueEnqueued     = "quietpatch_queue_enqueued_total"       // keys added
	MetricQueueSuperseded   = "quietpatch_queue_superseded_total"     // keys added while waiting (coalesced)
	MetricReconcileDuration = "quietpatch_reconcile_duration_seconds" // one sample per full pass
	MetricReconcileObjects  = "quietpatch_reconcile_objects_total"    // by result
	MetricReconcileHalted   = "quietpatch_reconcile_halted_total"     // passes halted on a full pass lane
	MetricDispatchPatches   = "quietpatch_dispatch_patches_total"     // patch calls by outcome
	MetricDispatchDropped   = "quietpatch_dispatch_dropped_total"     // keys served without a call, by reason
	MetricDispatchInFlight  = "quietpatch_dispatch_in_flight"         // patch calls in progress
	MetricDispatchLimit     = "quietpatch_dispatch_limit"             // in-flight limit (adaptive or fixed)
	// MetricDispatchLatencyEWMA is the Peak-EWMA of the patch latency.
	MetricDispatchLatencyEWMA = "quietpatch_dispatch_latency_peak_ewma_seconds"
	// MetricLeaderIsLeader is 1 while the replica holds the Lease, else 0.
	MetricLeaderIsLeader = "quietpatch_leader_is_leader"
)

// PatchFilter selects the status patches of HTTPRoutes in the API server's
// apiserver_request_total.
func PatchFilter() cluster.RequestFilter {
	return cluster.RequestFilter{Verb: "PATCH", Group: "gateway.networking.k8s.io", Resource: "httproutes", Subresource: "status"}
}

// Metrics is one scrape of a Prometheus endpoint, by family name.
type Metrics map[string]*dto.MetricFamily

// ParseMetrics parses the Prometheus text format.
func ParseMetrics(r io.Reader) (Metrics, error) {
	fams, err := cluster.ParseMetrics(r)
	if err != nil {
		return nil, err
	}
	return Metrics(fams), nil
}

// Has reports whether the family is present.
func (m Metrics) Has(name string) bool { return m[name] != nil }

// Names lists the families whose names start with one of the prefixes (all
// if none are given), sorted.
func (m Metrics) Names(prefixes ...string) []string {
	var out []string
	for name := range m {
		if len(prefixes) == 0 || slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Sum adds up the values of the family's series whose labels include every
// name=value pair of match (given as name, value, name, value...). For a
// histogram or summary the value is its sample count.
func (m Metrics) Sum(name string, match ...string) float64 {
	fam := m[name]
	if fam == nil {
		return 0
	}
	var n float64
	for _, s := range fam.GetMetric() {
		if matchLabels(s, match) {
			n += value(s)
		}
	}
	return n
}

// ByLabel adds up the family's values per value of one label.
func (m Metrics) ByLabel(name, label string) map[string]float64 {
	out := map[string]float64{}
	fam := m[name]
	if fam == nil {
		return out
	}
	for _, s := range fam.GetMetric() {
		v := ""
		for _, l := range s.GetLabel() {
			if l.GetName() == label {
				v = l.GetValue()
			}
		}
		out[v] += value(s)
	}
	return out
}

func matchLabels(s *dto.Metric, match []string) bool {
	for i := 0; i+1 < len(match); i += 2 {
		found := false
		for _, l := range s.GetLabel() {
			if l.GetName() == match[i] && l.GetValue() == match[i+1] {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func value(s *dto.Metric) float64 {
	switch {
	case s.GetCounter() != nil:
		return s.GetCounter().GetValue()
	case s.GetGauge() != nil:
		return s.GetGauge().GetValue()
	case s.GetHistogram() != nil:
		return float64(s.GetHistogram().GetSampleCount())
	case s.GetSummary() != nil:
		return float64(s.GetSummary().GetSampleCount())
	case s.GetUntyped() != nil:
		return s.GetUntyped().GetValue()
	}
	return 0
}

// Passes is the number of full reconcile passes the replica has finished
// (the sample count of MetricReconcileDuration).
func (m Metrics) Passes() float64 { return m.Sum(MetricReconcileDuration) }

// Idle reports whether nothing is queued and no patch call is in progress.
func (m Metrics) Idle() bool {
	return m.Sum(MetricQueueDepth) == 0 && m.Sum(MetricDispatchInFlight) == 0
}

// PatchCount is a reading of the API server's count of HTTPRoute status
// patches, in total and by response code.
type PatchCount struct {
	Total    float64
	OK       float64 // 200
	Conflict float64 // 409
}

// Sub returns c - d, the requests between two readings.
func (c PatchCount) Sub(d PatchCount) PatchCount {
	return PatchCount{Total: c.Total - d.Total, OK: c.OK - d.OK, Conflict: c.Conflict - d.Conflict}
}

// String formats the count as "N (ok A, conflict B, other C)".
func (c PatchCount) String() string {
	return fmt.Sprintf("%.0f (ok %.0f, conflict %.0f, other %.0f)", c.Total, c.OK, c.Conflict, c.Total-c.OK-c.Conflict)
}

// CountPatches reads the API server's apiserver_request_total for
// PatchFilter().
func CountPatches(ctx context.Context, cp *cluster.ControlPlane) (PatchCount, error) {
	series, err := cp.RequestTotals(ctx)
	if err != nil {
		return PatchCount{}, err
	}
	f := PatchFilter()
	c := PatchCount{Total: cluster.SumRequests(series, f)}
	f.Code = "200"
	c.OK = cluster.SumRequests(series, f)
	f.Code = "409"
	c.Conflict = cluster.SumRequests(series, f)
	return c, nil
}
