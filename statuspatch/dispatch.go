package statuspatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"k8s.io/utils/clock"

	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// Lifecycle errors of the reconciler and the dispatcher.
var (
	// ErrNotLeader is returned by reconciles attempted while the claim is
	// not current for our identity.
	ErrNotLeader = errors.New("statuspatch: not leader")
	// ErrNotStarted is returned (wrapped) by Healthy before Run was called.
	ErrNotStarted = errors.New("statuspatch: not started")
	// ErrStopped is returned (wrapped, with the reason) by Healthy after Run
	// returned.
	ErrStopped = errors.New("statuspatch: stopped")
	// ErrAlreadyStarted is returned by a second call of Run.
	ErrAlreadyStarted = errors.New("statuspatch: Run already called")
)

// DropReason says why the dispatcher dequeued a patch and did not apply it:
// the values of the reason attribute of quietpatch.dispatch.dropped.
type DropReason string

// Drop reasons of the dispatcher.
const (
	// DropNotLeader: at dispatch time the claim was not current for our
	// identity (another holder, our claim ran out on the local clock, or
	// it ended while the patch waited).
	DropNotLeader DropReason = "not_leader"
	// DropStaleEpoch: the patch was computed under another epoch than the
	// current claim's: a new leadership recomputes it from fresh state.
	DropStaleEpoch DropReason = "stale_epoch"
	// DropClaimEnding: less than DispatcherConfig.ClaimMargin of our claim
	// was left, too little for the call to be answered before it ends.
	DropClaimEnding DropReason = "claim_ending"
	// DropReleased: this replica was giving its claim up on purpose
	// (Relinquish, shutdown): no new call starts.
	DropReleased DropReason = "released"
	// DropShutdown: the dispatcher was stopped with the patch still
	// queued.
	DropShutdown DropReason = "shutdown"
)

// DropReasons returns every DropReason, in a fixed order.
func DropReasons() []DropReason {
	return []DropReason{DropNotLeader, DropStaleEpoch, DropClaimEnding, DropReleased, DropShutdown}
}

// Defaults of [DispatcherConfig].
const (
	// DefaultPatchTimeout is the default DispatcherConfig.PatchTimeout.
	DefaultPatchTimeout = 5 * time.Second
	// DefaultClaimMargin is the least DispatcherConfig.ClaimMargin
	// defaults to.
	DefaultClaimMargin = 250 * time.Millisecond
	// DefaultMaxInFlight is the default DispatcherConfig.MaxInFlight.
	DefaultMaxInFlight = 64
)

// maxWorkers bounds DispatcherConfig.Workers: far above what an API server
// absorbs (its throughput stops growing at about 16 in flight), low enough
// that a typo cannot start millions of goroutines.
const maxWorkers = 1024

// DispatcherConfig configures a [Dispatcher]. Queue, Patcher and Leader are
// required; every other field has a default.
type DispatcherConfig[P any] struct {
	// Queue the dispatcher drains. Required, built with QueueConfig.Key
	// set to [PatchKey], so that two patches of one object are never in
	// flight at once.
	Queue *PatchQueue[Patch[P]]
	// Patcher applies patches. Required.
	Patcher Patcher[P]
	// Leader tells whether we hold the claim, and under which epoch.
	// Required, and its Identity must not be empty. If it has an
	// AddWriter(leader.Writer) func() method, as *leader.Claimer does, the
	// dispatcher registers itself, so that the claimer quiesces it before
	// giving the lease up (see [Dispatcher.Quiesce]).
	Leader leader.Observer
	// PatchTimeout bounds every patch call. The deadline of a call is
	// min(PatchTimeout, time left on our claim). Default
	// [DefaultPatchTimeout]; must not be negative.
	PatchTimeout time.Duration
	// ClaimMargin: no call starts with less than ClaimMargin of our claim
	// left; such a patch is dropped (reason claim_ending). A call started
	// closer to the claim's end could still be in flight when the claim
	// ends. Default: twice the Peak-EWMA of the patch latency observed so
	// far, at least [DefaultClaimMargin] and at most PatchTimeout/2. Must
	// not be negative; with a leader.Claimer it matters only when
	// renewals fail, as a healthy holder keeps at least RenewGrace of its
	// claim.
	ClaimMargin time.Duration
	// Workers fixes the number of patch calls in flight at most, between
	// 1 and 1024. Zero (the default) makes it adaptive: the dispatcher
	// moves its in-flight limit between 1 and MaxInFlight from the
	// latency it observes (see [Dispatcher]).
	Workers int
	// MaxInFlight bounds the adaptive in-flight limit. Default
	// [DefaultMaxInFlight]; at most 1024. Ignored when Workers is set.
	MaxInFlight int
	// Clock reads the time for leadership checks, deadlines and durations.
	// Default the real clock. Deadlines themselves are context deadlines:
	// the duration computed from Clock is handed to context.WithTimeout.
	Clock clock.PassiveClock
	// Logger receives debug logs per dropped or failed patch, at most one
	// warning per minute per failure outcome (forbidden, unauthorized,
	// invalid, timeout, error), and an info record when Run stops. Nil
	// discards.
	Logger *slog.Logger
	// Meter creates the dispatcher's instruments (see the package
	// documentation); nil means none.
	Meter metric.Meter
	// Name is the value of the pipeline attribute on the dispatcher's
	// instruments and in its logs; typically the queue's QueueConfig.Name.
	// Default [DefaultQueueName].
	Name string
}

