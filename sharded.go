package quietpatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/internal/pipeline"
	"github.com/quietpatch/quietpatch/internal/shard"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/source"
)

// Sharded keeps the status of the objects of one resource up to date from
// several replicas: the UIDs' hash space is split into Config.Shards
// shards, and each replica runs, for each shard it holds, the pipeline of
// a [Controller] on an informer of its own over the shard's range, under
// the shard's own Lease (package statuspatch/shard coordinates them;
// docs/shards.md says what holds and what a move costs). Build it with
// [NewSharded]. All methods are safe for concurrent use.
type Sharded[O, S, P any] struct {
	cfg     Config
	opts    pipeline.Options
	comp    statuspatch.StatusComputer[O, S, P]
	patcher statuspatch.Patcher[P]
	coord   *shard.Coordinator[*shardPipeline[O, S, P]]
	log     *slog.Logger
	synced  []cache.InformerSynced
	life    base.Lifecycle
}

var _ Runner = (*Sharded[any, any, any])(nil)

// NewSharded builds a [Sharded] for the objects lw lists and watches, whose
// status comp computes and patcher writes, and starts nothing.
// Config.Shards is the shard count K, 2 or more (one pipeline is [New]'s);
// shard i's Lease is named <Lease.Name>-shard-<i>-of-<K>, each replica
// keeps a membership Lease <Lease.Name>-member-<hash>, and Lease's
// durations apply to all. It rejects an invalid cfg, or a nil lw, comp or
// patcher, with a [*ConfigError] naming the field.
//
// lw is the resource's ListerWatcher, for example
// cache.NewListWatchFromClient(client.RESTClient(), "httproutes", "", fields.Everything()),
// or a cache.ListWatch with ListWithContextFunc and WatchFuncWithContext;
// O must be the pointer type of its objects (*gatewayv1.HTTPRoute). NewSharded
// adds the shard selector to its options and filters what comes back.
// Dependencies are full caches, shared by all shards: their events reach
// the shards held.
func NewSharded[O, S, P any](lw cache.ListerWatcher, comp statuspatch.StatusComputer[O, S, P], patcher statuspatch.Patcher[P], cfg Config) (*Sharded[O, S, P], error) {
	var zero O
	switch {
	case lw == nil:
		return nil, &ConfigError{Field: "ListerWatcher", Reason: "must not be nil"}
	case !isObject(zero):
		return nil, &ConfigError{Field: "O", Reason: fmt.Sprintf("must be the runtime.Object pointer type of the resource, got %T", zero)}
	case comp == nil:
		return nil, &ConfigError{Field: "Computer", Reason: "must not be nil"}
	case patcher == nil:
		return nil, &ConfigError{Field: "Patcher", Reason: "must not be nil"}
	case cfg.Shards <= 1 || cfg.Shards > shard.MaxShards:
		return nil, &ConfigError{Field: "Shards", Reason: fmt.Sprintf("is %d: a sharded pipeline has 2 to %d shards; build one pipeline with New", cfg.Shards, shard.MaxShards)}
	}
	cfg, opts, err := cfg.complete()
	if err != nil {
		return nil, err
	}
	s := &Sharded[O, S, P]{cfg: cfg, opts: opts, comp: comp, patcher: patcher, log: cfg.Logger.With(slog.String("pipeline", cfg.Name))}
	k := cfg.Shards
	// Each shard's pipeline is New's, under the Lease with the longest
	// name: build shard K-1's now, so that what a shard would reject is
	// rejected here, before anything runs.
	last := cfg.Lease
	last.Name = shard.LeaseName(cfg.Lease.Name, k-1, k)
	if _, err := s.build(k-1, last, cfg.Leases, nil); err != nil {
		return nil, err
	}
	if s.coord, err = shard.NewCoordinator(shard.Config{Shards: k, Leases: cfg.Leases, Lease: cfg.Lease, Name: cfg.Name}, lw, s.build); err != nil {
		return nil, err
	}
	if s.synced, err = addDependencies(cfg.Dependencies, s.coord.Enqueue, s.coord.Resync); err != nil {
		return nil, err
	}
	return s, nil
}

func isObject(o any) bool { _, ok := o.(runtime.Object); return ok }

// build is the pipeline of shard i: an informer on lw (none when nil: a
// check) and the pipeline [New] builds on it, under lease, with the shard
// attribute on its instruments.
func (s *Sharded[O, S, P]) build(i int, lease leader.Config, leases coordinationv1client.LeasesGetter, lw cache.ListerWatcher) (*shardPipeline[O, S, P], error) {
	var zero O
	inf := cache.NewSharedIndexInformer(lw, any(zero).(runtime.Object), 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	cfg, opts := s.cfg, s.opts
	cfg.Lease, cfg.Logger = lease, lease.Logger
	opts.Logger = lease.Logger.With(slog.String("pipeline", cfg.Name))
	opts.Attrs = append(opts.Attrs, attribute.Int("shard", i))
	ctrl, err := build(source.FromInformer[O](inf), s.comp, s.patcher, cfg, opts, leases)
	if err != nil {
		return nil, err
	}
	p := &shardPipeline[O, S, P]{inf: inf, ctrl: ctrl}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { p.objects.Add(1) },
		DeleteFunc: func(any) { p.objects.Add(-1) },
	}); err != nil {
		return nil, fmt.Errorf("quietpatch: counting the objects of shard %d: %w", i, err)
	}
	return p, nil
}

