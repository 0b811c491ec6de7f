package statuspatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"

	"github.com/quietpatch/quietpatch/leader"
)

// Sentinel errors of the reconciler and the dispatcher.
var (
	// ErrNotLeader is returned by reconciles attempted while the claim is
	// not current for our identity.
	ErrNotLeader = errors.New("statuspatch: not leader")
	// ErrNotRunning is returned (wrapped) by Healthy before Run started and
	// after it returned.
	ErrNotRunning = errors.New("statuspatch: not running")
	// ErrAlreadyRunning is returned by Run when it was already called.
	ErrAlreadyRunning = errors.New("statuspatch: Run already called")
)

// Outcome classifies the result of one patch call; see [Classify].
type Outcome string

// Patch call outcomes, the values of the OutcomeAttrKey attribute.
const (
	// OutcomeOK: the patch was applied.
	OutcomeOK Outcome = "ok"
	// OutcomeConflict: 409, the object changed since the patch was computed
	// (resourceVersion precondition failed).
	OutcomeConflict Outcome = "conflict"
	// OutcomeNotFound: 404, the object is gone.
	OutcomeNotFound Outcome = "not_found"
	// OutcomeForbidden: 403, RBAC does not allow patching the status.
	OutcomeForbidden Outcome = "forbidden"
	// OutcomeTimeout: the call's deadline passed (PatchTimeout or the end of
	// the claim), or the server answered with a timeout.
	OutcomeTimeout Outcome = "timeout"
	// OutcomeThrottled: 429, the server's priority and fairness (or another
	// limit) refused the request.
	OutcomeThrottled Outcome = "throttled"
	// OutcomeCanceled: the dispatcher was stopped during the call.
	OutcomeCanceled Outcome = "canceled"
	// OutcomeOther: any other error.
	OutcomeOther Outcome = "other"
)

func outcomes() []Outcome {
	return []Outcome{OutcomeOK, OutcomeConflict, OutcomeNotFound, OutcomeForbidden,
		OutcomeTimeout, OutcomeThrottled, OutcomeCanceled, OutcomeOther}
}

// Classify maps the error of a patch call to an [Outcome] using the API
// status in the error (k8s.io/apimachinery/pkg/api/errors) and context
// errors. A nil error is OutcomeOK.
func Classify(err error) Outcome {
	var netErr net.Error
	switch {
	case err == nil:
		return OutcomeOK
	case apierrors.IsConflict(err):
		return OutcomeConflict
	case apierrors.IsNotFound(err):
		return OutcomeNotFound
	case apierrors.IsForbidden(err):
		return OutcomeForbidden
	case apierrors.IsTooManyRequests(err):
		return OutcomeThrottled
	case errors.Is(err, context.DeadlineExceeded), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err),
		errors.As(err, &netErr) && netErr.Timeout():
		return OutcomeTimeout
	case errors.Is(err, context.Canceled):
		return OutcomeCanceled
	}
	return OutcomeOther
}

// DropReason says why the dispatcher dequeued a patch and did not apply it.
type DropReason string

// Drop reasons, the values of the DropReasonAttrKey attribute on DispatchDroppedMetric.
const (
	// DropNotLeader: at dispatch time the claim was not current for our
	// identity (another holder, or our claim expired).
	DropNotLeader DropReason = "not_leader"
	// DropStaleEpoch: the patch was produced under another leadership epoch
	// than the current claim's; it was computed from a view that a new
	// leadership recomputes anyway.
	DropStaleEpoch DropReason = "stale_epoch"
	// DropShutdown: the dispatcher was stopped (ctx cancelled) with the
	// patch still queued.
	DropShutdown DropReason = "shutdown"
)

func dropReasons() []DropReason {
	return []DropReason{DropNotLeader, DropStaleEpoch, DropShutdown}
}

// maxWorkers bounds DispatcherConfig.Workers: far above what an API server
// absorbs (its throughput stops growing at about 16 in flight), low enough
// that a typo cannot start millions of goroutines.
const maxWorkers = 1024

// DispatcherConfig configures a [Dispatcher]. Queue, Patcher and Leader are
// required; every other field has a default.
type DispatcherConfig[P any] struct {
	// Queue the dispatcher drains. Required. Its QueueConfig.Key should be
	// [PatchKey] so that Workers > 1 never patch one object concurrently.
	Queue *PatchQueue[Patch[P]]
	// Patcher applies patches. Required.
	Patcher Patcher[P]
	// Leader tells whether we hold the claim, and under which epoch.
	// Required, and its Identity must not be empty.
	Leader leader.Observer
	// PatchTimeout bounds every patch call. The deadline of a call is
	// min(PatchTimeout, time left on our claim), so no write is sent that
	// could land after the claim ran out. Default 5s; must not be negative.
	PatchTimeout time.Duration
	// Workers is the number of patches in flight at most. Default 1; at
	// most 1024. Throughput does not grow linearly: measured on 2
	// cores, 1 in flight ≈ 144 patches/s, 4 ≈ 265/s, 16+ ≈ 300/s (the
	// server's ceiling). See [SuggestCapacity].
	Workers int
	// Clock reads the time for leadership checks, deadlines and durations.
	// Default the real clock. Deadlines themselves are context deadlines:
	// the duration computed from Clock is handed to context.WithTimeout.
	Clock clock.PassiveClock
	// Logger receives debug logs per dropped or failed patch and at most one
	// warning per minute per failure outcome (forbidden, timeout, other).
	// Nil discards.
	Logger *slog.Logger
	// Meter creates the dispatcher's instruments; nil means no-op.
	Meter metric.Meter
	// Name is the value of the "dispatcher" attribute on the dispatcher's
	// instruments and in its logs; typically the queue's QueueConfig.Name.
	// Default [DefaultQueueName].
	Name string
}

