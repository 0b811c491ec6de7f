package quietpatch

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/metric"
	"k8s.io/apimachinery/pkg/types"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/quietpatch/quietpatch/internal/leases"
	"github.com/quietpatch/quietpatch/internal/pipeline"
	"github.com/quietpatch/quietpatch/leader"
)

// Defaults of [Config]: what a zero field means. Compare with them rather
// than with their values.
const (
	// DefaultCapacity is the default Config.Capacity: keys per lane of the
	// queue.
	DefaultCapacity = pipeline.DefaultCapacity
	// DefaultInterval is the default Config.Interval between full passes.
	DefaultInterval = pipeline.DefaultInterval
	// DefaultMaxInFlight is the default Config.MaxInFlight, the bound of
	// the adaptive in-flight limit.
	DefaultMaxInFlight = pipeline.DefaultMaxInFlight
	// DefaultPatchTimeout is the default Config.PatchTimeout.
	DefaultPatchTimeout = pipeline.DefaultPatchTimeout
	// DefaultSyncTimeout is the default Config.SyncTimeout.
	DefaultSyncTimeout = 2 * time.Minute
)

// Config configures a [Controller] or a [Sharded]. Leases, Lease.Namespace
// and Lease.Name are required; every other field has a default that needs
// no measurement. Name, Logger, Meter and Clock are given here once, for
// every part (the Lease's claimer included).
type Config struct {
	// Leases is the client the pipeline competes for the Lease with:
	// leader.NewLeaseClient(restConfig), which has no client-side rate
	// limiter, so that a renewal never waits in one. A client with
	// client-go's token-bucket limiter (QPS > 0, or 0: 5 a second) is
	// rejected. Required.
	Leases coordinationv1client.LeasesGetter
	// Lease names the Lease and sets its timings (see leader.Config);
	// Namespace and Name are required, Identity defaults to
	// leader.DefaultIdentity(). Its Clock, Logger and Meter must be left
	// empty: they are this Config's.
	Lease leader.Config
	// Name is the value of the pipeline attribute on every instrument and
	// log record; give each pipeline of a process its own. Default
	// "quietpatch".
	Name string
	// Capacity bounds each lane of the queue: keys waiting plus
	// reservations. It should hold the patches the API server absorbs in
	// one Interval (Interval / per-patch latency). Default
	// [DefaultCapacity].
	Capacity int
	// Interval between full passes while leader. Default [DefaultInterval].
	Interval time.Duration
	// Workers fixes the number of patch calls in flight, 1 to 1024. Zero
	// (the default) makes it adaptive, between 1 and MaxInFlight.
	Workers int
	// MaxInFlight bounds the adaptive limit, at most 1024. Default
	// [DefaultMaxInFlight].
	MaxInFlight int
	// PatchTimeout bounds every patch call; the claim left bounds it
	// further. Default [DefaultPatchTimeout].
	PatchTimeout time.Duration
	// ClaimMargin: no call starts with less of the claim left. Zero means
	// twice the latency estimate, within 250 ms and PatchTimeout/2.
	ClaimMargin time.Duration
	// SyncTimeout bounds how long Run waits for the caches. Default
	// [DefaultSyncTimeout].
	SyncTimeout time.Duration
	// Dependencies are the other resources the statuses are computed from.
	Dependencies []Dependency
	// Shards is the number K of shards the resource is split into, 2 to
	// 1024, for [NewSharded]; [New] builds one pipeline and takes 0 (or 1).
	Shards int
	// DiffOptions are the go-cmp options of the debug-level diff logged
	// for every patch, e.g. conditions.IgnoreTransitionTime().
	DiffOptions []gocmp.Option
	// Logger receives the records listed in docs/logs.md; nil discards.
	Logger *slog.Logger
	// Meter creates the instruments listed in docs/metrics.md, registered
	// while Run runs; nil creates none (Stats work either way).
	Meter metric.Meter
	// Clock is every part's clock. Default the real clock.
	Clock clock.WithTicker
}

