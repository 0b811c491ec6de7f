package otelprom_test

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/integrations/otelprom"
	"github.com/quietpatch/quietpatch/leader"
)

// A registry of one's own gathers the pipeline's instruments while its Run
// runs; serve it with promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).
// The pipeline here has no objects, and its Lease client is client-go's
// fake.
func ExampleNewMeterProvider() {
	reg := prometheus.NewRegistry()
	provider, err := otelprom.NewMeterProvider(reg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = provider.Shutdown(context.Background()) }()
	ctrl, err := quietpatch.New(configMaps(), readyComputer{}, patcherFunc(nil), quietpatch.Config{
		Name:   "widgets",
		Leases: fake.NewClientset().CoordinationV1(),
		Lease:  leader.Config{Namespace: "demo", Name: "widgets"},
		Meter:  provider.Meter(otelprom.MeterName),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); ctrl.Ready() != nil && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond) // Run registers the instruments, then starts the parts
	}
	families, _ := reg.Gather()
	for _, f := range families {
		if f.GetName() == "quietpatch_queue_capacity" {
			fmt.Println(f.GetName(), f.GetMetric()[0].GetGauge().GetValue())
		}
	}
	cancel()
	fmt.Println("Run:", <-done)
	// Output:
	// quietpatch_queue_capacity 50000
	// Run: <nil>
}
