// Package reliability holds the end-to-end reliability tests of quietpatch:
// the example HTTPRoute status controller (examples/httproute-status) and
// the routestatus computation, run against the real local control plane of
// package cluster (kube-apiserver + etcd) while things go wrong.
//
// The package has no code of its own besides this documentation; its tests
// are its content (libparts_test.go holds every direct use of the library's
// API):
//
//   - TestLeastPrivilege: the controller binary runs under exactly the RBAC
//     of examples/httproute-status/deploy and every route converges; then,
//     under a copy of that RBAC whose httproutes/status grant is narrowed by
//     resourceNames, the status patch of one route is refused with 403,
//     counted as the dispatch outcome "forbidden", and not retried in a loop
//     (the audit log shows at most about one attempt per reconcile interval).
//   - TestGeneratedRoutesPassCRDValidation: varied, generated HTTPRoutes (up
//     to 32 parentRefs, other controllers' entries filling the parents list,
//     odd hostnames, many backends, cross-namespace references) are created,
//     their status computed by routestatus and sent as the example's merge
//     patch; the API server's CRD validation accepts every one (no 422).
//   - TestLeadershipMovesWhileQueueFull: the leader reaches the API server
//     through a FaultProxy; the API is made slow for it and its queue
//     filled, then stalled until its claim runs out and a second replica
//     takes the Lease. The audit log shows no status write by the old
//     holder after its claim ended; its drops are counted.
//   - TestFailoverKillLeader: three replicas, each its own process and
//     ServiceAccount; the leader is killed with SIGKILL three times. Routes
//     changed during each failover converge within lease duration + 2
//     intervals (+1 s slack), and the audit log, with claim periods
//     reconstructed from the Lease writes, shows no status write by an
//     identity that did not hold a current claim.
//   - TestSIGTERMNoStatusWriteAfterVacate and
//     TestRelinquishNoStatusWriteAfterVacate: a replica gives the Lease up
//     on purpose — the example controller by SIGTERM, a replica built from
//     the library's parts (leader.Claimer, statuspatch.PatchQueue and
//     Dispatcher) by Relinquish — while its status patches are held in a
//     FaultProxy that forwards them even after the client gave up
//     (Fault.Detach). Every version of the Lease and the routes is recorded
//     from the start (cluster.History) and the status writes that landed
//     are ordered against the Lease's writes by resourceVersion: none of
//     the replica's may land after its vacate or its successor's
//     acquisition; without a vacate, the successor must have waited out
//     the claim. The audit log tells the successor's writes from the
//     stopping replica's, whatever the latter's requests were answered.
//   - TestSIGTERMStopsWithinBound: a leading replica of the example
//     controller gets SIGTERM while the API server answers nothing — its
//     watches broken and its watch-list requests answered 429 until a
//     client-go reflector sleeps out a back-off of 6.4 s or more without
//     looking at its context, then every request held — and exits within
//     controller.Options.StopBound (PatchTimeout, plus the Lease's
//     CallTimeout, plus controller.StopGrace) and half of it as slack.
//   - TestRestartDoesNotInheritClaim: the leader is killed with SIGKILL
//     right after a renewal and started again at once with the same
//     --identity, three times; its first acquisition (a higher
//     spec.leaseTransitions) comes no earlier than a lease duration after
//     its predecessor's last renewal, and it never writes the Lease under
//     its predecessor's epoch.
//   - TestSlowOrFailingAPI: a controller with QP_RELIABILITY_FAULT_ROUTES
//     routes (default 2,000) behind a FaultProxy that adds 2 s latency,
//     stalls, answers 50% of requests with 503, then resets connections,
//     while routes change. Its heap stays under 3× its heap after the first
//     convergence + 16 MiB, patch calls end at their deadline, the changed
//     routes converge within 2 intervals (+3 s slack) after each fault
//     clears, and its goroutine count returns to its level before the faults.
//   - TestRecoversFromRestarts: etcd, then kube-apiserver, is restarted
//     under a running controller; routes changed after each restart
//     converge without restarting the controller (a restarted API server
//     may answer 403 until its RBAC authorizer has synced; the lease claimer
//     rides that out for up to a LeaseDuration).
//
// The tests share one control plane and one build of the controller,
// set up by the first test that needs them and torn down by TestMain, which
// also checks for leaked goroutines. Each test is bounded by its own
// deadline and polls instead of sleeping.
//
// Run them with
//
//	cd e2e && go test -count=1 -v ./reliability/
//
// They need Linux and the binaries of `make bins` (see package cluster).
package reliability
