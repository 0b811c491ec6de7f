package leader

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/quietpatch/quietpatch/statuspatch/outcome"
	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
// A Claimer implements [Observer]: [Claimer.Current] and [Claimer.Subscribe]
// serve consumers such as a reconciler or dispatcher, [Claimer.Healthy] serves a
// readiness probe, and [Claimer.Relinquish] gives the lease up on purpose.
type Claimer struct {
	cfg    Config
	leases coordinationv1client.LeaseInterface
	clk    clock.Clock
	log    *slog.Logger
	in     *instruments
	hub    hub

	kick         chan struct{}      // buffer 1: the watch saw something
	relinquishCh chan relinquishReq // served by the loop while it waits
	done         chan struct{}      // closed when Run returns
	hooks        testHooks          // zero outside tests
	watch        watchState         // written by the watch goroutine
	mu           sync.Mutex         // guards state and runErr
	state        runState
	runErr       error

	writersMu sync.Mutex
	writers   map[*writerEntry]struct{}
}

// writerEntry is one registration of AddWriter; a pointer so that the same
// Writer may be registered twice and removed once.
type writerEntry struct{ w Writer }

type runState int

const (
	notStarted runState = iota
	running
	stopped
)

type relinquishReq struct {
	backoff time.Duration
	done    chan error // buffer 1
}

// testHooks let tests in this package observe the loop. Every field may be nil.
type testHooks struct {
	// idle is called when the loop is about to block, with the clock
	// reading it last acted on, the time it will wake at the latest and
	// the last watch event it has taken into account.
	idle func(now, wake time.Time, watchSeq uint64)
}

var _ Observer = (*Claimer)(nil)

// NewClaimer returns a Claimer for the Lease cfg.Namespace/cfg.Name, using
// client for every request (pass clientset.CoordinationV1() of a
// kubernetes.Interface). It applies the defaults documented on [Config] and
// returns an error wrapping [outcome.ErrInvalidConfig], naming the field, for an
// impossible configuration. NewClaimer makes no API request.
func NewClaimer(client coordinationv1client.LeasesGetter, cfg Config) (*Claimer, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: client must not be nil", outcome.ErrInvalidConfig)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	in, err := newInstruments(cfg.Meter, cfg.Namespace, cfg.Name, cfg.Identity)
	if err != nil {
		return nil, fmt.Errorf("leader: creating instruments: %w", err)
	}
	return &Claimer{
		cfg:          cfg,
		leases:       client.Leases(cfg.Namespace),
		clk:          cfg.Clock,
		log:          cfg.Logger.With("lease", cfg.Namespace+"/"+cfg.Name, "identity", cfg.Identity),
		in:           in,
		kick:         make(chan struct{}, 1),
		relinquishCh: make(chan relinquishReq),
		done:         make(chan struct{}),
	}, nil
}

// Identity returns Config.Identity, the holder identity this replica writes.
func (c *Claimer) Identity() string { return c.cfg.Identity }

// Config returns the configuration in effect, defaults applied.
func (c *Claimer) Config() Config { return c.cfg }

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
// channel stays open after Run returns; use [Claimer.Healthy] to learn that.
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
// successor's claim. A statuspatch Dispatcher registers itself.
func (c *Claimer) AddWriter(w Writer) (remove func()) {
	e := &writerEntry{w: w}
	c.writersMu.Lock()
	if c.writers == nil {
		c.writers = make(map[*writerEntry]struct{})
	}
	c.writers[e] = struct{}{}
	c.writersMu.Unlock()
	return func() {
		c.writersMu.Lock()
		delete(c.writers, e)
		c.writersMu.Unlock()
	}
}

