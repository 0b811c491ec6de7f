// Package monitoring checks the Grafana dashboard and the Prometheus
// alerting rules shipped with the HTTPRoute status example
// (examples/httproute-status/deploy/monitoring) against the real tools, and
// tells other tests which metrics they rely on.
//
// # What is checked
//
// The package's tests, run by `make monitoring` (and as part of the e2e
// suite of `make test`):
//
//   - `promtool check rules` accepts rules.yaml, and `promtool test rules`
//     passes rules_test.yaml, which holds a firing and a not-firing case
//     for every alert. A test breaks each alert in a copy of the rules and
//     checks that promtool's tests then fail, so the unit tests have teeth.
//   - Every PromQL expression of the dashboard, with Grafana's variables
//     expanded, is accepted by promtool's parser (as recording rules of a
//     scratch rules file).
//   - prometheusrule.yaml, the prometheus-operator manifest, carries
//     exactly the groups of rules.yaml.
//   - The dashboard is valid JSON with a ${datasource} variable used by
//     every panel and query, a pipeline variable used by every pipeline
//     query, unique panel ids and a layout without overlaps.
//   - Every metric name in the rules and the dashboard belongs to
//     quietpatch's naming scheme (or to the Go runtime's and process
//     collectors), with the labels and label values the instruments have,
//     and the list equals metric-names.txt. The naming scheme equals the
//     instrument table of docs/metrics.md (DocumentedInstruments):
//     the same families and kinds, each Prometheus name there being what
//     the exporter makes of the instrument's name, kind and unit
//     (PrometheusName), and the same labels with the same values (a
//     dashboard or alert matching a value the table no longer lists
//     fails); so every documented instrument is on the dashboard or in an
//     alert.
//   - `kubectl kustomize` renders deploy/monitoring (when kubectl is on
//     PATH).
//
// promtool is built from the Go module proxy by e2e/hack/build-tools.sh
// (its own module, e2e/tools, so Prometheus enters neither the library's
// go.mod nor the e2e module's) and found by FindPromtool.
//
// # For other tests
//
// MetricNames returns the metric names the dashboard and rules select, so
// that an end-to-end test can scrape the running example and fail when one
// of them is missing; FamilyName maps a series name (name_bucket) to the
// family a scrape lists. DocumentedInstruments returns the instrument
// table of docs/metrics.md, so that the same test can
// check the scrape against the docs. Queries, Selectors and Names are the
// pieces MetricNames is made of. The metric names are extracted by a small PromQL
// lexer (Selectors) rather than Prometheus's parser, which would pull
// Prometheus into the e2e module.
package monitoring
