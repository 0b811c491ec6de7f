package statuspatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/metric"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/quietpatch/quietpatch/leader"
)

// Source gives the reconciler the objects to reconcile, typically an
// informer's lister behind a small adapter.
type Source[O any] interface {
	// List returns every object. The reconciler may reorder the returned
	// slice (it sorts it by key when resuming a halted pass) and does not
	// keep it after the pass; it never modifies the objects. A lister's
	// List(labels.Everything()) fits: it returns a fresh slice each call.
	List() ([]O, error)
	// Get returns the object with key, and false if there is none.
	Get(key types.NamespacedName) (obj O, found bool, err error)
}

// Patch is what the reconciler queues and the dispatcher applies: a payload
// built by StatusComputer.Patch, tagged with the object's key and the
// leadership epoch it was computed under.
type Patch[P any] struct {
	// Key is the object's key, "namespace/name" (or "name" for
	// cluster-scoped objects): the queue coalesces and serializes by it.
	Key string
	// Epoch is the epoch of the claim under which the patch was computed.
	// The dispatcher drops a patch whose epoch is not the current claim's.
	Epoch int64
	// Payload is what the Patcher sends.
	Payload P
}

// PatchKey returns p.Key. Use it as QueueConfig.Key of the queue between a
// [Reconciler] and a [Dispatcher]:
//
//	statuspatch.NewPatchQueue(statuspatch.QueueConfig[statuspatch.Patch[P]]{
//		Capacity: n, Key: statuspatch.PatchKey[P],
//	})
func PatchKey[P any](p Patch[P]) string { return p.Key }

// ReconcilerConfig configures a [Reconciler]. Source, Computer, Queue and
// Leader are required; every other field has a default.
type ReconcilerConfig[O, S, P any] struct {
	// Source lists and gets the objects. Required.
	Source Source[O]
	// Computer computes, compares and patches statuses. Required.
	Computer StatusComputer[O, S, P]
	// Queue receives the patches. Required. Its QueueConfig.Key should be
	// [PatchKey]. Size it with [SuggestCapacity].
	Queue *PatchQueue[Patch[P]]
	// Leader tells whether we hold the claim and under which epoch; the
	// reconciler works only while the claim is current for Leader.Identity().
	// Required, and its Identity must not be empty.
	Leader leader.Observer
	// Interval between full passes while leader. Default 10s; must not be
	// negative. A pass also runs at once when leadership is gained. Choose it
	// together with the queue's capacity: see [SuggestCapacity].
	Interval time.Duration
	// MaxPendingKeys bounds the set of keys queued by Enqueue and not yet
	// reconciled. When an Enqueue would exceed it, the set is cleared and one
	// full pass is scheduled instead, which covers every key. Default the
	// queue's capacity; must not be negative.
	MaxPendingKeys int
	// Clock drives the interval ticker and reads the time for leadership
	// checks and durations. Default the real clock.
	Clock clock.WithTicker
	// Logger receives one warning per halted pass, one warning per pass in
	// which some objects failed, and debug logs per object (with a cmp.Diff
	// of what changed, computed only when debug is enabled). Nil discards.
	Logger *slog.Logger
	// DiffOptions are the go-cmp options of the debug-level diff of a
	// changed status, e.g. [IgnoreConditionTransitionTime].
	DiffOptions []cmp.Option
	// Meter creates the reconciler's instruments; nil means no-op.
	Meter metric.Meter
	// Name is the value of the "reconciler" attribute on the reconciler's
	// instruments and in its logs; typically the queue's QueueConfig.Name.
	// Default [DefaultQueueName].
	Name string
}

// PassResult counts what one reconcile pass did.
type PassResult struct {
	// Objects is how many objects the source listed.
	Objects int
	// Visited is how many objects the pass handled before it ended.
	Visited int
	// Unchanged, Changed and Errors split Visited by result. Changed counts
	// the patches queued.
	Unchanged, Changed, Errors int
	// Halted reports that the pass stopped because the queue was at
	// capacity. The next pass resumes after the last object handled.
	Halted bool
	// Resumed reports that this pass started after the cursor left by an
	// earlier pass that did not complete.
	Resumed bool
}

