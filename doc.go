// Package quietpatch keeps the status of many Kubernetes objects up to date
// without flooding the API server and without unbounded memory.
//
// It is a set of small packages meant to be composed by a controller:
//
//   - [github.com/quietpatch/quietpatch/ewma]: a Peak-EWMA gauge, a
//     time-weighted and peak-sensitive average of a value that changes at
//     events, such as a queue's depth. An instant sample of a queue's depth
//     misses the bursts that matter; the Peak-EWMA jumps to every peak and
//     decays with a time constant.
//   - [github.com/quietpatch/quietpatch/leader]: claims on a
//     coordination.k8s.io/v1 Lease. A Claim says who holds the lease, until
//     when (on the local clock) and under which epoch, so work produced under
//     one leadership can be fenced from the next.
//   - [github.com/quietpatch/quietpatch/statuspatch]: the bounded PatchQueue
//     (reserve a slot before building a patch, coalesce per key, drop and
//     count on overflow), the StatusComputer contract (compute the desired
//     status, compare with the current one, patch only what changed), the
//     Reconciler that turns objects into patches while leader, and the
//     Dispatcher that applies them with a deadline no later than the end of
//     our claim, dropping anything produced under another epoch.
//
// The flow of one status write:
//
//	informer/lister ──▶ Reconciler ──(changed only; Reserve → build → Send)──▶ PatchQueue
//	                        ▲  leader only                                         │ bounded
//	Lease ◀── leader.Claimer ── Claim{Holder, Expiry, Epoch} ──▶ Dispatcher ◀──────┘
//	                                                                │ deadline = min(PatchTimeout, claim left)
//	                                                                ▼
//	                                                  PATCH …/status (merge, resourceVersion)
//
// Every step is measured through OpenTelemetry instruments (the application
// chooses the SDK; a nil Meter means no-op) and logs through log/slog.
//
// The examples directory holds a complete Gateway API HTTPRoute status
// controller built from these packages.
package quietpatch
