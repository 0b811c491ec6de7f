// Package controller wires the example HTTPRoute status controller from the
// quietpatch packages: informers feed a statuspatch.Reconciler that, while
// this replica holds a leader.Claimer's Lease, computes each route's status
// with routestatus, compares it with routestatus.Equal and queues a status
// merge patch for what changed only; a statuspatch.Dispatcher applies the
// patches with deadlines and fences them by leadership epoch. The command
// in the parent directory parses flags into [Options] and calls [Run]; tests
// and the e2e suite can run the same controller in-process, with fake or
// real clients.
//
// # Lifecycle
//
// [New] validates [Options] (an [*OptionError] names the bad field), builds
// the clients and wires everything; it starts nothing. [Controller.Run]
// listens on the metrics and health addresses, starts the informers, waits
// for their caches, and only then starts the dispatcher, the claimer and the
// reconciler: a replica that cannot see the cluster does not compete for the
// Lease. Run returns nil when its context is cancelled, after stopping the
// reconciler, then the dispatcher, then vacating the Lease — so that no
// patch of ours is sent after we gave the Lease up. It returns an error, after
// the same shutdown, when a part fails: the lease loop (say, RBAC forbids the
// Lease), the cache sync (Options.CacheSyncTimeout), an endpoint, or the
// dispatcher or reconciler stopping on their own.
//
// # Events
//
// Every informer event enqueues the routes it can affect, found through
// informer indexes: a Service by the routes that use it as a backend or mesh
// parent, a Gateway by its routes, a GatewayClass through its Gateways, a
// ReferenceGrant by the routes with backends in its namespace from another
// namespace, a Namespace by the routes in it. The periodic pass
// (Options.ReconcileInterval) is the safety net; there is no informer resync.
//
// # Metrics and health
//
// With Options.MetricsAddr (or MetricsListener) set, an OpenTelemetry SDK
// meter provider of the controller's own exports the library's instruments
// through the OTel Prometheus exporter to a Prometheus registry of its own
// (plus Go runtime and process collectors), served at /metrics. Names are
// translated as Prometheus expects: statuspatch.queue.depth.peak_ewma
// becomes statuspatch_queue_depth_peak_ewma, statuspatch.dispatch.patches
// becomes statuspatch_dispatch_patches_total, quietpatch.leader.is_leader
// (unit "1") becomes quietpatch_leader_is_leader_ratio; the README lists
// them all. /healthz and /readyz are served on Options.HealthAddr; see
// [Controller.Live] and [Controller.Ready].
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
// Options.Logger (nil discards) receives the controller's lifecycle
// records at info level (configuration, cache sync, leadership gained and
// lost, shutdown) and the library's records: one warning per halted pass,
// debug records per changed route with a cmp.Diff of its status.
package controller