// Reconciler turns objects into status patches while this replica is the
// leader. For each object it computes the desired status and compares it
// with the current one; an unchanged object costs nothing more. For a
// changed object it reserves a queue slot, builds the patch and sends it
// tagged with the epoch of our claim.
//
// Passes. Run makes a full pass every Interval, at once when leadership is
// gained (a claim current for our identity with an epoch other than the one
// the last pass ran under), and whenever Enqueue'd keys overflowed
// MaxPendingKeys. ReconcileAll makes one pass synchronously.
//
// Queue full. When no slot is free a pass stops at once: one warning is
// logged (capacity, position, the sizing formula), ReconcileHaltedMetric is
// incremented, and the key of the last object handled is kept as a cursor.
// A pass that finds no free slot before its first object halts there,
// without sorting or computing anything: a stalled dispatcher costs the
// reconciler no CPU.
// A pass normally visits objects in the order Source.List returns them; a
// pass that starts with a cursor sorts them by key (namespace, then name) and
// starts with the first key after the cursor, wrapping around, so that over
// successive halted passes every object gets its turn: none starves. A pass
// that visits every object clears the cursor. Passes interrupted by lost
// leadership or cancellation leave a cursor too.
//
// On demand. Enqueue records a key (for example from an informer's event
// handler) in a bounded coalescing set; Run reconciles the pending keys
// between passes. ReconcileKey reconciles one key synchronously.
//
// Errors. An object whose Desired or Patch fails is counted as an error and
// logged at debug level; the pass goes on. A pass with errors logs one
// warning with the count and the first error.
//
// Passes and single-key reconciles are serialized: the StatusComputer and
// the Source are called from one goroutine at a time. All methods are safe
// for concurrent use.
type Reconciler[O, S, P any] struct {
	src      Source[O]
	comp     StatusComputer[O, S, P]
	queue    *PatchQueue[Patch[P]]
	leader   leader.Observer
	id       string
	interval time.Duration
	clock    clock.WithTicker
	log      *slog.Logger
	diffOpts []cmp.Option
	inst     *reconcileInstruments

	// mu serializes passes and single-key reconciles, and guards cursor.
	mu        sync.Mutex
	cursor    types.NamespacedName
	hasCursor bool

	// pendingMu guards the on-demand key set.
	pendingMu  sync.Mutex
	pending    map[types.NamespacedName]struct{}
	spare      map[types.NamespacedName]struct{}
	maxPending int
	needFull   bool
	kick       chan struct{}
	started    atomic.Bool
	runningMu  sync.Mutex
	running    bool
	runStopErr error
}

