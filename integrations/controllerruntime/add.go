package controllerruntime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
)

// defaultName is the library's default quietpatch.Config.Name, which Add
// also gives the probes and the field manager.
const defaultName = "quietpatch"

// Options configures [Add]. Only Config.Lease.Namespace and
// Config.Lease.Name are required.
type Options struct {
	// Config configures the pipeline; see quietpatch.Config for every
	// field and its default. Add sets these when they are zero:
	//
	//   - Name: "quietpatch", the library's default. It labels the
	//     instruments and names the probes: give each pipeline of a
	//     process its own.
	//   - Leases: leader.NewLeaseClient of
	//     mgr.GetConfig(), a Lease client of its own with no client-side
	//     rate limiter, so that a renewal never waits in one.
	//   - Lease.Identity: leader.DefaultIdentity() — $POD_NAME (else the
	//     host name) plus a random suffix drawn per process, so that a
	//     restarted container never inherits its predecessor's claim. It is
	//     not the manager's leader election identity, and needs not be.
	//   - Logger: the manager's logr.Logger (mgr.GetLogger()) named
	//     "quietpatch", through logr.ToSlogHandler.
	//   - Meter: the meter of a MeterProvider of Add's own, exported to
	//     Registerer (see NewMeterProvider), shut down when the Runnable
	//     stops.
	//
	// Config.Dependencies declares the other resources the statuses are
	// computed from: a [Source] over one (NewSource(ctx, mgr.GetCache(),
	// &corev1.ConfigMap{})) is a quietpatch.Informer, so one entry makes
	// Run wait for it and its events enqueue the objects its Keys names;
	// the StatusComputer reads it with the Source's Get, without copies.
	Config quietpatch.Config

	// FieldManager names the writer of the status patches in managedFields.
	// Default: Config.Name.
	FieldManager string

	// Patcher, when set, writes the patches instead of the default:
	// statuspatch.NewMergePatcher over a client of its own, made from
	// mgr.GetConfig() with the rate limit PatchQPS/PatchBurst (the
	// resource found through mgr.GetRESTMapper()); it leaves a 429's
	// Retry-After to the dispatcher and sends each call's deadline to the
	// API server. Pass NewStatusPatcher(mgr, obj, fieldManager) to patch
	// under the rate limit of the manager's configuration, or its
	// WithFence to name the writer in every write.
	Patcher statuspatch.Patcher[statuspatch.MergePatch]

	// PatchQPS and PatchBurst are the client-side rate limit of the
	// default patcher's client. A positive PatchQPS is that many requests
	// per second, a negative one means no client-side limit (client-go's
	// convention), and zero, the default, means the library's default,
	// which is no limit: 0 behaves like −1. Without a limit the pipeline
	// bounds its own calls in flight (Config.Workers) and the API server's
	// priority and fairness protects it, while a limiter would silently
	// cap throughput (see the package documentation, section Clients).
	// PatchBurst applies only with a positive PatchQPS, and defaults to
	// PatchQPS (at least 1); it must not be negative.
	PatchQPS   float32
	PatchBurst int

	// Registerer receives the instruments when Config.Meter is nil.
	// Default: controller-runtime's metrics.Registry, which the manager
	// serves on its metrics address.
	Registerer prometheus.Registerer
}

