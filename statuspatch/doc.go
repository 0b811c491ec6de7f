// Package statuspatch keeps the status subresource of many Kubernetes
// objects up to date without flooding the API server and without unbounded
// memory.
//
// The package exists because of one failure pattern: a leader recomputes
// the status of every object on an interval and queues one patch per
// object, changed or not, into an unbounded queue. When patches are produced
// faster than the API server absorbs them, the queue and the process grow
// until the process is killed for lack of memory. statuspatch patches only
// what changed, bounds the queue and counts what it drops, puts a deadline
// on every API call, and measures every step.
//
// # The flow
//
// A [Reconciler] runs while its process is leader. For each object it asks a
// [StatusComputer] for the desired status and compares it with the current
// one; only when they differ does it reserve a slot in a [PatchQueue], build
// the patch and send it. A [Dispatcher] drains the queue, always, and
// applies each patch through a [Patcher] with a deadline no later than the
// end of the leadership claim, dropping (and counting) whatever was produced
// under another leadership.
//
//	objects ──▶ Reconciler ──(changed only: Reserve → build → Send)──▶ PatchQueue ──▶ Dispatcher ──▶ PATCH …/status
//	             leader only                 bounded, coalescing            always draining
//
// # PatchQueue
//
// [PatchQueue] is a bounded FIFO queue with four rules:
//
//   - Bounded. Items waiting plus outstanding reservations never exceed the
//     capacity fixed at construction. An item gives its slot back when a
//     consumer receives it; items being processed do not count. A producer
//     never blocks unless it asks to ([PatchQueue.Send] with a context):
//     [PatchQueue.Reserve] and [PatchQueue.TrySend] fail at once with
//     [ErrFull] and count the drop.
//   - Reserve first. [PatchQueue.Reserve] takes a slot before the patch is
//     built, so a full queue costs no patch building; the [Permit] is then
//     sent or released, exactly once.
//   - Coalescing per key. With [QueueConfig.Key], a newer item for a key
//     that is already waiting replaces it in place: latest wins, the item
//     keeps its place in line, no extra slot is used (even when the queue is
//     full), and the replaced value is counted as superseded.
//   - Exclusivity per key. While an item of a key is in flight (received,
//     not yet [PatchQueue.Done]), the next item of that key waits; consumers
//     skip it and take the next eligible item, in FIFO order across keys.
//     So several consumers (dispatcher workers) never apply two patches of
//     one object at once, and never out of order.
//
// Optionally, items older than [QueueConfig.MaxAge] when a consumer would
// take them are dropped instead (reason "expired"): a patch older than one
// reconcile interval will be recomputed from fresh state anyway.
//
// [PatchQueue.Close] refuses producers with [ErrClosed]; consumers drain
// what is left, then get ErrClosed.
//
// Cost: with a Key function and no meter, TrySend + Receive + Done costs one
// mutex acquisition per call, one map lookup per send, one monotonic clock
// read per send, and no allocation; memory grows to the high-water mark
// and no further. See [PatchQueue] for figures, and BenchmarkQueue for the
// comparison with a buffered channel and client-go's workqueue.
//
// # Queue instruments
//
// With [QueueConfig.Meter] set, a queue reports the OpenTelemetry
// instruments below. Each carries the attribute queue, whose value is
// [QueueConfig.Name] (default "statuspatch"), so several queues can share a
// meter. A nil Meter, or a no-op one (go.opentelemetry.io/otel/metric/noop),
// creates nothing and costs nothing on the hot path. The names are stable
// (see the Queue*Metric constants).
//
//	name                               kind                    unit    attributes     what
//	statuspatch.queue.enqueued         Int64Counter            {item}  queue          items accepted by a send, including those that replaced a waiting item
//	statuspatch.queue.dequeued         Int64Counter            {item}  queue          items delivered to a consumer
//	statuspatch.queue.superseded       Int64Counter            {item}  queue          waiting items replaced by a newer item of their key
//	statuspatch.queue.dropped          Int64Counter            {item}  queue, reason  items refused (reason full, closed) or expired (reason expired)
//	statuspatch.queue.depth            Int64UpDownCounter      {item}  queue          items waiting; changed at every insertion and removal
//	statuspatch.queue.depth.peak_ewma  Float64ObservableGauge  {item}  queue          Peak-EWMA of depth, time constant QueueConfig.DepthTau
//	statuspatch.queue.capacity         Int64ObservableGauge    {item}  queue          QueueConfig.Capacity
//	statuspatch.queue.wait             Float64Histogram        s       queue          time from enqueue (of the latest value) to delivery
//
// The depth Peak-EWMA (package github.com/quietpatch/quietpatch/ewma) is
// updated at every insertion and removal, so a burst that fills and drains
// between two collections is still reported at its full height, and decays
// by e⁻¹ per DepthTau afterwards. The wait histogram's buckets run from 1 ms
// to 60 s.
//
// Drops come in two kinds, told apart by reason:
//
//   - reason=full and reason=closed are rejections: Reserve, TrySend, Send
//     or Permit.Send refused an item, which therefore was never enqueued.
//     (Send counts reason=full when its context ends while the queue is
//     full.) A failed Reserve counts once, as the patch it would have
//     carried is not built.
//   - reason=expired counts items that were enqueued and dropped at dequeue
//     because they were older than MaxAge.
//
// So at any moment when no call is in progress:
//
//	enqueued = dequeued + superseded + dropped{reason=expired} + depth
//
// Nothing else leaves the queue: Close drops nothing (consumers drain), and
// a released permit never enqueued anything. [PatchQueue.Stats] returns the
// same counters, meter or not. The observable gauges (capacity, depth
// Peak-EWMA) are unregistered at Close.
//
// # StatusComputer
//
// A [StatusComputer] is what the controller supplies: an object's key, its
// current status, its desired status, how to compare the two and how to
// build a patch. The comparison must ignore what changes on its own —
// conditions' LastTransitionTime, list order — or every pass patches every
// object. [ConditionsEqual] is a typed comparison of condition lists that
// allocates nothing (20–30 ns for two conditions); [CmpEqual] with
// [IgnoreConditionTransitionTime] and [SortConditions] gives the same
// answers through go-cmp at 15 to 110 µs and tens to hundreds of
// allocations per comparison: fine to start with or in tests, too costly for
// the hot path of a controller with many objects. With the logger at debug
// level the reconciler logs a cmp.Diff of every changed status
// ([ReconcilerConfig.DiffOptions]); otherwise no diff is computed.
//
// # Reconciler
//
// [Reconciler] works while the claim of [ReconcilerConfig.Leader] is current
// for its identity: a full pass every [ReconcilerConfig.Interval] (default
// 10 s), one at once on gaining leadership, and single keys on demand
// ([Reconciler.Enqueue] from an informer's event handler, into a bounded
// coalescing set; [Reconciler.ReconcileKey] synchronously). An unchanged
// object costs Current, Desired and Equal and nothing else: no key, no
// patch, no allocation by the library (BenchmarkReconcile, 2 shared cores:
// about 45 ns per object with ConditionsEqual, about 15 µs with CmpEqual; a
// changed object about 0.7 µs and one allocation, its queue key, plus what
// building the patch costs). A changed object takes a queue slot ([PatchQueue.Reserve])
// before its patch is built, and the patch is sent tagged with the claim's
// epoch ([Patch]).
//
// When the queue is full the pass stops: exactly one warning says that
// reconciliation halted because the queue is at capacity, with the
// capacity, the position in the pass and the sizing formula;
// statuspatch.reconcile.halted is incremented; the key of the last object
// handled becomes a cursor. The next pass sorts the objects by key and
// starts after the cursor, wrapping around, so no object starves however
// often passes halt. An object whose desired status cannot be computed is
// counted as an error and logged at debug level, with one warning per pass
// summing the errors up; the pass goes on.
//
// # Dispatcher
//
// [Dispatcher] drains the queue whether or not this replica leads, with at
// most [DispatcherConfig.Workers] patches in flight (the queue keeps keys
// exclusive). At dispatch time it reads the claim again: a patch is dropped
// — counted, logged at debug level, never applied — when the claim is not
// current for our identity, expiry included (reason not_leader), or when the
// patch was produced under another epoch (reason stale_epoch). Otherwise it
// is applied with a deadline of min(PatchTimeout, time left on the claim),
// so nothing we send can land after our claim ran out. The outcome ([Classify]:
// ok, conflict, not_found, forbidden, timeout, throttled, canceled, other)
// is timed and counted; a failed patch is not retried, as the next pass
// recomputes it from fresh state. When its context is cancelled, Run returns
// promptly: calls in flight are cancelled and queued patches are dropped
// with reason shutdown (the next leader recomputes them). After
// [PatchQueue.Close] it drains the queue instead, then returns.
// [Dispatcher.Healthy] and [Reconciler.Healthy] report a loop that is not
// running, for a readiness probe.
//
// [DynamicStatusPatcher] is a ready [Patcher]: a JSON merge patch of the
// status subresource of any resource through client-go's dynamic client,
// with a metadata.resourceVersion precondition ([MergePatch]) and a field
// manager.
//
// # Sizing
//
// Capacity and interval go together: the queue should hold the patches the
// API server absorbs in one interval, interval / per-patch latency, where
// the latency is at least 1/QPS of the client's rate limiter
// ([SuggestCapacity]). Measured on 2 cores against a real kube-apiserver:
// one patch in flight ≈ 144 patches/s, so ≈ 1,440 per 10 s interval; 4 in
// flight ≈ 265/s; 16 or more ≈ 300/s. client-go's default limiter (QPS 5,
// burst 10) allows 50 patches per 10 s interval whatever the server does:
// set QPS and Burst explicitly.
//
// With every object changed and the dispatcher stalled, 20 passes over
// 100,000 objects keep the library's live heap at what the queue holds
// (0.3 MB with capacity 1,000), where one patch per object per pass into an
// unbounded queue grows by ≈ 18 MB a pass, to ≈ 340 MB (TestMemoryBounded).
//
// # Reconciler and dispatcher instruments
//
// [ReconcilerConfig.Meter] and [DispatcherConfig.Meter] create these
// instruments (nil: no-op), each with the attribute reconciler (the value of
// [ReconcilerConfig.Name]) or dispatcher (of [DispatcherConfig.Name]),
// default "statuspatch". The names are stable.
//
//	name                            kind                unit      extra attribute   measures
//	statuspatch.reconcile.duration  Float64Histogram    s         result (pass)     duration of a full pass
//	statuspatch.reconcile.objects   Int64Counter        {object}  result (object)   objects reconciled; changed means a patch was queued
//	statuspatch.reconcile.halted    Int64Counter        {pass}                      passes (and batches of enqueued keys) halted on a full queue
//	statuspatch.dispatch.duration   Float64Histogram    s         outcome           duration of a patch call
//	statuspatch.dispatch.patches    Int64Counter        {patch}   outcome           patch calls
//	statuspatch.dispatch.dropped    Int64Counter        {patch}   reason            patches dequeued and not applied
//	statuspatch.dispatch.in_flight  Int64UpDownCounter  {patch}                     patch calls in progress
//
// Attribute values: result of a pass is completed, halted, not_leader,
// error (the Source failed), canceled or closed (the queue); result of an
// object is unchanged, changed or error; outcome is one of the [Outcome]
// values; reason is not_leader, stale_epoch or shutdown ([DropReason]).
// Every patch a dispatcher dequeues is either dropped or applied, so with
// one dispatcher per queue:
//
//	statuspatch.queue.dequeued = statuspatch.dispatch.dropped + statuspatch.dispatch.patches + statuspatch.dispatch.in_flight
package statuspatch