// NewReconciler validates cfg and returns a reconciler; nothing runs until
// Run, ReconcileAll or ReconcileKey.
func NewReconciler[O, S, P any](cfg ReconcilerConfig[O, S, P]) (*Reconciler[O, S, P], error) {
	switch {
	case cfg.Source == nil:
		return nil, errors.New("statuspatch: ReconcilerConfig.Source must be set")
	case cfg.Computer == nil:
		return nil, errors.New("statuspatch: ReconcilerConfig.Computer must be set")
	case cfg.Queue == nil:
		return nil, errors.New("statuspatch: ReconcilerConfig.Queue must be set")
	case cfg.Leader == nil:
		return nil, errors.New("statuspatch: ReconcilerConfig.Leader must be set")
	case cfg.Leader.Identity() == "":
		return nil, errors.New("statuspatch: ReconcilerConfig.Leader.Identity() must not be empty")
	case cfg.Interval < 0:
		return nil, fmt.Errorf("statuspatch: ReconcilerConfig.Interval must be >= 0 (0 means 10s), got %s", cfg.Interval)
	case cfg.MaxPendingKeys < 0:
		return nil, fmt.Errorf("statuspatch: ReconcilerConfig.MaxPendingKeys must be >= 0 (0 means the queue's capacity), got %d", cfg.MaxPendingKeys)
	}
	switch f := any(cfg.Computer).(type) {
	case ComputerFuncs[O, S, P]:
		if err := f.validate(); err != nil {
			return nil, fmt.Errorf("statuspatch: ReconcilerConfig.Computer: %w", err)
		}
	case *ComputerFuncs[O, S, P]:
		if f == nil {
			return nil, errors.New("statuspatch: ReconcilerConfig.Computer must be set")
		}
		if err := f.validate(); err != nil {
			return nil, fmt.Errorf("statuspatch: ReconcilerConfig.Computer: %w", err)
		}
	}
	if cfg.Interval == 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.MaxPendingKeys == 0 {
		cfg.MaxPendingKeys = max(cfg.Queue.Cap(), 1)
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
	inst, err := newReconcileInstruments(cfg.Meter, cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("statuspatch: ReconcilerConfig.Meter: %w", err)
	}
	return &Reconciler[O, S, P]{
		src:        cfg.Source,
		comp:       cfg.Computer,
		queue:      cfg.Queue,
		leader:     cfg.Leader,
		id:         cfg.Leader.Identity(),
		interval:   cfg.Interval,
		clock:      cfg.Clock,
		log:        cfg.Logger.With(slog.String("reconciler", cfg.Name)),
		diffOpts:   append([]cmp.Option(nil), cfg.DiffOptions...),
		inst:       inst,
		pending:    make(map[types.NamespacedName]struct{}),
		spare:      make(map[types.NamespacedName]struct{}),
		maxPending: cfg.MaxPendingKeys,
		kick:       make(chan struct{}, 1),
		runStopErr: fmt.Errorf("%w: Run not called", ErrNotRunning),
	}, nil
}

// objResult is the result of reconciling one object.
type objResult int

const (
	resUnchanged objResult = iota
	resChanged
	resError
	resFull   // no queue slot: the object was not handled
	resClosed // queue closed: the object was not handled
)

// reconcileOne handles one object. It allocates nothing when the status is
// unchanged. err is set for resError, resFull and resClosed.
func (r *Reconciler[O, S, P]) reconcileOne(ctx context.Context, obj O, epoch int64) (objResult, error) {
	current := r.comp.Current(obj)
	desired, err := r.comp.Desired(obj)
	if err != nil {
		return resError, fmt.Errorf("desired status: %w", err)
	}
	if r.comp.Equal(current, desired) {
		return resUnchanged, nil
	}
	permit, err := r.queue.Reserve()
	if err != nil {
		if errors.Is(err, ErrClosed) {
			return resClosed, err
		}
		return resFull, err
	}
	key := r.comp.Key(obj)
	payload, err := r.comp.Patch(obj, desired)
	if err != nil {
		permit.Release()
		return resError, fmt.Errorf("build patch: %w", err)
	}
	if err := permit.Send(Patch[P]{Key: keyString(key), Epoch: epoch, Payload: payload}); err != nil {
		return resClosed, err
	}
	if r.log.Enabled(ctx, slog.LevelDebug) {
		r.log.LogAttrs(ctx, slog.LevelDebug, "statuspatch: status changed, patch queued",
			slog.String("key", keyString(key)), slog.Int64("epoch", epoch),
			slog.String("diff", safeDiff(current, desired, r.diffOpts)))
	}
	return resChanged, nil
}

// keyString formats key as client-go's cache keys: "namespace/name", or
// "name" for cluster-scoped objects.
func keyString(key types.NamespacedName) string {
	if key.Namespace == "" {
		return key.Name
	}
	return key.Namespace + "/" + key.Name
}

// leaderClaim returns the current claim and whether it is ours now.
func (r *Reconciler[O, S, P]) leaderClaim() (leader.Claim, bool) {
	c := r.leader.Current()
	return c, c.IsCurrentFor(r.id, r.clock.Now())
}

// compareKeys orders keys by namespace, then name.
func compareKeys(a, b types.NamespacedName) int {
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// leaderCheckEvery is how many objects a pass handles between two checks
// that the claim is still ours and ctx is not done.
const leaderCheckEvery = 256

// ReconcileAll makes one full pass now, if we are the leader, and returns
// what it did. Run calls it every Interval; call it directly when you drive
// passes yourself.
//
// It returns an error wrapping [ErrNotLeader] when the claim is not ours (at
// the start, or when it changes during the pass), [ErrFull] when the pass
// halted on a full queue (result.Halted is set too), [ErrClosed] when the
// queue is closed, the Source's error, or ctx's error. Objects whose status
// could not be computed do not make it fail: they are counted in
// result.Errors.
func (r *Reconciler[O, S, P]) ReconcileAll(ctx context.Context) (PassResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	start := r.clock.Now()
	res, kind, err := r.pass(ctx)
	r.inst.duration.Record(ctx, r.clock.Since(start).Seconds(), r.inst.passOpts[kind]...)
	return res, err
}

// pass does the work of ReconcileAll with r.mu held and reports the pass
// result for the duration histogram.
func (r *Reconciler[O, S, P]) pass(ctx context.Context) (res PassResult, kind string, err error) {
	claim, ok := r.leaderClaim()
	if !ok {
		return res, passNotLeader, ErrNotLeader
	}
	if err := ctx.Err(); err != nil {
		return res, passCanceled, err
	}
	objs, err := r.src.List()
	if err != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "statuspatch: reconcile pass failed: listing objects", slog.Any("error", err))
		return res, passError, fmt.Errorf("statuspatch: list objects: %w", err)
	}
	n := len(objs)
	res.Objects = n
	if n > 0 {
		// A queue with no free slot halts the pass at its first changed
		// object: find out before sorting and comparing anything, so that
		// a stalled dispatcher costs no CPU here.
		permit, err := r.queue.Reserve()
		if err != nil {
			kind := passHalted
			if errors.Is(err, ErrClosed) {
				kind = passClosed
			} else {
				res.Halted = true
				r.inst.halted.Add(ctx, 1, r.inst.nameOpts...)
				r.logHalt(ctx, 0, n, 0)
			}
			return res, kind, fmt.Errorf("statuspatch: reconcile pass halted before its first object: %w", err)
		}
		permit.Release()
	}
	first := 0
	if r.hasCursor && n > 0 {
		res.Resumed = true
		slices.SortFunc(objs, func(a, b O) int { return compareKeys(r.comp.Key(a), r.comp.Key(b)) })
		cursor := r.cursor
		first, _ = slices.BinarySearchFunc(objs, cursor, func(o O, k types.NamespacedName) int {
			if compareKeys(r.comp.Key(o), k) <= 0 {
				return -1 // o is at or before the cursor: already handled
			}
			return 1
		})
		if first == n {
			first = 0
		}
	}

	var (
		firstErr    error
		firstErrKey types.NamespacedName
		last        = -1 // index of the last object handled
		stopErr     error
	)
	kind = passCompleted
	for j := range n {
		i := first + j
		if i >= n {
			i -= n
		}
		if j%leaderCheckEvery == leaderCheckEvery-1 {
			if err := ctx.Err(); err != nil {
				kind, stopErr = passCanceled, err
				break
			}
			if c, ok := r.leaderClaim(); !ok || c.Epoch != claim.Epoch {
				kind, stopErr = passNotLeader, fmt.Errorf("%w: leadership changed during the pass", ErrNotLeader)
				break
			}
		}
		result, err := r.reconcileOne(ctx, objs[i], claim.Epoch)
		switch result {
		case resUnchanged:
			res.Unchanged++
		case resChanged:
			res.Changed++
		case resError:
			res.Errors++
			key := r.comp.Key(objs[i])
			if firstErr == nil {
				firstErr, firstErrKey = err, key
			}
			if r.log.Enabled(ctx, slog.LevelDebug) {
				r.log.LogAttrs(ctx, slog.LevelDebug, "statuspatch: object not reconciled",
					slog.String("key", keyString(key)), slog.Any("error", err))
			}
		case resFull:
			res.Halted = true
			kind, stopErr = passHalted, fmt.Errorf("statuspatch: reconcile pass halted at object %d of %d: %w", j+1, n, err)
			r.inst.halted.Add(ctx, 1, r.inst.nameOpts...)
			if last >= 0 {
				r.cursor, r.hasCursor = r.comp.Key(objs[last]), true
			}
			r.logHalt(ctx, j, n, res.Changed)
		case resClosed:
			kind, stopErr = passClosed, err
		}
		if stopErr != nil {
			break
		}
		last = i
		res.Visited++
	}
	if stopErr != nil {
		if last >= 0 {
			r.cursor, r.hasCursor = r.comp.Key(objs[last]), true
		}
	} else {
		r.cursor, r.hasCursor = types.NamespacedName{}, false
	}

	r.inst.objects.Add(ctx, int64(res.Unchanged), r.inst.objOpts[0]...)
	r.inst.objects.Add(ctx, int64(res.Changed), r.inst.objOpts[1]...)
	r.inst.objects.Add(ctx, int64(res.Errors), r.inst.objOpts[2]...)
	if res.Errors > 0 {
		r.log.LogAttrs(ctx, slog.LevelWarn, "statuspatch: some objects were not reconciled",
			slog.Int("errors", res.Errors), slog.Int("objects", n),
			slog.String("first_key", keyString(firstErrKey)), slog.Any("first_error", firstErr))
	}
	if r.log.Enabled(ctx, slog.LevelDebug) {
		r.log.LogAttrs(ctx, slog.LevelDebug, "statuspatch: reconcile pass done",
			slog.String("result", kind), slog.Int("objects", n), slog.Int("visited", res.Visited),
			slog.Int("unchanged", res.Unchanged), slog.Int("changed", res.Changed),
			slog.Int("errors", res.Errors), slog.Bool("resumed", res.Resumed), slog.Int64("epoch", claim.Epoch))
	}
	return res, kind, stopErr
}

