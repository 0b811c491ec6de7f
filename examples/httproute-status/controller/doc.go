// Package controller wires the example HTTPRoute status controller from
// the quietpatch library: informers feed one status pipeline
// (quietpatch.New: a leader.Claimer, a reconciler, a bounded patch queue
// and a dispatcher) that, while this replica holds the Lease, computes each
// route's status with routestatus, compares it with routestatus.Equal and
// queues a status merge patch for what changed only; the dispatcher applies
// the patches with deadlines and fences them by leadership epoch. The
// command in the parent directory parses flags into [Options] and calls
// [Run]; tests and the e2e suite can run the same controller in-process,
// with fake or real clients.
//
// # Lifecycle
//
// [New] validates [Options] (an [*OptionError] names the bad field), builds
// the clients and wires everything; it starts nothing. [Controller.Run]
// listens on the metrics and health addresses, starts the informers and
// runs the pipeline, whose own Run (quietpatch.Controller.Run) does the
// rest: it waits until every informer has synced (the pipeline's Source
// reports synced only then, bounded by Options.CacheSyncTimeout) — a
// replica that cannot see the cluster does not compete for the Lease —,
// and on cancellation stops the reconciler, then the dispatcher, then
// vacates the Lease, so that no patch of ours is sent after we gave the
// Lease up. Run then stops the informers and the endpoints and returns
// nil; or, after the same shutdown, an error when a part fails: the lease
// loop (say, RBAC forbids the Lease), the cache sync, an endpoint, or the
// dispatcher or reconciler stopping on their own. It returns at most
// [Options.StopBound] after ctx ends, whether the API server answers or
// not: it waits for the informers only within [StopGrace]. See the
// quietpatch package documentation for the details of the start and stop
// order.
//
// # Events
//
// An HTTPRoute's events enqueue it (the pipeline registers that handler on
// the informer it was given). Every other informer event enqueues the
// routes it can affect, found through informer indexes: a Service by the routes that use it as a backend or mesh
// parent, a Gateway by its routes, a GatewayClass through its Gateways, a
// ReferenceGrant by the routes with backends in its namespace from another
// namespace, a Namespace by the routes in it. The periodic pass
// (Options.ReconcileInterval) is the safety net; there is no informer resync.
//
// # Metrics and health
//
// An OpenTelemetry SDK meter provider of the controller's own exports the
// library's instruments through the OTel Prometheus exporter to a
// Prometheus registry of its own (plus Go runtime and process collectors),
// served at /metrics on Options.MetricsAddr (or MetricsListener). Names
// are translated as Prometheus expects: quietpatch.queue.depth becomes
// quietpatch_queue_depth, quietpatch.dispatch.patches becomes
// quietpatch_dispatch_patches_total, quietpatch.leader.is_leader becomes
// quietpatch_leader_is_leader; the README lists them all. /healthz and
// /readyz are served on Options.HealthAddr: see [Controller.Live] and
// [Controller.Ready], which are the pipeline's.
//
// # Permissions
//
// list and watch on httproutes, gateways, gatewayclasses and
// referencegrants (gateway.networking.k8s.io) and on services and
// namespaces; patch on httproutes/status; in the Lease's namespace, create
// on leases and get, update and watch on the Lease. deploy/rbac.yaml grants
// exactly these, and a test checks every request the controller makes
// against it.
//
// # Logging
//
// Options.Logger (nil discards) receives the controller's records at info
// level (configuration, the ReferenceGrant version found) and the
// library's: the pipeline's start, cache sync and shutdown, the claimer's
// acquiring, losing and vacating the Lease, one warning per halted pass,
// and debug records per changed route with a cmp.Diff of its status.
package controller
