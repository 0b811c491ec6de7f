package quietpatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/internal/pipeline"
	"github.com/quietpatch/quietpatch/internal/queue"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
)

// Controller keeps the status of the objects of one resource up to date: a
// lease claimer, a reconciler finding what changed, a bounded queue of
// keys and a dispatcher building and sending each patch when it can be
// sent. Build it with [New]; [Controller.Run] starts and stops the parts in
// the safe order. All methods are safe for concurrent use.
type Controller[O, S, P any] struct {
	cfg        Config
	src        statuspatch.Source[O]
	comp       statuspatch.StatusComputer[O, S, P]
	log        *slog.Logger
	claimer    *leader.Claimer
	queue      *queue.Queue[types.NamespacedName]
	reconciler *pipeline.Reconciler[O, S, P]
	dispatcher *pipeline.Dispatcher[O, S, P]
	metrics    *pipeline.Metrics
	synced     []cache.InformerSynced
	life       base.Lifecycle // stopped from the moment Run begins to stop
	ready      atomic.Bool    // synced, parts running
}

var _ Runner = (*Controller[any, any, any])(nil)

// New builds a Controller for the objects src lists, whose status comp
// computes and patcher writes, and starts nothing. It rejects an invalid
// cfg, or a nil src, comp or patcher, with a [*ConfigError] naming the
// field.
//
// Events: when src has an informer (source.FromInformer), or is itself an
// [Informer] (AddEventHandler and HasSynced, as the Source of the
// controller-runtime integration), New registers a handler that enqueues
// the key comp.Key gives every object added, updated or deleted, except
// the Adds of the informer's initial list (the pass made on gaining the
// lead covers them) and the updates that are the echoes of its own writes
// (with a statuspatch.VersionPatcher). With any other Source (an Indexer,
// a lister) call Enqueue from your handlers, and skip the initial list
// likewise (source.EnqueueHandler does both). Config.Dependencies wires the
// other resources.
func New[O, S, P any](src statuspatch.Source[O], comp statuspatch.StatusComputer[O, S, P], patcher statuspatch.Patcher[P], cfg Config) (*Controller[O, S, P], error) {
	cfg, opts, err := cfg.complete()
	if err != nil {
		return nil, err
	}
	if cfg.Shards > 1 {
		return nil, &ConfigError{Field: "Shards", Reason: fmt.Sprintf("is %d: a sharded pipeline needs an informer per shard, build it with NewSharded", cfg.Shards)}
	}
	c, err := build(src, comp, patcher, cfg, opts, cfg.Leases)
	if err != nil {
		return nil, err
	}
	deps, err := addDependencies(cfg.Dependencies, c.Enqueue, c.resync)
	if err != nil {
		return nil, err
	}
	c.synced = append(c.synced, deps...)
	return c, nil
}

// build is New once cfg is complete, for one pipeline or one shard's: its
// claimer on leases and cfg.Lease, its queue, reconciler and dispatcher,
// its instruments, and the event handler on src's informer.
func build[O, S, P any](src statuspatch.Source[O], comp statuspatch.StatusComputer[O, S, P], patcher statuspatch.Patcher[P], cfg Config, opts pipeline.Options, leases coordinationv1client.LeasesGetter) (*Controller[O, S, P], error) {
	if src == nil {
		return nil, &ConfigError{Field: "Source", Reason: "must not be nil"}
	}
	c := &Controller[O, S, P]{cfg: cfg, src: src, comp: comp, log: cfg.Logger.With(slog.String("pipeline", cfg.Name))}
	var err error
	if c.claimer, err = leader.NewClaimer(leases, cfg.Lease); err != nil {
		return nil, base.Prefix("Lease.", err)
	}
	opts.Lease = types.NamespacedName{Namespace: cfg.Lease.Namespace, Name: cfg.Lease.Name}
	c.queue = queue.New[types.NamespacedName](opts.Capacity, opts.Clock)
	c.metrics = pipeline.NewMetrics(cfg.Meter, opts)
	if c.reconciler, err = pipeline.NewReconciler(src, comp, c.queue, c.claimer, opts, c.metrics); err != nil {
		return nil, err
	}
	if c.dispatcher, err = pipeline.NewDispatcher(c.queue, src, comp, patcher, c.claimer, opts, c.metrics); err != nil {
		return nil, err
	}
	if s, ok := src.(interface{ HasSynced() bool }); ok {
		c.synced = append(c.synced, s.HasSynced)
	}
	var events Informer
	if s, ok := src.(interface {
		Informer() cache.SharedIndexInformer
	}); ok && s.Informer() != nil {
		events = s.Informer()
	} else if s, ok := src.(Informer); ok {
		events = s
	}
	if events != nil {
		if _, err := events.AddEventHandler(c.eventHandler()); err != nil {
			return nil, fmt.Errorf("quietpatch: registering the event handler on the Source's informer: %w", err)
		}
	}
	return c, nil
}

