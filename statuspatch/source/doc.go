// Package source connects a statuspatch pipeline to client-go's caches: a
// [statuspatch.Source] over a SharedIndexInformer, an Indexer or a lister,
// and an event handler that asks for a reconcile of every object that
// changes.
//
// # What to enqueue
//
// A pipeline makes a full pass every interval and one on gaining
// leadership, so every object is reconciled at least once an interval
// whatever the events say. Events make it prompt: enqueue the key of an
// object when it is added, updated or deleted — [EnqueueHandler] does — and
// when anything its status is computed from changes (a Gateway for its
// routes, a Secret for the objects referring to it): register handlers on
// those informers that enqueue the keys of the objects concerned.
//
// Our own status writes come back as update events. quietpatch.New's
// handler drops the event whose object has exactly the resourceVersion our
// write produced (with a statuspatch.VersionPatcher, as the merge patcher
// is); any other is enqueued — cheap and right: the reconcile finds the
// status equal to the desired one and does nothing, and if another writer
// changed the status since, it is put back. Deleted objects are enqueued
// too: the reconcile finds them gone and does nothing; a patch of theirs
// still waiting fails with not found.
//
// # Objects
//
// Sources hand out the cache's own objects, without copies: a
// StatusComputer must not modify them. For custom resources without
// generated Go clients, a dynamic informer holds *unstructured.Unstructured
// objects, which package conditions' Computer reads directly; or
// [ToTyped] converts them once, when the informer stores them, into the
// Go type of the resource.
package source
