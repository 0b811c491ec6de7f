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

	// desired is the status the patch was built for (the reconciler's S),
	// so that a later pass that computes the same status while the patch
	// still waits does not build it again. Nil in patches built by others.
	desired any
	// pass is the sequence number of the reconcile pass that built it.
	pass uint64
}

// PatchKey returns p.Key. Use it as QueueConfig.Key of the queue between a
// [Reconciler] and a [Dispatcher] (both require it):
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
	// Queue receives the patches. Required, built with QueueConfig.Key set
	// to [PatchKey]: the reconciler relies on the key to replace a waiting
	// patch of an object with a newer one, even when the queue is full.
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
	// Logger receives, at most once a minute, one record about passes
	// halted on a full queue (info while it is a backlog being drained,
	// warning once passes have kept halting for longer than max(1 minute,
	// 3 intervals)); one warning per pass in which some objects failed;
	// an info record when Run stops; and debug records per object (with a
	// cmp.Diff of what changed, computed only when debug is enabled). Nil
	// discards.
	Logger *slog.Logger
	// DiffOptions are the go-cmp options of the debug-level diff of a
	// changed status, e.g. conditions.IgnoreTransitionTime().
	DiffOptions []cmp.Option
	// Meter creates the reconciler's instruments (see the package
	// documentation); nil means none.
	Meter metric.Meter
	// Name is the value of the pipeline attribute on the reconciler's
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
	// Unchanged, Changed, Queued and Errors split Visited by result.
	// Changed counts the patches queued; Queued the changed objects whose
	// identical patch (same epoch, equal desired status) already waited.
	Unchanged, Changed, Queued, Errors int
	// Halted reports that the pass stopped because the queue was at
	// capacity. The next pass resumes after the last object handled; Run
	// makes it as soon as half of the queue is free again.
	Halted bool
	// Resumed reports that this pass started after the cursor left by an
	// earlier pass that did not complete.
	Resumed bool
}

// ReconcilerStats are a reconciler's counters since construction.
type ReconcilerStats struct {
	// Passes counts full passes by result: completed, halted, not_leader,
	// error (the Source failed), canceled, closed (the queue).
	Passes map[string]int64
	// Objects counts objects reconciled (by passes and on demand) by
	// result: unchanged, changed (a patch was queued), queued (the same
	// patch already waited), error.
	Objects map[string]int64
	// Halted counts passes, and batches of Enqueue'd keys, halted because
	// the queue was at capacity.
	Halted int64
}

// Reconciler turns objects into status patches while this replica is the
// leader. For each object it computes the desired status and compares it
// with the current one; an unchanged object costs nothing more. For a
// changed object it reserves room in the queue for the object's key, builds
// the patch and sends it tagged with the epoch of our claim.
//
// Passes. Run makes a full pass every Interval, at once whenever leadership
// of a new epoch is gained (whether the claim's notification or a tick comes
// first), whenever Enqueue'd keys overflowed MaxPendingKeys, and, after a
// pass or a batch of Enqueue'd keys halted on a full queue, as soon as half
// of the queue is free again. ReconcileAll makes one pass synchronously.
//
// Latest wins, also at capacity. A changed object whose patch already waits
// in the queue replaces it ([PatchQueue.ReserveKey]): no free slot is
// needed, and the waiting patch is superseded, not applied stale. If the
// waiting patch is already the one the pass would build (same epoch, equal
// desired status), nothing is built (result queued).
//
// Queue full. A pass stops at the first changed object that needs a free
// slot and finds none: quietpatch.reconcile.halted is incremented and the
// key of the last object handled is kept as a cursor. A pass that finds the
// queue full before its first object reconciles only the objects whose
// patches wait in the queue (so that they are brought up to date), then
// halts, without listing, sorting or computing anything else: a stalled
// dispatcher costs the reconciler little CPU. A pass normally visits objects
// in the order Source.List returns them; a pass that starts with a cursor
// sorts them by key (namespace, then name) and starts with the first key
// after the cursor, wrapping around, so that over successive halted passes
// every object gets its turn: none starves. A pass that visits every
// object clears the cursor. Passes interrupted by lost leadership or
// cancellation leave a cursor too. Run resumes a halted pass once the
// dispatcher has taken half of the queue, not at the next tick: a backlog
// larger than the queue (a storm that changes every object) then keeps the
// dispatcher busy, whatever the capacity, while the queue stays bounded.
//
// Halts are logged once a minute at most: at info while they are a backlog
// being drained (a start-up or a storm larger than the queue), as a warning
// once passes have kept halting for longer than max(1 minute, 3 intervals),
// and at info again when a pass completes.
//
// On demand. Enqueue records a key (for example from an informer's event
// handler) in a bounded coalescing set; Run reconciles the pending keys
// between passes. ReconcileKey reconciles one key synchronously.
//
// Errors. An object whose Current, Desired, Equal, Key or Patch fails — by
// returning an error or by panicking — is counted as an error and logged at
// debug level; its queue reservation, if any, is released; the pass goes
// on. A pass with errors logs one warning with the count and the first
// error.
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
	counts   reconcileCounters

	// mu serializes passes and single-key reconciles, and guards cursor,
	// halts and waitingKeys.
	mu          sync.Mutex
	cursor      types.NamespacedName
	hasCursor   bool
	halts       haltLog
	waitingKeys []string
	passSeq     uint64 // of the current or last pass

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

