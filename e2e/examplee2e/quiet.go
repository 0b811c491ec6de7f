package examplee2e

import (
	"context"
	"fmt"
	"time"

	"github.com/quietpatch/quietpatch/e2e/cluster"
)

// passCounts scrapes the number of finished reconcile passes of each leader.
func passCounts(ctx context.Context, leaders []*Replica) ([]float64, error) {
	out := make([]float64, len(leaders))
	for i, r := range leaders {
		m, err := r.Scrape(ctx)
		if err != nil {
			return nil, err
		}
		if !m.Has(MetricReconcileDuration) {
			// No pass finished yet (or the family is named differently):
			// say so rather than count from zero.
			return nil, fmt.Errorf("replica %s exports no %s yet", r.Identity, MetricReconcileDuration)
		}
		out[i] = m.Passes()
	}
	return out, nil
}

// WaitPasses waits until each leader has finished at least n full reconcile
// passes that began after WaitPasses was called. Since a pass may be under
// way at the call, that is n+1 more finished passes. Each leader's pass
// count is MetricReconcileDuration's sample count.
func WaitPasses(ctx context.Context, leaders []*Replica, n int) error {
	var base []float64
	if err := Poll(ctx, 100*time.Millisecond, func(ctx context.Context) (err error) {
		base, err = passCounts(ctx, leaders)
		return err
	}); err != nil {
		return fmt.Errorf("examplee2e: reading pass counts: %w", err)
	}
	return Poll(ctx, 100*time.Millisecond, func(ctx context.Context) error {
		now, err := passCounts(ctx, leaders)
		if err != nil {
			return err
		}
		for i := range now {
			if now[i] < base[i]+float64(n+1) {
				return fmt.Errorf("replica %s finished %.0f of %d more passes", leaders[i].Identity, now[i]-base[i], n+1)
			}
		}
		return nil
	})
}

// Settle waits until each leader has finished a full pass that began after
// the call and then has nothing queued and no patch in flight. Patches
// computed from a cache that had not yet seen the latest writes (answered
// 409 Conflict) are sent by then; what follows is the steady state.
func Settle(ctx context.Context, leaders []*Replica) error {
	if err := WaitPasses(ctx, leaders, 1); err != nil {
		return err
	}
	return Poll(ctx, 50*time.Millisecond, func(ctx context.Context) error {
		for _, r := range leaders {
			m, err := r.Scrape(ctx)
			if err != nil {
				return err
			}
			if !m.Idle() {
				return fmt.Errorf("replica %s: queue depth %.0f, %.0f patches in flight", r.Identity, m.Sum(MetricQueueDepth), m.Sum(MetricDispatchInFlight))
			}
		}
		return nil
	})
}

// PatchesOver counts the API server's HTTPRoute status PATCH requests (from
// anyone) while each leader finishes n full reconcile passes (see
// WaitPasses): the write traffic of n intervals.
func PatchesOver(ctx context.Context, cp *cluster.ControlPlane, leaders []*Replica, n int) (PatchCount, error) {
	before, err := CountPatches(ctx, cp)
	if err != nil {
		return PatchCount{}, err
	}
	if err := WaitPasses(ctx, leaders, n); err != nil {
		return PatchCount{}, err
	}
	after, err := CountPatches(ctx, cp)
	if err != nil {
		return PatchCount{}, err
	}
	return after.Sub(before), nil
}
