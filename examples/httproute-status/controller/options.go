package controller

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/quietpatch/quietpatch/examples/httproute-status/routestatus"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
)

// Defaults applied to zero fields of [Options]. The command's flags show the
// same values.
const (
	// DefaultControllerName is the default Options.ControllerName.
	DefaultControllerName = "quietpatch.io/httproute-status"
	// DefaultLeaseName is the default Options.LeaseName.
	DefaultLeaseName = "quietpatch-httproute-status"
	// DefaultFieldManager is the default Options.FieldManager.
	DefaultFieldManager = "quietpatch-httproute-status"
	// DefaultReconcileInterval is the default Options.ReconcileInterval.
	DefaultReconcileInterval = 10 * time.Second
	// DefaultPatchLatency is the default Options.PatchLatency: one status
	// patch in flight against a real kube-apiserver on 2 cores took 1/144 s
	// (≈ 6.9 ms) on average.
	DefaultPatchLatency = time.Second / 144
	// DefaultPatchTimeout is the default Options.PatchTimeout.
	DefaultPatchTimeout = 5 * time.Second
	// DefaultWorkers is the default Options.Workers.
	DefaultWorkers = 2
	// DefaultKubeQPS is the default Options.KubeQPS.
	DefaultKubeQPS = 50
	// DefaultKubeBurst is the default Options.KubeBurst.
	DefaultKubeBurst = 100
	// DefaultLeaseDuration is the default Options.LeaseDuration.
	DefaultLeaseDuration = 15 * time.Second
	// DefaultCacheSyncTimeout is the default Options.CacheSyncTimeout.
	DefaultCacheSyncTimeout = 2 * time.Minute
	// MaxWorkers bounds Options.Workers (the dispatcher's own limit).
	MaxWorkers = 1024
	// MaxQueueCapacity bounds Options.QueueCapacity: far above what any API
	// server absorbs in an interval, low enough that a typo cannot reserve
	// gigabytes.
	MaxQueueCapacity = 10_000_000
)

// ReferenceGrant API versions accepted by Options.ReferenceGrantVersion.
const (
	// ReferenceGrantAuto asks the API server (discovery) whether
	// gateway.networking.k8s.io/v1 serves referencegrants, and uses v1 if
	// it does, else v1beta1. When discovery fails, v1 is used.
	ReferenceGrantAuto = "auto"
	// ReferenceGrantV1 watches ReferenceGrants through the v1 API.
	ReferenceGrantV1 = "v1"
	// ReferenceGrantV1beta1 watches ReferenceGrants through the v1beta1
	// API, for clusters whose Gateway API CRDs predate the v1 version.
	ReferenceGrantV1beta1 = "v1beta1"
)

// ErrInvalidOptions is wrapped by every error [New] returns for Options it
// rejects; the error is an [*OptionError] naming the field.
var ErrInvalidOptions = errors.New("controller: invalid options")

// OptionError says which field of [Options] is invalid and why. It wraps
// [ErrInvalidOptions]. The command maps Field to its flag.
type OptionError struct {
	// Field is the name of the Options field, e.g. "Workers".
	Field string
	// Value is the rejected value, formatted with %v; nil when Rule
	// already shows it.
	Value any
	// Rule says what the value must be, e.g. "must be between 1 and 1024".
	Rule string
}

// Error implements error: "controller: Options.Workers must be between 1
// and 1024, got 0".
func (e *OptionError) Error() string {
	if e.Value == nil {
		return fmt.Sprintf("controller: Options.%s %s", e.Field, e.Rule)
	}
	return fmt.Sprintf("controller: Options.%s %s, got %v", e.Field, e.Rule, e.Value)
}

// Unwrap returns ErrInvalidOptions.
func (e *OptionError) Unwrap() error { return ErrInvalidOptions }

func optErr(field string, value any, rule string, args ...any) error {
	return &OptionError{Field: field, Value: value, Rule: fmt.Sprintf(rule, args...)}
}

