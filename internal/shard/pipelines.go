package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/quietpatch/quietpatch/leader"
)

// Pipeline is one shard's pipeline as a [Coordinator] runs it: its cache
// and the parts that write under the shard's Lease (quietpatch.NewSharded
// builds a quietpatch.Controller on an informer).
type Pipeline interface {
	// Run runs the pipeline until ctx ends, in its safe stop order.
	Run(ctx context.Context) error
	// Claim is the latest claim of the shard's Lease the pipeline observed.
	Claim() leader.Claim
	// Objects is the number of objects in its cache.
	Objects() int64
	// Enqueue asks for the objects with keys — those its cache has — to
	// be reconciled soon; Resync for a pass, if it leads.
	Enqueue(keys ...types.NamespacedName)
	Resync()
	// Ready and Live are its probes; Ready is nil while its cache syncs.
	Ready() error
	Live() error
}

// Build builds shard i's pipeline, starting nothing: its claimer on
// lease (Name and Logger set for the shard) with the Lease client leases
// (which tells the claimer when the group first saw the shard's Lease),
// its cache on lw (the shard's ListerWatcher).
type Build[P Pipeline] func(i int, lease leader.Config, leases coordinationv1client.LeasesGetter, lw cache.ListerWatcher) (P, error)

// Each calls f with every shard's pipeline this replica runs (competing or
// leading), not under the coordinator's lock.
func (c *Coordinator[P]) Each(f func(i int, p P)) {
	c.mu.Lock()
	ps := make(map[int]P, len(c.shards))
	for i, sl := range c.shards {
		if sl.phase != leaving {
			ps[i] = sl.p
		}
	}
	c.mu.Unlock()
	for i, p := range ps {
		f(i, p)
	}
}

// Enqueue gives keys to every shard's pipeline run here: each enqueues
// those in its cache; the others' holders hear the same events.
func (c *Coordinator[P]) Enqueue(keys ...types.NamespacedName) {
	c.Each(func(_ int, p P) { p.Enqueue(keys...) })
}

// Resync asks every shard's pipeline run here for a pass, if it leads.
func (c *Coordinator[P]) Resync() { c.Each(func(_ int, p P) { p.Resync() }) }

// Ready reports whether this replica is ready, holding shards or not: nil
// while Run runs, the group's Lease calls succeed and every shard's
// pipeline is ready; [ErrNotRunning] before Run and once it stops.
func (c *Coordinator[P]) Ready() error {
	if _, running, _ := c.life.State(); !running {
		return ErrNotRunning
	}
	var errs []error
	if err := c.group.healthy(); err != nil {
		errs = append(errs, fmt.Errorf("shard group: %w", err))
	}
	return c.join(P.Ready, errs...)
}

// Live reports whether every shard's pipeline run here is live.
func (c *Coordinator[P]) Live() error { return c.join(P.Live) }

// join joins errs and the errors probe returns for the pipelines run here,
// each naming its shard.
func (c *Coordinator[P]) join(probe func(P) error, errs ...error) error {
	c.Each(func(i int, p P) {
		if err := probe(p); err != nil {
			errs = append(errs, fmt.Errorf("shard %d: %w", i, err))
		}
	})
	return errors.Join(errs...)
}

// Leading reports whether this replica leads at least one shard now.
func (c *Coordinator[P]) Leading() bool {
	leading := false
	c.Each(func(_ int, p P) { leading = leading || c.leads(p) })
	return leading
}

// Stats is a snapshot of a [Coordinator].
type Stats struct {
	// Shards is K; Members the replicas alive as this one sees them.
	Shards  int
	Members []string
	// Held lists the shards this replica leads; Running those it runs
	// (leading or competing for).
	Held, Running []int
	// Acquired, GivenUp and Lost count this replica's shard moves.
	Acquired, GivenUp, Lost int64
	// Objects is the number of objects in the caches of the shards run.
	Objects int64
	// Unfiltered is true once the API server returned an object outside
	// the range asked for (it does not honour ShardSelector): each shard's
	// cache is then filtered client-side.
	Unfiltered bool
}

// Stats returns a snapshot.
func (c *Coordinator[P]) Stats() Stats {
	st := Stats{Shards: len(c.ranges), Members: c.group.view().Members, Unfiltered: c.told.Load(),
		Acquired: c.moves.Get(movedAcquired), GivenUp: c.moves.Get(movedGivenUp), Lost: c.moves.Get(movedLost)}
	c.Each(func(i int, p P) {
		st.Running = append(st.Running, i)
		st.Objects += p.Objects()
		if c.leads(p) {
			st.Held = append(st.Held, i)
		}
	})
	slices.Sort(st.Running)
	slices.Sort(st.Held)
	return st
}