// Add builds a quietpatch status controller for the objects of obj's type
// in mgr's cache and adds it to mgr; mgr.Start runs it. It returns the
// Controller: its Stats, Ready and Live report on it, and Enqueue takes
// the keys of events Config.Dependencies does not cover. (NewSource(ctx,
// mgr.GetCache(), obj) gives a Source over the same informer, for a
// StatusComputer of another resource that reads these objects.)
//
// In one call, Add:
//
//   - builds the Source over the manager's informer for obj's type
//     ([NewSource]: the cache's own objects, no deep copies, whatever the
//     cache's namespaces and selectors), on which quietpatch.New registers
//     the handler that enqueues every change;
//   - builds the Patcher (Options.Patcher, else statuspatch's merge
//     patcher over a client of its own — see Options.PatchQPS);
//   - builds the pipeline with quietpatch.New (claimer of its own Lease,
//     bounded queue, reconciler, dispatcher), with the defaults listed on
//     Options.Config;
//   - registers its Ready and Live as the manager's readyz and healthz
//     checks named Config.Name ([AddChecks]);
//   - adds a [Runnable] that runs it on every replica
//     (NeedLeaderElection is false), after the manager's caches have
//     synced, and that returns from Start only once the pipeline has
//     stopped in the safe order.
//
// obj is a pointer to a typed object registered in mgr's scheme
// (&v1.Widget{}) or an *unstructured.Unstructured with its
// GroupVersionKind set; O is that type. comp is the StatusComputer, for
// example a conditions.Computer[O]. ctx bounds GetInformer (see
// NewSource). Call Add before mgr.Start: the manager accepts probe checks
// only before it starts.
//
// An error names what is wrong; one wrapping quietpatch.ErrInvalidConfig
// names the field of Options.Config. Add rejects Config.Shards > 1, before
// it uses mgr, with a *quietpatch.ConfigError naming Shards: a sharded
// pipeline needs an informer per shard, which the manager's cache cannot
// give (see the package documentation, section Shards).
func Add[O client.Object, S any](ctx context.Context, mgr manager.Manager, obj O, comp statuspatch.StatusComputer[O, S, statuspatch.MergePatch], opts Options) (*quietpatch.Controller[O, S, statuspatch.MergePatch], error) {
	if mgr == nil {
		return nil, errors.New("controllerruntime: Add: mgr must not be nil")
	}
	if comp == nil {
		return nil, errors.New("controllerruntime: Add: the StatusComputer must not be nil")
	}
	if opts.Config.Shards > 1 {
		// Before anything touches the manager: GetInformer would start a
		// cache of the whole resource.
		return nil, &quietpatch.ConfigError{Field: "Shards", Reason: fmt.Sprintf("is %d: Add runs one pipeline over the manager's cache, "+
			"which holds every object of the resource (controller-runtime's cache has no shard selector); "+
			"build a sharded pipeline with quietpatch.NewSharded over a ListWatch made from mgr.GetConfig(), "+
			"and add its Run to the manager (see the package documentation, section Shards)", opts.Config.Shards)}
	}
	cfg := opts.Config
	if cfg.Name == "" {
		cfg.Name = defaultName
	}
	if opts.FieldManager == "" {
		opts.FieldManager = cfg.Name
	}
	if opts.PatchBurst < 0 {
		return nil, fmt.Errorf("controllerruntime: Add: Options.PatchBurst must be >= 0, got %d", opts.PatchBurst)
	}

	patcher := opts.Patcher
	if patcher == nil {
		var err error
		if patcher, err = newPatcher(mgr, obj, opts); err != nil {
			return nil, err
		}
	}
	if cfg.Leases == nil {
		leases, err := leaseClient(mgr)
		if err != nil {
			return nil, err
		}
		cfg.Leases = leases
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(logr.ToSlogHandler(mgr.GetLogger().WithName("quietpatch")))
	}
	var stop func(context.Context) error
	if cfg.Meter == nil {
		reg := opts.Registerer
		if reg == nil {
			reg = metrics.Registry
		}
		mp, err := NewMeterProvider(reg)
		if err != nil {
			return nil, err
		}
		cfg.Meter = mp.Meter(MeterName)
		stop = mp.Shutdown
	}
	fail := func(err error) (*quietpatch.Controller[O, S, statuspatch.MergePatch], error) {
		if stop != nil {
			_ = stop(context.WithoutCancel(ctx))
		}
		return nil, err
	}

	src, err := NewSource(ctx, mgr.GetCache(), obj)
	if err != nil {
		return fail(err)
	}
	ctrl, err := quietpatch.New(src, comp, patcher, cfg)
	if err != nil {
		return fail(err)
	}
	if err := AddChecks(mgr, cfg.Name, ctrl); err != nil {
		return fail(err)
	}
	r := NewRunnable(ctrl)
	r.stop = stop
	if err := mgr.Add(r); err != nil {
		return fail(fmt.Errorf("controllerruntime: adding the Runnable of %q to the manager: %w", cfg.Name, err))
	}
	return ctrl, nil
}

// newPatcher builds the default patcher: statuspatch.NewMergePatcher over
// a client of its own with the rate limit of opts. Unlike a client-go or
// controller-runtime client, it does not retry a 429 by itself (sleeping
// Retry-After in one worker while the others go on): the dispatcher sees
// the 429 and holds every call back for the window.
func newPatcher(mgr manager.Manager, obj client.Object, opts Options) (statuspatch.Patcher[statuspatch.MergePatch], error) {
	rc := rest.CopyConfig(mgr.GetConfig())
	rc.QPS, rc.Burst = patchLimit(opts.PatchQPS, opts.PatchBurst)
	gvr, err := resourceOf(mgr, obj)
	if err != nil {
		return nil, fmt.Errorf("controllerruntime: Add: %w", err)
	}
	p, err := statuspatch.NewMergePatcher(rc, gvr, opts.FieldManager)
	if err != nil {
		return nil, fmt.Errorf("controllerruntime: Add: the patch client: %w", err)
	}
	return p, nil
}

// patchLimit returns the rest.Config QPS and Burst of the default
// patcher's client for Options.PatchQPS and PatchBurst: -1 (client-go: no
// rate limiter) for a QPS of zero or less; else qps, with burst defaulting
// to qps (at least 1).
func patchLimit(qps float32, burst int) (float32, int) {
	if qps <= 0 {
		return -1, 0
	}
	if burst == 0 {
		burst = max(1, int(qps))
	}
	return qps, burst
}

// leaseClient builds the Lease client: leader.NewLeaseClient of the
// manager's configuration, with no client-side rate limiter.
func leaseClient(mgr manager.Manager) (coordinationv1client.LeasesGetter, error) {
	c, err := leader.NewLeaseClient(mgr.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("controllerruntime: Add: the Lease client: %w", err)
	}
	return c, nil
}
