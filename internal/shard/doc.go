// Package shard splits a resource into K shards by the 64-bit FNV-1a hash
// of each object's UID — the hash the API server's sharded list and watch
// uses (KEP-5866, feature gate ShardedListAndWatch: a
// metav1.ListOptions.ShardSelector of the form
// shardRange(object.metadata.uid, '0x…', '0x…')) — and runs, on each
// replica, the pipelines of the shards it holds.
//
// [Split] gives K equal ranges of [0, 2^64); [Range.Contains] tells whether
// an object belongs to a range; [ListWatch] lists and watches one range
// with the selector set and drops, client-side, whatever the server sent
// outside it, so a cache built on it holds exactly the shard's objects
// whether or not the server honours the selector (gate off, older server).
// A UID never changes, so an object never moves between shards.
//
// [Plan] is what a replica does given a [View] of the group: which shards
// to compete for and which to give up, a pure function. A [Coordinator]
// keeps the replica in the group (a membership Lease per replica), applies
// the plan and runs each shard's [Pipeline] under the shard's own Lease.
// Most callers use it through quietpatch.NewSharded; docs/shards.md says
// what holds and what a move costs. The arithmetic and the ListerWatcher
// are usable on their own.
package shard
