// Command benchtable reads `go test -bench` output on standard input and
// prints one Markdown table: every benchmark's median figures, and the ratios
// between benchmarks measured in the same run (a benchmark against its
// baseline), so a noisy shared machine compares like with like.
//
// Usage:
//
//	go test -run '^$' -bench . -benchmem -count 5 ./... | go run ./cmd/benchtable
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// ratio compares two benchmarks on one unit. A den with a wildcard
// (path.Match syntax, e.g. "BenchmarkStorm/plain-*") is the best of the
// benchmarks it matches: the one with the highest median, for units where
// more is better (rates). An empty den makes the row num's own median: a
// figure with a goal, such as a fraction.
type ratio struct {
	label, num, den, unit, goal string
}

// ratios are the comparisons the project tracks. A missing benchmark leaves
// its row out rather than failing, so a partial run still prints.
var ratios = []ratio{
	{"queue: patchqueue / chan", "BenchmarkQueue/patchqueue", "BenchmarkQueue/chan", "ns/op", "≤ 2"},
	{"queue: patchqueue / workqueue", "BenchmarkQueue/patchqueue", "BenchmarkQueue/workqueue", "ns/op", "≤ 0.5"},
	{"queue: patchqueue-parallel / chan", "BenchmarkQueue/patchqueue-parallel", "BenchmarkQueue/chan", "ns/op", ""},
	{"queue with OTel SDK + Prometheus exporter: patchqueue-otel / patchqueue", "BenchmarkQueue/patchqueue-otel", "BenchmarkQueue/patchqueue", "ns/op", "≤ 2"},
	{"queue, both instrumented: patchqueue-otel / workqueue-metrics", "BenchmarkQueue/patchqueue-otel", "BenchmarkQueue/workqueue-metrics", "ns/op", "≤ 0.5"},
	{"dispatcher instruments per patch: otel-sdk / no-meter", "BenchmarkInstrumentsPerPatch/otel-sdk", "BenchmarkInstrumentsPerPatch/no-meter", "ns/op", ""},
	{"reconcile (library): unchanged-typed / unchanged-gocmp", "BenchmarkReconcile/unchanged-typed", "BenchmarkReconcile/unchanged-gocmp", "ns/object", ""},
	{"reconcile (library): changed / unchanged-typed", "BenchmarkReconcile/changed", "BenchmarkReconcile/unchanged-typed", "ns/object", ""},
	{"reconcile (HTTPRoute): typed / naive", "BenchmarkRoutePass/unchanged-typed", "BenchmarkRoutePass/naive", "ns/object", ""},
	{"reconcile (HTTPRoute): gocmp / naive", "BenchmarkRoutePass/unchanged-gocmp", "BenchmarkRoutePass/naive", "ns/object", ""},
	{"steady state: PATCHes quietpatch / naive (per interval)", "BenchmarkSteadyState/quietpatch", "BenchmarkSteadyState/naive", "patches/interval", ""},
	{"convergence: 1 worker / floor", "BenchmarkConvergence/quietpatch-1", "BenchmarkConvergence/floor-1", "routes/s", ""},
	{"convergence: N workers / floor", "BenchmarkConvergence/quietpatch-N", "BenchmarkConvergence/floor-N", "routes/s", "≥ 0.8"},
	{"convergence: N workers / 1 in flight", "BenchmarkConvergence/quietpatch-N", "BenchmarkConvergence/quietpatch-1", "routes/s", "≥ 4"},
	{"convergence (floor): N / 1 in flight", "BenchmarkConvergence/floor-N", "BenchmarkConvergence/floor-1", "routes/s", ""},
	{"memory, stalled API: unbounded / quietpatch heap", "BenchmarkStalledMemory/unbounded", "BenchmarkStalledMemory/quietpatch", "heap-MiB", ""},
	{"memory, stalled API: unbounded / quietpatch heap growth", "BenchmarkStalledMemory/unbounded", "BenchmarkStalledMemory/quietpatch", "growth-MiB", ""},
	{"failover: crash / vacate (to first write)", "BenchmarkFailover/crash", "BenchmarkFailover/vacate", "s", ""},
	{"adaptive in-flight limit / best fixed, RTT 0", "BenchmarkAdaptive/rtt=0s/adaptive", "BenchmarkAdaptive/rtt=0s/fixed-*", "routes/s", "≥ 0.9"},
	{"adaptive in-flight limit / best fixed, RTT 10 ms", "BenchmarkAdaptive/rtt=10ms/adaptive", "BenchmarkAdaptive/rtt=10ms/fixed-*", "routes/s", "≥ 0.9"},
	{"adaptive in-flight limit / best fixed, RTT 50 ms", "BenchmarkAdaptive/rtt=50ms/adaptive", "BenchmarkAdaptive/rtt=50ms/fixed-*", "routes/s", "≥ 0.9"},
	{"storm: quietpatch.New (adaptive) / plain client at its best concurrency", "BenchmarkStorm/adaptive", "BenchmarkStorm/plain-*", "routes/s", "≥ 0.9"},
	{"storm: patch calls beyond one per route / N", "BenchmarkStorm/adaptive", "", "extra/N", ""},
	{"storm: keys served with nothing to send (unchanged) / N", "BenchmarkStorm/adaptive", "", "unchanged/N", ""},
	{"fresh change during a storm: p95, edit to correct status", "BenchmarkFreshChange", "", "fresh-p95-s", "≤ 1"},
	{"politeness: competitor's p99 during an adaptive storm / alone", "BenchmarkPoliteness/adaptive", "BenchmarkPoliteness/alone", "p99-ms", "≤ 2"},
	{"politeness: competitor's p99 during a fixed-64 storm / alone", "BenchmarkPoliteness/fixed-64", "BenchmarkPoliteness/alone", "p99-ms", ""},
	{"sharded, R=4 K=8: route cache per replica × R / R=1 K=1's", "BenchmarkSharded/r4-k8", "", "cache_ratio_xR", "≤ 1.2"},
	{"sharded, R=4 K=8: peak RSS per replica / R=1 K=1's", "BenchmarkSharded/r4-k8", "", "rss_ratio", ""},
	{"sharded, R=1 K=8: route cache / R=1 K=1's", "BenchmarkSharded/r1-k8", "", "cache_ratio", ""},
	{"sharded storm, R=1 K=1 (unsharded) / plain client at its best", "BenchmarkSharded/r1-k1", "BenchmarkSharded/plain-*", "routes/s", ""},
	{"sharded storm, R=1 K=8 / plain client at its best", "BenchmarkSharded/r1-k8", "BenchmarkSharded/plain-*", "routes/s", ""},
	{"sharded storm, R=4 K=8 / plain client at its best", "BenchmarkSharded/r4-k8", "BenchmarkSharded/plain-*", "routes/s", ""},
	{"sharded first convergence, R=4 K=8 / R=1 K=1 (time)", "BenchmarkSharded/r4-k8", "BenchmarkSharded/r1-k1", "converge_s", ""},
	{"sharded, R=4 K=8: kill -9 to its shards' first writes", "BenchmarkSharded/r4-k8", "", "failover_s", ""},
	{"sharded, R=4 K=8: kill -9 to its shards' Leases acquired", "BenchmarkSharded/r4-k8", "", "lease_s", ""},
}