// eventHandler enqueues the key of every object added (but for the
// informer's initial list), updated or deleted — comp.Key's, the one key
// the queue, the Source and the dispatcher use —, but for the echoes of
// the dispatcher's own writes, and tells the dispatcher of deletions.
func (c *Controller[O, S, P]) eventHandler() cache.ResourceEventHandler {
	key := func(obj any) (types.NamespacedName, bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			if _, isO := d.Obj.(O); !isO {
				ns, name, err := cache.SplitMetaNamespaceKey(d.Key)
				return types.NamespacedName{Namespace: ns, Name: name}, err == nil
			}
			obj = d.Obj
		}
		if o, ok := obj.(O); ok {
			return c.comp.Key(o), true
		}
		// An informer whose objects are not the Source's type: its
		// namespace and name.
		m, err := meta.Accessor(obj)
		if err != nil {
			return types.NamespacedName{}, false
		}
		return types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}, true
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			if k, ok := key(obj); ok && !isInInitialList {
				c.Enqueue(k)
			}
		},
		UpdateFunc: func(_, obj any) {
			k, ok := key(obj)
			if !ok {
				return
			}
			if m, err := meta.Accessor(obj); err == nil && c.dispatcher.Echo(k, m.GetResourceVersion()) {
				return
			}
			c.Enqueue(k)
		},
		DeleteFunc: func(obj any) {
			if k, ok := key(obj); ok {
				c.dispatcher.Echo(k, "")
				c.Enqueue(k)
			}
		},
	}
}

// addDependencies registers on each dependency's informer the handler
// that enqueues the keys its events affect — or, with Keys nil, calls
// resync — and returns their HasSynced.
func addDependencies(deps []Dependency, enqueue func(...types.NamespacedName), resync func()) ([]cache.InformerSynced, error) {
	var synced []cache.InformerSynced
	for i, d := range deps {
		if d.Informer == nil {
			return nil, &ConfigError{Field: fmt.Sprintf("Dependencies[%d].Informer", i), Reason: "must not be nil"}
		}
		synced = append(synced, d.Informer.HasSynced)
		if _, err := d.Informer.AddEventHandler(dependencyHandler(d.Keys, enqueue, resync)); err != nil {
			return nil, fmt.Errorf("quietpatch: registering the event handler of Dependencies[%d]: %w", i, err)
		}
	}
	return synced, nil
}

// Run runs the Controller until ctx is cancelled, then stops it and returns
// nil; or until a part fails, then stops it and returns that failure. A
// second call returns [ErrAlreadyStarted].
//
// Start: wait until the Source's cache and every dependency's have synced
// (at most Config.SyncTimeout: a replica with an empty cache must not
// lead), register the instruments (Config.Meter), then start the
// dispatcher, the claimer and the reconciler.
//
// Stop, in this order: the reconciler (no new key); the dispatcher — no
// new call, the calls in flight run to the API server's answer, what is
// queued is dropped; then the claimer — it vacates the Lease only if every
// call got an answer, else it lets the claim run out. Run unregisters the
// instruments and returns once all have stopped: at most PatchTimeout +
// the Lease's CallTimeout after ctx is done, whether the API server answers
// or not (with a Patcher that returns when its context ends). The
// reconciler and the dispatcher see ctx itself: from the moment it is
// done, no pass and no serve starts reading the Source (nor computes a
// status, which may read the dependencies' caches), so the informers may
// stop with ctx (informers.Start(ctx.Done())); Run does not wait for them,
// and nothing needs to (see Stop order in the package documentation).
//
// Failures that end Run: the caches do not sync in time ([ErrNotSynced]);
// the lease loop fails (for example RBAC forbids the Lease); a part stops
// on its own.
func (c *Controller[O, S, P]) Run(ctx context.Context) error {
	if err := c.life.Start(); err != nil {
		return err
	}
	defer c.life.Stop(nil)
	if err := waitSynced(ctx, c.log, c.cfg.SyncTimeout, c.synced, "is the resource served, and may we list and watch it?"); err != nil {
		return err
	}
	unregister, err := c.metrics.Register(c.queue, c.reconciler.Stats, c.dispatcher.Stats)
	if err != nil {
		return err
	}
	defer unregister()
	c.log.Info("quietpatch: caches synced; competing for the lease",
		slog.String("identity", c.claimer.Identity()), slog.Int("capacity", c.queue.Cap()),
		slog.Duration("interval", c.cfg.Interval), slog.Int("workers", c.cfg.Workers))

	runCtx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	var first atomic.Pointer[error] // the first part to stop on its own
	start := func(name string, pctx context.Context, run func(context.Context) error) (wait func()) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := run(pctx); pctx.Err() == nil { // not stopped by us
				if err == nil {
					err = errors.New("stopped unexpectedly")
				}
				err = fmt.Errorf("quietpatch: %s: %w", name, err)
				first.CompareAndSwap(nil, &err)
				fail(err)
			}
		}()
		return func() { <-done }
	}
	// The reconciler and the dispatcher run on ctx itself; the claimer
	// until both stopped, for it quiesces the dispatcher and vacates.
	claimCtx, stopClaim := context.WithCancel(context.WithoutCancel(ctx))
	dispatcher := start("dispatcher", runCtx, c.dispatcher.Run)
	claimer := start("lease loop", claimCtx, c.claimer.Run)
	reconciler := start("reconciler", runCtx, c.reconciler.Run)
	c.ready.Store(true)

	<-runCtx.Done()
	c.life.Stop(nil) // stopping
	c.log.Info("quietpatch: stopping: the reconciler, the dispatcher (calls in flight finish), then the lease")
	reconciler()
	c.queue.Close()
	dispatcher()
	c.dispatcher.DropQueued()
	stopClaim()
	claimer()
	c.ready.Store(false)
	if p := first.Load(); p != nil {
		err = *p
	}
	c.log.Info("quietpatch: stopped", slog.Any("error", err))
	return err
}