// DispatcherStats are a dispatcher's counters since construction.
type DispatcherStats struct {
	// Patches counts patch calls by outcome.
	Patches map[outcome.Outcome]int64
	// Dropped counts patches dequeued and not applied, by reason.
	Dropped map[DropReason]int64
	// InFlight is the number of patch calls in progress.
	InFlight int
	// Unanswered counts patch calls that ended without an answer from the
	// API server (outcome.Answered false): timeouts, cancels, broken
	// connections, 5xx. Such a write may still land.
	Unanswered int64
	// Latency is the Peak-EWMA of the patch call latency.
	Latency time.Duration
	// Limit is the number of calls allowed in flight now: Workers when
	// fixed, the adaptive limit otherwise.
	Limit int
	// DrainRate is what the dispatcher can apply at its limit and latency,
	// Limit / Latency, in patches per second (0 before the first call).
	// During the adaptive limit's probe round (one call, once a window) it
	// uses the limit the probe restores.
	DrainRate float64
	// Backoff is how long no call may start yet, because the API server
	// answered a call with 429 Too Many Requests and Retry-After.
	Backoff time.Duration
	// RetryAfters counts the Retry-After windows honoured.
	RetryAfters int64
}

// Dispatcher drains a [PatchQueue] and applies each patch with a [Patcher],
// whether or not this replica is the leader: a replica that is not the
// leader keeps draining so that nothing it queued earlier lingers, but drops
// (and counts) every patch instead of applying it.
//
// For each dequeued patch, at dispatch time, the dispatcher reads the claim
// again. It drops the patch when the claim is not current for our identity,
// expiry included (reason not_leader); when the patch was computed under
// another epoch (stale_epoch); when less than ClaimMargin of the claim is
// left (claim_ending); or while the claim is being given up on purpose
// (released). Otherwise it applies the patch with a deadline of
// min(PatchTimeout, time left on the claim). The outcome is classified
// ([outcome.Of]), timed and counted. A failed patch is never retried: the
// next reconcile pass recomputes the status from the fresh object and
// queues a new patch if one is still needed.
//
// Calls are scoped to the claim. When the claim ends involuntarily — lost
// to another holder, run out on the local clock, replaced by a new epoch —
// the calls in flight under it are cancelled at once, not left to their
// deadline. When this replica gives the claim up on purpose, the claimer
// calls [Dispatcher.Quiesce] first: no new call starts, queued patches are
// dropped as they come (released), and the calls in flight run until the
// API server answers them; the claimer vacates the Lease only if every call
// made under the claim got an answer.
//
// What this does and does not guarantee. Cancelling a call does not stop a
// write the API server has already begun: a PATCH cancelled by the client,
// or timed out, may still be committed afterwards. So after an involuntary
// end of the claim a write of ours can still land after a successor took
// over. Every patch carries a metadata.resourceVersion precondition
// ([MergePatch]), so such a late write fails with a conflict whenever the
// object changed since we read it — in particular once the successor has
// written its status. After a voluntary end (Relinquish, shutdown) with
// every call answered, no write of ours lands after the vacate; with a call
// unanswered the Lease is not vacated and a successor acquires only after
// a full lease duration, so a late write must outlast that.
//
// Concurrency. Patches are applied concurrently, the queue delivering a key
// to one call at a time, so two patches of one object never race. With
// DispatcherConfig.Workers set, at most Workers calls are in flight. By
// default the in-flight limit adapts, between 1 and MaxInFlight, to what
// the API server absorbs, the way a load balancer reads a backend: once per
// round (max(100 ms, latency)) it compares the Peak-EWMA of the rounds'
// mean patch latency (quietpatch.dispatch.latency.peak_ewma) with the
// lowest round mean of the last 10 to 20 seconds. The latency holds while the
// calls it says are waiting at the server, limit × (1 − best/estimate), are
// fewer than 3, or the estimate is within 1.5 × the best: then, if the
// limit was in use, it grows — doubling per round until the first sign of
// congestion (slow start), then by one per round (additive increase). The
// latency rises when more than 6 calls wait and the estimate is above
// 2 × the best: then the limit shrinks by 10 % (multiplicative decrease).
// A call throttled (429) or timed out halves it, at most once per round.
// Once a window the limit drops to 1 for a round to measure the base
// latency afresh.
// A 429 carrying Retry-After holds every call back until then (counted in
// Stats().RetryAfters). client-go retries a 429 by itself unless the
// request says not to: [NewStatusPatcherForConfig] builds a patcher that
// leaves the waiting to the dispatcher, so that no call of any worker goes
// out inside the window. A client-side rate limiter (rest.Config.QPS) caps
// the throughput whatever the limit: turn it off for the status client —
// the API server's Priority and Fairness protects the server, the limit
// protects latency.
//
// Stopping: when the ctx given to Run is cancelled, Run stops taking patches,
// lets the calls in flight run to the server's answer (their deadline is at
// most PatchTimeout), drops what is still queued (reason shutdown: the next
// leader recomputes it), and returns. When the queue is closed instead, the
// dispatcher drains it — applying what it may, dropping the rest — and Run
// returns once it is empty.
//
// A Dispatcher is safe for concurrent use; Run may be called once.
type Dispatcher[P any] struct {
	queue   *PatchQueue[Patch[P]]
	patcher Patcher[P]
	leader  leader.Observer
	id      string
	timeout time.Duration
	margin  time.Duration // 0: the default, from latency
	workers int           // goroutines: Workers, or MaxInFlight when adaptive
	lim     *limiter
	clock   clock.PassiveClock
	log     *slog.Logger
	inst    *dispatchInstruments
	fence   fence

	started  atomic.Bool
	mu       sync.Mutex
	running  bool
	stopErr  error          // why Run returned
	callFrom []atomic.Int64 // per worker: unix nanos when the call in progress began, 0 if none

	patches    [numOutcomes]atomic.Int64
	dropped    [numDropReasons]atomic.Int64
	inFlight   atomic.Int64
	unanswered atomic.Int64

	lastWarn [numOutcomes]atomic.Int64 // unix nanos of the last warning per outcome
}

