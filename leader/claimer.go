package leader

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/internal/leases"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/clock"
)

// Claimer competes for one coordination.k8s.io/v1 Lease on behalf of one
// replica, and tells every replica — holder or not — who holds it.
//
// Create it with [NewClaimer] and call [Claimer.Run] once, typically in its
// own goroutine for the life of the process. Run creates the Lease if it is
// missing (unless Config.RequireExisting), acquires it when it is free or its
// holder's claim has run out, renews it while held, watches it otherwise,
// and vacates it when its context is cancelled. All other methods are safe
// for concurrent use, from any goroutine, before, during and after Run.
//
// [Claimer.Current] and [Claimer.Subscribe] serve consumers such as a
// pipeline's reconciler and dispatcher, [Claimer.Ready] serves a readiness
// probe, and [Claimer.Relinquish] gives the lease up on purpose.
type Claimer struct {
	cfg    Config
	leases coordinationv1client.LeaseInterface
	clk    clock.Clock
	log    *slog.Logger
	in     *instruments
	hub    hub

	life         base.Lifecycle
	kick         chan struct{}      // buffer 1: the watch saw something
	relinquishCh chan relinquishReq // served by the loop while it waits
	done         chan struct{}      // closed when Run returns

	mu      sync.Mutex                        // guards writers and watch
	writers map[*Writer]struct{}              // a pointer per AddWriter: one Writer may be added twice
	watch   watchState                        // written by the watch goroutine, read by the loop
	watchUp atomic.Bool                       // a watch of the Lease is established
	client  coordinationv1client.LeasesGetter // for the limiter warning at Run, and leases.SeenAt
}

type relinquishReq struct {
	backoff time.Duration
	done    chan error // buffer 1
}

// NewClaimer returns a Claimer for the Lease cfg.Namespace/cfg.Name, using
// client for every request (pass [NewLeaseClient]'s; one with client-go's
// rate limiter is rejected). It applies the defaults documented on [Config] and
// returns an error wrapping [base.ErrInvalidConfig], naming the field, for an
// impossible configuration. NewClaimer makes no API request.
func NewClaimer(client coordinationv1client.LeasesGetter, cfg Config) (*Claimer, error) {
	if client == nil || reflect.ValueOf(client).Kind() == reflect.Pointer && reflect.ValueOf(client).IsNil() {
		return nil, &base.ConfigError{Field: "client", Reason: "must not be nil"}
	}
	if err := leases.Check(client); err != nil {
		return nil, err
	}
	cfg, err := cfg.Complete()
	if err != nil {
		return nil, err
	}
	return &Claimer{
		cfg:          cfg,
		leases:       client.Leases(cfg.Namespace),
		clk:          cfg.Clock,
		log:          cfg.Logger.With("lease", cfg.Namespace+"/"+cfg.Name, "identity", cfg.Identity),
		in:           newInstruments(cfg.Meter, cfg.Namespace, cfg.Name),
		kick:         make(chan struct{}, 1),
		relinquishCh: make(chan relinquishReq),
		done:         make(chan struct{}),
		client:       client,
	}, nil
}

// Identity returns Config.Identity, the holder identity this replica writes.
func (c *Claimer) Identity() string { return c.cfg.Identity }

// Current returns the latest claim this replica has observed; it never
// blocks on I/O. Before Run has read the Lease it is the zero Claim.
//
// While this replica holds the lease, Current().IsCurrentFor(Identity(), now)
// is true until the claim's Expiry — the time our last successful acquire or
// renew request was sent plus LeaseDuration — and the claimer stops
// reporting itself as holder before it vacates, relinquishes, or returns
// from Run. A claim that merely runs out is not re-published: consumers
// compare Expiry with their own clock ([Claim.Remaining]).
func (c *Claimer) Current() Claim { return c.hub.current() }

// Subscribe returns a channel that receives the current claim at once and
// then every claim that differs from the previous one, in order, and a
// function that ends the subscription and closes the channel (calling it
// again does nothing).
//
// Publishing never blocks the claimer: the channel buffers one claim, and a
// subscriber that falls behind has the claims it missed coalesced — it does
// not see every intermediate claim, but the last value it receives is always
// the latest one. A held claim is re-published at every renewal (its Expiry
// moves), and another holder's claim whenever the Lease changes. The
// channel stays open after Run returns; use [Claimer.Ready] to learn that.
func (c *Claimer) Subscribe() (<-chan Claim, func()) { return c.hub.subscribe() }

// AddWriter registers w, and returns a function that removes it (calling it
// again does nothing). Before this replica gives the lease up on purpose —
// [Claimer.Relinquish], or Run's context cancelled — the claimer calls
// w.Quiesce with the epoch of its claim, while it still reports the claim
// as its own, and vacates the Lease only if every registered Writer reports
// that each of its writes under that epoch got an answer from the API
// server. Otherwise it leaves the Lease naming us and lets the claim run
// out, so that a successor waits a full LeaseDuration: a write that ended
// without an answer may still land, and must not land under the
// successor's claim. quietpatch.New registers its dispatcher.
func (c *Claimer) AddWriter(w Writer) (remove func()) {
	e := &w
	c.mu.Lock()
	if c.writers == nil {
		c.writers = make(map[*Writer]struct{})
	}
	c.writers[e] = struct{}{}
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		delete(c.writers, e)
		c.mu.Unlock()
	}
}

