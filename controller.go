package quietpatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/metric"
	"k8s.io/apimachinery/pkg/types"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/source"
)

// Defaults of [Config].
const (
	// DefaultName is the default Config.Name.
	DefaultName = "quietpatch"
	// DefaultInterval is the default Config.Interval.
	DefaultInterval = 10 * time.Second
	// DefaultSyncTimeout is the default Config.SyncTimeout.
	DefaultSyncTimeout = 2 * time.Minute
	// DefaultPatchLatency is the per-patch latency the first capacity
	// assumes, before anything was measured: one status patch in flight
	// against a real kube-apiserver on 2 cores took 1/144 s (≈ 6.9 ms) on
	// average.
	DefaultPatchLatency = time.Second / 144
	// DefaultMinCapacity and DefaultMaxCapacity bound the automatic
	// capacity; DefaultMaxCapacity is Config.MaxCapacity's default.
	DefaultMinCapacity = 100
	DefaultMaxCapacity = 50_000
)

// Errors of the Controller.
var (
	// ErrInvalidConfig is wrapped by every error [New] returns for a
	// configuration it rejects; the error is a *statuspatch.ConfigError or
	// a *leader.ConfigError naming the field.
	ErrInvalidConfig = errors.New("quietpatch: invalid config")
	// ErrNotSynced is wrapped by the error Run returns when the Source did
	// not sync within Config.SyncTimeout, and by Ready until it has.
	ErrNotSynced = errors.New("quietpatch: source not synced")
	// ErrAlreadyStarted is returned by a second call of Run.
	ErrAlreadyStarted = errors.New("quietpatch: Run already called")
)

// Config configures a [Controller]. Lease.Namespace and Lease.Name are
// required, with Leases, unless Observer is set; every other field has a
// default that needs no measurement.
type Config struct {
	// Name names the pipeline: the value of the pipeline attribute on the
	// library's instruments and in its logs. Default [DefaultName]; use
	// the resource's name when a process runs several pipelines.
	Name string

	// Leases is the client the Controller's leader.Claimer competes for
	// the Lease with: clientset.CoordinationV1(). Give it a client of its
	// own, with client-go's default rate limiter, so that renewals never
	// wait behind status patches. Required unless Observer is set.
	Leases coordinationv1client.LeasesGetter
	// Lease configures the claimer (see leader.Config): Namespace and Name
	// are required; Identity defaults to leader.DefaultIdentity() — the pod
	// name plus a random suffix, unique per process; Logger and Meter
	// default to this Config's.
	Lease leader.Config
	// Observer, when set, is used instead of a claimer of the
	// Controller's own (Leases and Lease must then be empty): for example
	// one leader.Claimer shared by the pipelines of several resources. The
	// Controller then neither runs nor stops it; whoever runs it must stop
	// it after the Controller's Run has returned, and a *leader.Claimer
	// still quiesces the Controller's dispatcher before it vacates.
	Observer leader.Observer

	// Interval between full reconcile passes while leader. Default
	// [DefaultInterval].
	Interval time.Duration
	// Capacity fixes the capacity of the patch queue. Zero (the default)
	// makes it follow what the dispatcher drains: the patches applied in
	// one Interval at the current in-flight limit and latency
	// (DispatcherStats.DrainRate × Interval), re-read every Interval,
	// between DefaultMinCapacity and MaxCapacity, starting from
	// statuspatch.SuggestCapacity(Interval, DefaultPatchLatency, 0, 1) =
	// 1,440. Then a backlog drains within an interval, passes halt only
	// on real excess, and a patch does not wait until it expires. A pass
	// that halts resumes as soon as half of the queue is free again, so
	// a capacity below what the API absorbs costs passes, not throughput.
	Capacity int
	// MaxCapacity bounds the automatic capacity. Default
	// [DefaultMaxCapacity]. Memory grows with use up to the capacity, each
	// slot holding one patch.
	MaxCapacity int
	// MaxAge: a patch that waited longer is dropped at dequeue (the next
	// pass recomputes it). Default 2 × Interval; negative means never.
	MaxAge time.Duration
	// Workers fixes the number of status patches in flight at most.
	// Zero (the default) makes it adaptive, between 1 and MaxInFlight
	// (see statuspatch.Dispatcher).
	Workers int
	// MaxInFlight bounds the adaptive in-flight limit. Default
	// statuspatch.DefaultMaxInFlight.
	MaxInFlight int
	// PatchTimeout bounds every patch call (and the claim left bounds it
	// further). Default statuspatch.DefaultPatchTimeout.
	PatchTimeout time.Duration
	// ClaimMargin: no patch call starts with less of the claim left. See
	// statuspatch.DispatcherConfig.ClaimMargin for the default.
	ClaimMargin time.Duration
	// SyncTimeout bounds how long Run waits for the Source's cache — and
	// the caches of WaitFor — to sync before it competes for the lease.
	// Default [DefaultSyncTimeout].
	SyncTimeout time.Duration
	// WaitFor are further caches the statuses are computed from (the
	// informers of other resources: HasSynced of each): Run waits for them
	// too, so that no replica leads with a partial view.
	WaitFor []cache.InformerSynced
	// DiffOptions are the go-cmp options of the debug-level diff of a
	// changed status (statuspatch.ReconcilerConfig.DiffOptions), e.g.
	// conditions.IgnoreTransitionTime().
	DiffOptions []cmp.Option

	// Logger receives the parts' records (see their documentation) and
	// the Controller's own: start, sync, shutdown. Nil discards.
	Logger *slog.Logger
	// Meter creates every instrument of the parts (see the package
	// documentation for the table); nil means none. Stats works either
	// way.
	Meter metric.Meter
	// Clock is the clock of the parts. Default the real clock.
	Clock clock.WithTicker
}