var outcomeIndex = func() map[outcome.Outcome]int {
	m := map[outcome.Outcome]int{}
	for i, o := range outcome.All() {
		m[o] = i
	}
	return m
}()

const numDropReasons = 5

func dropIndex(r DropReason) int {
	for i, x := range DropReasons() {
		if x == r {
			return i
		}
	}
	return 0
}

// NewDispatcher validates cfg and returns a dispatcher; nothing runs until
// Run. An invalid cfg yields a [*ConfigError] naming the field.
func NewDispatcher[P any](cfg DispatcherConfig[P]) (*Dispatcher[P], error) {
	const s = "DispatcherConfig"
	switch {
	case cfg.Queue == nil:
		return nil, configErr(s, "Queue", "must be set")
	case cfg.Queue.key == nil:
		return nil, configErr(s, "Queue", "must be built with QueueConfig.Key set to statuspatch.PatchKey: without a key two patches of one object can be in flight at once, out of order")
	case cfg.Patcher == nil:
		return nil, configErr(s, "Patcher", "must be set")
	case cfg.Leader == nil:
		return nil, configErr(s, "Leader", "must be set")
	case cfg.Leader.Identity() == "":
		return nil, configErr(s, "Leader", "must have a non-empty Identity()")
	case cfg.PatchTimeout < 0:
		return nil, configErr(s, "PatchTimeout", "must be >= 0 (0 means %s), got %s", DefaultPatchTimeout, cfg.PatchTimeout)
	case cfg.ClaimMargin < 0:
		return nil, configErr(s, "ClaimMargin", "must be >= 0 (0 means the default), got %s", cfg.ClaimMargin)
	case cfg.Workers < 0 || cfg.Workers > maxWorkers:
		return nil, configErr(s, "Workers", "must be between 0 (adaptive) and %d, got %d", maxWorkers, cfg.Workers)
	case cfg.MaxInFlight < 0 || cfg.MaxInFlight > maxWorkers:
		return nil, configErr(s, "MaxInFlight", "must be between 0 (meaning %d) and %d, got %d", DefaultMaxInFlight, maxWorkers, cfg.MaxInFlight)
	}
	if cfg.PatchTimeout == 0 {
		cfg.PatchTimeout = DefaultPatchTimeout
	}
	adaptive := cfg.Workers == 0
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if adaptive {
		cfg.Workers = cfg.MaxInFlight
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Name == "" {
		cfg.Name = DefaultQueueName
	}
	lim, err := newLimiter(cfg.Clock, adaptive, cfg.Workers)
	if err != nil {
		return nil, err
	}
	d := &Dispatcher[P]{
		queue:    cfg.Queue,
		patcher:  cfg.Patcher,
		leader:   cfg.Leader,
		id:       cfg.Leader.Identity(),
		timeout:  cfg.PatchTimeout,
		margin:   cfg.ClaimMargin,
		workers:  cfg.Workers,
		clock:    cfg.Clock,
		log:      cfg.Logger.With(slog.String(pipelineAttr, cfg.Name)),
		lim:      lim,
		stopErr:  fmt.Errorf("%w: Run not called", ErrNotStarted),
		callFrom: make([]atomic.Int64, cfg.Workers),
	}
	d.fence.init()
	if d.inst, err = newDispatchInstruments(cfg.Meter, cfg.Name, d); err != nil {
		return nil, configErr(s, "Meter", "%v", err)
	}
	if r, ok := cfg.Leader.(interface {
		AddWriter(leader.Writer) (remove func())
	}); ok {
		r.AddWriter(d)
	}
	return d, nil
}

// claimMargin returns the margin in force.
func (d *Dispatcher[P]) claimMargin() time.Duration {
	if d.margin > 0 {
		return d.margin
	}
	// Twice the latency estimate, at least DefaultClaimMargin, at most half
	// of PatchTimeout: a slow server must not stop every call (the estimate
	// only moves when calls are made).
	est := time.Duration(2 * d.lim.stateAt(d.clock.Now()).latency * float64(time.Second))
	return min(max(DefaultClaimMargin, est), d.timeout/2)
}

// Run drains the queue until ctx is cancelled or the queue is closed and
// empty, and returns nil then. It returns [ErrAlreadyStarted] if called
// twice. See [Dispatcher] for what happens to calls in flight and queued
// patches on stop.
func (d *Dispatcher[P]) Run(ctx context.Context) error {
	if !d.started.CompareAndSwap(false, true) {
		return ErrAlreadyStarted
	}
	d.mu.Lock()
	d.running = true
	d.mu.Unlock()

	// The fence follows the claim for as long as any call may run.
	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	watchDone := make(chan struct{})
	changes, unsubscribe := d.leader.Subscribe()
	go func() {
		defer close(watchDone)
		d.watchClaim(watchCtx, changes)
	}()

	var wg sync.WaitGroup
	for w := range d.workers {
		wg.Go(func() { d.work(ctx, w) })
	}
	workersDone := make(chan struct{})
	go func() { wg.Wait(); close(workersDone) }()

	reason := "queue closed and drained"
	select {
	case <-workersDone:
	case <-ctx.Done():
		// Workers take no more patches; calls in flight run to their
		// answer, bounded by their deadline. A Patcher that ignores its
		// context is not waited for beyond twice PatchTimeout.
		t := time.NewTimer(2 * d.timeout)
		select {
		case <-workersDone:
		case <-t.C:
			d.log.LogAttrs(context.Background(), slog.LevelError,
				"statuspatch: dispatcher stopping without a patch call that did not return within twice PatchTimeout: the Patcher ignores its context",
				slog.Duration("patch_timeout", d.timeout))
		}
		t.Stop()
	}
	if ctx.Err() != nil {
		reason = "context cancelled"
		d.dropQueued()
	}
	stopWatch()
	unsubscribe()
	<-watchDone

	d.mu.Lock()
	d.running = false
	d.stopErr = fmt.Errorf("%w: dispatcher stopped: %s", ErrStopped, reason)
	d.mu.Unlock()
	d.log.LogAttrs(context.Background(), slog.LevelInfo, "statuspatch: dispatcher stopped", slog.String("reason", reason))
	return nil
}

// watchClaim cancels the calls of an epoch as soon as its claim ends.
func (d *Dispatcher[P]) watchClaim(ctx context.Context, changes <-chan leader.Claim) {
	for {
		select {
		case <-ctx.Done():
			return
		case c, ok := <-changes:
			if !ok {
				return
			}
			d.fence.observe(c, c.IsCurrentFor(d.id, d.clock.Now()))
		}
	}
}

// work is one worker's loop: a permit from the limiter, then a patch.
func (d *Dispatcher[P]) work(ctx context.Context, w int) {
	for {
		if err := d.lim.acquire(ctx); err != nil {
			return
		}
		it, err := d.queue.Receive(ctx)
		if err != nil {
			// ErrClosed: closed and drained; otherwise ctx is done.
			d.lim.release()
			return
		}
		if d.inst != nil {
			d.inst.recordWait(context.Background(), d.clock.Since(it.Enqueued))
		}
		if ctx.Err() != nil {
			// Receive hands out ready items even when ctx is done.
			d.drop(context.Background(), it.Value, DropShutdown, leader.Claim{})
			d.queue.Done(it)
			d.lim.release()
			return
		}
		d.dispatch(w, it.Value)
		d.queue.Done(it)
	}
}

// dropQueued removes what is left in the queue after the workers stopped on
// a cancelled context, counting each patch as dropped for shutdown. It only
// takes patches that are ready at once; it never waits.
func (d *Dispatcher[P]) dropQueued() {
	for {
		it, ok, _ := d.queue.TryReceive()
		if !ok {
			return
		}
		d.drop(context.Background(), it.Value, DropShutdown, leader.Claim{})
		d.queue.Done(it)
	}
}

// dispatch applies or drops one patch.
func (d *Dispatcher[P]) dispatch(w int, p Patch[P]) {
	ctx := context.Background()
	now := d.clock.Now()
	claim := d.leader.Current()
	if !claim.IsCurrentFor(d.id, now) {
		d.dropReleasing(ctx, p, DropNotLeader, claim)
		return
	}
	if p.Epoch != claim.Epoch {
		d.dropReleasing(ctx, p, DropStaleEpoch, claim)
		return
	}
	left := claim.Remaining(now)
	if left < d.claimMargin() {
		d.dropReleasing(ctx, p, DropClaimEnding, claim)
		return
	}
	ec, reason := d.fence.enter(claim.Epoch)
	if ec == nil {
		d.dropReleasing(ctx, p, reason, claim)
		return
	}
	timeout := min(d.timeout, left)
	callCtx, cancel := context.WithTimeout(ec.ctx, timeout)
	d.inFlight.Add(1)
	d.lim.callStarted()
	d.callFrom[w].Store(now.UnixNano())
	err := d.patcher.Patch(callCtx, p.Payload)
	d.callFrom[w].Store(0)
	elapsed := d.clock.Since(now)
	d.inFlight.Add(-1)

	o := outcome.Of(err)
	if err != nil && callCtx.Err() != nil && (o == outcome.Error || o == outcome.Canceled || o == outcome.Timeout) {
		// The call gave up because its context ended, whatever error the
		// patcher wrapped that in: the claim ended (cancelled) or the
		// deadline passed.
		if ec.ctx.Err() != nil {
			o = outcome.Canceled
		} else {
			o = outcome.Timeout
		}
	}
	answered := outcome.Answered(err)
	cancel()
	d.fence.exit(ec, answered)
	if !answered {
		d.unanswered.Add(1)
	}
	d.lim.done(elapsed, err)
	d.patches[outcomeIndex[o]].Add(1)
	d.inst.recordCall(ctx, o, elapsed)
	if err == nil {
		return
	}
	level := slog.LevelDebug
	switch o {
	case outcome.Forbidden, outcome.Unauthorized, outcome.Invalid, outcome.Timeout, outcome.Error:
		last := &d.lastWarn[outcomeIndex[o]]
		prev := last.Load()
		if now.UnixNano()-prev >= int64(time.Minute) && last.CompareAndSwap(prev, now.UnixNano()) {
			level = slog.LevelWarn
		}
	}
	if d.log.Enabled(ctx, level) {
		d.log.LogAttrs(ctx, level, "statuspatch: patch failed; not retried, the next reconcile recomputes it",
			slog.String("key", p.Key), slog.String("outcome", string(o)),
			slog.Duration("elapsed", elapsed), slog.Duration("deadline", timeout), slog.Any("error", err))
	}
}

// dropReleasing drops a patch for which no call is made and gives the
// worker's permit back.
func (d *Dispatcher[P]) dropReleasing(ctx context.Context, p Patch[P], reason DropReason, claim leader.Claim) {
	d.drop(ctx, p, reason, claim)
	d.lim.release()
}

// drop counts and logs a patch that is not applied.
func (d *Dispatcher[P]) drop(ctx context.Context, p Patch[P], reason DropReason, claim leader.Claim) {
	d.dropped[dropIndex(reason)].Add(1)
	if d.log.Enabled(ctx, slog.LevelDebug) {
		d.log.LogAttrs(ctx, slog.LevelDebug, "statuspatch: patch dropped",
			slog.String("key", p.Key), slog.String("reason", string(reason)),
			slog.Int64("patch_epoch", p.Epoch), slog.Int64("claim_epoch", claim.Epoch),
			slog.String("claim_holder", claim.Holder))
	}
}

// Quiesce implements [leader.Writer]; a [leader.Claimer] calls it before it
// gives its claim of epoch up on purpose. From then on no patch call starts
// under epoch (queued patches are dropped, reason released); the calls in
// flight are not cancelled. Quiesce waits until none is in flight, or ctx
// ends, and reports whether every call made under epoch ended with an answer
// from the API server ([outcome.Answered]) — false if one did not, or if
// ctx ended first.
func (d *Dispatcher[P]) Quiesce(ctx context.Context, epoch int64) bool {
	return d.fence.quiesce(ctx, epoch)
}

// Stats returns the dispatcher's counters.
func (d *Dispatcher[P]) Stats() DispatcherStats {
	lim := d.lim.stateAt(d.clock.Now())
	s := DispatcherStats{
		Patches:     make(map[outcome.Outcome]int64, numOutcomes),
		Dropped:     make(map[DropReason]int64, numDropReasons),
		InFlight:    int(d.inFlight.Load()),
		Unanswered:  d.unanswered.Load(),
		Latency:     time.Duration(lim.latency * float64(time.Second)),
		Limit:       lim.limit,
		DrainRate:   lim.drainRate,
		Backoff:     lim.backoff,
		RetryAfters: lim.retryAfters,
	}
	for i, o := range outcome.All() {
		if n := d.patches[i].Load(); n > 0 {
			s.Patches[o] = n
		}
	}
	for i, r := range DropReasons() {
		if n := d.dropped[i].Load(); n > 0 {
			s.Dropped[r] = n
		}
	}
	return s
}

// Healthy reports whether the dispatcher is working: nil while Run is
// draining the queue; an error wrapping [ErrNotStarted] before Run was
// called, or [ErrStopped] after it returned; an error when a patch call
// has been running for more than twice PatchTimeout (a Patcher that ignores
// its context and blocks the worker). Wire it to a readiness or liveness
// probe.
func (d *Dispatcher[P]) Healthy() error {
	d.mu.Lock()
	running, stopErr := d.running, d.stopErr
	d.mu.Unlock()
	if !running {
		return stopErr
	}
	now := d.clock.Now().UnixNano()
	for w := range d.callFrom {
		if from := d.callFrom[w].Load(); from != 0 && time.Duration(now-from) > 2*d.timeout {
			return fmt.Errorf("statuspatch: dispatcher worker %d stuck in a patch call for %s (PatchTimeout %s): the Patcher does not return when its context ends",
				w, time.Duration(now-from), d.timeout)
		}
	}
	return nil
}

// fence scopes patch calls to the claim they were started under.
//
// Each epoch under which calls were made has a context, the parent of those
// calls' contexts. When the claim of that epoch ends involuntarily (observe)
// the context is cancelled, and with it every call in flight under it. A
// voluntary end (quiesce) stops new calls and waits for the ones in flight
// without cancelling them. Epochs only increase: a call under an epoch older
// than the newest one seen is refused.
type fence struct {
	mu       sync.Mutex
	cur      *epochCalls   // the newest epoch seen; nil before any
	inFlight int           // calls in flight, all epochs
	changed  chan struct{} // closed and replaced when inFlight drops, if waiters
	waiters  int
}

type epochCalls struct {
	epoch      int64
	ctx        context.Context
	cancel     context.CancelFunc
	ended      bool // the claim ended involuntarily: ctx is cancelled
	quiesced   bool // given up on purpose: no new call
	unanswered bool // a call under this epoch ended without an answer
}

func (f *fence) init() { f.changed = make(chan struct{}) }

// advanceLocked makes epoch the newest, ending the older one.
func (f *fence) advanceLocked(epoch int64) {
	if f.cur != nil {
		f.cur.ended = true
		f.cur.cancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cur = &epochCalls{epoch: epoch, ctx: ctx, cancel: cancel}
}

// enter admits a call under epoch, or returns the reason it may not start.
func (f *fence) enter(epoch int64) (*epochCalls, DropReason) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.cur == nil || epoch > f.cur.epoch:
		f.advanceLocked(epoch)
	case epoch < f.cur.epoch:
		return nil, DropStaleEpoch
	}
	switch {
	case f.cur.quiesced:
		return nil, DropReleased
	case f.cur.ended:
		return nil, DropNotLeader
	}
	f.inFlight++
	return f.cur, ""
}

