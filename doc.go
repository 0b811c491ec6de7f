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
//	func run(ctx context.Context, dyn dynamic.Interface, cfg *rest.Config) error {
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
//		statusCfg := rest.CopyConfig(cfg)
//		statusCfg.QPS = -1 // no client-side limit on the status client (see below)
//		patcher, err := statuspatch.NewMergePatcher(statusCfg, gvr, "example.com/widget-status")
//		if err != nil {
//			return err
//		}
//		leases, err := leader.NewLeaseClient(cfg) // none on the Lease client either
//		if err != nil {
//			return err
//		}
//		ctrl, err := quietpatch.New(source.FromInformer[*Widget](inf), computer, patcher, quietpatch.Config{
//			Leases: leases,
//			Lease:  leader.Config{Namespace: "widgets-system", Name: "widget-status"},
//		})
//		if err != nil {
//			return err
//		}
//		ctx, stop := context.WithCancel(ctx)
//		defer stop()                // the informers stop when run returns; nothing waits for them
//		informers.Start(ctx.Done()) // returns at once
//		return ctrl.Run(ctx)        // blocks until ctx is cancelled, then stops in the safe order
//	}
//
// Example has it complete, runnable on client-go's fakes, with the patcher
// of package statuspatch/statuspatchtest: it answers as the API server
// does (a new resourceVersion per write, 409 on a stale precondition), for
// unit tests of a controller of one's own. Run waits for the caches to sync —
// a replica with an empty cache must not lead —, then competes for the
// Lease, reconciles every Interval, at once on gaining the Lease, and on
// every event of the informer; [Controller.Ready] and [Controller.Live] are
// the probes, [Controller.Stats] the counters, no metrics SDK needed.
// Statuses that depend on other resources declare them once in
// Config.Dependencies. A Controller's methods are safe for concurrent use;
// its Run runs once. Every constructor of the library rejects invalid
// input with a [*ConfigError] naming the field.
//
// The named parts are public and usable alone: package leader (the Lease:
// Claim, Claimer), package statuspatch (the inputs — Source,
// StatusComputer, Patcher and the merge and apply patchers — and the
// bounded PatchQueue), package ewma (the Peak-EWMA gauge). The machinery
// that composes them — the reconciler, the dispatcher and its in-flight
// state, the shards' coordination — is the library's own, behind New and
// NewSharded.
//
// The status client. Give the patcher a rest.Config of its own with the
// client-side rate limiter off (QPS -1): client-go's default of 5 requests
// a second caps a controller at 5 patches a second, whatever the server
// absorbs. The API server's Priority and Fairness protects the server; the
// dispatcher's adaptive in-flight limit protects its latency.
// [statuspatch.NewMergePatcher] also leaves a 429's Retry-After
// to the dispatcher, which then holds every call back, and tells the API
// server each call's deadline (see What holds). The Lease client is
// [leader.NewLeaseClient]'s, with no client-side limiter either: in one,
// Lease requests wait behind each other — with K shards, K claims, a
// membership Lease and a list every RetryPeriod —, and a late renewal
// loses the claim. New and NewSharded reject a Lease client with
// client-go's limiter, naming Config.Leases.
//
// # How many calls at once: the knee
//
// The API server is shared: every call of ours that waits in it makes every
// other client wait behind it. Past a few calls in flight the server gives
// little more (on 2 cores, 2 calls gave 0.82–0.99 of the rate of 16) and
// every call added waits in its queue (a neighbour's median latency ×1.8–2.6
// at 2 calls, ×14–17 at 16; docs/performance.md, "At the knee"). Unless
// Config.Workers fixes it, the dispatcher keeps the calls in flight at that
// knee, by the latency it reads on its own calls: with n calls in flight
// taking the estimate each and the best recent round taking best, n × (1 −
// best/estimate) of them wait at the server (Little's law). It grows the
// limit by one a round while fewer than three quarters of a call wait, or
// the latency is within a tenth of the best, and shrinks it by a tenth while
// more than 1.75 wait and the latency is a quarter above the best; once
// every 10 s it probes the best latency with one call in flight, and a 429
// or a timeout halves it. So one or two calls of ours wait at the server,
// whatever its speed, the round trip or the number of objects. Replicas
// writing to one server read the same latency, so each holds back on the
// others' calls too (by design; not yet measured with replicas).
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
// Bounded memory. Each lane of the queue holds at most Capacity keys, and
// a key waits at most once; calls in flight, and the goroutines making
// them, never exceed the in-flight limit. A pass that finds its lane full stops and resumes where it
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
// involuntarily (lost, run out, new epoch).
//
// What the API server enforces. The deadline travels with the request:
// the patcher sends it as the timeout parameter, a little before the
// client's own ([statuspatch.ServerTimeout]: a tenth less, at most 100 ms),
// and the server, counting from when it received the request's headers,
// gives the request up then (504, outcome abandoned) instead of
// committing it — a PATCH whose body a paused process sends late does not
// land after the claim ended. With the fence (optional,
// [statuspatch.MergePatcher.WithFence] and the HTTPRoute example's
// deploy/fence), the field manager of every write names its writer,
// <Lease namespace>/<Lease name>@<identity>, and a ValidatingAdmissionPolicy
// whose param is the Lease denies at admission a write whose Lease names
// another holder or none (outcome fenced: answered, not written).
//
// What remains. A request delayed before the server received its headers
// (the network, a proxy, a process paused between building and sending
// it) gets that delay, less the margin, on top of the claim. A storage
// write that began before the deadline is finished even after the 504,
// as it is after a client's cancel. The fence sees an acquisition only
// once the server's cache of the Lease has (a lag of milliseconds:
// docs/performance.md), and admits what it admitted before. Every patch
// carries a metadata.resourceVersion precondition, and that is what makes
// such a late write fail whenever the object changed since we read it —
// in particular once the successor wrote its own status. The fence is
// against lateness, not forgery: any client may name any writer.
//
// Giving the Lease up. When this replica gives it up on purpose (Run's
// context cancelled; a shard given up by NewSharded's rebalance), no new
// call starts and
// the calls in flight are not cancelled: they run until the API server
// answers. The Lease is vacated only if every call made under the claim
// got an answer that settles it (success or a 4xx refusal, fenced
// included); then no write of ours lands after the vacate. If a call ended
// without one (a timeout, a 504, a broken connection, a 5xx), the Lease is
// not vacated and a successor acquires only after a full lease duration.
// A restarted process never inherits its predecessor's claim: the default
// identity is unique per process, and a claim under our identity that this
// process did not make is waited out like anyone else's.
//
// # When the API server restarts
//
// The claimer's requests fail and are retried every RetryPeriod: a claim
// survives an outage shorter than its RenewGrace (10 s by default), else
// it runs out and no call is made until it is acquired again. The
// informers' watches break and client-go's reflector lists again after a
// backoff that grows from 800 ms to 30 s, with as much again of jitter —
// after repeated restarts a leader's watch was seen to sit ~50 s in it.
// Meanwhile the cache is stale and the pipeline may lead on it: statuses
// of objects changed during the outage catch up only once the watch is
// back, and a write computed from a stale object carries its
// resourceVersion, so it fails with 409 if the object changed (the next
// pass recomputes it). No call is made outside a claim; Ready does not
// report a stale cache (client-go does not tell one).
//
// # Stop order
//
// Run stops, when its context is cancelled, in this order: the reconciler
// (no new key); the dispatcher (no new call; the calls in flight run to
// their answer, at most PatchTimeout; what is queued is dropped and
// counted, reason shutdown — the next leader recomputes it); then the
// Lease (vacated or left to run out, as above). It returns once all have
// stopped: at most PatchTimeout + the Lease's CallTimeout after ctx is
// done, whether the API server answers or not. The informers may stop when
// ctx ends, as informers.Start(ctx.Done()) has them: the reconciler and the
// dispatcher see ctx itself, so from the moment it is done neither a pass
// nor the dispatcher starts reading the Source — a pass under way stops
// within 256 objects, and the calls in flight send what they built before.
//
// Nothing needs to wait for the informers, and a process that is stopping
// should not wait for them without a bound:
// SharedInformerFactory.Shutdown waits for every reflector, and a
// client-go v0.37 reflector whose watch broke and whose watch-list
// request was then refused or answered 429 (an API server restarting or
// overloaded) sleeps out its back-off, up to a minute, before it looks at
// its context (tools/cache/reflector.go, Reflector.watchList). The
// example above stops them when run returns, whatever ended Run, and waits
// for none; the HTTPRoute example waits for them at most a second
// (controller.StopGrace). [NewSharded]'s Run waits for each shard's
// informer at most a second, and deletes its membership Lease under one
// CallTimeout more.
//
// # More
//
// [NewSharded] spreads one resource over the replicas, a shard each holds
// (docs/shards.md); [Controller] and [Sharded] are both a [Runner]. The
// instruments are listed in docs/metrics.md, every log record at info level
// and above in docs/logs.md, the figures in docs/performance.md.
package quietpatch