// quiesceWriters asks every registered Writer, concurrently, to stop
// writing under epoch and wait for its writes in flight; it reports whether
// all of them were answered.
func (c *Claimer) quiesceWriters(ctx context.Context, epoch int64) bool {
	c.mu.Lock()
	ws := make([]Writer, 0, len(c.writers))
	for e := range c.writers {
		ws = append(ws, *e)
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	var unanswered atomic.Bool
	for _, w := range ws {
		wg.Go(func() {
			if !w.Quiesce(ctx, epoch) {
				unanswered.Store(true)
			}
		})
	}
	wg.Wait()
	return !unanswered.Load()
}

// Ready reports whether the claimer is working: nil while Run is running,
// else an error wrapping [ErrNotRunning] — and, after Run returned, Run's
// error (never nil). It suits a readiness probe: a replica whose lease loop
// died must not look ready. Being ready does not mean holding the lease.
func (c *Claimer) Ready() error {
	switch started, running, why := c.life.State(); {
	case !started:
		return fmt.Errorf("%w: Run not called", ErrNotRunning)
	case running:
		return nil
	default:
		return fmt.Errorf("%w: Run returned: %w", ErrNotRunning, why)
	}
}

// Relinquish gives the lease up on purpose and keeps this replica out of the
// race for backoff: it asks the registered writers to quiesce (their
// writes in flight run to the API server's answer, for at most what is
// left of the claim), stops reporting itself as holder, vacates the Lease if
// it carries a claim of this process and every write was answered
// (clearing spec.holderIdentity, so another replica can acquire without
// waiting for the claim to run out) — else leaves it to run out — and does
// not acquire or create the Lease again until backoff has passed on the
// Clock. A later call extends, never shortens, a back-off in force.
//
// Relinquish waits for the loop to handle the request, which bounds it by
// the claim left plus Config.CallTimeout; ctx bounds the wait. It returns the vacate
// request's error, if any (the back-off applies anyway); an error wrapping
// [ErrNotRunning] before Run and after it returned; a
// *quietpatch.ConfigError for a negative backoff. Relinquishing while not
// holding the lease only starts the back-off.
func (c *Claimer) Relinquish(ctx context.Context, backoff time.Duration) error {
	if backoff < 0 {
		return &base.ConfigError{Field: "backoff", Reason: fmt.Sprintf("must be >= 0, got %s", backoff)}
	}
	if started, _, _ := c.life.State(); !started {
		return fmt.Errorf("%w: Run not called", ErrNotRunning)
	}
	req := relinquishReq{backoff: backoff, done: make(chan error, 1)}
	select {
	case c.relinquishCh <- req:
	case <-c.done:
		return fmt.Errorf("%w: Run returned", ErrNotRunning)
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run competes for the lease until ctx is cancelled or a permanent error
// occurs, and returns why it stopped: context.Cause(ctx) (ctx.Err() unless
// the context was cancelled with a cause) after a cancellation, or an
// error that retrying cannot fix — the API server refused our credentials or
// permissions (Unauthorized, Forbidden) for a full LeaseDuration, rejected
// the request as invalid, or
// the Lease is missing while Config.RequireExisting is set ([ErrLeaseNotFound]).
// Transient errors (timeouts, 5xx, 429 Too Many Requests, conflicts) are
// retried every RetryPeriod and never end Run; while they outlast our claim
// we are simply not the holder.
//
// When ctx is cancelled, Run gives the claim up on purpose: it asks the
// registered writers to quiesce (for at most what is left of the claim),
// stops reporting itself as holder, and vacates the Lease with a fresh
// CallTimeout if it carries a claim of this process and every write was
// answered, so a successor need not wait for the claim to run out; if a
// write went unanswered it leaves the Lease to run out (see
// [Claimer.AddWriter]). On a permanent error it stops reporting itself as
// holder at once but cannot vacate.
//
// Run may be called once; later calls return [base.ErrAlreadyStarted].
func (c *Claimer) Run(ctx context.Context) error {
	if err := c.life.Start(); err != nil {
		return err
	}
	leases.Warn(c.log, c.client)

	unregister, err := c.in.observe(c.cfg.Identity, func() bool {
		return c.Current().IsCurrentFor(c.cfg.Identity, c.clk.Now())
	}, func() int64 { return c.Current().Epoch })
	if err != nil {
		err = fmt.Errorf("leader: registering the instruments' callback: %w", err)
		c.log.Error("leader: claimer stopped", "err", err)
		return c.finish(err)
	}

	wctx, stopWatch := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { c.watchLease(wctx) })
	l := &loop{Claimer: c}
	err = l.run(ctx)
	stopWatch()
	wg.Wait()
	unregister()
	if ctx.Err() == nil {
		c.log.Error("leader: claimer stopped", "err", err)
	}
	return c.finish(err)
}

func (c *Claimer) finish(err error) error {
	c.life.Stop(err)
	close(c.done)
	return err
}
