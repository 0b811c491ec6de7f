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
	"slices"
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
	// scale, if not 0, multiplies num's median: a per-object figure turned
	// into one for a size.
	scale float64
}

// ratios are the comparisons the project tracks. A missing benchmark leaves
// its row out rather than failing, so a partial run still prints.
var ratios = []ratio{
	{"queue: patchqueue / chan", "BenchmarkQueue/patchqueue", "BenchmarkQueue/chan", "ns/op", "≤ 2", 0},
	{"queue: patchqueue / workqueue", "BenchmarkQueue/patchqueue", "BenchmarkQueue/workqueue", "ns/op", "≤ 0.5", 0},
	{"queue as the pipeline builds it (clock, depth Peak-EWMA, wait): patchqueue-clock / patchqueue", "BenchmarkQueue/patchqueue-clock", "BenchmarkQueue/patchqueue", "ns/op", "≤ 2", 0},
	{"queue as the pipeline builds it: patchqueue-clock / workqueue", "BenchmarkQueue/patchqueue-clock", "BenchmarkQueue/workqueue", "ns/op", "", 0},
	{"queue, public facade: patchqueue-public / patchqueue-clock", "BenchmarkQueue/patchqueue-public", "BenchmarkQueue/patchqueue-clock", "ns/op", "", 0},
	{"dispatcher instruments per call: otel-sdk / no-meter", "BenchmarkInstrumentsPerCall/otel-sdk", "BenchmarkInstrumentsPerCall/no-meter", "ns/op", "", 0},
	{"reconcile pass (library): typed / gocmp", "BenchmarkPass/typed", "BenchmarkPass/gocmp", "ns/object", "", 0},
	{"reconcile (HTTPRoute): typed / naive", "BenchmarkRoutePass/unchanged-typed", "BenchmarkRoutePass/naive", "ns/object", "", 0},
	{"reconcile (HTTPRoute): UpToDate first / Compute and Equal", "BenchmarkRoutePass/unchanged-uptodate", "BenchmarkRoutePass/unchanged-typed", "ns/object", "", 0},
	{"unchanged HTTPRoute, the example's computation (UpToDate)", "BenchmarkRoutePass/unchanged-uptodate", "", "ns/object", "≤ 1000", 0},
	{"unchanged HTTPRoute, the example's computation (UpToDate)", "BenchmarkRoutePass/unchanged-uptodate", "", "allocs/object", "≤ 2", 0},
	{"a pass over 50,000 unchanged HTTPRoutes, CPU (s)", "BenchmarkRoutePass/unchanged-uptodate", "", "ns/object", "≤ 0.1", 50_000 / 1e9},
	{"reconcile (HTTPRoute): gocmp / naive", "BenchmarkRoutePass/unchanged-gocmp", "BenchmarkRoutePass/naive", "ns/object", "", 0},
	{"steady state: PATCHes quietpatch / naive (per interval)", "BenchmarkSteadyState/quietpatch", "BenchmarkSteadyState/naive", "patches/interval", "", 0},
	{"convergence: 1 worker / floor", "BenchmarkConvergence/quietpatch-1", "BenchmarkConvergence/floor-1", "routes/s", "", 0},
	{"convergence: N workers / floor", "BenchmarkConvergence/quietpatch-N", "BenchmarkConvergence/floor-N", "routes/s", "≥ 0.8", 0},
	{"convergence: N workers / 1 in flight", "BenchmarkConvergence/quietpatch-N", "BenchmarkConvergence/quietpatch-1", "routes/s", "≥ 4", 0},
	{"convergence (floor): N / 1 in flight", "BenchmarkConvergence/floor-N", "BenchmarkConvergence/floor-1", "routes/s", "", 0},
	{"memory, stalled API: unbounded / quietpatch heap", "BenchmarkStalledMemory/unbounded", "BenchmarkStalledMemory/quietpatch", "heap-MiB", "", 0},
	{"memory, stalled API: unbounded / quietpatch heap growth", "BenchmarkStalledMemory/unbounded", "BenchmarkStalledMemory/quietpatch", "growth-MiB", "", 0},
	{"failover: crash / vacate (to first write)", "BenchmarkFailover/crash", "BenchmarkFailover/vacate", "s", "", 0},
	{"adaptive in-flight limit / best fixed, RTT 0", "BenchmarkAdaptive/rtt=0s/adaptive", "BenchmarkAdaptive/rtt=0s/fixed-*", "routes/s", "≥ 0.9", 0},
	{"adaptive in-flight limit / best fixed, RTT 10 ms", "BenchmarkAdaptive/rtt=10ms/adaptive", "BenchmarkAdaptive/rtt=10ms/fixed-*", "routes/s", "≥ 0.9", 0},
	{"adaptive in-flight limit / best fixed, RTT 50 ms", "BenchmarkAdaptive/rtt=50ms/adaptive", "BenchmarkAdaptive/rtt=50ms/fixed-*", "routes/s", "≥ 0.9", 0},
	{"storm: quietpatch.New (adaptive) / plain client at its best concurrency", "BenchmarkStorm/adaptive", "BenchmarkStorm/plain-*", "routes/s", "≥ 0.9", 0},
	{"storm: patch calls beyond one per route / N", "BenchmarkStorm/adaptive", "", "extra/N", "", 0},
	{"storm: keys served with nothing to send (unchanged) / N", "BenchmarkStorm/adaptive", "", "unchanged/N", "", 0},
	{"fresh change during a storm: p95, edit to correct status", "BenchmarkFreshChange", "", "fresh-p95-s", "≤ 1", 0},
	{"politeness: competitor's p99 during an adaptive storm / alone", "BenchmarkPoliteness/adaptive", "BenchmarkPoliteness/alone", "p99-ms", "≤ 3", 0},
	{"politeness: competitor's p99 during a fixed-64 storm / alone", "BenchmarkPoliteness/fixed-64", "BenchmarkPoliteness/alone", "p99-ms", "", 0},
	{"sharded, R=4 K=8: route cache per replica × R / R=1 K=1's", "BenchmarkSharded/r4-k8", "", "cache_ratio_xR", "≤ 1.2", 0},
	{"sharded, R=4 K=8: peak RSS per replica / R=1 K=1's", "BenchmarkSharded/r4-k8", "", "rss_ratio", "", 0},
	{"sharded, R=1 K=8: route cache / R=1 K=1's", "BenchmarkSharded/r1-k8", "", "cache_ratio", "", 0},
	{"sharded storm, R=1 K=1 (unsharded) / plain client at its best", "BenchmarkSharded/r1-k1", "BenchmarkSharded/plain-*", "routes/s", "", 0},
	{"sharded storm, R=1 K=8 / plain client at its best", "BenchmarkSharded/r1-k8", "BenchmarkSharded/plain-*", "routes/s", "", 0},
	{"sharded storm, R=4 K=8 / plain client at its best", "BenchmarkSharded/r4-k8", "BenchmarkSharded/plain-*", "routes/s", "", 0},
	{"sharded first convergence, R=4 K=8 / R=1 K=1 (time)", "BenchmarkSharded/r4-k8", "BenchmarkSharded/r1-k1", "converge_s", "", 0},
	{"sharded, R=4 K=8: kill -9 to its shards' first writes", "BenchmarkSharded/r4-k8", "", "failover_s", "", 0},
	{"sharded, R=4 K=8: kill -9 to its shards' Leases acquired", "BenchmarkSharded/r4-k8", "", "lease_s", "", 0},
}

