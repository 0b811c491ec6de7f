// Package statuspatch holds what a status controller gives quietpatch and
// the queue between its parts: the [Source] of the objects, the
// [StatusComputer] that says what their status should be and builds the
// patch, the [Patcher] that sends it — [MergePatcher] and [ApplyPatcher] are
// the built-in ones —, and [PatchQueue], the bounded queue of keys with
// client-go workqueue's rules, usable on its own.
//
// Most controllers meet it through quietpatch.New (package
// github.com/quietpatch/quietpatch), which runs the pipeline for one
// resource and documents what holds:
//
//	Source ──▶ pass ──keys──▶ PatchQueue ──▶ dispatcher ──▶ Patcher (PATCH …/status)
//	           compare,        two lanes,      get, compute,
//	           queue changed   bounded         build, call
//	events ──fresh lane──▶
//
// Data flows one way. The queue holds keys, as client-go's workqueue does:
// a key waits at most once, one worker holds it at a time, a key that
// changes while held is served again after. Because the patch is computed
// when it is sent, a key that waited long costs nothing stale: the
// dispatcher finds the status already right, or builds the patch from the
// current object.
//
// Two kinds of status write. A [MergePatch] (sent by [MergePatcher])
// carries the status fields the controller writes with a resourceVersion
// precondition: the write fails with 409 Conflict if the object changed
// since it was read. It suits atomic lists, such as Gateway API's
// status.parents, where controllers share one list: the precondition keeps
// another writer's entries, and it is what makes a late write fail — a
// write an earlier leader sent before its claim ended that reaches etcd
// after the object changed. An [ApplyPatch] (sent by [ApplyPatcher]) is a
// server-side apply of the fields this writer owns only, under its field
// manager, with force: for a CRD whose status.conditions is listType=map
// keyed by type and written by several controllers, each its own condition
// types, it needs no read-modify-write and never conflicts — no 409s,
// nothing retried. It has no precondition: a late write of an earlier
// leader lands, and the object's next event has the current leader
// re-apply. Do not apply an atomic list: the applied list replaces the
// other writers' entries. Package statuspatch/conditions builds both
// (conditions.Computer, conditions.Applier).
//
// Both patchers tell the API server each call's deadline, the timeout
// parameter from [ServerTimeout], so that the server gives a call up at
// the end of the claim instead of committing it late; a custom [Patcher]
// must do the same. [MergePatcher.WithFence] also names the writer in
// every write's field manager ([FencedFieldManager] of the call's
// [WriteClaim]), for a ValidatingAdmissionPolicy whose param is the Lease
// to deny the writes of a replica that no longer holds it. Not the apply
// patcher: its field manager is the owner of its fields, the same in
// every replica.
//
// Constructors reject invalid arguments with a *quietpatch.ConfigError
// naming them; everything here is safe for concurrent use. Package
// statuspatch/statuspatchtest has a Patcher over client-go's fakes for unit
// tests. Figures (queue operation costs against client-go's workqueue, a
// fresh change during a storm) are in docs/performance.md.
package statuspatch
