package quietpatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
	"github.com/quietpatch/quietpatch/statuspatch/shard"
	"github.com/quietpatch/quietpatch/statuspatch/source"
)

// Controller keeps the status of the objects of one resource up to date: a
// lease claimer, a reconciler finding what changed, a bounded queue of
// keys and a dispatcher building and sending each patch when it can be
// sent. Build it with [New]; [Controller.Run] starts and stops the parts in
// the safe order. All methods are safe for concurrent use.
type Controller[O, S, P any] struct {
	cfg        Config
	src        statuspatch.Source[O]
	log        *slog.Logger
	claimer    *leader.Claimer // nil with Config.Observer
	observer   leader.Observer
	queue      *statuspatch.PatchQueue[types.NamespacedName]
	reconciler *statuspatch.Reconciler[O, S, P]
	dispatcher *statuspatch.Dispatcher[O, S, P]
	synced     []cache.InformerSynced
	life       outcome.Lifecycle // stopped from the moment Run begins to stop
	ready      atomic.Bool       // synced, parts running
}

var _ Runner = (*Controller[any, any, any])(nil)

// New builds a Controller for the objects src lists, whose status comp
// computes and patcher writes, and starts nothing. It rejects an invalid
// cfg with a [*ConfigError] naming the field.
//
// Events: when src has an informer (statuspatch/source.Informer), or is
// itself an [Informer] (AddEventHandler and HasSynced, as the Source of
// the controller-runtime integration), New registers a handler that
// enqueues every object added, updated or deleted, except the Adds of the
// informer's initial list (source.EnqueueHandler) and the updates that
// are the echoes of its own writes (statuspatch.Dispatcher.Echo, with a
// statuspatch.VersionPatcher); with any other Source
// (an Indexer, a lister) call Enqueue from your handlers, and skip the
// initial list likewise: the pass made on gaining the lead covers every
// object the synced Source lists, and keys enqueued for it would wait in
// the fresh lane ahead of the edits made during the first convergence.
// Config.Dependencies wires the other resources.
func New[O, S, P any](src statuspatch.Source[O], comp statuspatch.StatusComputer[O, S, P], patcher statuspatch.Patcher[P], cfg Config) (*Controller[O, S, P], error) {
	cfg, err := cfg.complete()
	if err != nil {
		return nil, err
	}
	c := &Controller[O, S, P]{cfg: cfg, src: src, log: cfg.Logger.With(slog.String("pipeline", cfg.Name))}
	if src == nil {
		return nil, &ConfigError{Field: "Source", Reason: "must not be nil"}
	}
	c.observer = cfg.Observer
	if c.observer == nil {
		if c.claimer, err = leader.NewClaimer(cfg.Leases, cfg.Lease); err != nil {
			return nil, outcome.Prefix("Lease.", err)
		}
		c.observer = c.claimer
	}
	if c.queue, err = statuspatch.NewPatchQueue[types.NamespacedName](cfg.Options); err != nil {
		return nil, err
	}
	if c.reconciler, err = statuspatch.NewReconciler(src, comp, c.queue, c.observer, cfg.Options); err != nil {
		return nil, err
	}
	if c.dispatcher, err = statuspatch.NewDispatcher(c.queue, src, comp, patcher, c.observer, cfg.Options); err != nil {
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
	deps, err := addDependencies(cfg.Dependencies, c.Enqueue, c.resync)
	if err != nil {
		return nil, err
	}
	c.synced = append(c.synced, deps...)
	return c, nil
}

// eventHandler is source.EnqueueHandler to Enqueue, that drops the echoes
// of the dispatcher's own writes (statuspatch.Dispatcher.Echo) and tells it
// of deletions (their keys as EnqueueHandler finds them, tombstones too).
func (c *Controller[O, S, P]) eventHandler() cache.ResourceEventHandler {
	h := source.EnqueueHandler(func(k types.NamespacedName) { c.Enqueue(k) })
	forget := source.EnqueueHandler(func(k types.NamespacedName) { c.dispatcher.Echo(k, "") })
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: h.OnAdd,
		UpdateFunc: func(old, obj any) {
			if m, err := meta.Accessor(obj); err == nil &&
				c.dispatcher.Echo(types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}, m.GetResourceVersion()) {
				return
			}
			h.OnUpdate(old, obj)
		},
		DeleteFunc: func(obj any) {
			forget.OnDelete(obj)
			h.OnDelete(obj)
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
		if _, err := d.Informer.AddEventHandler(source.DependencyHandler(d.Keys, enqueue, resync)); err != nil {
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
// lead), then start the dispatcher, the claimer (unless Config.Observer)
// and the reconciler.
//
// Stop, in this order: the reconciler (no new key); the dispatcher — no
// new call, the calls in flight run to the API server's answer, what is
// queued is dropped; then the claimer — it vacates the Lease only if every
// call got an answer, else it lets the claim run out. Run returns once all
// have stopped: at most PatchTimeout + the Lease's CallTimeout after ctx is
// done, whether the API server answers or not. Once ctx is done no pass
// and no serve starts reading the Source (nor computes a status, which may
// read the dependencies' caches), so the informers may stop with ctx
// (informers.Start(ctx.Done())); Run does not wait for them, and nothing
// needs to (see Stop order in the package documentation).
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
	c.log.Info("quietpatch: caches synced; competing for the lease",
		slog.String("identity", c.observer.Identity()), slog.Int("capacity", c.queue.Cap()),
		slog.Duration("interval", c.cfg.Interval), slog.Int("workers", c.cfg.Workers))

	runCtx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	var first atomic.Pointer[error] // the first part to stop on its own
	start := func(name string, run func(context.Context) error) (stop func()) {
		pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
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
		return func() { cancel(); <-done }
	}
	dispatcher := start("dispatcher", c.dispatcher.Run)
	claimer := func() {}
	if c.claimer != nil {
		claimer = start("lease loop", c.claimer.Run)
	}
	reconciler := start("reconciler", c.reconciler.Run)
	c.ready.Store(true)

	<-runCtx.Done()
	c.life.Stop(nil) // stopping
	c.log.Info("quietpatch: stopping: the reconciler, the dispatcher (calls in flight finish), then the lease")
	reconciler()
	dispatcher()
	claimer()
	c.queue.Close()
	c.ready.Store(false)
	var err error
	if p := first.Load(); p != nil {
		err = *p
	}
	c.log.Info("quietpatch: stopped", slog.Any("error", err))
	return err
}

// Enqueue asks for the objects with keys — those one event affects — to be
// reconciled soon (statuspatch.Reconciler.Enqueue): a few keys take the
// fresh lane, served before the periodic passes' keys; more make one pass,
// which queues only the objects that changed. While this replica does not lead
// it does nothing (the pass made on gaining the lead covers every object).
// It never blocks: call it from event handlers.
func (c *Controller[O, S, P]) Enqueue(keys ...types.NamespacedName) { c.reconciler.Enqueue(keys...) }

// resync makes a pass soon, if we lead.
func (c *Controller[O, S, P]) resync() {
	if c.Leading() {
		c.reconciler.Resync()
	}
}

// Leading reports whether our claim is current now.
func (c *Controller[O, S, P]) Leading() bool {
	return c.observer.Current().IsCurrentFor(c.observer.Identity(), c.cfg.Clock.Now())
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
	if c.claimer != nil {
		if err := c.claimer.Healthy(); err != nil {
			errs = append(errs, fmt.Errorf("lease loop: %w", err))
		}
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
	if err := c.dispatcher.Healthy(); err != nil && !errors.Is(err, statuspatch.ErrNotRunning) {
		return fmt.Errorf("dispatcher: %w", err)
	}
	return nil
}

// Stats returns a snapshot of the Controller's counters.
func (c *Controller[O, S, P]) Stats() Stats {
	claim := c.observer.Current()
	st := Stats{
		Stats:      shard.Stats{Shards: 1, Members: []string{c.observer.Identity()}, Running: []int{0}},
		Reconciler: c.reconciler.Stats(),
		Dispatcher: c.dispatcher.Stats(),
		Queue:      c.queue.Stats(),
		Capacity:   c.queue.Cap(),
		Claim:      claim,
		Leading:    claim.IsCurrentFor(c.observer.Identity(), c.cfg.Clock.Now()),
	}
	if st.Leading {
		st.Held = []int{0}
	}
	return st
}

// Identity returns this replica's holder identity.
func (c *Controller[O, S, P]) Identity() string { return c.observer.Identity() }

// Source returns the Source the Controller reads.
func (c *Controller[O, S, P]) Source() statuspatch.Source[O] { return c.src }

// Claimer returns the Controller's claimer, or nil when Config.Observer
// was given.
func (c *Controller[O, S, P]) Claimer() *leader.Claimer { return c.claimer }