// scaleRatios are the rows of the scale table, one set per size: their
// benchmark names are relative to a size's prefix, "n=<N>/" (see scaleRE).
var scaleRatios = []ratio{
	{"first convergence: quietpatch.New / plain client (with resourceVersion precondition) at its best", "BenchmarkStorm/converge-adaptive", "BenchmarkStorm/plain-*", "routes/s", "≥ 0.9", 0},
	{"storm: quietpatch.New / plain client (with resourceVersion precondition) at its best", "BenchmarkStorm/adaptive", "BenchmarkStorm/plain-*", "routes/s", "≥ 0.9", 0},
	{"fresh change p95 during the first convergence (s)", "BenchmarkStorm/converge-adaptive", "", "fresh-p95-s", "≤ 1", 0},
	{"fresh change p95 during the storm (s)", "BenchmarkStorm/adaptive", "", "fresh-p95-s", "≤ 1", 0},
	{"events of our own writes served / N, first convergence", "BenchmarkStorm/converge-adaptive", "", "unchanged/N", "0", 0},
	{"events of our own writes served / N, storm", "BenchmarkStorm/adaptive", "", "unchanged/N", "0", 0},
	{"echoes counted, not served / N, storm", "BenchmarkStorm/adaptive", "", "echo/N", "≈ 1", 0},
	{"keys re-added while waiting (superseded) / N, storm", "BenchmarkStorm/adaptive", "", "superseded/N", "", 0},
	{"politeness: competitor's p99 during the storm / alone", "BenchmarkPoliteness/adaptive", "BenchmarkPoliteness/alone", "p99-ms", "≤ 3", 0},
	{"memory: route cache per route, one replica (KiB)", "BenchmarkSharded/r1-k1", "", "cache_KiB/route", "≤ 6", 0},
	{"sharded R=4 K=8: route cache per replica × R / one replica's", "BenchmarkSharded/r4-k8", "", "cache_ratio_xR", "≤ 1.2", 0},
	{"sharded R=4 K=8: kill -9 to its shards' first writes (s)", "BenchmarkSharded/r4-k8", "", "failover_s", "≤ LeaseDuration + 1", 0},
	{"sharded R=4 K=8 storm / plain client at its best", "BenchmarkSharded/r4-k8", "BenchmarkSharded/plain-*", "routes/s", "", 0},
}

