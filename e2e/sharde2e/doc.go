// Package sharde2e runs the example HTTPRoute status controller
// (examples/httproute-status) with --shards K: several replicas, each its
// own process under its own least-privilege ServiceAccount (the example's
// deploy RBAC plus the deploy/shards component), spread the K shard Leases
// among themselves, and each keeps only its shards' routes in its caches.
//
// The tests check the spread (quietpatch_shard_held, the shard Leases'
// holders) through a kill -9, a SIGTERM and a replica joining; that every
// route converges and the idle controller writes nothing; that each
// replica's caches hold exactly its shards' routes, the API server
// filtering by ShardSelector (feature gate ShardedListAndWatch on) or the
// client when it does not; and, from the audit log and the recorded
// versions of the routes and of every shard Lease, that each status write
// landed while its writer held the Lease of that route's shard.
//
// The tests only; there is no package API.
package sharde2e
