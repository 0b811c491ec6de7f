// Package statuspatch keeps the status subresource of many Kubernetes
// objects up to date: a reconciler finds the objects whose status is not
// what it should be and queues their keys in a bounded queue; a dispatcher
// takes each key when a patch call can be made, builds the patch from the
// object as the cache has it then, and sends it under this replica's
// leadership claim.
//
// Most controllers use it through quietpatch.New (package
// github.com/quietpatch/quietpatch), which builds the parts for one
// resource, runs them in the right order and documents the guarantees,
// the metric names and the logs. This package documents each part's own
// contract.
//
//	Source ──▶ Reconciler ──keys──▶ PatchQueue ──▶ Dispatcher ──▶ Patcher (PATCH …/status)
//	           pass: compare,        two lanes,      get, compute,
//	           queue changed keys    bounded         build, call
//	Enqueue(keys) ──fresh lane──▶
//
// Data flows one way. The queue holds keys, as client-go's workqueue does:
// a key waits at most once, one worker holds it at a time, a key that
// changes while held is served again after. Keys from events (Enqueue, an
// informer's handler) take the fresh lane and are served before the keys
// of periodic passes, with a bound that keeps the passes moving. Because
// the patch is computed when it is sent, a key that waited long costs
// nothing stale: the dispatcher finds the status already right (dropped,
// reason unchanged) or builds the patch from the current object.
//
// Two kinds of status write. A [MergePatch] (sent by
// [MergePatcher]) carries the status fields the controller writes
// with a resourceVersion precondition: the write fails with 409 Conflict
// if the object changed since it was read. It suits atomic lists, such as
// Gateway API's status.parents, where controllers share one list: the
// precondition keeps another writer's entries, and it is what makes a late
// write fail — a write an earlier leader sent before its claim ended that
// reaches etcd after the object changed. An [ApplyPatch] (sent by
// [ApplyStatusPatcher]) is a server-side apply of the fields this writer
// owns only, under its field manager, with force: for a CRD whose
// status.conditions is listType=map keyed by type and written by several
// controllers, each its own condition types, it needs no read-modify-write
// and never conflicts — no 409s, nothing retried. It has no precondition: a
// late write of an earlier leader lands, and the object's next event has
// the current leader re-apply. Do not apply an atomic list: the applied
// list replaces the other writers' entries. Package statuspatch/conditions
// builds both (conditions.Computer, conditions.Applier).
//
// Both patchers tell the API server each call's deadline, the timeout
// parameter from [ServerTimeout], so that the server gives a call up at
// the end of the claim instead of committing it late; a custom [Patcher]
// must do the same. [MergePatcher.WithFence] also names the writer
// in every write's field manager ([FencedFieldManager] of the call's
// [WriteClaim]), for a ValidatingAdmissionPolicy whose param is the Lease
// to deny the writes of a replica that no longer holds it. Not the apply
// patcher: its field manager is the owner of its fields, the same in
// every replica.
//
// The parts share one [Options]: the pipeline's name, clock, logger and
// meter, and the few numbers that size it; every field has a default, and
// the zero Options is valid. Every part is safe for concurrent use; each
// Run runs once.
// Errors for an invalid configuration are *base.ConfigError naming the
// field. Figures (queue operation costs against client-go's workqueue, the
// adaptive in-flight limit against fixed settings, a fresh change during a
// storm) are in docs/performance.md.
package statuspatch
