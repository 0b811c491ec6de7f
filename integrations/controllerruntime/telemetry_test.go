package controllerruntime_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	qpcr "github.com/quietpatch/quietpatch/integrations/controllerruntime"
)

// Two pipelines of one process, each with the MeterProvider Add makes,
// share the registry: one family, a series per pipeline label. After
// Shutdown a provider exports nothing, and the other goes on.
func TestNewMeterProviderTwoPipelines(t *testing.T) {
	reg := prometheus.NewRegistry()
	ctx := context.Background()
	var shutdown []func(context.Context) error
	for _, pipeline := range []string{"widgets", "gadgets"} {
		mp, err := qpcr.NewMeterProvider(reg)
		if err != nil {
			t.Fatal(err)
		}
		shutdown = append(shutdown, mp.Shutdown)
		c, err := mp.Meter(qpcr.MeterName).Int64Counter("quietpatch.dispatch.patches")
		if err != nil {
			t.Fatal(err)
		}
		c.Add(ctx, 1, metric.WithAttributes(attribute.String("pipeline", pipeline)))
	}
	series := func() int {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatalf("Gather: %v", err)
		}
		n := 0
		for _, f := range fams {
			if f.GetName() != "quietpatch_dispatch_patches_total" {
				t.Errorf("unexpected family %s", f.GetName())
			}
			n += len(f.GetMetric())
		}
		return n
	}
	if got := series(); got != 2 {
		t.Errorf("%d series of quietpatch_dispatch_patches_total, want 2 (one per pipeline)", got)
	}
	if err := shutdown[0](ctx); err != nil {
		t.Fatal(err)
	}
	if got := series(); got != 1 {
		t.Errorf("%d series after one provider's Shutdown, want 1", got)
	}
	if err := shutdown[1](ctx); err != nil {
		t.Fatal(err)
	}
}
