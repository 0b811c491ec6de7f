package otelprom_test

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"github.com/quietpatch/quietpatch/integrations/otelprom"
	"github.com/quietpatch/quietpatch/statuspatch"
)

// A registry of one's own gathers the pipeline's instruments; serve it
// with promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).
func ExampleNewMeterProvider() {
	reg := prometheus.NewRegistry()
	provider, err := otelprom.NewMeterProvider(reg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = provider.Shutdown(context.Background()) }()
	// quietpatch.Config{Options: statuspatch.Options{Meter: ...}} does the
	// same for a whole pipeline.
	_, _ = statuspatch.NewPatchQueue[types.NamespacedName](statuspatch.Options{Name: "widgets", Meter: provider.Meter(otelprom.MeterName)})
	families, _ := reg.Gather()
	for _, f := range families {
		if f.GetName() == "quietpatch_queue_capacity" {
			fmt.Println(f.GetName(), f.GetMetric()[0].GetGauge().GetValue())
		}
	}
	// Output: quietpatch_queue_capacity 50000
}
