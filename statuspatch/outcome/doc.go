// Package outcome classifies the result of one Kubernetes API request — a
// status patch, a Lease update — into a small set of [Outcome] values shared
// by every instrument and log of quietpatch, and tells whether the API
// server answered it ([Answered]).
//
// The two questions differ. The outcome is for counting and alerting: a
// conflict, a forbidden write and a timeout call for different actions. Whether
// the server answered is for safety: a request that ended without an answer
// from the API server (a client-side timeout or cancel, a broken connection,
// a 5xx) may still be executed after the client gave up, because cancelling
// a request does not undo a write the server has begun. Code that must know
// that none of its writes can still land — a leader about to give its Lease
// up — counts only answered requests as finished.
package outcome