// Options configures the controller. Zero fields take the documented
// default; [New] rejects invalid values with an [*OptionError] naming the
// field. Each field notes the command-line flag that sets it.
type Options struct {
	// Kubeconfig is the path of a kubeconfig file (--kubeconfig). Empty:
	// the in-cluster configuration when running in a pod, else the
	// standard loading rules ($KUBECONFIG, then ~/.kube/config). Ignored
	// when RestConfig or both clients are set.
	Kubeconfig string

	// RestConfig, when set, is used instead of loading a kubeconfig. It is
	// copied; the copy gets KubeQPS, KubeBurst and a user agent.
	RestConfig *rest.Config

	// KubeClient serves Services, Namespaces and (unless LeaseClient is
	// set) Leases. Default: built from the REST configuration with
	// KubeQPS and KubeBurst. Tests pass k8s.io/client-go/kubernetes/fake.
	KubeClient kubernetes.Interface

	// GatewayClient serves HTTPRoutes (and their status patches),
	// Gateways, GatewayClasses and ReferenceGrants. Default: built like
	// KubeClient. Tests pass gateway-api's fake clientset.
	GatewayClient gatewayclient.Interface

	// LeaseClient serves the Lease. Default: when KubeClient is set, its
	// CoordinationV1(); otherwise a client of its own built from the REST
	// configuration with client-go's default rate limit (QPS 5, burst 10,
	// plenty for about one write per 5 s), so that status patches
	// saturating the controller's own limiter never delay a lease renewal.
	LeaseClient coordinationv1client.LeasesGetter

	// ControllerName is written as controllerName in every status entry
	// this controller owns, and selects the Gateways it handles: those
	// whose GatewayClass's spec.controllerName equals it
	// (--controller-name). Default DefaultControllerName. Must be
	// DOMAIN/PATH.
	ControllerName string

	// Mesh makes the controller handle Service parents (GAMMA)
	// (--mesh, whose default is true). The zero value leaves them alone.
	Mesh bool

	// LeaseNamespace is the namespace of the Lease (--lease-namespace).
	// Required.
	LeaseNamespace string
	// LeaseName is the name of the Lease (--lease-name). Default
	// DefaultLeaseName.
	LeaseName string
	// Identity is this replica's holder identity (--identity). Required;
	// must be unique per process.
	Identity string
	// LeaseDuration, RenewGrace and RetryPeriod configure the claim
	// (--lease-duration, --renew-grace, --retry-period); see
	// leader.Config. Zero: LeaseDuration 15s, RenewGrace ⅔ of
	// LeaseDuration, RetryPeriod min(2s, RenewGrace/2). Invalid
	// combinations are rejected as leader.Config rejects them.
	LeaseDuration, RenewGrace, RetryPeriod time.Duration

	// ReconcileInterval is the time between full reconcile passes while
	// leader (--reconcile-interval). Default 10s; must not be negative.
	// Queued patches older than twice the interval are dropped at dequeue
	// (reason expired): the passes since have recomputed them.
	ReconcileInterval time.Duration

	// QueueCapacity is the number of patches the queue holds
	// (--queue-capacity). Zero: [SuggestedCapacity] of the interval,
	// PatchLatency, KubeQPS and Workers — with the defaults
	// 10 s × min(2 / 6.9 ms, 50/s) = 500. At most MaxQueueCapacity.
	QueueCapacity int

	// PatchLatency is the per-patch latency assumed when sizing the queue
	// (--patch-latency), measured at Workers in flight. Default
	// DefaultPatchLatency; must not be negative. Only used when
	// QueueCapacity is zero.
	PatchLatency time.Duration

	// PatchTimeout bounds every status patch (--patch-timeout); the
	// deadline is also never later than the end of our claim. Default 5s;
	// must not be negative.
	PatchTimeout time.Duration

	// Workers is the number of status patches in flight at most
	// (--workers). Default 2; at most MaxWorkers.
	Workers int

	// KubeQPS and KubeBurst configure the client-side rate limiter of the
	// clients built by the controller (--kube-qps, --kube-burst). Zero:
	// 50 and 100. client-go's own defaults (QPS 5, burst 10) would cap
	// status patches at 5/s, 50 per 10 s interval, however fast the API
	// server is. A negative KubeQPS turns the limiter off. KubeQPS also
	// enters the queue's default capacity. Set them when the controller
	// builds its clients; with KubeClient and GatewayClient given they
	// only size the queue.
	KubeQPS   float32
	KubeBurst int

	// FieldManager names this controller in the routes' managedFields.
	// Default DefaultFieldManager; at most 128 characters.
	FieldManager string

	// MetricsAddr is the listen address of the Prometheus endpoint
	// /metrics (--metrics-addr). Empty or "0": no endpoint (metrics are
	// still recorded by the library, and discarded).
	MetricsAddr string
	// MetricsListener, when set, is served instead of listening on
	// MetricsAddr (tests pass a listener on 127.0.0.1:0). Run closes it;
	// New does not, when it fails.
	MetricsListener net.Listener

	// HealthAddr is the listen address of /healthz (liveness) and /readyz
	// (readiness) (--health-addr). Empty or "0": no endpoint.
	HealthAddr string
	// HealthListener, when set, is served instead of listening on
	// HealthAddr. Run closes it.
	HealthListener net.Listener

	// CacheSyncTimeout bounds the wait for the informers' initial lists
	// (--cache-sync-timeout). Run fails when they are not synced by then:
	// usually missing CRDs or RBAC. Default 2m; must not be negative.
	CacheSyncTimeout time.Duration

	// ReferenceGrantVersion is the API version used to watch
	// ReferenceGrants: ReferenceGrantAuto (the default when empty),
	// ReferenceGrantV1 or ReferenceGrantV1beta1
	// (--reference-grant-version).
	ReferenceGrantVersion string

	// Logger receives the controller's and the library's logs. Nil
	// discards them.
	Logger *slog.Logger
}

