package quietpatch

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/types"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
)

// Defaults of [Config] (see statuspatch.Options for the others).
const (
	// DefaultSyncTimeout is the default Config.SyncTimeout.
	DefaultSyncTimeout = 2 * time.Minute
)

// Config configures a [Controller]. Leases and Lease.Namespace and
// Lease.Name are required unless Observer is set; every other field has a
// default that needs no measurement.
type Config struct {
	// Options are the pipeline's name, clock, logger, meter and sizes,
	// given once for every part (and, unless set there, for Lease).
	statuspatch.Options
	// Leases is the client the Controller competes for the Lease with:
	// leader.NewLeaseClient(restConfig), which has no client-side rate
	// limiter, so that a renewal never waits in one. A client with
	// client-go's limiter (QPS > 0, or 0: 5 a second) is rejected
	// (leader.CheckLeaseClient).
	Leases coordinationv1client.LeasesGetter
	// Lease configures the claimer (see leader.Config); Identity defaults
	// to leader.DefaultIdentity(), Clock, Logger and Meter to Options'.
	Lease leader.Config
	// Observer replaces the Controller's own claimer (Leases and Lease
	// must then be empty), for example one leader.Claimer shared by
	// several pipelines; whoever runs it stops it after Run returned.
	Observer leader.Observer
	// SyncTimeout bounds how long Run waits for the caches. Default
	// [DefaultSyncTimeout].
	SyncTimeout time.Duration
	// Dependencies are the other resources the statuses are computed from.
	Dependencies []Dependency
	// Shards is the number K of shards the resource is split into, 2 or
	// more, for [NewSharded]; [New] builds one pipeline and takes 0 (or 1).
	Shards int
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

// complete applies the defaults and checks what the parts do not.
func (cfg Config) complete() (Config, error) {
	bad := func(field, reason string) (Config, error) { return cfg, &ConfigError{Field: field, Reason: reason} }
	switch {
	case cfg.Observer != nil && (cfg.Leases != nil || cfg.Lease.Namespace != "" || cfg.Lease.Name != ""):
		return bad("Observer", "is set together with Leases or Lease: give one or the other")
	case cfg.Observer == nil && cfg.Leases == nil:
		return bad("Leases", "must be set (leader.NewLeaseClient(restConfig)), unless Observer is")
	case cfg.Shards > 1:
		return bad("Shards", fmt.Sprintf("is %d: a sharded pipeline needs an informer per shard, build it with NewSharded", cfg.Shards))
	case cfg.Shards < 0:
		return bad("Shards", fmt.Sprintf("must be >= 0, got %d", cfg.Shards))
	case cfg.SyncTimeout < 0:
		return bad("SyncTimeout", fmt.Sprintf("must be >= 0 (0 means %s), got %s", DefaultSyncTimeout, cfg.SyncTimeout))
	}
	if err := leader.CheckLeaseClient(cfg.Leases); cfg.Observer == nil && err != nil {
		return cfg, err
	}
	cfg.Name = cmp.Or(cfg.Name, statuspatch.DefaultName)
	cfg.SyncTimeout = cmp.Or(cfg.SyncTimeout, DefaultSyncTimeout)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	cfg.Clock = cmp.Or[clock.WithTicker](cfg.Clock, clock.RealClock{})
	if cfg.Observer == nil {
		if cfg.Lease.Identity == "" {
			cfg.Lease.Identity = leader.DefaultIdentity()
		}
		cfg.Lease.Logger = cmp.Or(cfg.Lease.Logger, cfg.Logger)
		cfg.Lease.Meter = cmp.Or(cfg.Lease.Meter, cfg.Meter)
		cfg.Lease.Clock = cmp.Or[clock.Clock](cfg.Lease.Clock, cfg.Clock)
	}
	return cfg, nil
}
