// Package examplee2e runs the example HTTPRoute status controller
// (examples/httproute-status) the way a cluster runs it — several replicas
// as separate processes, under a ServiceAccount holding exactly the RBAC the
// example ships, competing for one Lease — against the local control plane
// of package cluster, and checks what it writes. Its tests are the example's
// end-to-end tests; cmd/demo (`make demo`) tells the same story with 1,000+
// routes, a change of a few of them and a leader killed with SIGKILL.
//
// # Pieces
//
//   - BuildController builds the controller command from the examples
//     module (found by ExamplesDir) with `go build`.
//   - LoadRBAC reads the ClusterRoles, Roles and bindings from the
//     example's deploy directory (DeployDir); RBAC.Apply grants exactly
//     those rules to a ServiceAccount.
//   - Deploy creates the ServiceAccount, grants it the RBAC, writes a
//     kubeconfig with a TokenRequest token for it (WriteKubeconfig), starts
//     the replicas with their flags (Config), each with its own metrics and
//     health address on free 127.0.0.1 ports and its own log file, and
//     waits until every replica is ready. Deployment.WaitLeader reads the
//     Lease; Replica.Kill is a SIGKILL, Replica.Stop a SIGTERM, and
//     Deployment.Restart starts an exited replica again with its identity.
//   - Install creates fixtures (fixtures.Set.Objects) as the admin with
//     bounded concurrency; ExpectFixtures, CheckRoute and
//     Expectations.Census check the statuses read back from the server.
//   - Replica.Scrape parses a replica's /metrics (Metrics); CountPatches
//     reads the API server's count of HTTPRoute status PATCH requests.
//     WaitPasses, Settle and PatchesOver measure "intervals" by the
//     leaders' finished reconcile passes rather than by the wall clock, so
//     a slow machine stretches the window instead of failing the check.
//
// # Processes
//
// Each replica runs in its own process group with a parent-death signal of
// SIGKILL, forked from an OS thread that lives as long as the Deployment, so
// no replica outlives the test or demo process however it ends.
// Deployment.Stop stops them all and waits until they have exited.
package examplee2e