// Stats is a snapshot of a Controller's counters, for logs, tests and
// status pages: it needs no metrics SDK.
type Stats struct {
	// Reconciler counts passes by result and objects by result.
	Reconciler statuspatch.ReconcilerStats
	// Dispatcher counts patch calls by outcome and drops by reason.
	Dispatcher statuspatch.DispatcherStats
	// Queue has the queue's counters and its depth.
	Queue statuspatch.QueueStats
	// Capacity is the queue's capacity.
	Capacity int
	// Claim is the latest claim observed, and Leading whether it is ours
	// now.
	Claim   leader.Claim
	Leading bool
}

// Controller keeps the status of the objects of one resource up to date: a
// lease claimer, a reconciler, a bounded patch queue and a dispatcher,
// built by [New] and run by [Controller.Run], which takes care of the
// order of start and stop. The parts stay reachable for those who need
// them. All methods are safe for concurrent use.
type Controller[O, S, P any] struct {
	cfg        Config
	src        statuspatch.Source[O]
	log        *slog.Logger
	claimer    *leader.Claimer // nil with Config.Observer
	observer   leader.Observer
	queue      *statuspatch.PatchQueue[statuspatch.Patch[P]]
	reconciler *statuspatch.Reconciler[O, S, P]
	dispatcher *statuspatch.Dispatcher[P]

	autoCapacity bool

	started  atomic.Bool
	synced   atomic.Bool
	stopping atomic.Bool
	running  atomic.Bool
}

// synced is implemented by Sources that know whether their cache has
// synced: the sources of package statuspatch/source.
type synced interface{ HasSynced() bool }

// informerSource is implemented by Sources built from an informer.
type informerSource interface {
	AddEventHandler(cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error)
}

