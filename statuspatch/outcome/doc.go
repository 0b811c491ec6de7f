// Package outcome says how one Kubernetes API request ended: its
// [Outcome] ([Of]), the value of the outcome attribute of quietpatch's
// instruments and the keys of quietpatch.Stats' patch counters, and
// whether the API server answered it ([Answered]).
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
// Most callers meet this package through its values, in Stats and in the
// outcome attribute of the instruments; a custom Patcher returns the API
// server's errors as the client returns them, so that Of can classify
// them.
package outcome
