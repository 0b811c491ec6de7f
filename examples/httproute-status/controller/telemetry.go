package controller

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// MeterName is the instrumentation scope of the controller's meter.
const MeterName = "github.com/quietpatch/quietpatch/examples/httproute-status"

// telemetry is the OpenTelemetry SDK meter provider and the Prometheus
// registry it exports to. Each Controller has its own: there is no global
// registry, so several controllers can run in one process (tests, e2e).
// It exists with the metrics endpoint off too: then nothing scrapes it.
type telemetry struct {
	provider *sdkmetric.MeterProvider
	registry *prometheus.Registry
}

// newTelemetry builds a meter provider whose instruments are exported, on
// each scrape, to a fresh Prometheus registry that also holds the Go
// runtime and process collectors (heap size matters to a controller built
// not to grow without bound).
//
// Names are translated the Prometheus way
// (otlptranslator.UnderscoreEscapingWithSuffixes, set explicitly so a
// change of the exporter's default cannot rename them): dots become
// underscores, the unit becomes a suffix ("s" → _seconds; annotations such
// as {patch} add none), counters end in _total:
// quietpatch.dispatch.patches becomes quietpatch_dispatch_patches_total.
// Scope and target_info labels are left out.
func newTelemetry() (*telemetry, error) {
	reg := prometheus.NewRegistry()
	if err := errors.Join(reg.Register(collectors.NewGoCollector()),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))); err != nil {
		return nil, fmt.Errorf("controller: registering the Go and process collectors: %w", err)
	}
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo(),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		return nil, fmt.Errorf("controller: creating the Prometheus exporter: %w", err)
	}
	return &telemetry{provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)), registry: reg}, nil
}

// handler serves the registry in the Prometheus text format at /metrics.
func (t *telemetry) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{}))
	return mux
}

// healthHandler serves /healthz (and /livez) with live, /readyz with ready:
// 200 and "ok" when the check returns nil, else 503 and the reasons, one a
// line; with ?verbose, a JSON object {"ok":bool,"errors":[...]} instead.
// See [Controller.Live] and [Controller.Ready] for what they check.
func healthHandler(live, ready func() error) http.Handler {
	probe := func(check func() error) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			err := check()
			code, body := http.StatusOK, struct {
				OK     bool     `json:"ok"`
				Errors []string `json:"errors,omitempty"`
			}{OK: err == nil}
			if err != nil {
				code, body.Errors = http.StatusServiceUnavailable, strings.Split(err.Error(), "\n")
			}
			if _, verbose := r.URL.Query()["verbose"]; verbose {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(code)
				_ = json.NewEncoder(w).Encode(body)
				return
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(code)
			_, _ = fmt.Fprintln(w, cmp.Or(strings.Join(body.Errors, "\n"), "ok"))
		}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", probe(live))
	mux.Handle("GET /livez", probe(live))
	mux.Handle("GET /readyz", probe(ready))
	return mux
}