// Enqueue asks for the objects with keys — those one event affects — to be
// reconciled soon: a few keys take the fresh lane, served before the
// periodic passes' keys; more make one pass, which queues only the objects
// that changed. While this replica does not lead it does nothing (the pass
// made on gaining the lead covers every object). It never blocks: call it
// from event handlers.
func (c *Controller[O, S, P]) Enqueue(keys ...types.NamespacedName) { c.reconciler.Enqueue(keys...) }

// resync makes a pass soon, if we lead.
func (c *Controller[O, S, P]) resync() {
	if c.Leading() {
		c.reconciler.Resync()
	}
}

// Leading reports whether our claim is current now.
func (c *Controller[O, S, P]) Leading() bool {
	return c.claimer.Current().IsCurrentFor(c.claimer.Identity(), c.cfg.Clock.Now())
}

// Ready reports whether this replica is ready, leader or not: nil once the
// caches synced while the parts run; otherwise an error listing every
// reason. Wire it to a readiness probe.
func (c *Controller[O, S, P]) Ready() error {
	switch started, running, _ := c.life.State(); {
	case started && !running:
		return errors.New("quietpatch: stopping")
	case !c.ready.Load():
		return ErrNotSynced
	}
	var errs []error
	if err := c.claimer.Ready(); err != nil {
		errs = append(errs, fmt.Errorf("lease loop: %w", err))
	}
	if err := c.dispatcher.Healthy(); err != nil {
		errs = append(errs, fmt.Errorf("dispatcher: %w", err))
	}
	if err := c.reconciler.Healthy(); err != nil {
		errs = append(errs, fmt.Errorf("reconciler: %w", err))
	}
	return errors.Join(errs...)
}

// Live reports whether the process should be restarted: an error only when
// a patch call has been stuck for more than twice PatchTimeout (a Patcher
// that ignores its context). Every other failure ends Run. Wire it to a
// liveness probe.
func (c *Controller[O, S, P]) Live() error {
	if err := c.dispatcher.Healthy(); err != nil && !errors.Is(err, pipeline.ErrNotRunning) {
		return fmt.Errorf("dispatcher: %w", err)
	}
	return nil
}

// Stats returns a snapshot of the Controller's counters.
func (c *Controller[O, S, P]) Stats() Stats {
	claim := c.claimer.Current()
	st := Stats{
		Shards: 1, Members: []string{c.claimer.Identity()}, Running: []int{0},
		Reconciler: ReconcilerStats(c.reconciler.Stats()),
		Dispatcher: DispatcherStats(c.dispatcher.Stats()),
		Queue:      statuspatch.QueueStats(c.queue.Stats()),
		Capacity:   c.queue.Cap(),
		Claim:      claim,
		Leading:    claim.IsCurrentFor(c.claimer.Identity(), c.cfg.Clock.Now()),
	}
	if st.Leading {
		st.Held = []int{0}
	}
	return st
}
