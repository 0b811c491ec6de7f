// Package statuspatch keeps the status subresource of many Kubernetes
// objects up to date with a bounded patch queue between a reconciler that
// patches only what changed and a dispatcher that applies patches under a
// leadership claim.
//
// Most controllers use the parts through quietpatch.New (package
// github.com/quietpatch/quietpatch), which builds them for one resource,
// runs them in the right order and documents the guarantees, the metric
// names and the logs. This package documents each part's own contract.
//
//	objects ──▶ Reconciler ──(changed only: ReserveKey → build → Send)──▶ PatchQueue ──▶ Dispatcher ──▶ PATCH …/status
//	             leader only                 bounded, keyed                 always draining, claim-scoped
//
// # PatchQueue
//
// [PatchQueue] is a bounded FIFO queue with four rules:
//
//   - Bounded. Items waiting plus outstanding reservations never exceed the
//     capacity ([PatchQueue.SetCapacity] changes it). An item gives its slot
//     back when a consumer receives it. A producer never blocks unless it
//     asks to ([PatchQueue.Send] with a context): [PatchQueue.Reserve] and
//     [PatchQueue.TrySend] fail at once with [ErrFull] and count the drop.
//   - Reserve first. A reservation ([Permit]) is taken before the patch is
//     built, so a full queue costs no patch building; it is then sent or
//     released, exactly once.
//   - Latest wins per key. With QueueConfig.Key, a newer item for a key
//     that is waiting replaces it in place (superseded), needing no free
//     slot — also through [PatchQueue.ReserveKey], which grants a permit for
//     a waiting key when the queue is full and keeps the slot for it if a
//     consumer takes the waiting item meanwhile.
//   - One in flight per key. While an item of a key is in flight (received,
//     not yet Done), the next item of that key waits; consumers take the
//     next eligible item, in FIFO order across keys.
//
// Items older than QueueConfig.MaxAge when a consumer would take them are
// dropped instead (reason expired). [PatchQueue.Close] refuses producers;
// consumers drain what is left. The cost of each operation, measured
// against a buffered channel and client-go's workqueue, is in
// docs/performance.md (BenchmarkQueue).
//
// # StatusComputer and Reconciler
//
// A [StatusComputer] says how to name an object, read its current status,
// compute the desired one, compare them and build a patch. Package
// statuspatch/conditions has comparisons of condition lists and a complete
// StatusComputer for the common status of conditions and
// observedGeneration. The [Reconciler] applies it while this replica leads:
// a full pass every interval, one on gaining a new epoch, single keys on
// demand. An unchanged object costs Current, Desired and Equal and no
// allocation by the library. A pass stops at the first changed object that
// needs a slot and finds none (halted), refreshes the patches still waiting
// from earlier passes, and the next pass resumes after it — as soon as half
// of the queue is free again — so no object starves and a backlog larger
// than the queue keeps the dispatcher busy.
//
// # Dispatcher
//
// The [Dispatcher] drains the queue, leader or not, and applies each patch
// through a [Patcher] only while the claim it was computed under is current
// for this replica; see [Dispatcher] for the exact rules, the adaptive
// in-flight limit and Retry-After. It implements leader.Writer: a
// leader.Claimer quiesces it before giving the Lease up. [MergePatch] is a
// JSON merge patch of a status with a resourceVersion precondition;
// [NewStatusPatcherForConfig] and [NewDynamicStatusPatcher] send it.
//
// # Sizing
//
// Capacity and interval go together: the queue should hold what the API
// server absorbs in one interval, interval / per-patch latency, where the
// latency includes the client's own rate limit ([SuggestCapacity]).
// quietpatch.New does it for you, from the drain rate the dispatcher
// measures. Measured on 2 cores against a real kube-apiserver (see
// docs/performance.md): one patch in flight ≈ 144 patches/s, 16 or more ≈
// 300–600/s; client-go's default limiter (QPS 5) allows 50 patches per 10 s
// interval whatever the server does.
//
// # Instruments
//
// QueueConfig.Meter, ReconcilerConfig.Meter and DispatcherConfig.Meter
// create the instruments listed in the package documentation of
// github.com/quietpatch/quietpatch, all with the attribute pipeline (the
// configs' Name). A nil Meter creates none; [PatchQueue.Stats],
// [Reconciler.Stats] and [Dispatcher.Stats] report the same counters
// either way.
package statuspatch