// New builds a Controller for the objects src lists, whose status comp
// computes and patcher writes. It validates cfg (an error wrapping
// [ErrInvalidConfig] names the field) and starts nothing.
//
// When src was built from an informer (package statuspatch/source), New
// registers an event handler on it that enqueues every object added,
// updated or deleted; events of other resources the status depends on are
// for the caller to wire to [Controller.Enqueue].
func New[O, S, P any](src statuspatch.Source[O], comp statuspatch.StatusComputer[O, S, P], patcher statuspatch.Patcher[P], cfg Config) (*Controller[O, S, P], error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Controller[O, S, P]{cfg: cfg, src: src, log: cfg.Logger.With(slog.String("pipeline", cfg.Name))}
	if src == nil {
		return nil, invalid("Source", "must not be nil")
	}
	if cfg.Observer != nil {
		c.observer = cfg.Observer
	} else {
		if c.claimer, err = leader.NewClaimer(cfg.Leases, cfg.Lease); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		c.observer = c.claimer
	}
	maxAge := cfg.MaxAge
	if maxAge < 0 {
		maxAge = 0
	}
	capacity := cfg.Capacity
	if capacity == 0 {
		c.autoCapacity = true
		capacity = min(max(statuspatch.SuggestCapacity(cfg.Interval, DefaultPatchLatency, 0, 1), DefaultMinCapacity), cfg.MaxCapacity)
	}
	if c.queue, err = statuspatch.NewPatchQueue(statuspatch.QueueConfig[statuspatch.Patch[P]]{
		Capacity: capacity,
		Key:      statuspatch.PatchKey[P],
		MaxAge:   maxAge,
		Name:     cfg.Name,
		Meter:    cfg.Meter,
		Clock:    cfg.Clock,
	}); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if c.reconciler, err = statuspatch.NewReconciler(statuspatch.ReconcilerConfig[O, S, P]{
		Source:      src,
		Computer:    comp,
		Queue:       c.queue,
		Leader:      c.observer,
		Interval:    cfg.Interval,
		Clock:       cfg.Clock,
		Logger:      cfg.Logger,
		DiffOptions: cfg.DiffOptions,
		Meter:       cfg.Meter,
		Name:        cfg.Name,
	}); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if c.dispatcher, err = statuspatch.NewDispatcher(statuspatch.DispatcherConfig[P]{
		Queue:        c.queue,
		Patcher:      patcher,
		Leader:       c.observer,
		PatchTimeout: cfg.PatchTimeout,
		ClaimMargin:  cfg.ClaimMargin,
		Workers:      cfg.Workers,
		MaxInFlight:  cfg.MaxInFlight,
		Clock:        cfg.Clock,
		Logger:       cfg.Logger,
		Meter:        cfg.Meter,
		Name:         cfg.Name,
	}); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if inf, ok := src.(informerSource); ok {
		if _, err := inf.AddEventHandler(source.EnqueueHandler(c.reconciler.Enqueue)); err != nil {
			return nil, fmt.Errorf("quietpatch: registering the event handler on the Source's informer: %w", err)
		}
	}
	return c, nil
}

func invalid(field, reason string) error {
	return fmt.Errorf("%w: %w", ErrInvalidConfig, &statuspatch.ConfigError{Config: "quietpatch.New", Field: field, Reason: reason})
}

