// Package cluster runs a real, local Kubernetes control plane — etcd and
// kube-apiserver, built from the Go module proxy by `make bins` or taken from
// $KUBEBUILDER_ASSETS (see Binaries) — for end-to-end tests, benchmarks and
// demos of quietpatch.
//
// # What Start gives you
//
// Start (or StartT in a test) picks free ports on 127.0.0.1, generates a CA,
// a serving certificate for 127.0.0.1/localhost, an admin client certificate
// (CN=quietpatch-admin, O=system:masters) and a service-account signing key,
// and starts:
//
//   - etcd: loopback client and peer URLs, data in Dir/etcd-data,
//     --unsafe-no-fsync (speed over durability; a restart keeps the data);
//   - kube-apiserver: secure port on 127.0.0.1 only, --authorization-mode=RBAC,
//     ServiceAccount tokens (TokenRequest API), the audit policy AuditPolicy
//     writing JSON lines to Dir/audit.log, and shutdown flags that make a stop
//     take about a second instead of the default 15+ s.
//
// It waits for /readyz, writes an admin kubeconfig (KubeconfigPath), and
// installs the Gateway API standard-channel CRDs from the
// sigs.k8s.io/gateway-api module in the Go module cache (InstallGatewayAPI),
// waiting until they are Established. No controller manager or scheduler
// runs: there is no garbage collection, no namespace deletion, no default
// ServiceAccount per namespace.
//
// A cold start takes a few seconds (see Timings); tests in one package should
// share one ControlPlane where they can: a Shared starts it on the first Get,
// and RunShared, called from TestMain, stops it after the last test and checks
// for leaked goroutines.
//
// # Identities
//
// AdminConfig/AdminClient/AdminGatewayClient act as system:masters (client
// certificate; no rate limit). ConfigFor(ctx, ns, sa) creates a
// ServiceAccount and returns a rest.Config with a bearer token for it, so a
// controller under test can run with least privilege: give it exactly the
// rights it needs with Grant (a Role and RoleBinding) or GrantClusterRole.
// Its user name, as audit events and RBAC show it, is
// ServiceAccountUsername(ns, sa).
//
// # Observing the API server
//
//   - RequestTotals / RequestCount read apiserver_request_total from
//     /metrics, by verb, group, resource, subresource and code; compare a
//     reading before and after to count requests.
//   - AuditEvents / FindAuditEvents / WaitForAuditEvent read the audit log:
//     every write to a status subresource or a Lease, with who, when, verb,
//     object and response code.
//   - Record lists and watches one resource and keeps every version of its
//     objects (History), resourceVersion included: etcd's revision, one
//     counter for all objects, so writes to a Lease and to routes can be
//     ordered against each other; StatusChanges picks the status writes.
//
// # Faults and outages
//
// NewFaultProxy starts a reverse proxy on 127.0.0.1 in front of the API
// server. Its Fault can be changed at any time: added latency, a stall that
// holds requests until cleared or the client gives up, injected 5xx or 429
// (with Retry-After) answers with a probability, and connection resets.
// With Fault.Detach, a delayed request is forwarded after its latency even
// if its client gave up meanwhile — a write already on its way, which a
// client's cancel does not undo. RecordRequests notes when each request
// arrived, was forwarded and was answered, and with what status, so a test
// can check what a client sent when (no call inside a Retry-After window).
// Bearer tokens pass through it, so FaultProxy.ConfigFor keeps the identity.
// StopAPIServer/StartAPIServer, StopEtcd/StartEtcd and RestartAPIServer/
// RestartEtcd take a component down and bring it back on the same port with
// the same data, certificates and tokens.
//
// # Cleanup
//
// Each component runs in its own process group with a parent-death signal of
// SIGKILL, so nothing outlives the test binary, even when it is interrupted
// or times out. Stop sends SIGTERM, then SIGKILL after Options.StopTimeout,
// waits until the processes are gone and their ports free, and removes the
// temporary state directory. StartT registers Stop with t.Cleanup and keeps
// the directory (logs, audit log) when the test failed. A test binary that is
// killed or times out cannot run Stop: its processes still die with it, but
// its quietpatch-e2e-* directory under os.TempDir stays behind.
//
// # Binaries
//
// FindBinDir looks in $KUBEBUILDER_ASSETS first — controller-runtime
// envtest's convention: the folder `setup-envtest use -p path` prints, with
// upstream kube-apiserver and etcd binaries — else in $QP_BIN_DIR, else in the
// .bin directory of the e2e module (e2e/.bin), where `make bins` links the
// binaries it builds from the Go module proxy (or, with KUBEBUILDER_ASSETS
// set, the envtest ones, without building). If kube-apiserver or etcd is
// missing, Start fails with ErrBinariesMissing and a message that names the
// file and says what to do.
//
// Every flag the harness passes is an upstream one, nothing
// quietpatch-specific: etcd's are in the flag set of etcd 3.6 and 3.7 (and so
// of ./cmd/etcd, which is etcd's own main), kube-apiserver's in that of the
// pinned release. A binary of an older release that lacks a flag fails to
// start, and the kept kube-apiserver.log or etcd.log names the flag.
//
// The harness needs Linux. The command ./cmd/localcluster (`make cluster`)
// runs a control plane until interrupted, for poking at it with kubectl.
package cluster