// logHalt writes the one message of a halted pass.
// position is the number of objects handled before the halt; the next pass
// resumes after the cursor.
func (r *Reconciler[O, S, P]) logHalt(ctx context.Context, position, n, changed int) {
	resumeAfter := "(none: the next pass starts from the first object listed)"
	if r.hasCursor {
		resumeAfter = keyString(r.cursor)
	}
	r.log.LogAttrs(ctx, slog.LevelWarn,
		"statuspatch: reconciliation halted: the patch queue is at capacity; the next pass resumes after the last object handled",
		slog.Int("capacity", r.queue.Cap()),
		slog.Int("position", position),
		slog.Int("objects", n),
		slog.Int("queued_this_pass", changed),
		slog.String("resume_after", resumeAfter),
		slog.Duration("interval", r.interval),
		slog.String("hint", "capacity should hold the patches the API server absorbs in one interval: "+
			"interval / per-patch latency, where latency is at least 1/QPS of the client's rate limiter "+
			"(statuspatch.SuggestCapacity); raise the capacity, the dispatcher's workers or the client's QPS, "+
			"or lengthen the interval"))
}

// ReconcileKey reconciles the object with key now, if we are the leader. It
// returns true when a patch was queued. It returns false and nil when the
// object does not exist or its status is unchanged; an error wrapping
// [ErrNotLeader], [ErrFull] or [ErrClosed] when no patch could be queued;
// the Source's error; or the error of Desired or Patch.
func (r *Reconciler[O, S, P]) ReconcileKey(ctx context.Context, key types.NamespacedName) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	claim, ok := r.leaderClaim()
	if !ok {
		return false, ErrNotLeader
	}
	return r.reconcileKey(ctx, key, claim.Epoch)
}