// withDefaults applies the defaults and checks what the parts do not.
func (cfg Config) withDefaults() (Config, error) {
	cfgErr := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, &statuspatch.ConfigError{Config: "Config", Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	switch {
	case cfg.Observer != nil && (cfg.Leases != nil || cfg.Lease.Namespace != "" || cfg.Lease.Name != ""):
		return cfg, cfgErr("Observer", "is set together with Leases or Lease: give one or the other")
	case cfg.Observer == nil && cfg.Leases == nil:
		return cfg, cfgErr("Leases", "must be set (clientset.CoordinationV1()), unless Observer is")
	case cfg.Interval < 0:
		return cfg, cfgErr("Interval", "must be >= 0 (0 means %s), got %s", DefaultInterval, cfg.Interval)
	case cfg.Capacity < 0:
		return cfg, cfgErr("Capacity", "must be >= 0 (0 means automatic), got %d", cfg.Capacity)
	case cfg.MaxCapacity < 0:
		return cfg, cfgErr("MaxCapacity", "must be >= 0 (0 means %d), got %d", DefaultMaxCapacity, cfg.MaxCapacity)
	case cfg.Workers < 0:
		return cfg, cfgErr("Workers", "must be >= 0 (0 means adaptive), got %d", cfg.Workers)
	case cfg.SyncTimeout < 0:
		return cfg, cfgErr("SyncTimeout", "must be >= 0 (0 means %s), got %s", DefaultSyncTimeout, cfg.SyncTimeout)
	}
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.MaxCapacity == 0 {
		cfg.MaxCapacity = DefaultMaxCapacity
	}
	if cfg.MaxAge == 0 {
		cfg.MaxAge = 2 * cfg.Interval
	}
	if cfg.SyncTimeout == 0 {
		cfg.SyncTimeout = DefaultSyncTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Observer == nil {
		if cfg.Lease.Identity == "" {
			cfg.Lease.Identity = leader.DefaultIdentity()
		}
		if cfg.Lease.Logger == nil {
			cfg.Lease.Logger = cfg.Logger
		}
		if cfg.Lease.Meter == nil {
			cfg.Lease.Meter = cfg.Meter
		}
		if cfg.Lease.Clock == nil {
			cfg.Lease.Clock = cfg.Clock
		}
	}
	return cfg, nil
}

// Run runs the Controller until ctx is cancelled, then stops it and returns
// nil; or until a part fails, then stops it and returns that failure. It
// may be called once; a second call returns [ErrAlreadyStarted].
//
// Start: wait until the Source's cache has synced (if it can tell, and for
// Config.SyncTimeout at most: a replica with an empty cache must not lead),
// then start the dispatcher, the claimer (unless Config.Observer) and the
// reconciler.
//
// Stop, in this order: the reconciler (no new patch is queued); the
// dispatcher — it takes no new patch, lets the calls in flight run to the
// API server's answer, drops what is queued; then the claimer — it vacates
// the Lease only if every patch call made under the claim got an answer,
// else it lets the claim run out, so that a successor waits a full lease
// duration rather than racing a late write. Run returns once all have
// stopped.
//
// Failures that end Run: the Source does not sync in time ([ErrNotSynced]);
// the lease loop fails (for example RBAC forbids the Lease: a
// leader.Claimer gives up after a full lease duration of refusals); the
// reconciler or the dispatcher stops on its own.
func (c *Controller[O, S, P]) Run(ctx context.Context) error {
	if !c.started.CompareAndSwap(false, true) {
		return ErrAlreadyStarted
	}
	defer c.stopping.Store(true)
	if err := c.waitSynced(ctx); err != nil {
		return err
	}
	c.synced.Store(true)
	c.log.Info("quietpatch: source synced; competing for the lease",
		slog.String("identity", c.observer.Identity()), slog.Int("capacity", c.queue.Cap()),
		slog.Bool("capacity_automatic", c.autoCapacity), slog.Duration("interval", c.cfg.Interval),
		slog.Int("workers", c.cfg.Workers))

	runCtx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	var (
		mu       sync.Mutex
		firstErr error
	)
	type part struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	start := func(name string, run func(context.Context) error) part {
		pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		p := part{cancel: cancel, done: make(chan struct{})}
		go func() {
			defer close(p.done)
			err := run(pctx)
			if pctx.Err() != nil {
				return // stopped by us
			}
			if err == nil {
				err = errors.New("stopped unexpectedly")
			}
			mu.Lock()
			if firstErr == nil {
				firstErr = fmt.Errorf("quietpatch: %s: %w", name, err)
			}
			mu.Unlock()
			fail(err)
		}()
		return p
	}
	parts := []part{}
	dispatcher := start("dispatcher", c.dispatcher.Run)
	var claimer part
	if c.claimer != nil {
		claimer = start("lease loop", c.claimer.Run)
	}
	reconciler := start("reconciler", c.reconciler.Run)
	var sizer part
	if c.autoCapacity {
		sizer = start("capacity", c.followDrainRate)
	}
	c.running.Store(true)

	<-runCtx.Done()
	c.stopping.Store(true)
	c.log.Info("quietpatch: stopping: the reconciler, the dispatcher (calls in flight finish), then the lease")
	if c.autoCapacity {
		parts = append(parts, sizer)
	}
	parts = append(parts, reconciler, dispatcher)
	if c.claimer != nil {
		parts = append(parts, claimer)
	}
	for _, p := range parts {
		p.cancel()
		<-p.done
	}
	c.queue.Close()
	c.running.Store(false)
	mu.Lock()
	defer mu.Unlock()
	c.log.Info("quietpatch: stopped", slog.Any("error", firstErr))
	return firstErr
}

// followDrainRate sets the queue's capacity to what the dispatcher drains
// in an interval, every interval, until ctx ends. It changes the capacity
// only by more than a tenth, and never from a rate measured without calls.
func (c *Controller[O, S, P]) followDrainRate(ctx context.Context) error {
	t := c.cfg.Clock.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
		rate := c.dispatcher.Stats().DrainRate
		if rate <= 0 {
			continue
		}
		want := int(math.Ceil(rate * c.cfg.Interval.Seconds()))
		want = min(max(want, DefaultMinCapacity), c.cfg.MaxCapacity)
		if cur := c.queue.Cap(); abs(want-cur) > cur/10 {
			_ = c.queue.SetCapacity(want) // want is within bounds
			c.log.Debug("quietpatch: queue capacity follows the drain rate",
				slog.Int("capacity", want), slog.Float64("drain_rate", rate))
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// waitSynced waits for the Source's cache, if it can tell, and for those of
// Config.WaitFor.
func (c *Controller[O, S, P]) waitSynced(ctx context.Context) error {
	checks := c.cfg.WaitFor
	if s, ok := c.src.(synced); ok {
		checks = append([]cache.InformerSynced{s.HasSynced}, checks...)
	}
	if len(checks) == 0 {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, c.cfg.SyncTimeout)
	defer cancel()
	c.log.Info("quietpatch: waiting for the caches to sync", slog.Int("caches", len(checks)), slog.Duration("timeout", c.cfg.SyncTimeout))
	if !cache.WaitForCacheSync(sctx.Done(), checks...) {
		if ctx.Err() != nil {
			return nil // stopped before the sync: nothing to report
		}
		return fmt.Errorf("%w within %s (SyncTimeout): is the resource served, and may we list and watch it?", ErrNotSynced, c.cfg.SyncTimeout)
	}
	return nil
}

// Enqueue asks for the object with key to be reconciled soon (see
// statuspatch.Reconciler.Enqueue): call it from the event handlers of the
// resources a status depends on.
func (c *Controller[O, S, P]) Enqueue(key types.NamespacedName) { c.reconciler.Enqueue(key) }

// Ready reports whether this replica is ready, leader or not: nil when the
// Source has synced and the lease loop (if the Controller runs one), the
// dispatcher and the reconciler run; otherwise an error listing every
// reason. Wire it to a readiness probe.
func (c *Controller[O, S, P]) Ready() error {
	switch {
	case c.stopping.Load():
		return errors.New("quietpatch: stopping")
	case !c.synced.Load():
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
	if !c.running.Load() {
		return nil
	}
	if err := c.dispatcher.Healthy(); err != nil && !errors.Is(err, statuspatch.ErrNotStarted) && !errors.Is(err, statuspatch.ErrStopped) {
		return fmt.Errorf("dispatcher: %w", err)
	}
	return nil
}

// Stats returns a snapshot of the Controller's counters.
func (c *Controller[O, S, P]) Stats() Stats {
	claim := c.observer.Current()
	return Stats{
		Reconciler: c.reconciler.Stats(),
		Dispatcher: c.dispatcher.Stats(),
		Queue:      c.queue.Stats(),
		Capacity:   c.queue.Cap(),
		Claim:      claim,
		Leading:    claim.IsCurrentFor(c.observer.Identity(), c.cfg.Clock.Now()),
	}
}

// Identity returns this replica's holder identity.
func (c *Controller[O, S, P]) Identity() string { return c.observer.Identity() }

// Claimer returns the Controller's claimer, or nil when Config.Observer
// was given.
func (c *Controller[O, S, P]) Claimer() *leader.Claimer { return c.claimer }

// Queue returns the patch queue.
func (c *Controller[O, S, P]) Queue() *statuspatch.PatchQueue[statuspatch.Patch[P]] { return c.queue }

// Reconciler returns the reconciler.
func (c *Controller[O, S, P]) Reconciler() *statuspatch.Reconciler[O, S, P] { return c.reconciler }

// Dispatcher returns the dispatcher.
func (c *Controller[O, S, P]) Dispatcher() *statuspatch.Dispatcher[P] { return c.dispatcher }
