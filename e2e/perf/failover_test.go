package perf

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/leader"
)

// BenchmarkFailover measures how long the routes go without a status writer
// when the leader goes away: two replicas run in process, each a
// leader.Claimer on one Lease (LeaseDuration QP_PERF_LEASE, 15 s, other
// timings at their defaults) with its own reconciler, queue and dispatcher.
// Replica A leads; its API traffic goes through a FaultProxy. QP_PERF_K
// routes change when A goes away, so B has patches to send as soon as it
// leads.
//
//   - crash: A's API traffic stalls (the proxy holds every request), so A
//     can neither renew nor vacate: B takes over when A's claim, as B
//     observed it, runs out — between LeaseDuration − RenewGrace and
//     LeaseDuration after the stall, depending on when A last renewed.
//   - vacate: A shuts down cleanly (reconciler and dispatcher first, then
//     the claimer, which clears the Lease's holder): B takes over as soon as
//     its watch of the Lease reports the change.
//
// Reported: s, the time from the failure (stall set, or shutdown of the
// claimer begun) to the answer of B's first successful status patch, and
// lease-s, to B's acquisition of the Lease.
func BenchmarkFailover(b *testing.B) {
	w := shared.get(b)
	ctx := benchContext(b, 10*time.Minute)
	if err := w.converge(ctx, nil); err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"crash", "vacate"} {
		b.Run(mode, func(b *testing.B) {
			lease, first, err := w.failover(ctx, b, mode)
			if err != nil {
				b.Fatal(err)
			}
			b.Logf("%s: lease acquired by B after %v, first status patch by B after %v",
				mode, lease.Round(time.Millisecond), first.Round(time.Millisecond))
			b.ReportMetric(first.Seconds(), "s")
			b.ReportMetric(lease.Seconds(), "lease-s")
		})
	}
}

// replica is one in-process controller replica: a Claimer and a quietpatch
// stack whose reconciler and dispatcher follow it.
type replica struct {
	id      string
	claimer *leader.Claimer
	stack   *stack

	claimCancel context.CancelFunc
	claimDone   chan error
	claimOnce   sync.Once
	claimErr    error
	stopOnce    sync.Once
	stopErr     error
}

func (w *world) newReplica(id, lease string, cfg *rest.Config) (*replica, error) {
	leases, err := leader.NewLeaseClient(cfg)
	if err != nil {
		return nil, err
	}
	claimer, err := leader.NewClaimer(leases, leader.Config{
		Namespace: benchNamespace, Name: lease, Identity: id, LeaseDuration: w.cfg.Lease,
	})
	if err != nil {
		return nil, err
	}
	st, err := w.newStack(stackConfig{Name: id, Capacity: w.cfg.Capacity, Workers: 4, Leader: claimer, Lease: lease, Client: cfg})
	if err != nil {
		return nil, err
	}
	return &replica{id: id, claimer: claimer, stack: st, claimDone: make(chan error, 1)}, nil
}

// start runs the claimer, the reconciler's loop and the dispatcher.
func (r *replica) start(ctx context.Context) error {
	claimCtx, cancel := context.WithCancel(context.Background())
	r.claimCancel = cancel
	go func() { r.claimDone <- r.claimer.Run(claimCtx) }()
	return r.stack.start(ctx, true)
}

// stopWork stops the reconciler and the dispatcher.
func (r *replica) stopWork() error {
	r.stopOnce.Do(func() { r.stopErr = r.stack.stop() })
	return r.stopErr
}

// stopClaim cancels the claimer, which vacates the Lease if it holds it,
// and waits for it to return. Later and concurrent calls wait for the first.
func (r *replica) stopClaim() error {
	r.claimOnce.Do(func() {
		r.claimCancel()
		if err := <-r.claimDone; err != nil && !errors.Is(err, context.Canceled) {
			r.claimErr = err
		}
	})
	return r.claimErr
}