// reconcileKey does the work of ReconcileKey with r.mu held.
func (r *Reconciler[O, S, P]) reconcileKey(ctx context.Context, key types.NamespacedName, epoch int64) (bool, error) {
	obj, found, err := r.src.Get(key)
	if err != nil {
		return false, fmt.Errorf("statuspatch: get %s: %w", key, err)
	}
	if !found {
		return false, nil
	}
	result, err := r.reconcileOne(ctx, obj, epoch)
	switch result {
	case resUnchanged:
		r.inst.objects.Add(ctx, 1, r.inst.objOpts[0]...)
		return false, nil
	case resChanged:
		r.inst.objects.Add(ctx, 1, r.inst.objOpts[1]...)
		return true, nil
	case resError:
		r.inst.objects.Add(ctx, 1, r.inst.objOpts[2]...)
	}
	return false, fmt.Errorf("statuspatch: reconcile %s: %w", key, err)
}

// Enqueue asks for the object with key to be reconciled soon by Run. Keys
// coalesce: a key enqueued again before Run got to it is reconciled once.
// The set of pending keys is bounded by MaxPendingKeys; when it would
// overflow it is replaced by one full pass, which covers every key. Enqueue
// never blocks and is cheap enough to call from an informer's event
// handler. Pending keys are discarded while we are not the leader: the pass
// made on gaining leadership covers them.
func (r *Reconciler[O, S, P]) Enqueue(key types.NamespacedName) {
	r.pendingMu.Lock()
	if !r.needFull {
		if _, ok := r.pending[key]; !ok {
			if len(r.pending) >= r.maxPending {
				clear(r.pending)
				r.needFull = true
			} else {
				r.pending[key] = struct{}{}
			}
		}
	}
	r.pendingMu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// takePending returns the pending keys and whether a full pass was asked
// for, and empties the set. The returned map is valid until the next call.
func (r *Reconciler[O, S, P]) takePending() (map[types.NamespacedName]struct{}, bool) {
	r.pendingMu.Lock()
	defer r.pendingMu.Unlock()
	keys, full := r.pending, r.needFull
	clear(r.spare)
	r.pending, r.spare = r.spare, keys
	r.needFull = false
	return keys, full
}

// reconcilePending reconciles the keys enqueued since the last call. When the
// queue is full it stops and forgets the remaining keys: the next full pass
// covers them.
func (r *Reconciler[O, S, P]) reconcilePending(ctx context.Context, keys map[types.NamespacedName]struct{}) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	claim, ok := r.leaderClaim()
	if !ok {
		return nil
	}
	for key := range keys {
		if ctx.Err() != nil {
			return nil
		}
		_, err := r.reconcileKey(ctx, key, claim.Epoch)
		switch {
		case err == nil:
		case errors.Is(err, ErrClosed):
			return err
		case errors.Is(err, ErrFull):
			r.inst.halted.Add(ctx, 1, r.inst.nameOpts...)
			if r.log.Enabled(ctx, slog.LevelDebug) {
				r.log.LogAttrs(ctx, slog.LevelDebug, "statuspatch: on-demand reconcile halted: the patch queue is at capacity; the next pass covers the remaining keys",
					slog.Int("capacity", r.queue.Cap()), slog.Int("pending", len(keys)))
			}
			return nil
		default:
			if r.log.Enabled(ctx, slog.LevelDebug) {
				r.log.LogAttrs(ctx, slog.LevelDebug, "statuspatch: object not reconciled",
					slog.String("key", keyString(key)), slog.Any("error", err))
			}
		}
	}
	return nil
}

