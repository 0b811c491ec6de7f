package otelprom

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/otlptranslator"
	otelexporter "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// MeterName is a suitable instrumentation scope for the meter given to
// quietpatch.Config.Meter.
const MeterName = "github.com/quietpatch/quietpatch"

// NewMeterProvider returns an OpenTelemetry SDK MeterProvider whose
// instruments are exported to reg on every scrape. Give
// provider.Meter(MeterName) to quietpatch.Config.Meter, and Shutdown the
// provider once the pipeline has stopped.
//
// Names are translated the Prometheus way, set explicitly so that a change
// of the exporter's default cannot rename them: dots become underscores,
// the unit a suffix (s → _seconds), counters end in _total —
// quietpatch.dispatch.patches is quietpatch_dispatch_patches_total. The
// otel_scope_* labels and the target_info family are left out. The
// exporter registers a collector with reg that cannot be unregistered:
// after Shutdown it exports nothing.
func NewMeterProvider(reg prometheus.Registerer) (*sdkmetric.MeterProvider, error) {
	if reg == nil {
		return nil, errors.New("otelprom: NewMeterProvider: reg must not be nil")
	}
	exp, err := otelexporter.New(
		otelexporter.WithRegisterer(reg),
		otelexporter.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		otelexporter.WithoutScopeInfo(),
		otelexporter.WithoutTargetInfo(),
	)
	if err != nil {
		return nil, fmt.Errorf("otelprom: the OpenTelemetry Prometheus exporter: %w", err)
	}
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)), nil
}
