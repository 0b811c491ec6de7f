// Package outcome classifies the result of one Kubernetes API request — a
// status patch, a Lease update — into a small set of [Outcome] values shared
// by every instrument and log of quietpatch, and tells whether the API
// server answered it ([Answered]).
//
// The two questions differ. The outcome is for counting and alerting: a
// conflict, a forbidden write and a timeout call for different actions. Whether
// the server answered is for safety: a request that ended without an answer
// from the API server (a client-side timeout or cancel, a broken connection,
// a 5xx, a 504 the server sent when it abandoned the request at its
// deadline) may still be executed after the client gave up, because
// neither a cancel nor the server's deadline undoes a write the server has
// begun. A write the fence refused ([Fenced]) was answered: it was not done. Code that must know
// that none of its writes can still land — a leader about to give its Lease
// up — counts only answered requests as finished.
package outcome