// haltLog is the state of the halted-pass log.
type haltLog struct {
	streak  int       // consecutive halted passes
	since   time.Time // start of the first of them
	lastLog time.Time // last record about halts
}

// NewReconciler validates cfg and returns a reconciler; nothing runs until
// Run, ReconcileAll or ReconcileKey. An invalid cfg yields a [*ConfigError]
// naming the field.
func NewReconciler[O, S, P any](cfg ReconcilerConfig[O, S, P]) (*Reconciler[O, S, P], error) {
	const s = "ReconcilerConfig"
	switch {
	case cfg.Source == nil:
		return nil, configErr(s, "Source", "must be set")
	case cfg.Computer == nil:
		return nil, configErr(s, "Computer", "must be set")
	case cfg.Queue == nil:
		return nil, configErr(s, "Queue", "must be set")
	case cfg.Queue.key == nil:
		return nil, configErr(s, "Queue", "must be built with QueueConfig.Key set to statuspatch.PatchKey: without a key a newer patch of an object cannot replace a waiting one")
	case cfg.Leader == nil:
		return nil, configErr(s, "Leader", "must be set")
	case cfg.Leader.Identity() == "":
		return nil, configErr(s, "Leader", "must have a non-empty Identity()")
	case cfg.Interval < 0:
		return nil, configErr(s, "Interval", "must be >= 0 (0 means 10s), got %s", cfg.Interval)
	case cfg.MaxPendingKeys < 0:
		return nil, configErr(s, "MaxPendingKeys", "must be >= 0 (0 means the queue's capacity), got %d", cfg.MaxPendingKeys)
	}
	switch f := any(cfg.Computer).(type) {
	case ComputerFuncs[O, S, P]:
		if err := f.validate(); err != nil {
			return nil, configErr(s, "Computer", "%v", err)
		}
	case *ComputerFuncs[O, S, P]:
		if f == nil {
			return nil, configErr(s, "Computer", "must be set")
		}
		if err := f.validate(); err != nil {
			return nil, configErr(s, "Computer", "%v", err)
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
	r := &Reconciler[O, S, P]{
		src:        cfg.Source,
		comp:       cfg.Computer,
		queue:      cfg.Queue,
		leader:     cfg.Leader,
		id:         cfg.Leader.Identity(),
		interval:   cfg.Interval,
		clock:      cfg.Clock,
		log:        cfg.Logger.With(slog.String(pipelineAttr, cfg.Name)),
		diffOpts:   append([]cmp.Option(nil), cfg.DiffOptions...),
		pending:    make(map[types.NamespacedName]struct{}),
		spare:      make(map[types.NamespacedName]struct{}),
		maxPending: cfg.MaxPendingKeys,
		kick:       make(chan struct{}, 1),
		runStopErr: fmt.Errorf("%w: Run not called", ErrNotStarted),
	}
	inst, err := newReconcileInstruments(cfg.Meter, cfg.Name, &r.counts)
	if err != nil {
		return nil, configErr(s, "Meter", "%v", err)
	}
	r.inst = inst
	return r, nil
}

// objResult is the result of reconciling one object.
type objResult int

const (
	resUnchanged objResult = iota
	resChanged
	resQueued // changed; the same patch already waits
	resError
	resFull   // no queue slot: the object was not handled
	resClosed // queue closed: the object was not handled
)

// reconcileOne handles one object. It allocates nothing when the status is
// unchanged. err is set for resError, resFull and resClosed. A panic in the
// StatusComputer becomes resError, and a reservation taken is released.
func (r *Reconciler[O, S, P]) reconcileOne(ctx context.Context, obj O, epoch int64) (res objResult, err error) {
	var (
		stage  = "Current"
		permit Permit[Patch[P]]
	)
	defer func() {
		if v := recover(); v != nil {
			permit.Release()
			res, err = resError, fmt.Errorf("StatusComputer.%s panicked: %v", stage, v)
		}
	}()
	current := r.comp.Current(obj)
	stage = "Desired"
	desired, err := r.comp.Desired(obj)
	if err != nil {
		return resError, fmt.Errorf("desired status: %w", err)
	}
	stage = "Equal"
	if r.comp.Equal(current, desired) {
		return resUnchanged, nil
	}
	stage = "Key"
	key := keyString(r.comp.Key(obj))
	if w, ok := r.queue.Waiting(key); ok && w.Epoch == epoch {
		if ws, ok := w.desired.(S); ok {
			stage = "Equal"
			if r.comp.Equal(ws, desired) {
				return resQueued, nil
			}
		}
	}
	permit, err = r.queue.ReserveKey(key)
	if err != nil {
		if errors.Is(err, ErrClosed) {
			return resClosed, err
		}
		return resFull, err
	}
	stage = "Patch"
	payload, err := r.comp.Patch(obj, desired)
	if err != nil {
		permit.Release()
		return resError, fmt.Errorf("build patch: %w", err)
	}
	if err := permit.Send(Patch[P]{Key: key, Epoch: epoch, Payload: payload, desired: desired, pass: r.passSeq}); err != nil {
		if errors.Is(err, ErrClosed) {
			return resClosed, err
		}
		return resFull, err
	}
	if r.log.Enabled(ctx, slog.LevelDebug) {
		r.log.LogAttrs(ctx, slog.LevelDebug, "statuspatch: status changed, patch queued",
			slog.String("key", key), slog.Int64("epoch", epoch),
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

// parseKey is the inverse of keyString.
func parseKey(s string) types.NamespacedName {
	if ns, name, ok := strings.Cut(s, "/"); ok {
		return types.NamespacedName{Namespace: ns, Name: name}
	}
	return types.NamespacedName{Name: s}
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
	i := passIndex(kind)
	r.counts.passes[i].Add(1)
	r.inst.recordPass(ctx, i, r.clock.Since(start))
	if kind != passNotLeader && kind != passCanceled && kind != passClosed {
		r.logHalts(ctx, res, kind == passHalted, start)
	}
	return res, err
}

// count adds one object's result to the counters and to res.
func (r *Reconciler[O, S, P]) count(res *PassResult, result objResult) {
	switch result {
	case resUnchanged:
		res.Unchanged++
		r.counts.objects[0].Add(1)
	case resChanged:
		res.Changed++
		r.counts.objects[1].Add(1)
	case resQueued:
		res.Queued++
		r.counts.objects[2].Add(1)
	case resError:
		res.Errors++
		r.counts.objects[3].Add(1)
	}
}

// pass does the work of ReconcileAll with r.mu held and reports the pass
// result.
func (r *Reconciler[O, S, P]) pass(ctx context.Context) (res PassResult, kind string, err error) {
	claim, ok := r.leaderClaim()
	if !ok {
		return res, passNotLeader, ErrNotLeader
	}
	if err := ctx.Err(); err != nil {
		return res, passCanceled, err
	}
	r.passSeq++
	if r.queue.free() == 0 {
		// Nothing but the waiting patches can change: refresh them and
		// halt, without listing or computing anything else.
		r.refreshWaiting(ctx, claim.Epoch, &res)
		res.Halted = true
		r.counts.halted.Add(1)
		return res, passHalted, fmt.Errorf("statuspatch: reconcile pass halted before its first object (%d waiting patches checked): %w", res.Visited, ErrFull)
	}
	objs, err := r.src.List()
	if err != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "statuspatch: reconcile pass failed: listing objects", slog.Any("error", err))
		return res, passError, fmt.Errorf("statuspatch: list objects: %w", err)
	}
	n := len(objs)
	res.Objects = n
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
		r.count(&res, result)
		switch result {
		case resError:
			key := r.safeKey(objs[i])
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
			r.counts.halted.Add(1)
			r.refreshWaiting(ctx, claim.Epoch, &res)
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
			r.cursor, r.hasCursor = r.safeKey(objs[last]), true
		}
	} else {
		r.cursor, r.hasCursor = types.NamespacedName{}, false
	}

	if res.Errors > 0 {
		r.log.LogAttrs(ctx, slog.LevelWarn, "statuspatch: some objects were not reconciled",
			slog.Int("errors", res.Errors), slog.Int("objects", n),
			slog.String("first_key", keyString(firstErrKey)), slog.Any("first_error", firstErr))
	}
	if r.log.Enabled(ctx, slog.LevelDebug) {
		r.log.LogAttrs(ctx, slog.LevelDebug, "statuspatch: reconcile pass done",
			slog.String("result", kind), slog.Int("objects", n), slog.Int("visited", res.Visited),
			slog.Int("unchanged", res.Unchanged), slog.Int("changed", res.Changed), slog.Int("queued", res.Queued),
			slog.Int("errors", res.Errors), slog.Bool("resumed", res.Resumed), slog.Int64("epoch", claim.Epoch))
	}
	return res, kind, stopErr
}

// refreshWaiting reconciles the objects whose patches wait in the queue
// from earlier passes, when a pass halts on a full queue: a newer status
// replaces a waiting patch without a free slot, so the queue never applies
// a patch a later pass knows to be out of date, however long passes keep
// halting (a halted pass does not reach the objects before its cursor). It
// costs a Get and a computation per waiting patch, at most the capacity.
func (r *Reconciler[O, S, P]) refreshWaiting(ctx context.Context, epoch int64, res *PassResult) {
	r.waitingKeys = r.queue.appendWaitingKeys(r.waitingKeys[:0])
	defer clear(r.waitingKeys)
	for _, k := range r.waitingKeys {
		if w, ok := r.queue.Waiting(k); !ok || w.pass == r.passSeq {
			continue // delivered meanwhile, or built by this pass
		}
		obj, found, err := r.src.Get(parseKey(k))
		if err != nil || !found {
			continue // the patch will fail or be dropped; the next pass sees the object
		}
		result, _ := r.reconcileOne(ctx, obj, epoch)
		r.count(res, result)
		if result == resClosed {
			return
		}
		if result != resFull {
			res.Visited++
		}
	}
}

// safeKey returns the object's key, or the zero key if Key panics (the
// object is then counted as an error by reconcileOne already).
func (r *Reconciler[O, S, P]) safeKey(obj O) (k types.NamespacedName) {
	defer func() { _ = recover() }()
	return r.comp.Key(obj)
}

// logHalts writes the records about halted passes: see [Reconciler].
func (r *Reconciler[O, S, P]) logHalts(ctx context.Context, res PassResult, halted bool, now time.Time) {
	h := &r.halts
	if !halted {
		if h.streak > 0 {
			r.log.LogAttrs(ctx, slog.LevelInfo, "statuspatch: backlog drained: a reconcile pass completed",
				slog.Int("halted_passes", h.streak), slog.Duration("after", now.Sub(h.since)))
		}
		*h = haltLog{}
		return
	}
	if h.streak == 0 {
		h.since = now
	}
	h.streak++
	if !h.lastLog.IsZero() && now.Sub(h.lastLog) < time.Minute {
		return
	}
	h.lastLog = now
	resumeAfter := "(none: the next pass starts from the first object listed)"
	if r.hasCursor {
		resumeAfter = keyString(r.cursor)
	}
	attrs := []slog.Attr{
		slog.Int("capacity", r.queue.Cap()),
		slog.Int("objects", res.Objects),
		slog.Int("visited", res.Visited),
		slog.Int("queued_this_pass", res.Changed),
		slog.String("resume_after", resumeAfter),
		slog.Int("halted_passes", h.streak),
		slog.Duration("interval", r.interval),
	}
	if now.Sub(h.since) < max(time.Minute, 3*r.interval) {
		r.log.LogAttrs(ctx, slog.LevelInfo,
			"statuspatch: backlog: more changed objects than the patch queue holds; passes resume where they stopped until it is drained", attrs...)
		return
	}
	attrs = append(attrs, slog.Duration("halting_for", now.Sub(h.since)), slog.String("hint",
		"the dispatcher does not drain in one interval what passes produce: "+
			"capacity should hold the patches the API server absorbs in one interval "+
			"(interval / per-patch latency, where latency is at least 1/QPS of the client's rate limiter; statuspatch.SuggestCapacity); "+
			"raise the capacity, the dispatcher's concurrency or the client's QPS, or lengthen the interval"))
	r.log.LogAttrs(ctx, slog.LevelWarn,
		"statuspatch: reconcile passes keep halting: the patch queue stays at capacity", attrs...)
}

// ReconcileKey reconciles the object with key now, if we are the leader. It
// returns true when a patch was queued. It returns false and nil when the
// object does not exist, its status is unchanged, or the same patch already
// waits; an error wrapping [ErrNotLeader], [ErrFull] or [ErrClosed] when no
// patch could be queued; the Source's error; or the StatusComputer's error.
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
	var res PassResult
	r.count(&res, result)
	switch result {
	case resUnchanged, resQueued:
		return false, nil
	case resChanged:
		return true, nil
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
// queue is full it stops, forgets the remaining keys (the next full pass
// covers them) and reports halted.
func (r *Reconciler[O, S, P]) reconcilePending(ctx context.Context, keys map[types.NamespacedName]struct{}) (halted bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	claim, ok := r.leaderClaim()
	if !ok {
		return false, nil
	}
	for key := range keys {
		if ctx.Err() != nil {
			return false, nil
		}
		_, err := r.reconcileKey(ctx, key, claim.Epoch)
		switch {
		case err == nil:
		case errors.Is(err, ErrClosed):
			return false, err
		case errors.Is(err, ErrFull):
			r.counts.halted.Add(1)
			if r.log.Enabled(ctx, slog.LevelDebug) {
				r.log.LogAttrs(ctx, slog.LevelDebug, "statuspatch: on-demand reconcile halted: the patch queue is at capacity; a full pass covers the remaining keys once half the queue is free",
					slog.Int("capacity", r.queue.Cap()), slog.Int("pending", len(keys)))
			}
			return true, nil
		default:
			if r.log.Enabled(ctx, slog.LevelDebug) {
				r.log.LogAttrs(ctx, slog.LevelDebug, "statuspatch: object not reconciled",
					slog.String("key", keyString(key)), slog.Any("error", err))
			}
		}
	}
	return false, nil
}

// Run reconciles while we are the leader until ctx is cancelled, and returns
// nil then; it returns an error wrapping [ErrClosed] if the queue is closed,
// and [ErrAlreadyStarted] if called twice. It makes a full pass at every
// tick of an Interval ticker, one at once whenever leadership of a new epoch
// is gained — observed through Leader.Subscribe or at a tick, whichever
// comes first — and reconciles Enqueue'd keys as they come. After a pass (or
// Enqueue'd keys) halted on a full queue, it makes a full pass as soon as
// half of the queue is free again. A tick that comes less than Interval/2
// after the start of the last full pass (for example just after the pass
// made on gaining leadership) is skipped. While we are not the leader Run
// only waits.
func (r *Reconciler[O, S, P]) Run(ctx context.Context) error {
	if !r.started.CompareAndSwap(false, true) {
		return ErrAlreadyStarted
	}
	changes, unsubscribe := r.leader.Subscribe()
	defer unsubscribe()
	ticker := r.clock.NewTicker(r.interval)
	defer ticker.Stop()

	r.setRunning(true, nil)
	err := r.loop(ctx, changes, ticker.C())
	reason := "context cancelled"
	if err != nil {
		reason = err.Error()
	}
	r.setRunning(false, fmt.Errorf("%w: reconciler stopped: %s", ErrStopped, reason))
	r.log.LogAttrs(context.Background(), slog.LevelInfo, "statuspatch: reconciler stopped", slog.String("reason", reason))
	return err
}

func (r *Reconciler[O, S, P]) loop(ctx context.Context, changes <-chan leader.Claim, ticks <-chan time.Time) error {
	var (
		leading   bool
		epoch     int64
		lastStart time.Time // start of the last full pass
		// room is closed once half the queue is free again after a
		// pass (or on-demand keys) halted on a full queue: the pass
		// resumes then rather than at the next tick, so that a backlog
		// larger than the queue keeps the dispatcher busy.
		room <-chan struct{}
	)
	halted := func() { room = r.queue.roomSignal(max(r.queue.Cap()/2, 1)) }
	// full makes a pass; only a closed queue ends Run.
	full := func() error {
		lastStart = r.clock.Now()
		room = nil
		_, err := r.ReconcileAll(ctx)
		switch {
		case errors.Is(err, ErrClosed):
			return err
		case errors.Is(err, ErrFull):
			halted()
		}
		return nil
	}
	// handle reacts to a claim, from a notification or read at a tick: a
	// pass when leadership of a new epoch is gained, whichever way it is
	// first seen; at a tick, the periodic pass.
	handle := func(c leader.Claim, tick bool) error {
		cur := c.IsCurrentFor(r.id, r.clock.Now())
		gained := cur && (!leading || c.Epoch != epoch)
		leading, epoch = cur, c.Epoch
		switch {
		case gained:
			return full()
		case tick && cur && (lastStart.IsZero() || r.clock.Since(lastStart) >= r.interval/2):
			return full()
		}
		return nil
	}
	if err := handle(r.leader.Current(), false); err != nil {
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
			if err := handle(c, false); err != nil {
				return err
			}
		case <-ticks:
			if err := handle(r.leader.Current(), true); err != nil {
				return err
			}
		case <-room:
			room = nil
			if _, ok := r.leaderClaim(); !ok {
				continue // the pass on gaining leadership resumes
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
			stopped, err := r.reconcilePending(ctx, keys)
			if err != nil {
				return err
			}
			if stopped && room == nil {
				halted()
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
// [ErrNotStarted] before it was called and [ErrStopped] (with the reason)
// after it returned. A reconciler that is not the leader is healthy: it
// waits.
func (r *Reconciler[O, S, P]) Healthy() error {
	r.runningMu.Lock()
	defer r.runningMu.Unlock()
	if r.running {
		return nil
	}
	return r.runStopErr
}

// Stats returns the reconciler's counters.
func (r *Reconciler[O, S, P]) Stats() ReconcilerStats {
	s := ReconcilerStats{
		Passes:  make(map[string]int64, numPassResults),
		Objects: make(map[string]int64, numObjResults),
		Halted:  r.counts.halted.Load(),
	}
	for i, k := range passResults() {
		if n := r.counts.passes[i].Load(); n > 0 {
			s.Passes[k] = n
		}
	}
	for i, k := range objResults() {
		if n := r.counts.objects[i].Load(); n > 0 {
			s.Objects[k] = n
		}
	}
	return s
}
