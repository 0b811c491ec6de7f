// Package statuspatchtest provides a [statuspatch.Patcher] for unit tests
// of a controller built on package statuspatch, over client-go's fakes —
// as net/http/httptest provides a server for tests of HTTP clients.
//
// A controller sends its [statuspatch.MergePatch]es to the API server
// through package statuspatch's merge patcher. In a unit test
// the objects live in a fake client (k8s.io/client-go/kubernetes/fake or
// k8s.io/client-go/dynamic/fake) and the informers are built on it;
// [NewPatcher] applies the patches to the objects that fake holds, so the
// informers see the update events, and answers the way the API server
// does where the pipeline's behaviour depends on it:
//
//   - every write gets a new resourceVersion, which [Patcher.PatchVersion]
//     reports: the dispatcher then recognises the event of its own write
//     (its echo) and does not serve it, as it does against a real server
//     (client-go's fakes keep the version an object is given);
//   - a patch whose resourceVersion precondition is stale is answered with
//     409 Conflict, a patch of a missing object with 404 NotFound, both as
//     *k8serrors.StatusError (package statuspatch/outcome classifies them);
//   - a done context and an invalid patch write nothing.
//
// Give the objects a resourceVersion when the test creates them, and a
// new one whenever the test changes them through the fake, as the API
// server does on every write: the fake keeps the version it is given. A
// MergePatch's precondition needs one, and an object without it cannot be
// patched. A change left at the version of the Patcher's last write may
// look to the dispatcher like that write's echo, and not be served; and a
// patch built before the change still meets its precondition.
//
// The writes are patch actions of the status subresource through the
// fake: it records them, and a reactor the test prepends for "patch"
// answers in their place (to inject an error).
//
// What it does not do: no field manager of the caller (the writes name
// "statuspatchtest"), no admission, no validation against a schema, no
// server-side timeout, and no atomic compare-and-swap against writes made
// through the fake's own clients at the same moment.
package statuspatchtest
