package controller

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/examples/httproute-status/routestatus"
	"github.com/quietpatch/quietpatch/leader"
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
	DefaultReconcileInterval = quietpatch.DefaultInterval
	// DefaultPatchTimeout is the default Options.PatchTimeout.
	DefaultPatchTimeout = quietpatch.DefaultPatchTimeout
	// DefaultQueueCapacity is what a zero Options.QueueCapacity means.
	DefaultQueueCapacity = quietpatch.DefaultCapacity
	// DefaultKubeQPS is the default Options.KubeQPS: negative, no
	// client-side rate limit on the status and informer client.
	DefaultKubeQPS = -1
	// DefaultKubeBurst is the default Options.KubeBurst, used when KubeQPS
	// is positive.
	DefaultKubeBurst = 100
	// DefaultLeaseDuration is the default Options.LeaseDuration.
	DefaultLeaseDuration = leader.DefaultLeaseDuration
	// DefaultCacheSyncTimeout is the default Options.CacheSyncTimeout.
	DefaultCacheSyncTimeout = quietpatch.DefaultSyncTimeout
	// MaxShards bounds Options.Shards.
	MaxShards = 256
	// MaxWorkers bounds Options.Workers: the library's own limit of
	// quietpatch.Config.Workers.
	MaxWorkers = 1024
	// MaxQueueCapacity bounds Options.QueueCapacity: far above the routes
	// of any cluster. (A lane never holds more keys than there are routes:
	// its memory follows the keys waiting, not the capacity.)
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
	// Rule says what the value must be, and what it was: e.g. "must be
	// between 0 (automatic) and 1024, got -1".
	Rule string
}

// Error implements error: "controller: Options.Workers must be between 0
// (automatic) and 1024, got -1".
func (e *OptionError) Error() string { return "controller: Options." + e.Field + " " + e.Rule }

// Unwrap returns ErrInvalidOptions.
func (e *OptionError) Unwrap() error { return ErrInvalidOptions }

