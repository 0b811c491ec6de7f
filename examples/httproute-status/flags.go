package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/quietpatch/quietpatch/examples/httproute-status/controller"
)

// config is what the command line says: the controller's options and how
// to log.
type config struct {
	opts      controller.Options
	logLevel  slog.Level
	logFormat string // "text" or "json"
	// warnings are logged once logging is configured: deprecated flags.
	warnings []string
}

// env reads the environment; tests pass a map's lookup.
type env func(string) string

// flagValues holds the values the flag package parses into.
type flagValues struct {
	kubeconfig, controllerName, leaseNamespace, leaseName, identity string
	leaseDuration, renewGrace, retryPeriod                          time.Duration
	interval, patchLatency, patchTimeout, cacheSyncTimeout          time.Duration
	queueCapacity, workers, kubeBurst, shards                       int
	kubeQPS                                                         float64
	metricsAddr, healthAddr, logLevel, logFormat, refGrantVersion   string
	mesh, fence                                                     bool
}

// defaultLeaseNamespace is $POD_NAMESPACE, else "default".
func defaultLeaseNamespace(getenv env) string {
	if ns := getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return "default"
}

// newFlagSet defines every flag on a FlagSet that reports errors instead of
// exiting or printing.
func newFlagSet(getenv env) (*flag.FlagSet, *flagValues) {
	fs := flag.NewFlagSet("httproute-status", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	v := &flagValues{}

	fs.StringVar(&v.kubeconfig, "kubeconfig", "",
		"path of a kubeconfig file; empty: the in-cluster configuration when running in a pod, else $KUBECONFIG, else ~/.kube/config")
	fs.StringVar(&v.controllerName, "controller-name", controller.DefaultControllerName,
		"controllerName written in the status entries this controller owns; Gateways are handled when their GatewayClass names it (DOMAIN/PATH)")
	fs.StringVar(&v.leaseNamespace, "lease-namespace", defaultLeaseNamespace(getenv),
		"namespace of the coordination.k8s.io Lease the replicas compete for: $POD_NAMESPACE if set, else \"default\"")
	fs.StringVar(&v.leaseName, "lease-name", controller.DefaultLeaseName, "name of the Lease")
	fs.StringVar(&v.identity, "identity", "",
		"this replica's holder identity in the Lease, unique per process; empty: $POD_NAME (else the host name) plus '_' and 8 random hex digits drawn at start")
	fs.DurationVar(&v.leaseDuration, "lease-duration", controller.DefaultLeaseDuration,
		"how long a claim lasts after it was last renewed; whole seconds (short values are for tests)")
	fs.DurationVar(&v.renewGrace, "renew-grace", 0,
		"renew the claim when less than this remains; 0: 2/3 of --lease-duration (10s); must be < --lease-duration")
	fs.DurationVar(&v.retryPeriod, "retry-period", 0,
		"retry a failed lease request, and re-check another holder's lease, this often; 0: min(2s, --renew-grace/2); must be < --renew-grace")
	fs.DurationVar(&v.interval, "reconcile-interval", controller.DefaultReconcileInterval,
		"time between full reconcile passes while leader (events reconcile single routes in between)")
	fs.IntVar(&v.queueCapacity, "queue-capacity", 0,
		"route keys each lane of the queue holds (a pass finding more changed routes halts and the next resumes where it stopped); 0: the library's default ("+strconv.Itoa(controller.DefaultQueueCapacity)+")")
	fs.DurationVar(&v.patchLatency, "patch-latency", 0,
		"deprecated and ignored (see --queue-capacity)")
	fs.DurationVar(&v.patchTimeout, "patch-timeout", controller.DefaultPatchTimeout,
		"deadline of each status patch (never later than the end of our claim)")
	fs.IntVar(&v.shards, "shards", 0,
		"split the HTTPRoutes into this many shards by UID hash, each with its own Lease and cache, spread over the replicas alive; 0 or 1: one Lease, one cache of every route. Every replica must use the same value")
	fs.IntVar(&v.workers, "workers", 0,
		"status patches in flight at most; 0: automatic, the library adapts the limit to the API server's latency (1 to 1024)")
	fs.Float64Var(&v.kubeQPS, "kube-qps", controller.DefaultKubeQPS,
		"client-side rate limit of the status and informer client, requests per second; negative: none, the default — the API server's "+
			"Priority and Fairness protects the server and the adaptive --workers limit protects latency, while a client-side limit "+
			"silently caps patches (client-go's default 5 allows 50 per 10s interval); the Lease has a client of its own with no limit")
	fs.IntVar(&v.kubeBurst, "kube-burst", controller.DefaultKubeBurst, "client-side burst of API requests above a positive --kube-qps")
	fs.StringVar(&v.metricsAddr, "metrics-addr", ":8080", `listen address of the Prometheus endpoint /metrics; "" or "0" disables it`)
	fs.StringVar(&v.healthAddr, "health-addr", ":8081", `listen address of /healthz (liveness) and /readyz (readiness); "" or "0" disables them`)
	fs.StringVar(&v.logLevel, "log-level", "info", "debug, info, warn or error; debug logs a diff of every changed status")
	fs.StringVar(&v.logFormat, "log-format", "text", "text or json")
	fs.BoolVar(&v.mesh, "mesh", true, `handle Service parents (GAMMA mesh routes); --mesh=false leaves them to other controllers`)
	fs.DurationVar(&v.cacheSyncTimeout, "cache-sync-timeout", controller.DefaultCacheSyncTimeout,
		"fail when the informer caches have not synced by then (missing CRDs or RBAC)")
	fs.BoolVar(&v.fence, "fence", false,
		"name the writer in the field manager of every status write (<Lease namespace>/<Lease name>@<identity>), so that the ValidatingAdmissionPolicy "+
			"of deploy/fence denies a write whose writer no longer holds its Lease; the controller checks once per Lease that it does, and warns if not")
	fs.StringVar(&v.refGrantVersion, "reference-grant-version", controller.ReferenceGrantAuto,
		"API version to watch ReferenceGrants with: auto (ask discovery), v1 or v1beta1")
	return fs, v
}

// flagOf maps Options fields to the flag that sets them.
var flagOf = map[string]string{
	"ControllerName":        "controller-name",
	"LeaseNamespace":        "lease-namespace",
	"LeaseName":             "lease-name",
	"Identity":              "identity",
	"LeaseDuration":         "lease-duration",
	"RenewGrace":            "renew-grace",
	"RetryPeriod":           "retry-period",
	"ReconcileInterval":     "reconcile-interval",
	"QueueCapacity":         "queue-capacity",
	"PatchTimeout":          "patch-timeout",
	"Workers":               "workers",
	"Shards":                "shards",
	"KubeQPS":               "kube-qps",
	"KubeBurst":             "kube-burst",
	"CacheSyncTimeout":      "cache-sync-timeout",
	"ReferenceGrantVersion": "reference-grant-version",
	"Fence":                 "fence",
}

// fieldsToFlags rewrites the Options field names that appear in rules
// (from the leader package's validation) as flags.
var fieldsToFlags = strings.NewReplacer(
	"LeaseDuration", "--lease-duration", "RenewGrace", "--renew-grace", "RetryPeriod", "--retry-period")

// flagError is an invalid flag value: "invalid value for --workers: must be
// between 1 and 1024, got 0".
func flagError(name, format string, args ...any) error {
	return fmt.Errorf("invalid value for --%s: %s", name, fmt.Sprintf(format, args...))
}

// parseFlags parses args (without the program name) into a config. It
// never exits or prints: flag.ErrHelp for -h/--help, otherwise an error
// naming the flag. The options are validated as controller.New would.
func parseFlags(args []string, getenv env) (config, error) {
	fs, v := newFlagSet(getenv)
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected argument %q: this command takes flags only", fs.Arg(0))
	}

	// Zero means "default" in Options; on the command line it is an error
	// for these flags, rather than a silent default.
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"lease-duration", v.leaseDuration}, {"reconcile-interval", v.interval},
		{"patch-timeout", v.patchTimeout}, {"cache-sync-timeout", v.cacheSyncTimeout},
	} {
		if d.v <= 0 {
			return config{}, flagError(d.name, "must be > 0, got %s", d.v)
		}
	}
	if v.kubeQPS == 0 {
		return config{}, flagError("kube-qps", "must be > 0, or negative to turn the client-side limiter off, got 0")
	}
	if v.kubeQPS > 1e6 {
		return config{}, flagError("kube-qps", "must be at most 1e6, got %g", v.kubeQPS)
	}
	if v.kubeBurst < 1 {
		return config{}, flagError("kube-burst", "must be >= 1, got %d", v.kubeBurst)
	}

	cfg := config{logFormat: v.logFormat}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "patch-latency" {
			cfg.warnings = append(cfg.warnings, "--patch-latency is deprecated and ignored: --queue-capacity sets the queue's capacity")
		}
	})
	switch strings.ToLower(v.logLevel) {
	case "debug":
		cfg.logLevel = slog.LevelDebug
	case "info":
		cfg.logLevel = slog.LevelInfo
	case "warn", "warning":
		cfg.logLevel = slog.LevelWarn
	case "error":
		cfg.logLevel = slog.LevelError
	default:
		return config{}, flagError("log-level", "must be debug, info, warn or error, got %q", v.logLevel)
	}
	if v.logFormat != "text" && v.logFormat != "json" {
		return config{}, flagError("log-format", "must be text or json, got %q", v.logFormat)
	}

	cfg.opts = controller.Options{
		Kubeconfig:            v.kubeconfig,
		ControllerName:        v.controllerName,
		Mesh:                  v.mesh,
		LeaseNamespace:        v.leaseNamespace,
		LeaseName:             v.leaseName,
		Identity:              v.identity,
		LeaseDuration:         v.leaseDuration,
		RenewGrace:            v.renewGrace,
		RetryPeriod:           v.retryPeriod,
		ReconcileInterval:     v.interval,
		QueueCapacity:         v.queueCapacity,
		PatchTimeout:          v.patchTimeout,
		Workers:               v.workers,
		Shards:                v.shards,
		KubeQPS:               float32(v.kubeQPS),
		KubeBurst:             v.kubeBurst,
		MetricsAddr:           v.metricsAddr,
		HealthAddr:            v.healthAddr,
		CacheSyncTimeout:      v.cacheSyncTimeout,
		ReferenceGrantVersion: v.refGrantVersion,
		Fence:                 v.fence,
	}
	completed, err := cfg.opts.Complete()
	if err != nil {
		var oe *controller.OptionError
		if errors.As(err, &oe) {
			if name, ok := flagOf[oe.Field]; ok {
				return config{}, flagError(name, "%s", fieldsToFlags.Replace(oe.Rule))
			}
		}
		return config{}, err
	}
	completed.Logger = nil // set by main once logging is configured
	cfg.opts = completed
	return cfg, nil
}

// usage writes the command's help.
func usage(w io.Writer, getenv env) {
	fs, _ := newFlagSet(getenv)
	fs.SetOutput(w)
	_, _ = fmt.Fprint(w, `httproute-status keeps status.parents of Gateway API HTTPRoutes up to date for one
controller name, with the quietpatch library: one replica at a time (a Lease) patches
only what changed, through a bounded queue, with a deadline on every call.

Usage: httproute-status [flags]

Flags:
`)
	fs.PrintDefaults()
	_, _ = fmt.Fprint(w, `
Exit status: 0 after SIGINT/SIGTERM (lease vacated), 1 when the controller fails
(the lease loop, the informers, an endpoint), 2 for invalid flags.
`)
}
