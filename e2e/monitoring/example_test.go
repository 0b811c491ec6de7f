package monitoring_test

import (
	"fmt"

	"github.com/quietpatch/quietpatch/e2e/monitoring"
)

func ExampleSelectors() {
	sels, err := monitoring.Selectors(`histogram_quantile(0.99,
	  sum by (pipeline, le) (rate(quietpatch_dispatch_duration_seconds_bucket{job=~"$job", outcome="ok"}[$__rate_interval])))
	/ on (pipeline) group_left max by (pipeline) (quietpatch_dispatch_latency_peak_ewma_seconds)`)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range sels {
		fmt.Println(s.Name, s.Matchers)
	}
	// Output:
	// quietpatch_dispatch_duration_seconds_bucket [job=~"$job" outcome="ok"]
	// quietpatch_dispatch_latency_peak_ewma_seconds []
}

func ExampleFamilyName() {
	for _, name := range []string{
		"quietpatch_dispatch_duration_seconds_bucket",
		"quietpatch_dispatch_patches_total",
		"quietpatch_queue_depth",
	} {
		fmt.Println(monitoring.FamilyName(name))
	}
	// Output:
	// quietpatch_dispatch_duration_seconds
	// quietpatch_dispatch_patches_total
	// quietpatch_queue_depth
}

// A check against a scrape of the running example: every family the
// dashboard and the alerts rely on must be served.
func ExampleMetricNames() {
	names, err := monitoring.MetricNames()
	if err != nil {
		fmt.Println(err)
		return
	}
	scraped := map[string]bool{ // families of a /metrics scrape, e.g. examplee2e.Metrics
		"quietpatch_queue_depth": true,
	}
	var missing []string
	for _, n := range names {
		if !scraped[monitoring.FamilyName(n)] {
			missing = append(missing, n)
		}
	}
	fmt.Println(len(names) > 0, len(missing) > 0)
	// Output: true true
}
