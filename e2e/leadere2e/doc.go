// Package leadere2e holds the end-to-end tests of package leader against a
// real kube-apiserver and etcd (the local control plane of package cluster).
//
// The package has no API of its own; its tests are the point. Every claimer
// runs under its own ServiceAccount, granted exactly the verbs the claimer
// uses on leases in the test's namespace — get, create, update and watch (it
// never lists) — and with short timings (LeaseDuration 2s, RenewGrace 1s,
// RetryPeriod 250ms, CallTimeout 1s) so that hand-overs take seconds. What
// they check:
//
//   - mutual exclusion: three claimers race for one Lease, and at every
//     sampled instant — through renewals, relinquishments and a vacate — at
//     most one believes it holds a current claim; the audit log shows that
//     only those three identities wrote the Lease, with create and update;
//   - failover after a crash: a holder that can neither renew nor vacate (it
//     reaches the API server through a fault proxy that stalls every
//     request, and is cancelled) is succeeded, with no vacate in between,
//     never before its claim ran out and within RetryPeriod (+ slack) of
//     when the successor saw it run out;
//   - failover after a vacate: a holder that shuts down normally vacates,
//     and its successor acquires after the vacate and before the holder's
//     claim would have run out as the successor saw it;
//   - epochs: acquisitions — including the same holder acquiring again —
//     carry strictly increasing epochs, as each claimer observes them, as an
//     administrator's watch of the Lease records them, and as
//     spec.leaseTransitions finally stores them;
//   - relinquish: another replica takes over at once (after the vacate,
//     before the claim would have run out), and the relinquishing one stays
//     out of the race for its back-off even while the Lease is free;
//   - failure surfaces: a claimer that lacks RBAC on leases (or finds no
//     Lease with RequireExisting) ends Run promptly with that error, and
//     Ready reports it.
//
// The order of events and the epochs are asserted exactly, from the
// claimers' subscriptions and from an administrator's watch of the Lease;
// safety bounds (never before a claim ran out or a back-off ended) carry
// no slack; only how late something may happen is bounded with slack (3 s:
// two cores shared with other jobs; see its declaration).
//
// Measured failover times are logged with t.Logf; run with -v to see them:
//
//	cd e2e && go test -count=1 -v -run . ./leadere2e/
//
// The tests share one control plane, started by the first test and stopped
// by TestMain, and need the prebuilt binaries in e2e/.bin (`make bins`).
package leadere2e