// SuggestedCapacity is the queue capacity used when Options.QueueCapacity is
// zero: statuspatch.SuggestCapacity(interval, patchLatency, qps, workers),
// the patches the client and the API server absorb in one interval. qps <=
// 0 means no client limit.
func SuggestedCapacity(interval, patchLatency time.Duration, qps float32, workers int) int {
	return statuspatch.SuggestCapacity(interval, patchLatency, qps, workers)
}

// Complete returns o with the defaults applied, or the *OptionError (wrapping
// ErrInvalidOptions) that New would return for it. It makes no API call;
// New calls it too, and applying it twice changes nothing.
func (o Options) Complete() (Options, error) { return o.withDefaults() }

// withDefaults returns o with defaults applied, or an *OptionError.
func (o Options) withDefaults() (Options, error) {
	if o.ControllerName == "" {
		o.ControllerName = DefaultControllerName
	}
	if _, err := routestatus.NewComputer(routestatus.Options{ControllerName: gatewayControllerName(o.ControllerName)}); err != nil {
		return o, optErr("ControllerName", fmt.Sprintf("%q", o.ControllerName), `must be DOMAIN/PATH (e.g. "example.net/gateway-controller") of at most 253 characters`)
	}
	if o.LeaseName == "" {
		o.LeaseName = DefaultLeaseName
	}
	if o.LeaseNamespace == "" {
		return o, optErr("LeaseNamespace", `""`, "must be set")
	}
	if errs := validation.IsDNS1123Label(o.LeaseNamespace); len(errs) > 0 {
		return o, optErr("LeaseNamespace", fmt.Sprintf("%q", o.LeaseNamespace), "must be a namespace name (RFC 1123 label)")
	}
	if errs := validation.IsDNS1123Subdomain(o.LeaseName); len(errs) > 0 {
		return o, optErr("LeaseName", fmt.Sprintf("%q", o.LeaseName), "must be an object name (RFC 1123 subdomain)")
	}
	if o.Identity == "" {
		return o, optErr("Identity", `""`, "must be set (unique per process)")
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = DefaultLeaseDuration
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"LeaseDuration", o.LeaseDuration}, {"RenewGrace", o.RenewGrace}, {"RetryPeriod", o.RetryPeriod},
		{"ReconcileInterval", o.ReconcileInterval}, {"PatchLatency", o.PatchLatency},
		{"PatchTimeout", o.PatchTimeout}, {"CacheSyncTimeout", o.CacheSyncTimeout},
	} {
		if d.v < 0 {
			return o, optErr(d.field, d.v, "must not be negative")
		}
	}
	if err := validateLease(o); err != nil {
		return o, err
	}
	if o.ReconcileInterval == 0 {
		o.ReconcileInterval = DefaultReconcileInterval
	}
	if o.PatchLatency == 0 {
		o.PatchLatency = DefaultPatchLatency
	}
	if o.PatchTimeout == 0 {
		o.PatchTimeout = DefaultPatchTimeout
	}
	if o.CacheSyncTimeout == 0 {
		o.CacheSyncTimeout = DefaultCacheSyncTimeout
	}
	if o.Workers == 0 {
		o.Workers = DefaultWorkers
	}
	if o.Workers < 0 || o.Workers > MaxWorkers {
		return o, optErr("Workers", o.Workers, "must be between 1 and %d", MaxWorkers)
	}
	if o.KubeQPS == 0 {
		o.KubeQPS = DefaultKubeQPS
	}
	if o.KubeBurst == 0 {
		o.KubeBurst = DefaultKubeBurst
	}
	if o.KubeBurst < 0 {
		return o, optErr("KubeBurst", o.KubeBurst, "must not be negative")
	}
	if o.KubeQPS > 0 && float64(o.KubeBurst) < 1 {
		return o, optErr("KubeBurst", o.KubeBurst, "must be >= 1 when KubeQPS is positive")
	}
	if o.QueueCapacity < 0 || o.QueueCapacity > MaxQueueCapacity {
		return o, optErr("QueueCapacity", o.QueueCapacity, "must be between 0 (derived) and %d", MaxQueueCapacity)
	}
	if o.QueueCapacity == 0 {
		o.QueueCapacity = SuggestedCapacity(o.ReconcileInterval, o.PatchLatency, o.KubeQPS, o.Workers)
		o.QueueCapacity = min(max(o.QueueCapacity, 1), MaxQueueCapacity)
	}
	if o.FieldManager == "" {
		o.FieldManager = DefaultFieldManager
	}
	if len(o.FieldManager) > 128 {
		return o, optErr("FieldManager", len(o.FieldManager), "must be at most 128 characters long")
	}
	switch o.ReferenceGrantVersion {
	case "":
		o.ReferenceGrantVersion = ReferenceGrantAuto
	case ReferenceGrantAuto, ReferenceGrantV1, ReferenceGrantV1beta1:
	default:
		return o, optErr("ReferenceGrantVersion", fmt.Sprintf("%q", o.ReferenceGrantVersion), "must be %q, %q or %q",
			ReferenceGrantAuto, ReferenceGrantV1, ReferenceGrantV1beta1)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// disabledAddr reports whether a listen address turns the endpoint off.
func disabledAddr(addr string) bool { return addr == "" || addr == "0" }

// validateLease checks the lease fields as leader.NewClaimer does, by
// building a claimer over a client that is never called (leader.Config has
// no Validate of its own).
func validateLease(o Options) error {
	_, err := leader.NewClaimer(noLeases{}, leader.Config{
		Namespace:     o.LeaseNamespace,
		Name:          o.LeaseName,
		Identity:      o.Identity,
		LeaseDuration: o.LeaseDuration,
		RenewGrace:    o.RenewGrace,
		RetryPeriod:   o.RetryPeriod,
	})
	if err != nil {
		return leaderOptionError(err)
	}
	return nil
}

// noLeases is a LeasesGetter for validation only: NewClaimer keeps the
// interface it returns and makes no request.
type noLeases struct{}

func (noLeases) Leases(string) coordinationv1client.LeaseInterface { return nil }
