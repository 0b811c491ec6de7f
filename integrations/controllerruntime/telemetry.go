package controllerruntime

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/otlptranslator"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// MeterName is the instrumentation scope of the meter [Add] gives the
// pipeline when it creates the MeterProvider itself.
const MeterName = "github.com/quietpatch/quietpatch/integrations/controllerruntime"

// NewMeterProvider returns an OpenTelemetry SDK MeterProvider whose
// instruments are exported to reg on every scrape. Pass
// controller-runtime's metrics.Registry (sigs.k8s.io/controller-runtime/pkg/metrics)
// and quietpatch's families appear on the manager's /metrics next to
// controller-runtime's own (controller_runtime_*, workqueue_*,
// rest_client_*). Give provider.Meter(MeterName) to quietpatch.Config.Meter,
// and Shutdown the provider when the pipeline has stopped.
//
// Names are translated the Prometheus way, set explicitly so that a change
// of the exporter's default cannot rename them
// (otlptranslator.UnderscoreEscapingWithSuffixes): dots become
// underscores, the unit becomes a suffix (s → _seconds), counters end in
// _total — quietpatch.queue.depth is exported as quietpatch_queue_depth,
// quietpatch.dispatch.patches as quietpatch_dispatch_patches_total. The
// otel_scope_* labels and the target_info family are left out, as a
// Prometheus user expects of a controller's own metrics.
//
// The exporter registers an unchecked collector with reg, which cannot be
// unregistered: after Shutdown it exports nothing. Each call registers
// one more; the series of two pipelines in one process are told apart by
// their pipeline label (quietpatch.Config.Name), so give them different
// names.
func NewMeterProvider(reg prometheus.Registerer) (*sdkmetric.MeterProvider, error) {
	if reg == nil {
		return nil, errors.New("controllerruntime: NewMeterProvider: reg must not be nil (controller-runtime's is metrics.Registry)")
	}
	exp, err := otelprom.New(
		otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		otelprom.WithoutScopeInfo(),
		otelprom.WithoutTargetInfo(),
	)
	if err != nil {
		return nil, fmt.Errorf("controllerruntime: the OpenTelemetry Prometheus exporter: %w", err)
	}
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)), nil
}

// Checker is what [AddChecks] wires to the manager's probes: a
// *quietpatch.Controller.
type Checker interface {
	// Ready is nil when the replica is ready, leader or not.
	Ready() error
	// Live is nil unless the process should be restarted.
	Live() error
}

// AddChecks registers c's Ready as a readyz check and its Live as a healthz
// check of mgr, both named name; the manager serves them on its health
// probe address (Options.HealthProbeBindAddress) at /readyz/<name> and
// /healthz/<name>, and in /readyz and /healthz. Ready fails until the
// Source has synced, when the lease loop, the dispatcher or the reconciler
// has failed, and while stopping; Live fails only when a patch call has
// been stuck for more than twice PatchTimeout. Call it before mgr.Start: the
// manager refuses checks afterwards. A check of the same name replaces an
// earlier one, so give each pipeline its own name.
func AddChecks(mgr manager.Manager, name string, c Checker) error {
	if name == "" {
		return errors.New("controllerruntime: AddChecks: name must not be empty")
	}
	if err := mgr.AddReadyzCheck(name, func(*http.Request) error { return c.Ready() }); err != nil {
		return fmt.Errorf("controllerruntime: adding readyz check %q: %w", name, err)
	}
	if err := mgr.AddHealthzCheck(name, func(*http.Request) error { return c.Live() }); err != nil {
		return fmt.Errorf("controllerruntime: adding healthz check %q: %w", name, err)
	}
	return nil
}