// Informer is what a [Dependency] needs of a cache: a client-go
// SharedIndexInformer, or a controller-runtime cache.Informer.
type Informer interface {
	AddEventHandler(cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error)
	HasSynced() bool
}

// Dependency is another resource the statuses depend on, declared once:
// Run waits for its cache to sync before it competes for the Lease, and
// each of its events (the object before and after an update) enqueues the
// keys Keys maps it to — [Controller.Enqueue]'s rules: a few keys take the
// fresh lane, many make a pass. A nil Keys means every object: one pass
// per event, however many objects there are.
type Dependency struct {
	Informer Informer
	Keys     func(obj any) []types.NamespacedName
}

// complete checks cfg, applies the defaults, and returns the pipeline's
// options. Errors are *ConfigError naming the field.
func (cfg Config) complete() (Config, pipeline.Options, error) {
	bad := func(field, format string, args ...any) (Config, pipeline.Options, error) {
		return cfg, pipeline.Options{}, &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case cfg.Leases == nil:
		return bad("Leases", "must be set: leader.NewLeaseClient(restConfig)")
	case cfg.Shards < 0:
		return bad("Shards", "must be >= 0, got %d", cfg.Shards)
	case cfg.SyncTimeout < 0:
		return bad("SyncTimeout", "must be >= 0 (0 means %s), got %s", DefaultSyncTimeout, cfg.SyncTimeout)
	case cfg.Lease.Clock != nil:
		return bad("Lease.Clock", "must be empty: the pipeline's clock is Config.Clock")
	case cfg.Lease.Logger != nil:
		return bad("Lease.Logger", "must be empty: the pipeline's logger is Config.Logger")
	case cfg.Lease.Meter != nil:
		return bad("Lease.Meter", "must be empty: the pipeline's meter is Config.Meter")
	}
	if err := leases.Check(cfg.Leases); err != nil {
		return cfg, pipeline.Options{}, err
	}
	opts, err := pipeline.Options{Name: cfg.Name, Capacity: cfg.Capacity, Interval: cfg.Interval, Workers: cfg.Workers,
		MaxInFlight: cfg.MaxInFlight, PatchTimeout: cfg.PatchTimeout, ClaimMargin: cfg.ClaimMargin,
		DiffOptions: cfg.DiffOptions, Logger: cfg.Logger, Clock: cfg.Clock, Settle: pipeline.DefaultSettle}.Complete()
	if err != nil {
		return cfg, opts, err
	}
	cfg.Name, cfg.Clock = opts.Name, opts.Clock
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	cfg.SyncTimeout = cmp.Or(cfg.SyncTimeout, DefaultSyncTimeout)
	cfg.Lease.Identity = cmp.Or(cfg.Lease.Identity, leader.DefaultIdentity())
	cfg.Lease.Clock, cfg.Lease.Logger, cfg.Lease.Meter = cfg.Clock, cfg.Logger, cfg.Meter
	return cfg, opts, nil
}

// dependencyHandler is the event handler of another resource the statuses
// depend on: each event (the object before and after an update) enqueues,
// once each, the keys keys maps the objects to — a deleted object's last
// known state included. A nil keys means every object: each event calls
// resync instead. Adds of the informer's initial list do neither, as for
// source.EnqueueHandler: the pass made on gaining the lead, after every cache
// synced, covers them.
func dependencyHandler(keys func(any) []types.NamespacedName, enqueue func(...types.NamespacedName), resync func()) cache.ResourceEventHandler {
	on := func(objs ...any) {
		if keys == nil {
			resync()
			return
		}
		var ks []types.NamespacedName
		for _, o := range objs {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if o != nil {
				ks = append(ks, keys(o)...)
			}
		}
		slices.SortFunc(ks, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
		enqueue(slices.Compact(ks)...)
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(o any, isInInitialList bool) {
			if !isInInitialList {
				on(o)
			}
		},
		UpdateFunc: func(old, o any) { on(old, o) },
		DeleteFunc: func(o any) { on(o) },
	}
}