// Run reconciles while we are the leader until ctx is cancelled, and returns
// nil then; it returns an error wrapping [ErrClosed] if the queue is closed,
// and [ErrAlreadyRunning] if called twice. It makes a full pass at every tick
// of an Interval ticker, one at once whenever leadership is gained (observed
// through Leader.Subscribe), and reconciles Enqueue'd keys as they come. A
// tick that comes less than Interval/2 after the start of the last full pass
// (for example just after the pass made on gaining leadership) is skipped.
// While we are not the leader Run only waits.
func (r *Reconciler[O, S, P]) Run(ctx context.Context) error {
	if !r.started.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	changes, unsubscribe := r.leader.Subscribe()
	defer unsubscribe()
	ticker := r.clock.NewTicker(r.interval)
	defer ticker.Stop()

	r.setRunning(true, nil)
	err := r.loop(ctx, changes, ticker.C())
	reason := err
	if reason == nil {
		reason = ctx.Err()
	}
	r.setRunning(false, fmt.Errorf("%w: reconciler stopped: %v", ErrNotRunning, reason))
	return err
}

func (r *Reconciler[O, S, P]) loop(ctx context.Context, changes <-chan leader.Claim, ticks <-chan time.Time) error {
	var (
		leading   bool
		epoch     int64
		lastStart time.Time // start of the last full pass
	)
	// full makes a pass; only a closed queue ends Run.
	full := func() error {
		lastStart = r.clock.Now()
		_, err := r.ReconcileAll(ctx)
		if errors.Is(err, ErrClosed) {
			return err
		}
		return nil
	}
	// observe reacts to a claim: a pass when leadership is gained.
	observe := func(c leader.Claim) error {
		now := c.IsCurrentFor(r.id, r.clock.Now())
		gained := now && (!leading || c.Epoch != epoch)
		leading, epoch = now, c.Epoch
		if gained {
			return full()
		}
		return nil
	}
	if err := observe(r.leader.Current()); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case c, ok := <-changes:
			if !ok {
				changes = nil
				continue
			}
			if err := observe(c); err != nil {
				return err
			}
		case <-ticks:
			c := r.leader.Current()
			leading, epoch = c.IsCurrentFor(r.id, r.clock.Now()), c.Epoch
			if !leading || (!lastStart.IsZero() && r.clock.Since(lastStart) < r.interval/2) {
				continue
			}
			if err := full(); err != nil {
				return err
			}
		case <-r.kick:
			keys, wantFull := r.takePending()
			if _, ok := r.leaderClaim(); !ok {
				continue // the pass on gaining leadership covers them
			}
			if wantFull {
				if err := full(); err != nil {
					return err
				}
				continue
			}
			if err := r.reconcilePending(ctx, keys); err != nil {
				return err
			}
		}
	}
}

func (r *Reconciler[O, S, P]) setRunning(running bool, stopErr error) {
	r.runningMu.Lock()
	r.running = running
	if stopErr != nil {
		r.runStopErr = stopErr
	}
	r.runningMu.Unlock()
}

// Healthy reports whether Run is running: nil while it is, an error wrapping
// [ErrNotRunning] (with the reason) before it was called and after it
// returned. A reconciler that is not the leader is healthy: it waits.
func (r *Reconciler[O, S, P]) Healthy() error {
	r.runningMu.Lock()
	defer r.runningMu.Unlock()
	if r.running {
		return nil
	}
	return r.runStopErr
}