var lineRE = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

func parse(r io.Reader) (map[string]map[string][]float64, []string) {
	res := map[string]map[string][]float64{}
	var order []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := lineRE.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		name := m[1]
		f := strings.Fields(m[2])
		if _, ok := res[name]; !ok {
			res[name] = map[string][]float64{}
			order = append(order, name)
		}
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			res[name][f[i+1]] = append(res[name][f[i+1]], v)
		}
	}
	return res, order
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func main() {
	res, order := parse(io.TeeReader(os.Stdin, io.Discard))
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	fmt.Fprintln(w, "| benchmark | figures (median of runs) |")
	fmt.Fprintln(w, "|---|---|")
	for _, name := range order {
		units := make([]string, 0, len(res[name]))
		for u := range res[name] {
			units = append(units, u)
		}
		sort.Strings(units)
		parts := make([]string, 0, len(units))
		for _, u := range units {
			parts = append(parts, fmt.Sprintf("%.4g %s", median(res[name][u]), u))
		}
		fmt.Fprintf(w, "| %s | %s |\n", strings.TrimPrefix(name, "Benchmark"), strings.Join(parts, ", "))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| ratio (same run) | value | goal |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, r := range ratios {
		n, okN := res[r.num][r.unit]
		if !okN {
			continue
		}
		if r.den == "" {
			fmt.Fprintf(w, "| %s (%s) | %.3g | %s |\n", r.label, r.unit, median(n), r.goal)
			continue
		}
		den, d, okD := best(res, order, r.den, r.unit)
		if !okD || d == 0 {
			continue
		}
		label := r.label
		if den != r.den {
			label += fmt.Sprintf(" [best: %s]", den[strings.LastIndex(den, "/")+1:])
		}
		fmt.Fprintf(w, "| %s (%s) | %.3g | %s |\n", label, r.unit, median(n)/d, r.goal)
	}
}

// best returns the benchmark pattern names (itself, or the one with the
// highest median in unit among those it matches) and its median.
func best(res map[string]map[string][]float64, order []string, pattern, unit string) (string, float64, bool) {
	name, top, found := "", 0.0, false
	for _, b := range order {
		if ok, _ := path.Match(pattern, b); !ok {
			continue
		}
		v, ok := res[b][unit]
		if !ok {
			continue
		}
		if m := median(v); !found || m > top {
			name, top, found = b, m, true
		}
	}
	return name, top, found
}