// Dispatcher drains a [PatchQueue] and applies each patch with a [Patcher],
// whether or not this replica is the leader: a replica that is not the
// leader keeps draining so that nothing it queued earlier lingers, but drops
// (and counts) every patch instead of applying it.
//
// For each dequeued patch, at dispatch time: if the claim is not current for
// our identity (expiry included) the patch is dropped with reason not_leader;
// if the patch was queued under another epoch than the current claim's it is
// dropped with reason stale_epoch. Otherwise the patch is applied with a
// deadline of min(PatchTimeout, claim.Remaining(now)) and the outcome is
// classified ([Classify]), timed and counted. A failed patch is never
// retried: the next reconcile pass recomputes the status from the fresh
// object and queues a new patch if one is still needed.
//
// Workers goroutines apply patches concurrently; the queue delivers a key to
// one worker at a time, so two patches of one object never race.
//
// Stopping: when the ctx given to Run is cancelled, Run stops promptly. Calls
// in progress see their context cancelled (outcome canceled); patches still
// waiting in the queue are removed and dropped with reason shutdown, since
// the next leader recomputes them anyway. When the queue is closed instead,
// the dispatcher drains it — applying what it may, dropping the rest — and
// Run returns once it is empty: that is the graceful path.
//
// A Dispatcher is safe for concurrent use; Run may be called once.
type Dispatcher[P any] struct {
	queue   *PatchQueue[Patch[P]]
	patcher Patcher[P]
	leader  leader.Observer
	id      string
	timeout time.Duration
	workers int
	clock   clock.PassiveClock
	log     *slog.Logger
	name    string
	inst    *dispatchInstruments

	started  atomic.Bool
	mu       sync.Mutex
	running  bool
	stopErr  error          // why Run returned
	callFrom []atomic.Int64 // per worker: unix nanos when the call in progress began, 0 if none

	lastWarn map[Outcome]*atomic.Int64 // unix nanos of the last warning per outcome
}