// failover runs one failover of the given mode and returns how long after
// the failure B held the Lease and answered its first successful patch.
func (w *world) failover(ctx context.Context, b *testing.B, mode string) (lease, first time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, 4*w.cfg.Lease+2*time.Minute)
	defer cancel()
	proxy, err := w.cp.NewFaultProxy()
	if err != nil {
		return 0, 0, err
	}
	defer proxy.Close()
	aCfg, err := w.identity(ctx, "replica-a")
	if err != nil {
		return 0, 0, err
	}
	bCfg, err := w.identity(ctx, "replica-b")
	if err != nil {
		return 0, 0, err
	}
	leaseName := "failover-" + mode + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ra, err := w.newReplica("replica-a", leaseName, proxy.Config(aCfg))
	if err != nil {
		return 0, 0, err
	}
	rb, err := w.newReplica("replica-b", leaseName, bCfg)
	if err != nil {
		ra.stack.queue.Close()
		return 0, 0, err
	}
	started := []*replica{ra}
	defer func() {
		proxy.ClearFault()
		for _, r := range started {
			err = errors.Join(err, r.stopWork(), r.stopClaim())
		}
	}()
	if err := ra.start(ctx); err != nil {
		return 0, 0, err
	}
	if err := poll(ctx, 10*time.Millisecond, "replica A leading", func() error {
		if !ra.claimer.Current().IsCurrentFor(ra.id, time.Now()) {
			return errors.New("A does not lead")
		}
		return nil
	}); err != nil {
		return 0, 0, err
	}
	started = append(started, rb)
	if err := rb.start(ctx); err != nil {
		return 0, 0, err
	}
	if err := poll(ctx, 10*time.Millisecond, "replica B seeing A lead", func() error {
		if c := rb.claimer.Current(); c.Holder != ra.id {
			return fmt.Errorf("B sees holder %q", c.Holder)
		}
		return nil
	}); err != nil {
		return 0, 0, err
	}
	if n := rb.stack.rec.done(); n != 0 {
		return 0, 0, fmt.Errorf("B answered %d patches before leading", n)
	}

	// B's acquisition, timestamped as B's subscribers see it.
	claims, unsubscribe := rb.claimer.Subscribe()
	defer unsubscribe()
	acquired := make(chan time.Time, 1)
	go func() {
		for c := range claims {
			if c.Holder == rb.id {
				acquired <- time.Now()
				return
			}
		}
	}()

	keys := w.pick(w.cfg.K)
	var t0 time.Time
	switch mode {
	case "crash":
		t0 = time.Now()
		if err := proxy.SetFault(cluster.Fault{Stall: true}); err != nil {
			return 0, 0, err
		}
		if err := w.changeSpecs(ctx, keys); err != nil {
			return 0, 0, err
		}
	case "vacate":
		if err := ra.stopWork(); err != nil {
			return 0, 0, err
		}
		if err := w.changeSpecs(ctx, keys); err != nil {
			return 0, 0, err
		}
		t0 = time.Now()
		go func() { _ = ra.stopClaim() }()
	default:
		return 0, 0, fmt.Errorf("unknown failover mode %q", mode)
	}
	if err := poll(ctx, 5*time.Millisecond, "B's first successful patch", func() error {
		if rb.stack.rec.firstOK.Load() == 0 {
			return fmt.Errorf("B holds the lease: %v; B's patches failed: %d", rb.claimer.Current().IsCurrentFor(rb.id, time.Now()), rb.stack.rec.failed.Load())
		}
		return nil
	}); err != nil {
		return 0, 0, err
	}
	first = unixTime(rb.stack.rec.firstOK.Load()).Sub(t0)
	select {
	case at := <-acquired:
		lease = at.Sub(t0)
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	if err := w.waitConverged(ctx, keysOf(keys)); err != nil {
		return 0, 0, err
	}
	return lease, first, nil
}
