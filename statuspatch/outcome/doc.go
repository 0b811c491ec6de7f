// Package outcome is the vocabulary every quietpatch package shares, at the
// bottom of the import graph: how one Kubernetes API request ended ([Of],
// [Answered]), how a configuration is rejected ([ConfigError]), how a Run
// starts once and stops ([Lifecycle]), and the counters behind the
// instruments ([Counters]).
//
// The outcome and whether the server answered are two questions. The
// outcome is for counting and alerting: a conflict, a forbidden write and a
// timeout call for different actions. Whether the server answered is for
// safety: a request that ended without an answer from the API server (a
// client-side timeout or cancel, a broken connection, a 5xx, a 504 the
// server sent when it abandoned the request at its deadline) may still be
// executed after the client gave up, because neither a cancel nor the
// server's deadline undoes a write the server has begun. A write the fence
// refused ([Fenced]) was answered: it was not done. Code that must know
// that none of its writes can still land — a leader about to give its
// Lease up — counts only answered requests as finished.
//
// Most callers meet this package through its values: the outcome attribute
// of the instruments, errors.As(err, new(*outcome.ConfigError)) — which
// package quietpatch re-exports as ConfigError.
package outcome