// NewDispatcher validates cfg and returns a dispatcher; nothing runs until
// Run.
func NewDispatcher[P any](cfg DispatcherConfig[P]) (*Dispatcher[P], error) {
	switch {
	case cfg.Queue == nil:
		return nil, errors.New("statuspatch: DispatcherConfig.Queue must be set")
	case cfg.Patcher == nil:
		return nil, errors.New("statuspatch: DispatcherConfig.Patcher must be set")
	case cfg.Leader == nil:
		return nil, errors.New("statuspatch: DispatcherConfig.Leader must be set")
	case cfg.Leader.Identity() == "":
		return nil, errors.New("statuspatch: DispatcherConfig.Leader.Identity() must not be empty")
	case cfg.PatchTimeout < 0:
		return nil, fmt.Errorf("statuspatch: DispatcherConfig.PatchTimeout must be >= 0 (0 means 5s), got %s", cfg.PatchTimeout)
	case cfg.Workers < 0 || cfg.Workers > maxWorkers:
		return nil, fmt.Errorf("statuspatch: DispatcherConfig.Workers must be between 0 (meaning 1) and %d, got %d", maxWorkers, cfg.Workers)
	}
	if cfg.PatchTimeout == 0 {
		cfg.PatchTimeout = 5 * time.Second
	}
	if cfg.Workers == 0 {
		cfg.Workers = 1
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
	inst, err := newDispatchInstruments(cfg.Meter, cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("statuspatch: DispatcherConfig.Meter: %w", err)
	}
	d := &Dispatcher[P]{
		queue:    cfg.Queue,
		patcher:  cfg.Patcher,
		leader:   cfg.Leader,
		id:       cfg.Leader.Identity(),
		timeout:  cfg.PatchTimeout,
		workers:  cfg.Workers,
		clock:    cfg.Clock,
		log:      cfg.Logger.With(slog.String("dispatcher", cfg.Name)),
		name:     cfg.Name,
		inst:     inst,
		stopErr:  fmt.Errorf("%w: Run not called", ErrNotRunning),
		callFrom: make([]atomic.Int64, cfg.Workers),
		lastWarn: make(map[Outcome]*atomic.Int64),
	}
	for _, o := range outcomes() {
		d.lastWarn[o] = new(atomic.Int64)
	}
	return d, nil
}

// Run drains the queue until ctx is cancelled or the queue is closed and
// empty, and returns nil then. It returns [ErrAlreadyRunning] if called
// twice. See [Dispatcher] for what happens to queued patches on stop.
func (d *Dispatcher[P]) Run(ctx context.Context) error {
	if !d.started.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	d.mu.Lock()
	d.running = true
	d.mu.Unlock()

	var wg sync.WaitGroup
	for w := range d.workers {
		wg.Go(func() { d.work(ctx, w) })
	}
	wg.Wait()

	reason := "queue closed and drained"
	if ctx.Err() != nil {
		reason = "context cancelled"
		d.dropQueued()
	}
	d.mu.Lock()
	d.running = false
	d.stopErr = fmt.Errorf("%w: dispatcher stopped: %s", ErrNotRunning, reason)
	d.mu.Unlock()
	d.log.LogAttrs(context.Background(), slog.LevelInfo, "statuspatch: dispatcher stopped", slog.String("reason", reason))
	return nil
}

// work is one worker's loop.
func (d *Dispatcher[P]) work(ctx context.Context, w int) {
	for {
		it, err := d.queue.Receive(ctx)
		if err != nil {
			// ErrClosed: closed and drained; otherwise ctx is done.
			return
		}
		if ctx.Err() != nil {
			// Receive hands out ready items even when ctx is done.
			d.drop(context.Background(), it.Value, DropShutdown, leader.Claim{})
			d.queue.Done(it)
			return
		}
		d.dispatch(ctx, w, it.Value)
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
func (d *Dispatcher[P]) dispatch(ctx context.Context, w int, p Patch[P]) {
	now := d.clock.Now()
	claim := d.leader.Current()
	if !claim.IsCurrentFor(d.id, now) {
		d.drop(ctx, p, DropNotLeader, claim)
		return
	}
	if p.Epoch != claim.Epoch {
		d.drop(ctx, p, DropStaleEpoch, claim)
		return
	}
	timeout := min(d.timeout, claim.Remaining(now))
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	d.inst.inFlight.Add(ctx, 1, d.inst.nameOpts...)
	d.callFrom[w].Store(now.UnixNano())
	err := d.patcher.Patch(callCtx, p.Payload)
	d.callFrom[w].Store(0)
	elapsed := d.clock.Since(now)
	d.inst.inFlight.Add(ctx, -1, d.inst.nameOpts...)

	outcome := Classify(err)
	if err != nil && callCtx.Err() != nil && (outcome == OutcomeOther || outcome == OutcomeCanceled) {
		// The call gave up because its context ended, whatever error the
		// patcher wrapped that in.
		if ctx.Err() != nil {
			outcome = OutcomeCanceled
		} else {
			outcome = OutcomeTimeout
		}
	}
	cancel()
	d.inst.duration.Record(ctx, elapsed.Seconds(), d.inst.durOpts[outcome]...)
	d.inst.patches.Add(ctx, 1, d.inst.countOpts[outcome]...)
	if err == nil {
		return
	}
	level := slog.LevelDebug
	switch outcome {
	case OutcomeForbidden, OutcomeTimeout, OutcomeOther:
		last := d.lastWarn[outcome]
		prev := last.Load()
		if now.UnixNano()-prev >= int64(time.Minute) && last.CompareAndSwap(prev, now.UnixNano()) {
			level = slog.LevelWarn
		}
	}
	if d.log.Enabled(ctx, level) {
		d.log.LogAttrs(ctx, level, "statuspatch: patch failed; not retried, the next reconcile recomputes it",
			slog.String("key", p.Key), slog.String("outcome", string(outcome)),
			slog.Duration("elapsed", elapsed), slog.Duration("deadline", timeout), slog.Any("error", err))
	}
}

// drop counts and logs a patch that is not applied.
func (d *Dispatcher[P]) drop(ctx context.Context, p Patch[P], reason DropReason, claim leader.Claim) {
	d.inst.dropped.Add(ctx, 1, d.inst.dropOpts[reason]...)
	if d.log.Enabled(ctx, slog.LevelDebug) {
		d.log.LogAttrs(ctx, slog.LevelDebug, "statuspatch: patch dropped",
			slog.String("key", p.Key), slog.String("reason", string(reason)),
			slog.Int64("patch_epoch", p.Epoch), slog.Int64("claim_epoch", claim.Epoch),
			slog.String("claim_holder", claim.Holder))
	}
}

// Healthy reports whether the dispatcher is working: nil while Run is
// draining the queue; an error wrapping [ErrNotRunning] before Run was
// called and after it returned; an error when a patch call has been running
// for more than twice PatchTimeout (a Patcher that ignores its context and
// blocks the worker). Wire it to a readiness or liveness probe.
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