// exit ends a call admitted by enter.
func (f *fence) exit(ec *epochCalls, answered bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inFlight--
	if !answered {
		ec.unanswered = true
	}
	if f.waiters > 0 {
		close(f.changed)
		f.changed = make(chan struct{})
	}
}

// observe ends the newest epoch's calls when c says its claim is over:
// ours is false (not current for us), or c is of another epoch.
func (f *fence) observe(c leader.Claim, ours bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cur == nil || f.cur.ended {
		return
	}
	if !ours || c.Epoch != f.cur.epoch {
		f.cur.ended = true
		f.cur.cancel()
	}
}

// quiesce stops new calls under epoch and waits for every call in flight.
func (f *fence) quiesce(ctx context.Context, epoch int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.cur == nil || epoch > f.cur.epoch:
		// No call was made under epoch; none may start.
		f.advanceLocked(epoch)
	case epoch < f.cur.epoch:
		// Calls were made under a newer epoch than the one given up:
		// nothing can be said of epoch's own.
		return false
	}
	f.cur.quiesced = true
	for f.inFlight > 0 {
		ch := f.changed
		f.waiters++
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		f.mu.Lock()
		f.waiters--
		if ctx.Err() != nil && f.inFlight > 0 {
			return false
		}
	}
	return !f.cur.unanswered
}