func optErr(field string, value any, rule string, args ...any) error {
	return &OptionError{Field: field, Rule: fmt.Sprintf(rule, args...) + fmt.Sprintf(", got %v", value)}
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
	// CoordinationV1(); otherwise leader.NewLeaseClient of the REST
	// configuration: a client of its own without a client-side rate
	// limiter, so that a Lease request never waits in one (with --shards,
	// K claims, a membership Lease and a list every RetryPeriod share it).
	// A client with client-go's limiter is rejected.
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
	// Identity is this replica's holder identity (--identity). Default
	// leader.DefaultIdentity(): $POD_NAME (else the host name) plus a
	// random suffix, unique per process. An explicit identity must be
	// unique among the processes running at the same time; a process
	// restarted under its predecessor's identity waits out the claim it
	// finds.
	Identity string
	// LeaseDuration, RenewGrace and RetryPeriod configure the claim
	// (--lease-duration, --renew-grace, --retry-period); see
	// leader.Config, which validates them. Zero: LeaseDuration 15s,
	// RenewGrace ⅔ of LeaseDuration, RetryPeriod min(2s, RenewGrace/2).
	LeaseDuration, RenewGrace, RetryPeriod time.Duration

	// ReconcileInterval is the time between full reconcile passes while
	// leader (--reconcile-interval). Default 10s; must not be negative.
	ReconcileInterval time.Duration

	// QueueCapacity is the number of route keys each lane of the queue
	// holds (--queue-capacity): a pass that finds more changed routes
	// halts and the next resumes where it stopped. Zero:
	// DefaultQueueCapacity (quietpatch.DefaultCapacity). At most
	// MaxQueueCapacity.
	QueueCapacity int

	// PatchTimeout bounds every status patch (--patch-timeout); the
	// deadline is also never later than the end of our claim. Default 5s;
	// must not be negative.
	PatchTimeout time.Duration

	// Shards is the number K of shards the HTTPRoutes are split into
	// (--shards): 0 or 1 runs one pipeline (one Lease, one cache of every
	// route); K > 1 runs, in each replica, a cache and a pipeline per shard
	// it holds (quietpatch.NewSharded), with Leases
	// <LeaseName>-shard-<i>-of-<K> and a membership Lease per replica. At
	// most MaxShards. Every replica of a deployment must use the same K.
	Shards int
	// Workers is the number of status patches in flight at most
	// (--workers). Zero: automatic, the library adapts the limit to the
	// API server's latency (quietpatch.Config.Workers). At most
	// MaxWorkers.
	Workers int

	// KubeQPS and KubeBurst configure the client-side rate limiter of the
	// status and informer client the controller builds (--kube-qps,
	// --kube-burst). Default: no limiter (KubeQPS negative; KubeBurst 100
	// applies once KubeQPS is positive). The API server's Priority and
	// Fairness protects the server, and the dispatcher's in-flight limit
	// protects latency; a client-side limit would only cap patches
	// silently (client-go's own default, QPS 5, allows 50 per 10 s
	// interval). The Lease has a client of its own, without a limiter
	// (see LeaseClient).
	KubeQPS   float32
	KubeBurst int

	// FieldManager names this controller in the routes' managedFields.
	// Default DefaultFieldManager; at most 128 characters. With Fence the
	// writes name their writer instead.
	FieldManager string

	// Fence names the writer in the field manager of every status write,
	// <LeaseNamespace>/<Lease name>@<Identity> (--fence), so that the
	// ValidatingAdmissionPolicy of deploy/fence, whose param is the Lease,
	// denies a write of a replica that no longer holds it (outcome
	// fenced). With the REST configuration the patcher checks, once per
	// Lease, that the API server denies a dry-run write naming another
	// writer, and logs a warning if it does not. The field manager must
	// fit 128 characters with the longest Lease name.
	Fence bool

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

// Complete returns o with the defaults applied, or the *OptionError (wrapping
// ErrInvalidOptions) that New would return for it. It makes no API call;
// New calls it too, and applying it twice changes nothing.
func (o Options) Complete() (Options, error) {
	o.ControllerName = cmp.Or(o.ControllerName, DefaultControllerName)
	if _, err := routestatus.NewComputer(routestatus.Options{ControllerName: gatewayv1.GatewayController(o.ControllerName)}); err != nil {
		return o, optErr("ControllerName", fmt.Sprintf("%q", o.ControllerName), `must be DOMAIN/PATH (e.g. "example.net/gateway-controller") of at most 253 characters`)
	}
	o.LeaseName, o.LeaseDuration = cmp.Or(o.LeaseName, DefaultLeaseName), cmp.Or(o.LeaseDuration, DefaultLeaseDuration)
	if o.Identity == "" {
		o.Identity = leader.DefaultIdentity()
	}
	// leader.Config validates the lease's durations; these are ours.
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"ReconcileInterval", o.ReconcileInterval}, {"PatchTimeout", o.PatchTimeout}, {"CacheSyncTimeout", o.CacheSyncTimeout}} {
		if d.v < 0 {
			return o, optErr(d.field, d.v, "must not be negative")
		}
	}
	if _, err := o.leaseConfig().Complete(); err != nil {
		var ce *quietpatch.ConfigError
		if !errors.As(err, &ce) {
			return o, fmt.Errorf("controller: %w", err)
		}
		// leader.Config's fields by the Options field that sets them.
		field := map[string]string{"Namespace": "LeaseNamespace", "Name": "LeaseName", "CallTimeout": "LeaseDuration"}[ce.Field]
		return o, &OptionError{Field: cmp.Or(field, ce.Field), Rule: ce.Reason}
	}
	o.ReconcileInterval = cmp.Or(o.ReconcileInterval, DefaultReconcileInterval)
	o.PatchTimeout = cmp.Or(o.PatchTimeout, DefaultPatchTimeout)
	o.CacheSyncTimeout = cmp.Or(o.CacheSyncTimeout, DefaultCacheSyncTimeout)
	o.KubeQPS = cmp.Or(o.KubeQPS, DefaultKubeQPS)
	o.KubeBurst = cmp.Or(o.KubeBurst, DefaultKubeBurst)
	o.FieldManager = cmp.Or(o.FieldManager, DefaultFieldManager)
	o.ReferenceGrantVersion = cmp.Or(o.ReferenceGrantVersion, ReferenceGrantAuto)
	switch {
	case o.Shards < 0 || o.Shards > MaxShards:
		return o, optErr("Shards", o.Shards, "must be between 0 (one shard) and %d", MaxShards)
	case o.Workers < 0 || o.Workers > MaxWorkers:
		return o, optErr("Workers", o.Workers, "must be between 0 (automatic) and %d", MaxWorkers)
	case o.QueueCapacity < 0 || o.QueueCapacity > MaxQueueCapacity:
		return o, optErr("QueueCapacity", o.QueueCapacity, "must be between 0 (meaning %d) and %d", DefaultQueueCapacity, MaxQueueCapacity)
	case o.KubeBurst < 0:
		return o, optErr("KubeBurst", o.KubeBurst, "must not be negative")
	case len(o.FieldManager) > 128:
		return o, optErr("FieldManager", len(o.FieldManager), "must be at most 128 characters long")
	case o.ReferenceGrantVersion != ReferenceGrantAuto && o.ReferenceGrantVersion != ReferenceGrantV1 && o.ReferenceGrantVersion != ReferenceGrantV1beta1:
		return o, optErr("ReferenceGrantVersion", fmt.Sprintf("%q", o.ReferenceGrantVersion), "must be %q, %q or %q",
			ReferenceGrantAuto, ReferenceGrantV1, ReferenceGrantV1beta1)
	}
	o.Logger = cmp.Or(o.Logger, slog.New(slog.DiscardHandler))
	return o, nil
}

// StopBound is how long [Controller.Run] takes at most to return once its
// context is done, whether the API server answers or not, for these
// options with their defaults applied: PatchTimeout (the patch calls in
// flight run to their answer), then the claimer's CallTimeout,
// min(5s, LeaseDuration/3) (vacating the Lease), then [StopGrace] (the
// informers, the endpoints, the meter provider). With Shards > 1, one
// CallTimeout more (leaving the shard group: the membership Lease is
// deleted) and the second quietpatch.NewSharded gives the shards'
// informers. The defaults give 11s, under Kubernetes' default
// terminationGracePeriodSeconds of 30.
func (o Options) StopBound() time.Duration {
	if c, err := o.Complete(); err == nil {
		o = c
	}
	lease, _ := o.leaseConfig().Complete()
	b := o.PatchTimeout + lease.CallTimeout + StopGrace
	if o.Shards > 1 {
		b += lease.CallTimeout + time.Second
	}
	return b
}

// leaseConfig is the claimer's configuration; New adds nothing but the
// library's defaults (logger and meter).
func (o Options) leaseConfig() leader.Config {
	return leader.Config{Namespace: o.LeaseNamespace, Name: o.LeaseName, Identity: cmp.Or(o.Identity, leader.DefaultIdentity()),
		LeaseDuration: o.LeaseDuration, RenewGrace: o.RenewGrace, RetryPeriod: o.RetryPeriod}
}
