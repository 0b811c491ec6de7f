// Package quietpatch keeps the status of many Kubernetes objects up to date
// without flooding the API server and without unbounded memory: nothing is
// patched that did not change, the memory is bounded whatever the API
// server does, every write is measured, and a replica that lost its Lease
// does not keep writing.
//
// # One call
//
// A status controller for one resource is a Source (the objects, from an
// informer's cache), a StatusComputer (their desired status, compared with
// the current one) and a Patcher (the write), given to [New]:
//
//	func run(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, statusCfg *rest.Config) error {
//		gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
//		informers := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
//		inf := informers.ForResource(gvr).Informer()
//		if err := inf.SetTransform(source.ToTyped[Widget]()); err != nil { // cache typed Widgets
//			return err
//		}
//		computer, err := conditions.New(conditions.Config[*Widget]{
//			Conditions: widgetConditions, // func(*Widget) ([]metav1.Condition, error): all you write
//		})
//		if err != nil {
//			return err
//		}
//		statusCfg.QPS = -1 // no client-side limit on the status client (see below)
//		patcher, err := statuspatch.NewStatusPatcherForConfig(statusCfg, gvr, "example.com/widget-status")
//		if err != nil {
//			return err
//		}
//		ctrl, err := quietpatch.New(source.Informer[*Widget](inf), computer, patcher, quietpatch.Config{
//			Leases: kube.CoordinationV1(),
//			Lease:  leader.Config{Namespace: "widgets-system", Name: "widget-status"},
//		})
//		if err != nil {
//			return err
//		}
//		informers.Start(ctx.Done())    // returns at once; the informers run until ctx ends
//		defer informers.Shutdown()     // after Run: the dispatcher reads the cache until Run returns
//		return ctrl.Run(ctx)           // blocks until ctx is cancelled
//	}
//
// Example has it complete, runnable on client-go's fakes. Run waits for the
// caches to sync — a replica with an empty cache must not lead —, then
// competes for the Lease, reconciles every Interval, at once on gaining the
// Lease, and on every event of the informer; [Controller.Ready] and
// [Controller.Live] are the probes, [Controller.Stats] the counters, no
// metrics SDK needed. Statuses that depend on other resources declare them
// once in Config.Dependencies. The parts stay public: package leader (the
// Lease), package statuspatch (queue, reconciler, dispatcher), package ewma.
//
// The status client. Give the patcher a rest.Config of its own with the
// client-side rate limiter off (QPS -1): client-go's default of 5 requests
// a second caps a controller at 5 patches a second, whatever the server
// absorbs. The API server's Priority and Fairness protects the server; the
// dispatcher's adaptive in-flight limit protects its latency. Keep
// client-go's default limiter on the Lease client, so renewals never wait
// behind patches. [statuspatch.NewStatusPatcherForConfig] also leaves a
// 429's Retry-After to the dispatcher, which then holds every call back.
//
// # What holds
//
// Nothing patched that did not change. A pass queues the key of an object
// only when the StatusComputer's Equal says its desired status differs
// from the current one, and the dispatcher computes both again when it
// takes the key and sends a patch only if they still differ; an unchanged
// object costs its computation and no allocation. Idle, a controller
// writes nothing: its own writes come back as informer events and find
// nothing to do.
//
// Bounded memory. Each lane of the queue holds at most Capacity keys
// (default 50,000: a few MiB), and a key waits at most once; calls in
// flight, and the goroutines making them, never exceed the in-flight
// limit. A pass that finds its lane full stops and resumes where it
// stopped.
//
// Latest state, one call per object at a time. The patch is built by the
// worker about to send it, from the object as the cache has it then, so it
// is never older than the cache; at most one call per object is in flight,
// and an object that changes meanwhile is served again after it. A failed
// patch is not retried: the next pass finds the object still changed.
//
// Fresh changes first. Keys of events (an edit of the object, an event of
// a dependency that affects at most 16 objects, Enqueue) are served before
// the keys of passes — at most 8 in a row while pass keys wait — so an
// edit does not wait behind a storm's backlog. One event that affects more
// objects makes a pass instead.
//
// No stale write after a leadership change — to this exact extent. A patch
// is sent only if, at the moment of the call, our claim is current on the
// local clock, the patch was computed under that claim's epoch, and at
// least a margin of the claim is left; its call's deadline is at most what
// is left of the claim, and the call is cancelled the moment the claim ends
// involuntarily (lost, run out, new epoch). Cancelling a call does not stop
// a write the API server has already begun: such a write may still be
// committed after our claim ended, even after a successor took over. Every
// patch carries a metadata.resourceVersion precondition, and that is what
// makes a late write fail whenever the object changed since we read it —
// in particular once the successor wrote its own status. When this replica
// gives the Lease up on purpose (Run's context cancelled, or
// leader.Claimer.Relinquish), no new call starts and the calls in flight are
// not cancelled: they run until the API server answers. The Lease is
// vacated only if every call made under the claim got an answer that
// settles it (success or a 4xx refusal); then no write of ours lands after
// the vacate. If a call ended without one (a timeout, a broken connection,
// a 5xx), the Lease is not vacated and a successor acquires only after a
// full lease duration. A restarted process never inherits its
// predecessor's claim: the default identity is unique per process, and a
// claim under our identity that this process did not make is waited out
// like anyone else's.
//
// # Stop order
//
// Run stops, when its context is cancelled, in this order: the reconciler
// (no new key); the dispatcher (no new call; the calls in flight run to
// their answer, at most PatchTimeout; what is queued is dropped and
// counted, reason shutdown — the next leader recomputes it); then the
// Lease (vacated or left to run out, as above). It returns once all have
// stopped. Whoever composes the parts without [Controller] gets the same
// from leader.Claimer, which quiesces every statuspatch.Dispatcher built on
// it before it vacates. Stop the informers only after Run returned: the
// dispatcher reads the cache until then.
//
// # Shards
//
// One replica holds every object of the resource in its cache and makes
// every write. When that is the limit — memory, or writes a single
// replica's connection carries —, [NewSharded] spreads the resource over
// the replicas: Config.Shards = K splits the UIDs' 64-bit FNV-1a hash
// space into K ranges (package statuspatch/shard), and each replica runs,
// for each shard it holds, an informer on that range and the pipeline
// [New] builds, under the shard's own Lease. With R replicas alive, a
// replica's cache holds about N/R objects, the writes spread over the
// replicas, and a failover re-lists one shard, not the resource. K <= 1 is
// the unsharded pipeline (NewSharded then builds exactly New's, on one
// informer).
//
//	func runSharded(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, statusCfg *rest.Config, widgetConditions func(*unstructured.Unstructured) ([]metav1.Condition, error)) error {
//		gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
//		widgets := dyn.Resource(gvr)
//		lw := &cache.ListWatch{ // NewSharded adds each shard's selector to opts
//			ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
//				return widgets.List(ctx, opts)
//			},
//			WatchFuncWithContext: widgets.Watch,
//		}
//		computer, err := conditions.New(conditions.Config[*unstructured.Unstructured]{Conditions: widgetConditions})
//		if err != nil {
//			return err
//		}
//		statusCfg.QPS = -1
//		patcher, err := statuspatch.NewStatusPatcherForConfig(statusCfg, gvr, "example.com/widget-status")
//		if err != nil {
//			return err
//		}
//		sharded, err := quietpatch.NewSharded(lw, computer, patcher, quietpatch.Config{
//			Leases: kube.CoordinationV1(),
//			Lease:  leader.Config{Namespace: "widgets-system", Name: "widget-status"},
//			Shards: 8, // fixed for the deployment: the Lease names contain it
//		})
//		if err != nil {
//			return err
//		}
//		return sharded.Run(ctx) // joins the group, runs the shards it holds, stops each in the safe order
//	}
//
// What holds. Every guarantee above holds per shard Lease,
// <Lease.Name>-shard-<i>-of-<K>: patches fenced by its epoch, calls
// quiesced before it is vacated, no claim inherited by a restarted
// process, an identity per process. Nothing orders writes across shards:
// two shards' objects may be written by different replicas, in any order,
// under unrelated epochs. [Sharded.Enqueue] of a key reaches only the
// shard held here whose cache has the object, and is ignored otherwise —
// that shard's holder hears the same events. Dependencies stay full
// caches, one per replica, shared by its shards.
//
// How R is known. Each replica keeps a membership Lease,
// <Lease.Name>-member-<8 hex digits of the FNV-1a of its identity>,
// renewed like a claim and deleted when Run returns, and lists the
// namespace's Leases every RetryPeriod. A replica is alive, and a shard
// held, while its Lease changed less than its leaseDurationSeconds ago on
// this replica's clock (observed time, as for claims: clock skew between
// replicas does not matter). A replica runs at most ⌈K/R⌉ shards; when a
// replica joins, the one holding the most gives up one shard at a time
// (leader.Plan), and the shard Leases decide every race.
//
// What a move costs. The giver stops the shard's pipeline as Run does when
// its context ends (SIGTERM): no new key, the calls in flight answered,
// then the Lease vacated (or, after a call without an answer, left to run
// out). The taker starts an informer on the shard's range, lists and
// watches it, competes for the Lease once that cache synced, acquires,
// and makes a full pass over the shard. A replica killed with -9 vacates
// nothing: its shard Leases and its membership Lease run out one lease
// duration after they last changed (as each survivor observed it; the
// shard's new claimer counts from the group's observation, not from its
// own start), then each shard costs the same list, sync, acquisition and
// pass.
//
// The server's sharded list and watch. The informers set
// metav1.ListOptions.ShardSelector (KEP-5866; the API server's feature
// gate ShardedListAndWatch, alpha in Kubernetes 1.36, off by default).
// A server without it ignores the selector: NewSharded tells so from the
// objects returned (one outside the shard's range), logs a warning once,
// and filters each shard client-side. Each shard's cache then still holds
// only its range, but transfers and decodes the whole resource at every
// list and watch event.
//
// RBAC, in Lease.Namespace: leases list and watch (the group's list, each
// claim's watch), create, get, update and delete. The member Leases' names
// derive from each process's identity, so no resourceNames can name them;
// give the Leases a namespace of their own.
//
// K is fixed per deployment: the shard Leases' names contain it. A
// deployment with another K competes for other Leases — the two sets are
// independent, and while replicas of both run, both may write the same
// object (the resourceVersion precondition fails one of two writes made
// from the same read, nothing more). To change K, scale the old deployment
// to 0 replicas first, then roll out the new K; a rolling update that keeps
// K needs nothing.
//
// # Metrics
//
// Config.Meter (an OpenTelemetry meter; nil means none) receives the
// instruments below. Every statuspatch instrument carries the attribute
// pipeline (Config.Name); leader instruments carry k8s.namespace.name and
// k8s.lease.name. A [Sharded] with K > 1 adds the quietpatch.shard
// instruments, with pipeline = Config.Name and identity = this replica's;
// each shard it runs reports the statuspatch and leader instruments with
// the attribute shard (its index) added — pipeline stays Config.Name, and
// k8s.lease.name is <Lease.Name>-shard-<i>-of-<K> — only while this
// replica runs that shard:
// whether a shard is led is the maximum of quietpatch.leader.is_leader
// over the replicas, by k8s.lease.name. Counters and gauges are observable: they cost nothing per
// patch, as the SDK reads the library's own counters at collection time;
// the histograms are recorded once per patch call or pass. The Prometheus
// name is what the OTel Prometheus exporter makes of it (dots to
// underscores, _total on counters, _seconds for the unit s; attribute dots
// to underscores).
//
//	name                                   kind       unit          attributes and values                                 Prometheus name
//	quietpatch.queue.enqueued              counter    {key}         pipeline                                              quietpatch_queue_enqueued_total
//	quietpatch.queue.dequeued              counter    {key}         pipeline                                              quietpatch_queue_dequeued_total
//	quietpatch.queue.superseded            counter    {key}         pipeline                                              quietpatch_queue_superseded_total
//	quietpatch.queue.dropped               counter    {key}         pipeline, reason: full closed                         quietpatch_queue_dropped_total
//	quietpatch.queue.depth                 gauge      {key}         pipeline                                              quietpatch_queue_depth
//	quietpatch.queue.depth.peak_ewma       gauge      {key}         pipeline                                              quietpatch_queue_depth_peak_ewma
//	quietpatch.queue.capacity              gauge      {key}         pipeline                                              quietpatch_queue_capacity
//	quietpatch.queue.wait                  histogram  s             pipeline                                              quietpatch_queue_wait_seconds
//	quietpatch.reconcile.passes            counter    {pass}        pipeline, result: completed halted not_leader         quietpatch_reconcile_passes_total
//	                                                                error canceled closed
//	quietpatch.reconcile.duration          histogram  s             pipeline, result (as passes)                          quietpatch_reconcile_duration_seconds
//	quietpatch.reconcile.objects           counter    {object}      pipeline, result: unchanged changed error             quietpatch_reconcile_objects_total
//	quietpatch.reconcile.halted            counter    {pass}        pipeline                                              quietpatch_reconcile_halted_total
//	quietpatch.dispatch.patches            counter    {patch}       pipeline, outcome: ok conflict not_found forbidden    quietpatch_dispatch_patches_total
//	                                                                unauthorized invalid throttled timeout canceled error
//	quietpatch.dispatch.duration           histogram  s             pipeline, outcome (as patches)                        quietpatch_dispatch_duration_seconds
//	quietpatch.dispatch.dropped            counter    {key}         pipeline, reason: unchanged deleted error not_leader  quietpatch_dispatch_dropped_total
//	                                                                stale_epoch claim_ending released shutdown
//	quietpatch.dispatch.in_flight          gauge      {patch}       pipeline                                              quietpatch_dispatch_in_flight
//	quietpatch.dispatch.limit              gauge      {patch}       pipeline                                              quietpatch_dispatch_limit
//	quietpatch.dispatch.latency.peak_ewma  gauge      s             pipeline                                              quietpatch_dispatch_latency_peak_ewma_seconds
//	quietpatch.dispatch.backoff            gauge      s             pipeline                                              quietpatch_dispatch_backoff_seconds
//	quietpatch.dispatch.retry_after        counter    {wait}        pipeline                                              quietpatch_dispatch_retry_after_total
//	quietpatch.leader.is_leader            gauge      (none)        lease attributes, identity                            quietpatch_leader_is_leader
//	quietpatch.leader.epoch                gauge      (none)        lease attributes                                      quietpatch_leader_epoch
//	quietpatch.leader.transitions          counter    {transition}  lease attributes, direction: acquired lost            quietpatch_leader_transitions_total
//	quietpatch.leader.requests             counter    {request}     lease attributes, operation: get create acquire       quietpatch_leader_requests_total
//	                                                                renew vacate watch; result (as outcome)
//	quietpatch.shard.held                  gauge      {shard}       pipeline, identity                                    quietpatch_shard_held
//	quietpatch.shard.running               gauge      {shard}       pipeline, identity                                    quietpatch_shard_running
//	quietpatch.shard.members               gauge      {replica}     pipeline, identity                                    quietpatch_shard_members
//	quietpatch.shard.moves                 counter    {move}        pipeline, identity, direction: acquired given_up      quietpatch_shard_moves_total
//	                                                                lost
//	quietpatch.shard.objects               gauge      {object}      pipeline, identity                                    quietpatch_shard_objects
//	quietpatch.shard.unfiltered            gauge      (none)        pipeline, identity                                    quietpatch_shard_unfiltered
//
// shard.held counts the shards this replica leads, shard.running those it
// runs (leads, or competes for while the shard's cache syncs),
// shard.members the replicas alive as it sees them; shard.moves counts
// shards acquired, given up on purpose (a rebalance) and lost;
// shard.objects is the objects in the caches of the shards run (about N ×
// running / K when the server filters); shard.unfiltered is 1 once the
// server returned an object outside a shard's range (the selector is not
// honoured: filtered client-side).
//
// What they mean: queue.enqueued = dequeued + superseded + depth at any
// quiet moment (superseded: added while waiting already, no slot taken);
// dropped{full, closed} are refused adds. reconcile.objects counts what
// passes compared; changed objects had their key queued. dispatch.dropped
// counts keys served without a call: unchanged (the status was right by
// then — every event of our own writes ends so), deleted, error (the
// computer or Source failed), not_leader, stale_epoch, claim_ending,
// released (the claim was being given up), shutdown. The outcome values
// come from package statuspatch/outcome. examples/httproute-status/deploy/
// monitoring has a Grafana dashboard and Prometheus alerts built on these
// names.
//
// # Logs
//
// Config.Logger (log/slog; nil discards); docs/logs.md lists every record
// at info level and above with its attributes. At info level: the start (after
// the sync), each acquisition and loss of the Lease with the epoch, the
// vacate or the decision not to, a backlog of halted passes (at most once a
// minute, and once drained), and each part's stop. Warnings: passes that
// keep halting for longer than max(1 minute, 3 intervals) (with the sizing
// hint), objects whose status could not be computed (one per pass), failed
// patches (at most one a minute per outcome). Debug: every patch sent,
// with a diff of what changed; every key served without a call.
package quietpatch