// scaleRE matches the line hack/bench.sh prints before each size of the
// scale table: the benchmarks after it, until the next such line, are
// named with the prefix "n=<N>/" after "Benchmark".
var scaleRE = regexp.MustCompile(`^# scale n=(\d+)\s*$`)

var lineRE = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// parse reads benchmark lines into figures by name and unit, the names in
// the order first seen, and the sizes of the scale table seen.
func parse(r io.Reader) (map[string]map[string][]float64, []string, []string) {
	res := map[string]map[string][]float64{}
	var order, sizes []string
	prefix := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if m := scaleRE.FindStringSubmatch(line); m != nil {
			prefix = "n=" + m[1] + "/"
			if !slices.Contains(sizes, m[1]) {
				sizes = append(sizes, m[1])
			}
			continue
		}
		m := lineRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name := m[1]
		if prefix != "" {
			name = "Benchmark" + prefix + strings.TrimPrefix(name, "Benchmark")
		}
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
	return res, order, sizes
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
	res, order, sizes := parse(io.TeeReader(os.Stdin, io.Discard))
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
		row(w, res, order, r)
	}
	for _, n := range sizes {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "| scale, N = %s routes (same run) | value | goal |\n", n)
		fmt.Fprintln(w, "|---|---|---|")
		for _, r := range scaleRatios {
			r.num = "Benchmarkn=" + n + "/" + strings.TrimPrefix(r.num, "Benchmark")
			if r.den != "" {
				r.den = "Benchmarkn=" + n + "/" + strings.TrimPrefix(r.den, "Benchmark")
			}
			row(w, res, order, r)
		}
	}
}

// row prints one ratio, or nothing when a benchmark it needs is missing.
func row(w io.Writer, res map[string]map[string][]float64, order []string, r ratio) {
	n, okN := res[r.num][r.unit]
	if !okN {
		return
	}
	v := median(n)
	if r.scale != 0 {
		v *= r.scale
	}
	if r.den == "" {
		unit := " (" + r.unit + ")"
		if r.scale != 0 {
			unit = "" // the label says what the scaled figure is
		}
		fmt.Fprintf(w, "| %s%s | %.3g | %s |\n", r.label, unit, v, r.goal)
		return
	}
	den, d, okD := best(res, order, r.den, r.unit)
	if !okD || d == 0 {
		return
	}
	label := r.label
	if den != r.den {
		label += fmt.Sprintf(" [best: %s]", den[strings.LastIndex(den, "/")+1:])
	}
	fmt.Fprintf(w, "| %s (%s) | %.3g | %s |\n", label, r.unit, v/d, r.goal)
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
