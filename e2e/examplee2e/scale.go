package examplee2e

import (
	"context"
	"strconv"
)

// AddReplica starts one more replica, as a Deployment scaled up by one
// starts a new pod: a new process with the Deployment's flags and a new
// identity, IdentityPrefix-<n> with n the number of replicas started so far,
// and waits until it is ready.
func (d *Deployment) AddReplica(ctx context.Context) (*Replica, error) {
	d.mu.Lock()
	id := d.cfg.IdentityPrefix + "-" + strconv.Itoa(len(d.replicas))
	d.mu.Unlock()
	r, err := d.start(id)
	if err != nil {
		return nil, err
	}
	if err := d.waitReady(ctx, r); err != nil {
		return nil, err
	}
	return d.Replica(id), nil
}
