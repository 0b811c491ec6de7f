// Command widget is a kubebuilder-style status controller for Widgets
// (example.com/v1): a controller-runtime manager, and one call that adds a
// quietpatch pipeline keeping each Widget's Ready condition and
// observedGeneration up to date, under a policy ConfigMap (the largest
// Ready size) declared as a Dependency. Run it on every replica:
// quietpatch's own Lease decides which one writes.
//
//	widget -lease-namespace widget-system [-kubeconfig FILE] [-interval 10s] ...
//
// See README.md in this folder.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/quietpatch/quietpatch"
	qpcr "github.com/quietpatch/quietpatch/integrations/controllerruntime"
	examplev1 "github.com/quietpatch/quietpatch/integrations/controllerruntime/examples/widget/api/v1"
	"github.com/quietpatch/quietpatch/integrations/controllerruntime/examples/widget/readiness"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch/conditions"
)

// The least privilege the controller needs; `make generate` writes
// config/rbac/role.yaml from these markers.
//
// +kubebuilder:rbac:groups=example.com,resources=widgets,verbs=get;list;watch
// +kubebuilder:rbac:groups=example.com,resources=widgets/status,verbs=patch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=widget-system,resources=leases,verbs=get;create;update;watch
// +kubebuilder:rbac:groups="",namespace=widget-system,resources=configmaps,verbs=get;list;watch

func main() {
	var (
		cfg              quietpatch.Config
		metricsAddr      string
		probeAddr        string
		leaseDuration    time.Duration
		gracefulShutdown time.Duration
		policy           types.NamespacedName
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "address of the manager's /metrics (quietpatch's families included); 0 disables it")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address of /readyz and /healthz")
	flag.StringVar(&cfg.Lease.Namespace, "lease-namespace", "widget-system", "namespace of quietpatch's Lease")
	flag.StringVar(&cfg.Lease.Name, "lease-name", "widget-status", "name of quietpatch's Lease (not the manager's leader election ID)")
	flag.DurationVar(&leaseDuration, "lease-duration", leader.DefaultLeaseDuration, "quietpatch's LeaseDuration: a crashed leader's successor writes after about this long; whole seconds")
	flag.DurationVar(&cfg.Interval, "interval", quietpatch.DefaultInterval, "interval between full reconcile passes")
	flag.IntVar(&cfg.Workers, "workers", 0, "status patches in flight at most; 0: adaptive, the library's default (quietpatch.Config.Workers)")
	flag.DurationVar(&gracefulShutdown, "graceful-shutdown-timeout", 30*time.Second, "how long the manager waits for quietpatch to stop; keep it above PatchTimeout + Lease CallTimeout (10s by default)")
	flag.StringVar(&policy.Namespace, "policy-namespace", "widget-system", "namespace of the policy ConfigMap (the RBAC of config/rbac names widget-system)")
	flag.StringVar(&policy.Name, "policy-name", "widget-policy", "name of the policy ConfigMap; data."+readiness.PolicyMaxSize+" is the largest size of a Ready Widget (default "+fmt.Sprint(readiness.MaxSize)+")")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	cfg.Name = "widgets"
	cfg.Lease.LeaseDuration = leaseDuration
	if err := run(ctrl.SetupSignalHandler(), cfg, policy, metricsAddr, probeAddr, gracefulShutdown); err != nil {
		fmt.Fprintln(os.Stderr, "widget:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg quietpatch.Config, policyKey types.NamespacedName, metricsAddr, probeAddr string, gracefulShutdown time.Duration) error {
	scheme := runtime.NewScheme()
	if err := examplev1.AddToScheme(scheme); err != nil {
		return err
	}
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	restCfg, err := ctrl.GetConfig() // client-side rate limit off (QPS -1)
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:  probeAddr,
		GracefulShutdownTimeout: &gracefulShutdown,
		// The cache holds the one policy ConfigMap, not every ConfigMap.
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{&corev1.ConfigMap{}: {
			Namespaces: map[string]cache.Config{policyKey.Namespace: {}},
			Field:      fields.OneTermEqualSelector("metadata.name", policyKey.Name),
		}}},
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	// The policy: a Source over the manager's informer of ConfigMaps. Get
	// returns the cache's own object (no copy per Widget and pass), and the
	// Source is the Dependency's Informer: Run waits for its cache, and
	// each of its events makes a pass (Keys nil: every Widget).
	policy, err := qpcr.NewSource(ctx, mgr.GetCache(), &corev1.ConfigMap{})
	if err != nil {
		return err
	}
	cfg.Dependencies = []quietpatch.Dependency{{Informer: policy}}
	computer, err := conditions.New(conditions.Config[*examplev1.Widget]{
		Conditions: func(w *examplev1.Widget) ([]metav1.Condition, error) {
			cm, _, err := policy.Get(policyKey) // nil when there is none
			if err != nil {
				return nil, err
			}
			p, err := readiness.PolicyFrom(cm)
			if err != nil {
				return nil, err
			}
			return p.Conditions(w)
		},
	})
	if err != nil {
		return err
	}
	// The one call: cache-backed Source, patcher, Lease, queue, reconciler,
	// dispatcher, readyz/healthz checks, metrics into the manager's registry;
	// the Dependency's cache and events.
	if _, err := qpcr.Add(ctx, mgr, &examplev1.Widget{}, computer, qpcr.Options{
		Config:       cfg,
		FieldManager: "example.com/widget-status",
	}); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.Start(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