// shardPipeline is one shard's informer and pipeline.
type shardPipeline[O, S, P any] struct {
	inf     cache.SharedIndexInformer
	ctrl    *Controller[O, S, P]
	objects atomic.Int64 // in inf's cache, counted by a handler: no list per scrape
}

// informerStopGrace bounds the wait for a shard's informer once its
// pipeline has stopped. A client-go v0.37 reflector sleeps out its
// back-off after a refused or 429'd watch-list request, up to a minute,
// before it looks at its context (tools/cache/reflector.go,
// Reflector.watchList): its goroutine is left to end on its own.
const informerStopGrace = time.Second

// Run runs the informer and the pipeline, and stops the informer after the
// pipeline that reads it, waiting for it at most informerStopGrace (real
// time: the informer's own).
func (p *shardPipeline[O, S, P]) Run(ctx context.Context) error {
	ictx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.inf.RunWithContext(ictx)
	}()
	err := p.ctrl.Run(ctx)
	stop()
	t := time.NewTimer(informerStopGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	return err
}

func (p *shardPipeline[O, S, P]) Claim() leader.Claim { return p.ctrl.claimer.Current() }

func (p *shardPipeline[O, S, P]) Objects() int64 { return p.objects.Load() }

func (p *shardPipeline[O, S, P]) Enqueue(keys ...types.NamespacedName) {
	keys = slices.DeleteFunc(slices.Clone(keys), func(k types.NamespacedName) bool { _, ok, _ := p.ctrl.src.Get(k); return !ok })
	if len(keys) > 0 {
		p.ctrl.Enqueue(keys...)
	}
}

func (p *shardPipeline[O, S, P]) Resync() { p.ctrl.resync() }

// Ready is the Controller's: a shard whose cache syncs is ready.
func (p *shardPipeline[O, S, P]) Ready() error {
	if err := p.ctrl.Ready(); !errors.Is(err, ErrNotSynced) {
		return err
	}
	return nil
}

func (p *shardPipeline[O, S, P]) Live() error { return p.ctrl.Live() }

// Run runs until ctx is cancelled, then stops every shard's pipeline —
// each in [Controller.Run]'s safe order, so each held shard is quiesced and
// vacated — leaves the group and returns nil; or until a part fails (a
// shard's pipeline, the group's Lease calls), then stops and returns that
// failure. A second call returns [ErrAlreadyStarted].
//
// It waits for the dependencies' caches (at most SyncTimeout), joins the
// group and runs the shards the plan gives it (shard.Coordinator.Run): a
// shard's pipeline competes for the shard's Lease once its informer synced.
// Stop the dependencies' informers after Run returned.
//
// Once ctx is done, Run returns within PatchTimeout + 2 × the Lease's
// CallTimeout + 1 s, whether the API server answers or not: the shards
// stop together, each as [Controller.Run] does, its informer waited for at
// most a second (client-go's may take far longer: see Stop order in the
// package documentation); then the membership Lease is deleted under one
// CallTimeout.
func (s *Sharded[O, S, P]) Run(ctx context.Context) error {
	if err := s.life.Start(); err != nil {
		return err
	}
	err := waitSynced(ctx, s.log, s.cfg.SyncTimeout, s.synced, "the dependencies' caches")
	if err == nil && ctx.Err() == nil {
		err = s.coord.Run(ctx)
	}
	s.life.Stop(err)
	return err
}

// Enqueue asks for the objects with keys to be reconciled soon by the
// shards of this replica that hold them ([Controller.Enqueue]'s rules);
// keys of objects in no shard held here are ignored — their shard's holder
// hears the same events.
func (s *Sharded[O, S, P]) Enqueue(keys ...types.NamespacedName) { s.coord.Enqueue(keys...) }

// Ready reports whether this replica is ready, holding shards or not: nil
// while Run runs and the group's Lease calls and every shard's parts are
// healthy (a shard whose cache is syncing counts as healthy); ErrNotSynced
// before.
func (s *Sharded[O, S, P]) Ready() error {
	if err := s.coord.Ready(); !errors.Is(err, shard.ErrNotRunning) {
		return err
	}
	return ErrNotSynced
}

// Live reports whether the process should be restarted: a patch call of a
// shard stuck for more than twice PatchTimeout ([Controller.Live]).
func (s *Sharded[O, S, P]) Live() error { return s.coord.Live() }

// Leading reports whether this replica leads at least one shard now.
func (s *Sharded[O, S, P]) Leading() bool { return s.coord.Leading() }

// Stats returns a snapshot: the shards held and run, the moves, and each
// shard's Stats in PerShard.
func (s *Sharded[O, S, P]) Stats() Stats {
	g := s.coord.Stats()
	st := Stats{Shards: g.Shards, Members: g.Members, Held: g.Held, Running: g.Running, Acquired: g.Acquired,
		GivenUp: g.GivenUp, Lost: g.Lost, Objects: g.Objects, Unfiltered: g.Unfiltered,
		Leading: len(g.Held) > 0, PerShard: map[int]Stats{}}
	s.coord.Each(func(i int, p *shardPipeline[O, S, P]) {
		ps := p.ctrl.Stats()
		// The pipeline's fields only: not the Controller's one shard.
		st.PerShard[i] = Stats{Reconciler: ps.Reconciler, Dispatcher: ps.Dispatcher, Queue: ps.Queue,
			Capacity: ps.Capacity, Claim: ps.Claim, Leading: ps.Leading}
	})
	return st
}
