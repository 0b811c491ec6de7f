package statuspatch

// QueueWaiters reports how many producers are blocked in Send and how many
// consumers are blocked in Receive, so tests can wait for a goroutine to
// block instead of sleeping.
func QueueWaiters[T any](q *PatchQueue[T]) (senders, receivers int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.sendWait, q.recvWait
}

// QueueTrackedKeys reports how many keys the queue keeps a record for
// (waiting, in flight or idle), to check that memory stays bounded.
func QueueTrackedKeys[T any](q *PatchQueue[T]) (keys, idle int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.byKey), q.idleCount
}
