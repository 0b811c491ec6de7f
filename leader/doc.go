// Package leader elects one replica of a controller through a
// coordination.k8s.io/v1 Lease, and tells every replica who holds it, until
// when, and under which epoch. Most callers meet it through quietpatch.New,
// which runs a [Claimer] for its pipeline; a Claimer's methods are safe for
// concurrent use, and its Run runs once.
//
// # Claims
//
// A [Claim] is one observation: Holder, Expiry on the observer's own clock,
// and Epoch. Work done while leader — a status patch, say — is tagged with
// the epoch it was produced under and applied only while
// Current().IsCurrentFor(Identity(), now) holds and the epoch is unchanged:
//
//	func callCtx(ctx context.Context, c *leader.Claimer, epoch int64, timeout time.Duration) (context.Context, context.CancelFunc, bool) {
//		now := time.Now()
//		claim := c.Current()
//		if !claim.IsCurrentFor(c.Identity(), now) || claim.Epoch != epoch {
//			return nil, nil, false // produced under another leadership, or we are not leader
//		}
//		ctx, cancel := context.WithTimeout(ctx, min(timeout, claim.Remaining(now)))
//		return ctx, cancel, true
//	}
//
// [Claimer.Current] never blocks on I/O; [Claimer.Subscribe] tells of
// every change.
//
// # The Claimer
//
// [NewClaimer] takes a Lease client ([NewLeaseClient] of the controller's
// rest.Config) and a [Config]; [Claimer.Run] then loops until its context
// is cancelled:
//
//   - Lease missing: create it with ourselves as holder (unless
//     Config.RequireExisting, in which case Run fails with [ErrLeaseNotFound]).
//   - Lease free (spec.holderIdentity empty) or its holder's claim run out:
//     acquire it — write holderIdentity, acquireTime, renewTime,
//     leaseDurationSeconds and a new spec.leaseTransitions.
//   - Lease ours: renew it (renewTime) once less than RenewGrace of our claim
//     remains; retry every RetryPeriod until it succeeds or the claim runs
//     out, at which point we stop reporting ourselves as holder.
//   - Held by another replica whose claim is current: wait, watching the
//     Lease.
//   - Run's context cancelled: quiesce the writers (see below); if every
//     write was answered and the Lease carries our claim, clear
//     holderIdentity (vacate) with a fresh CallTimeout, so a successor
//     takes over at once instead of waiting for our claim to run out; then
//     return ctx.Err().
//
// Every write is an update carrying the resourceVersion last read. A 409
// Conflict means somebody else wrote in between: the claimer re-reads the
// Lease and decides again; it never overwrites. Every request has its own
// deadline (CallTimeout; for a renewal, also no later than our claim's end).
//
// [Claimer.Relinquish] vacates on purpose and keeps the replica out of the
// race for a back-off, to hand leadership to another replica (during a
// rolling update, or when this replica knows it is unhealthy).
//
// # Time and clock skew
//
// A holder's renewTime is written on the holder's clock and is never
// compared with ours. Another replica's claim expires LeaseDuration (its
// spec.leaseDurationSeconds) after the local time we last saw the Lease
// change — any change of resourceVersion, holder or renewTime. Our own claim
// expires LeaseDuration after the local time our successful acquire or renew
// request was sent, which is never later than when any other replica saw it
// land. So every replica's view of a claim ends no earlier than the holder's
// own view; clocks need only run at about the same rate, not agree.
//
// docs/leader.md has a timeline with the defaults.
//
// # Epochs
//
// The epoch is the Lease's spec.leaseTransitions. This claimer increments it
// on every acquisition — including when the same holder acquires again
// after its claim ran out or after it vacated — so an epoch identifies one
// continuous period of leadership, and work from an earlier period can be
// fenced even when the holder's identity did not change. If the Lease is
// deleted and re-created, or another party writes a lower count, the next
// acquisition still uses an epoch above every epoch this replica has seen,
// so a replica's own epochs strictly increase.
//
// Mixed on one Lease with k8s.io/client-go/tools/leaderelection, the two
// exclude each other correctly, but client-go's epochs do not mark its
// same-holder re-acquisitions (docs/leader.md): use one implementation per
// Lease.
//
// # Watching
//
// Every replica, leader or not, watches the Lease (a watch on
// metadata.name=<Name>, re-established whenever it ends), and re-reads the
// Lease with a GET when the watch reports a state it does not know — the GET
// rather than the event is what it acts on, so a lagging event can never
// make the holder believe it lost. A vacated Lease is thus taken over as
// soon as the watch delivers the change. While the watch is broken, a
// replica that does not hold the Lease re-reads it every RetryPeriod. A
// holder does not read between its own writes: a conflict on the next
// renewal tells it the Lease changed.
//
// # Failures and readiness
//
// Transient failures (timeouts, 5xx, 429, conflicts, connection errors) are
// retried every RetryPeriod and never end Run: while they outlast our claim,
// we are simply not the holder. Failures retrying cannot fix — an invalid
// request, the Lease missing with RequireExisting, and Unauthorized or
// Forbidden once they have lasted a full LeaseDuration (a kube-apiserver that
// has just restarted refuses requests until its authorizer has synced, and
// that must not stop a healthy replica) — end Run with that error, and
// [Claimer.Ready] reports an error from then on (it also does before Run
// starts), so a readiness probe turns a dead lease loop into a visible,
// restartable failure:
//
//	func readyz(claimer *leader.Claimer) http.HandlerFunc {
//		return func(w http.ResponseWriter, _ *http.Request) {
//			if err := claimer.Ready(); err != nil {
//				http.Error(w, err.Error(), http.StatusServiceUnavailable)
//			}
//		}
//	}
//
// # Permissions
//
// On leases in Config.Namespace: get, create (unless RequireExisting),
// update, and watch. Without watch the claimer still works, re-reading the
// Lease every RetryPeriod, and logs one warning.
//
// # Giving the lease up: writers
//
// Work done under a claim that must be answered before the Lease goes —
// the status patch calls of a quietpatch pipeline — registers as a [Writer]
// ([Claimer.AddWriter]; quietpatch.New registers its dispatcher).
// When this replica gives the Lease up on purpose (Relinquish, or Run's
// context cancelled), the claimer asks every writer to quiesce while it
// still reports the claim as its own: no new write starts, writes in flight
// run to the API server's answer. It vacates only if every write made under
// the claim got an answer that settles it; otherwise it leaves the Lease
// naming this replica, to run out, so that a successor waits a full
// LeaseDuration rather than race a write that may still land. When the
// claim ends any other way (lost, run out, a new epoch), writers see it in
// the published claim and cancel their calls.
//
// # Identity
//
// [DefaultIdentity] is unique per process (the pod name plus a random
// suffix). A Lease naming our identity with an epoch this process did not
// acquire was written by an earlier process with the same identity (a
// restarted container keeps its pod name): the claimer waits it out like
// another holder's claim, publishes it with a zero Expiry (never current
// for us), and never vacates it.
//
// # The Lease client
//
// A Lease request must never wait in a client-side rate limiter: a renewal
// sent late is a claim lost. [NewLeaseClient] builds the client from the
// controller's rest.Config without one; [NewClaimer] (and quietpatch.New
// and NewSharded) reject, with a ConfigError naming Leases, a client with
// client-go's token-bucket limiter, and log one warning at Run for a
// limiter of another kind. docs/leader.md has the requests a second a
// deployment sends. Every Lease a Claimer creates or acquires carries the
// label [LeaseLabel], so that a ValidatingAdmissionPolicyBinding can select
// a deployment's Leases as params (the HTTPRoute example's fence).
//
// # Observability
//
// Logging goes to Config.Logger (nil discards): an info record when this
// replica acquires the lease (with the epoch), stops holding it (with the
// reason), vacates it or decides not to, and when Run stops; a debug
// record when it sees another holder (or none) take over and when requests
// start or stop failing — nothing per unchanged renewal —; one error record
// when Run fails. Config.Meter gets the quietpatch.leader instruments,
// observed at collection time from the claimer's own counters; their table
// is in docs/metrics.md, registered while Run runs. Constructors reject
// invalid input with a *quietpatch.ConfigError naming the field.
//
// # Testing
//
// Config.Clock accepts k8s.io/utils/clock/testing's FakeClock; the claimer
// does all waiting on it. The package's own tests drive claimers against
// k8s.io/client-go/kubernetes/fake with a reactor that enforces
// resourceVersion preconditions (the fake does not), including several
// claimers on one Lease. Request deadlines are context deadlines, measured
// on the real clock.
package leader
