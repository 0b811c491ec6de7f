package controllerruntime_test

import (
	"context"
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/quietpatch/quietpatch"
	qpcr "github.com/quietpatch/quietpatch/integrations/controllerruntime"
	examplev1 "github.com/quietpatch/quietpatch/integrations/controllerruntime/examples/widget/api/v1"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch/conditions"
)

// A status controller for a custom resource in a kubebuilder project: the
// manager, the function from a Widget to its conditions, and one call.
// Every replica runs it; quietpatch's Lease widget-system/widget-status
// picks the one that writes. The readyz/healthz checks "widgets" and the
// quietpatch_* families on the manager's /metrics come with it.
func ExampleAdd() {
	scheme := runtime.NewScheme()
	if err := examplev1.AddToScheme(scheme); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{Scheme: scheme, HealthProbeBindAddress: ":8081"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	computer, err := conditions.New(conditions.Config[*examplev1.Widget]{
		Conditions: func(w *examplev1.Widget) ([]metav1.Condition, error) {
			if w.Spec.Size > 100 {
				return []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "TooLarge", Message: "size above 100"}}, nil
			}
			return []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Sized", Message: "ok"}}, nil
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	ctx := ctrl.SetupSignalHandler()
	if _, err := qpcr.Add(ctx, mgr, &examplev1.Widget{}, computer, qpcr.Options{
		Config: quietpatch.Config{
			Name:  "widgets",
			Lease: leader.Config{Namespace: "widget-system", Name: "widget-status"},
		},
		FieldManager: "example.com/widget-status",
	}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	if err := mgr.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}

// The instruments of a pipeline, exported into a Prometheus registry with
// the names a Prometheus user expects. In a manager, pass
// controller-runtime's metrics.Registry (Add does by default).
func ExampleNewMeterProvider() {
	reg := prometheus.NewRegistry()
	mp, err := qpcr.NewMeterProvider(reg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mp.Shutdown(context.Background())
	patches, _ := mp.Meter(qpcr.MeterName).Int64Counter("quietpatch.dispatch.patches")
	patches.Add(context.Background(), 3)
	depth, _ := mp.Meter(qpcr.MeterName).Int64Gauge("quietpatch.queue.depth")
	depth.Record(context.Background(), 7)

	fams, err := reg.Gather()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range fams {
		fmt.Println(f.GetName(), f.GetType(), len(f.GetMetric()[0].GetLabel()))
	}
	// Output:
	// quietpatch_dispatch_patches_total COUNTER 0
	// quietpatch_queue_depth GAUGE 0
}
