// Package shard splits a resource into K shards by the 64-bit FNV-1a hash
// of each object's UID — the hash the API server's sharded list and watch
// uses (KEP-5866, feature gate ShardedListAndWatch: a
// metav1.ListOptions.ShardSelector of the form
// shardRange(object.metadata.uid, '0x…', '0x…')) — and builds the
// ListerWatcher of one shard.
//
// [Split] gives K equal ranges of [0, 2^64); [Range.Contains] tells whether
// an object belongs to a range; [ListWatch] lists and watches one range
// with the selector set and drops, client-side, whatever the server sent
// outside it, so a cache built on it holds exactly the shard's objects
// whether or not the server honours the selector (gate off, older server).
// A UID never changes, so an object never moves between shards.
//
// The root package's NewSharded runs a pipeline per shard held; this
// package is the arithmetic and the cache's input, usable on its own.
package shard