// quiesceWriters asks every registered Writer, concurrently, to stop
// writing under epoch and wait for its writes in flight; it reports whether
// all of them were answered.
func (c *Claimer) quiesceWriters(ctx context.Context, epoch int64) bool {
	c.writersMu.Lock()
	ws := make([]Writer, 0, len(c.writers))
	for e := range c.writers {
		ws = append(ws, e.w)
	}
	c.writersMu.Unlock()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		answered = true
	)
	for _, w := range ws {
		wg.Go(func() {
			if !w.Quiesce(ctx, epoch) {
				mu.Lock()
				answered = false
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return answered
}

// Healthy reports whether the claimer is working: nil while Run is running,
// [ErrNotStarted] before, and an error wrapping [ErrStopped] and Run's
// error after Run has returned. It suits a readiness or liveness probe: a
// replica whose lease loop died must not look healthy. Being healthy does
// not mean holding the lease.
func (c *Claimer) Healthy() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state {
	case notStarted:
		return ErrNotStarted
	case running:
		return nil
	default:
		return fmt.Errorf("%w: %w", ErrStopped, c.runErr)
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
// request's error, if any (the back-off applies anyway), [ErrNotStarted]
// before Run, [ErrStopped] after Run returned, and [ErrNegativeBackoff] for a
// negative backoff. Relinquishing while not holding the lease only starts
// the back-off.
func (c *Claimer) Relinquish(ctx context.Context, backoff time.Duration) error {
	if backoff < 0 {
		return ErrNegativeBackoff
	}
	c.mu.Lock()
	st := c.state
	c.mu.Unlock()
	if st == notStarted {
		return ErrNotStarted
	}
	req := relinquishReq{backoff: backoff, done: make(chan error, 1)}
	select {
	case c.relinquishCh <- req:
	case <-c.done:
		return ErrStopped
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
// Run may be called once; later calls return [outcome.ErrAlreadyStarted].
func (c *Claimer) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.state != notStarted {
		c.mu.Unlock()
		return outcome.ErrAlreadyStarted
	}
	c.state = running
	c.mu.Unlock()

	unregister, err := c.in.observe(func() bool {
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
	l := &loop{c: c}
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
	c.mu.Lock()
	c.state = stopped
	c.runErr = err
	c.mu.Unlock()
	close(c.done)
	return err
}

// loop is the state of one Run, owned by Run's goroutine.
type loop struct {
	c *Claimer

	lease      *coordv1.Lease // last known state; nil when unknown or absent
	absent     bool           // the Lease is known not to exist
	stale      bool           // lease must be re-read before acting on it
	observedAt time.Time      // local time lease last changed as seen by us
	lastRead   time.Time      // local time of the last successful request

	held          bool      // we hold the claim below
	epoch         int64     // epoch of our claim
	maxEpoch      int64     // largest epoch seen in any observation or claim
	expiry        time.Time // our claim runs out here (send time + LeaseDuration)
	lastOwnExpiry time.Time // when our last claim ended (zero if none)

	backoffUntil time.Time // Relinquish back-off
	retryAt      time.Time // after a transient failure, no request before this
	conflicts    int       // consecutive conflicts
	failing      bool      // the last request failed (for logging edges)
	deniedRead   time.Time // first of the current run of refused reads (zero: none)
	deniedWrite  time.Time // first of the current run of refused writes (zero: none)
	missingNS    time.Time // first create refused for a missing namespace (zero: none)
	watchSeq     uint64    // last watch event handled
	lastHolder   string    // holder last logged
}

func (l *loop) run(ctx context.Context) error {
	c := l.c
	spins := 0
	for {
		wake, err := l.step(ctx)
		if err != nil {
			l.stopHolding(c.clk.Now(), "run failed")
			return err
		}
		if ctx.Err() != nil {
			return l.shutdown(ctx)
		}
		now := c.clk.Now()
		if !wake.After(now) {
			// step only returns when it must wait; guard against a bug
			// turning into a busy loop.
			if spins++; spins < 100 {
				continue
			}
			wake = now.Add(c.cfg.RetryPeriod)
		}
		spins = 0
		t := c.clk.NewTimer(wake.Sub(now))
		if c.hooks.idle != nil {
			c.hooks.idle(now, wake, l.watchSeq)
		}
		select {
		case <-ctx.Done():
			t.Stop()
			return l.shutdown(ctx)
		case <-t.C():
		case <-c.kick:
			l.readWatch()
		case req := <-c.relinquishCh:
			req.done <- l.relinquish(ctx, req.backoff)
		}
		t.Stop()
	}
}

// step does whatever requests the current state calls for and returns the
// time it must next run at the latest (always after the clock's now), or a
// permanent error. It returns early, with any wake time, if ctx is done.
func (l *loop) step(ctx context.Context) (time.Time, error) {
	c := l.c
	cfg := &c.cfg
	l.conflicts = 0
	for ctx.Err() == nil {
		now := c.clk.Now()
		if l.held && !now.Before(l.expiry) {
			l.stopHolding(now, "claim expired before it could be renewed")
		}
		if now.Before(l.retryAt) {
			return l.capByExpiry(l.retryAt), nil
		}
		if !l.held && !c.watchHealthy() && now.Sub(l.lastRead) >= cfg.RetryPeriod {
			l.stale = true // fallback while the watch is down
		}

		if l.stale || (l.lease == nil && !l.absent) {
			if err := l.get(ctx); err != nil {
				if l.permanent(err, &l.deniedRead) {
					return time.Time{}, err
				}
				l.transientFailure(err)
			}
			continue
		}

		if l.absent {
			if cfg.RequireExisting {
				return time.Time{}, fmt.Errorf("%w: %s/%s (Config.RequireExisting is set)", ErrLeaseNotFound, cfg.Namespace, cfg.Name)
			}
			if now.Before(l.backoffUntil) {
				return minTime(l.backoffUntil, now.Add(cfg.RetryPeriod)), nil
			}
			if err := l.create(ctx); err != nil {
				if apierrors.IsNotFound(err) {
					// The namespace does not exist: fatal once it has
					// lasted a full LeaseDuration (it may be on its
					// way), never a silent retry loop behind a healthy
					// replica.
					if l.missingNS.IsZero() {
						l.missingNS = now
					}
					if now.Sub(l.missingNS) >= cfg.LeaseDuration {
						return time.Time{}, fmt.Errorf("leader: cannot create the Lease %s/%s: its namespace has not existed for %s: %w",
							cfg.Namespace, cfg.Name, now.Sub(l.missingNS), err)
					}
					l.transientFailure(err)
					continue
				}
				if err := l.writeFailed(err); err != nil {
					return time.Time{}, err
				}
			}
			continue
		}

		if l.holdsLease() {
			renewAt := l.expiry.Add(-cfg.RenewGrace)
			if now.Before(renewAt) {
				return renewAt, nil
			}
			if err := l.renew(ctx); err != nil {
				if err := l.writeFailed(err); err != nil {
					return time.Time{}, err
				}
			}
			continue
		}

		if l.held { // the Lease no longer carries our claim
			l.stopHolding(now, "lease taken or changed by another party")
		}
		if wake, ok := l.mayAcquire(now); !ok {
			return wake, nil
		}
		if err := l.acquire(ctx); err != nil {
			if err := l.writeFailed(err); err != nil {
				return time.Time{}, err
			}
		}
	}
	return time.Time{}, nil
}

// capByExpiry returns t, or our expiry if we hold a claim that runs out
// before t (so the loss is noticed, logged and counted on time).
func (l *loop) capByExpiry(t time.Time) time.Time {
	if l.held && l.expiry.Before(t) {
		return l.expiry
	}
	return t
}

// ownClaimInLease reports whether the Lease as last known carries a claim
// this process made: our identity with the epoch of our latest acquisition.
// A Lease naming our identity with another epoch was written by an earlier
// process that used the same identity.
func (l *loop) ownClaimInLease() bool {
	return l.epoch != 0 && l.lease != nil && holderOf(l.lease) == l.c.cfg.Identity && transitionsOf(l.lease) == l.epoch
}

// holdsLease reports whether we hold a claim and the Lease as last known
// still carries it.
func (l *loop) holdsLease() bool {
	return l.held && l.lease != nil && holderOf(l.lease) == l.c.cfg.Identity && transitionsOf(l.lease) == l.epoch
}

// mayAcquire reports whether we may try to acquire the Lease now, and if
// not, when to look again.
func (l *loop) mayAcquire(now time.Time) (time.Time, bool) {
	cfg := &l.c.cfg
	next := now.Add(cfg.RetryPeriod)
	if h := holderOf(l.lease); h != "" && (h != cfg.Identity || !l.ownClaimInLease()) {
		// Another holder's claim — or one made under our identity by
		// an earlier process (a restarted container keeps its pod
		// name), whose last writes may still land: wait it out.
		if exp := l.observedAt.Add(durationOf(l.lease)); now.Before(exp) {
			return minTime(exp, next), false
		}
	}
	if now.Before(l.backoffUntil) {
		return minTime(l.backoffUntil, next), false
	}
	return time.Time{}, true
}

// callCtx returns a context for one request, bounded by CallTimeout and, if
// limit is non-zero, by limit.
func (l *loop) callCtx(ctx context.Context, limit time.Duration) (context.Context, context.CancelFunc) {
	d := l.c.cfg.CallTimeout
	if limit > 0 && limit < d {
		d = limit
	}
	return context.WithTimeout(ctx, d)
}

func (l *loop) get(ctx context.Context) error {
	c := l.c
	cctx, cancel := l.callCtx(ctx, 0)
	lease, err := c.leases.Get(cctx, c.cfg.Name, metav1.GetOptions{})
	cancel()
	c.in.request(opGet, err)
	now := c.clk.Now()
	switch {
	case err == nil:
		l.succeeded(now)
		l.deniedRead = time.Time{}
		l.observe(lease, now)
		return nil
	case apierrors.IsNotFound(err):
		l.succeeded(now)
		l.deniedRead = time.Time{}
		l.stale = false
		l.lease = nil
		l.absent = true
		if l.held {
			l.stopHolding(now, "lease deleted")
		}
		l.publish()
		return nil
	default:
		return err
	}
}

func (l *loop) create(ctx context.Context) error {
	c := l.c
	epoch, err := l.nextEpoch(0)
	if err != nil {
		return err
	}
	now := c.clk.Now()
	lease := &coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: c.cfg.Name, Namespace: c.cfg.Namespace},
		Spec: coordv1.LeaseSpec{
			HolderIdentity:       ptr(c.cfg.Identity),
			LeaseDurationSeconds: ptr(int32(c.cfg.LeaseDuration / time.Second)),
			AcquireTime:          &metav1.MicroTime{Time: now},
			RenewTime:            &metav1.MicroTime{Time: now},
			LeaseTransitions:     ptr(int32(epoch)),
		},
	}
	cctx, cancel := l.callCtx(ctx, 0)
	res, err := c.leases.Create(cctx, lease, metav1.CreateOptions{})
	cancel()
	c.in.request(opCreate, err)
	if err != nil {
		return err
	}
	l.missingNS = time.Time{}
	l.acquired(res, now, epoch)
	return nil
}

func (l *loop) acquire(ctx context.Context) error {
	c := l.c
	epoch, err := l.nextEpoch(transitionsOf(l.lease))
	if err != nil {
		return err
	}
	now := c.clk.Now()
	next := l.lease.DeepCopy()
	next.Spec.HolderIdentity = ptr(c.cfg.Identity)
	next.Spec.LeaseDurationSeconds = ptr(int32(c.cfg.LeaseDuration / time.Second))
	next.Spec.AcquireTime = &metav1.MicroTime{Time: now}
	next.Spec.RenewTime = &metav1.MicroTime{Time: now}
	next.Spec.LeaseTransitions = ptr(int32(epoch))
	cctx, cancel := l.callCtx(ctx, 0)
	res, err := c.leases.Update(cctx, next, metav1.UpdateOptions{})
	cancel()
	c.in.request(opAcquire, err)
	if err != nil {
		return err
	}
	l.acquired(res, now, epoch)
	return nil
}

// nextEpoch returns the epoch for a new acquisition of a Lease whose
// spec.leaseTransitions is trans: one more than both trans and any epoch we
// have seen, so our own epochs strictly increase even if the Lease was
// deleted and re-created with a lower count in between.
func (l *loop) nextEpoch(trans int64) (int64, error) {
	base := max(trans, l.maxEpoch)
	if base >= math.MaxInt32 {
		return 0, fmt.Errorf("%w: %s/%s", ErrTransitionsExhausted, l.c.cfg.Namespace, l.c.cfg.Name)
	}
	return base + 1, nil
}

func (l *loop) renew(ctx context.Context) error {
	c := l.c
	now := c.clk.Now()
	// A renewal must not land after our claim ran out (the next write is
	// then an acquisition, under a new epoch), so it gets no more time than
	// the claim has left.
	left := l.expiry.Sub(now)
	if left <= 0 {
		l.stopHolding(now, "claim expired before it could be renewed")
		return nil
	}
	next := l.lease.DeepCopy()
	next.Spec.RenewTime = &metav1.MicroTime{Time: now}
	next.Spec.LeaseDurationSeconds = ptr(int32(c.cfg.LeaseDuration / time.Second))
	cctx, cancel := l.callCtx(ctx, left)
	res, err := c.leases.Update(cctx, next, metav1.UpdateOptions{})
	cancel()
	c.in.request(opRenew, err)
	if err != nil {
		return err
	}
	l.succeeded(c.clk.Now())
	l.deniedWrite = time.Time{}
	l.expiry = now.Add(c.cfg.LeaseDuration)
	l.observe(res, c.clk.Now()) // publishes the extended claim
	return nil
}

// acquired records a successful create or acquire sent at sent.
func (l *loop) acquired(res *coordv1.Lease, sent time.Time, epoch int64) {
	c := l.c
	now := c.clk.Now()
	l.succeeded(now)
	l.deniedWrite = time.Time{}
	l.held = true
	l.epoch = epoch
	l.expiry = sent.Add(c.cfg.LeaseDuration)
	l.observe(res, now) // publishes the new claim
	c.in.transition(true)
	c.log.Info("leader: acquired the lease", "epoch", epoch, "expiry", l.expiry)
}

// stopHolding ends our claim locally at now (or at its expiry if earlier).
func (l *loop) stopHolding(now time.Time, reason string) {
	if !l.held {
		return
	}
	c := l.c
	l.held = false
	l.lastOwnExpiry = minTime(l.expiry, now)
	l.publish()
	c.in.transition(false)
	c.log.Info("leader: no longer holding the lease", "epoch", l.epoch, "reason", reason)
}

// writeFailed handles a failed create, acquire or renew. It returns the
// error if it is permanent.
func (l *loop) writeFailed(err error) error {
	switch {
	case l.permanent(err, &l.deniedWrite):
		return err
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err), apierrors.IsNotFound(err):
		// Somebody else changed the Lease: re-read it, never overwrite.
		// One immediate re-read; a second conflict in a row waits
		// RetryPeriod like any transient failure.
		l.stale = true
		l.conflicts++
		if l.conflicts > 1 {
			l.transientFailure(err)
		}
	default:
		l.transientFailure(err)
	}
	return nil
}

func (l *loop) transientFailure(err error) {
	c := l.c
	l.retryAt = c.clk.Now().Add(c.cfg.RetryPeriod)
	if !l.failing {
		l.failing = true
		c.log.Debug("leader: lease requests failing, retrying every RetryPeriod", "err", err, "retryPeriod", c.cfg.RetryPeriod)
	}
}

// permanent reports whether err ends Run. A request the server rejects as
// invalid does at once. Forbidden and Unauthorized answers do once they have
// lasted a full LeaseDuration with no success of the same kind (read, or
// write) in between: a kube-apiserver that has just restarted refuses
// requests until its authorization caches have synced, and that must not
// stop a healthy replica, while a real permission gap still ends Run within
// one lease duration, during which this replica cannot hold the lease
// anyway. since is the first refusal of the current run (per kind).
func (l *loop) permanent(err error, since *time.Time) bool {
	if !fatal(err) {
		return false
	}
	switch outcome.Of(err) {
	case outcome.Forbidden, outcome.Unauthorized:
		now := l.c.clk.Now()
		if since.IsZero() {
			*since = now
		}
		return now.Sub(*since) >= l.c.cfg.LeaseDuration
	}
	return true
}

func (l *loop) succeeded(now time.Time) {
	l.lastRead = now
	if l.failing {
		l.failing = false
		l.c.log.Debug("leader: lease requests succeed again")
	}
}

// observe records lease as the latest known state, seen at now.
func (l *loop) observe(lease *coordv1.Lease, now time.Time) {
	if l.lease == nil || keyOf(lease) != keyOf(l.lease) {
		l.observedAt = now
		if seen := l.c.cfg.Seen; l.lease == nil && seen != nil {
			if t, ok := seen(lease.Name, lease.ResourceVersion); ok && t.Before(now) {
				l.observedAt = t
			}
		}
	}
	l.maxEpoch = max(l.maxEpoch, transitionsOf(lease))
	l.lease = lease
	l.absent = false
	l.stale = false
	l.publish()
}

// publish derives the claim from the loop's state and hands it to the hub.
func (l *loop) publish() {
	c := l.c
	id := c.cfg.Identity
	var cl Claim
	switch {
	case l.held:
		cl = Claim{Holder: id, Expiry: l.expiry, Epoch: l.epoch}
	case l.lease != nil:
		cl.Epoch = transitionsOf(l.lease)
		switch h := holderOf(l.lease); h {
		case "":
		case id: // names us, but we hold no claim: not current
			cl.Holder = id
			if l.ownClaimInLease() {
				cl.Expiry = l.lastOwnExpiry
			} // else an earlier process's claim: zero Expiry, never ours
		default:
			cl.Holder = h
			cl.Expiry = l.observedAt.Add(durationOf(l.lease))
		}
	case l.absent:
	default:
		return // unknown: keep what was last published
	}
	// Our own transitions are logged where they happen; this logs the
	// others' (including the lease falling free).
	if c.hub.publish(cl) && cl.Holder != l.lastHolder && cl.Holder != id && l.lastHolder != id {
		c.log.Debug("leader: lease holder changed", "holder", cl.Holder, "epoch", cl.Epoch)
	}
	l.lastHolder = cl.Holder
}

// readWatch marks the Lease stale if the watch saw a state we do not know.
func (l *loop) readWatch() {
	ev, ok := l.c.watchEvent(l.watchSeq)
	if !ok {
		return
	}
	l.watchSeq = ev.seq
	if ev.deleted {
		if !l.absent {
			l.stale = true
		}
		return
	}
	if l.lease == nil || ev.key != keyOf(l.lease) {
		l.stale = true
	}
}

// relinquish handles Relinquish: back off, then release.
func (l *loop) relinquish(ctx context.Context, backoff time.Duration) error {
	c := l.c
	now := c.clk.Now()
	if until := now.Add(backoff); until.After(l.backoffUntil) {
		l.backoffUntil = until
	}
	return l.release(ctx, ctx, "relinquished")
}

// shutdown handles cancellation of Run's context: release under fresh
// deadlines, return the context's error.
func (l *loop) shutdown(ctx context.Context) error {
	c := l.c
	base := context.WithoutCancel(ctx)
	vctx, cancel := context.WithTimeout(base, c.cfg.CallTimeout)
	defer cancel()
	if err := l.release(base, vctx, "shutting down"); err != nil {
		c.log.Info("leader: vacating the lease on shutdown failed; the claim runs out on its own", "err", err)
	}
	c.log.Info("leader: claimer stopped", "reason", "context cancelled")
	return context.Cause(ctx)
}

// release gives our claim up on purpose: the registered Writers quiesce
// while the claim is still reported as ours (bounded by ctx and by the
// claim's expiry); then we stop holding; then we vacate with vctx — unless
// a Writer reports a write that ended without an answer, in which case the
// Lease keeps naming us and the claim runs out, so that a successor waits a
// full lease duration.
func (l *loop) release(ctx, vctx context.Context, reason string) error {
	c := l.c
	answered := true
	if l.epoch != 0 {
		limit := c.cfg.CallTimeout // a claim already ended: its writes were cancelled
		if l.held {
			limit = max(l.expiry.Sub(c.clk.Now()), 0)
		}
		qctx, cancel := context.WithTimeout(ctx, limit)
		answered = c.quiesceWriters(qctx, l.epoch)
		cancel()
	}
	l.stopHolding(c.clk.Now(), reason)
	if !answered {
		if l.ownClaimInLease() {
			c.log.Info("leader: not vacating the lease: a write made under our claim ended without an answer from the API server and could still land; the claim runs out on its own",
				"epoch", l.epoch, "expiry", l.lastOwnExpiry)
		}
		return nil
	}
	return l.vacate(vctx)
}

// vacate clears spec.holderIdentity if the Lease names us. A conflict means
// the Lease changed: it is re-read and vacated only if it still names us.
func (l *loop) vacate(ctx context.Context) error {
	c := l.c
	for range 2 {
		if !l.ownClaimInLease() {
			return nil // not ours (any more), or an earlier process's claim
		}
		next := l.lease.DeepCopy()
		next.Spec.HolderIdentity = nil
		cctx, cancel := l.callCtx(ctx, 0)
		res, err := c.leases.Update(cctx, next, metav1.UpdateOptions{})
		cancel()
		c.in.request(opVacate, err)
		if err == nil {
			l.observe(res, c.clk.Now())
			c.log.Info("leader: vacated the lease", "epoch", l.epoch)
			return nil
		}
		if !apierrors.IsConflict(err) {
			return err
		}
		if err := l.get(ctx); err != nil {
			return err
		}
	}
	return nil
}

func holderOf(l *coordv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func transitionsOf(l *coordv1.Lease) int64 {
	if l == nil || l.Spec.LeaseTransitions == nil {
		return 0
	}
	return int64(*l.Spec.LeaseTransitions)
}

// durationOf returns the Lease's leaseDurationSeconds; a missing or
// non-positive value counts as zero (the claim runs out when observed).
func durationOf(l *coordv1.Lease) time.Duration {
	if l == nil || l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds <= 0 {
		return 0
	}
	return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
}

// leaseKey is what makes two observations of the Lease the same.
type leaseKey struct {
	resourceVersion string
	holder          string
	renew, acquire  int64
	transitions     int64
	duration        time.Duration
}

func keyOf(l *coordv1.Lease) leaseKey {
	k := leaseKey{
		resourceVersion: l.ResourceVersion,
		holder:          holderOf(l),
		transitions:     transitionsOf(l),
		duration:        durationOf(l),
	}
	if l.Spec.RenewTime != nil {
		k.renew = l.Spec.RenewTime.UnixNano()
	}
	if l.Spec.AcquireTime != nil {
		k.acquire = l.Spec.AcquireTime.UnixNano()
	}
	return k
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func ptr[T any](v T) *T { return &v }
