package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// MeterName is the instrumentation scope of the controller's meter.
const MeterName = "github.com/quietpatch/quietpatch/examples/httproute-status"

// telemetry is the OpenTelemetry SDK meter provider and the Prometheus
// registry it exports to. Each Controller has its own: there is no global
// registry, so several controllers can run in one process (tests, e2e).
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
// underscores, the unit becomes a suffix ("s" → _seconds, "1" on a gauge →
// _ratio, annotations such as {item} are dropped), counters end in _total.
// Scope and target_info labels are left out.
func newTelemetry() (*telemetry, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("controller: registering the Go collector: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("controller: registering the process collector: %w", err)
	}
	exp, err := otelprom.New(
		otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		otelprom.WithoutScopeInfo(),
		otelprom.WithoutTargetInfo(),
	)
	if err != nil {
		return nil, fmt.Errorf("controller: creating the Prometheus exporter: %w", err)
	}
	return &telemetry{
		provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)),
		registry: reg,
	}, nil
}

// meter returns the controller's meter; a nil *telemetry gives nil (no-op
// instruments in the library).
func (t *telemetry) meter() metric.Meter {
	if t == nil {
		return nil
	}
	return t.provider.Meter(MeterName)
}

// handler serves the registry in the Prometheus text format.
func (t *telemetry) handler() http.Handler {
	return promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{})
}

func (t *telemetry) shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// healthHandler serves /healthz and /readyz.
//
// /healthz (liveness) answers 200 while the process serves, unless a
// dispatcher worker is stuck in a patch call: the failures that end the
// controller end the process too, so there is nothing else for a liveness
// probe to catch. /readyz answers 200 only when the informer caches are
// synced, the lease loop runs, the dispatcher drains and the reconciler
// runs, and 503 with the reasons otherwise (also while shutting down). Both
// answer a JSON object {"ok":bool,"errors":[...]} on ?verbose, else the
// text "ok" or the reasons.
func healthHandler(live, ready func() error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", probe(live))
	mux.Handle("GET /livez", probe(live))
	mux.Handle("GET /readyz", probe(ready))
	return mux
}

func probe(check func() error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := check()
		code := http.StatusOK
		if err != nil {
			code = http.StatusServiceUnavailable
		}
		if _, verbose := r.URL.Query()["verbose"]; verbose {
			body := struct {
				OK     bool     `json:"ok"`
				Errors []string `json:"errors,omitempty"`
			}{OK: err == nil}
			for _, e := range unjoin(err) {
				body.Errors = append(body.Errors, e.Error())
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			_ = json.NewEncoder(w).Encode(body)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(code)
		if err != nil {
			_, _ = fmt.Fprintln(w, err.Error())
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
}

// unjoin splits an errors.Join result into its parts.
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
