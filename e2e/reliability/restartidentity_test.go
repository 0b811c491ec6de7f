package reliability_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/e2e/examplee2e"
	"github.com/quietpatch/quietpatch/examples/httproute-status/fixtures"
)

// TestRestartDoesNotInheritClaim checks the promise "a restarted process
// never inherits its predecessor's claim": the leading replica of the
// example controller is killed with SIGKILL right after it renewed the
// Lease and started again at once with the same --identity, as a kubelet
// restarts a crashed container. The new process knows nothing of what its
// predecessor had in flight, so it must not act on the predecessor's claim:
// its first acquisition — a Lease write with its identity and a higher
// spec.leaseTransitions — must come no earlier than the predecessor's last
// Lease write (the renewal) plus the lease duration, as seen by a watch of
// the Lease from the start (less observationAllowance for the watch), and
// it must never write the Lease under the predecessor's epoch. Three
// rounds, each killing the replica the round before started.
//
// The lease duration is long against a restart (1–4 s on two busy cores),
// so a process that takes over its predecessor's claim acquires well
// before the bound; that is reported with the gap and the versions.
func TestRestartDoesNotInheritClaim(t *testing.T) {
	cp, binary, rbac := shared.get(t)
	ctx := testContext(t, 4*time.Minute)
	const (
		controller    gatewayv1.GatewayController = "quietpatch.io/e2e-restart-identity"
		ns                                        = "ri-system"
		leaseDuration                             = 10 * time.Second
		rounds                                    = 3
	)
	installSet(t, ctx, cp, fixtures.Config{Routes: 20, Namespaces: 1, Prefix: "ri", ControllerName: controller})
	lease := recordLease(t, ctx, cp, ns, examplee2e.DefaultLeaseName)
	cfg := baseConfig(t, binary, rbac, ns, controller)
	cfg.ServiceAccount, cfg.LeaseDuration = "ri", leaseDuration
	d := deploy(t, ctx, cp, cfg)
	r, err := d.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bound := leaseDuration - observationAllowance(leaseDuration)
	for round := 1; round <= rounds; round++ {
		renewal, err := waitRenewal(ctx, lease, r.Identity)
		if err != nil {
			t.Fatal(err)
		}
		r.Kill()
		killed := time.Now()
		if r, err = d.Restart(ctx, r); err != nil {
			t.Fatal(err)
		}
		ready := time.Since(killed)
		acq, inherited, err := waitAcquisition(ctx, lease, renewal, leaseDuration+time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		gap := acq.Received.Sub(renewal.Received)
		t.Logf("round %d: %s killed %v after its renewal %s was seen, ready again after %v; first acquisition %s, %v after the renewal (bound %v)",
			round, r.Identity, killed.Sub(renewal.Received).Round(time.Millisecond), renewal, ready.Round(time.Millisecond), acq, gap.Round(time.Millisecond), bound)
		for _, v := range inherited {
			t.Errorf("round %d: the restarted %s wrote the Lease under its predecessor's epoch %d: %s", round, r.Identity, renewal.epoch, v)
		}
		if acq.holder != r.Identity {
			t.Errorf("round %d: the Lease was acquired by %q, want the restarted %s (the only replica)", round, acq.holder, r.Identity)
		}
		if gap < bound {
			t.Errorf("round %d: the restarted %s acquired the Lease %v after its predecessor's last renewal was seen, want >= %v (lease duration %v less %v for observation): it inherited its predecessor's claim",
				round, r.Identity, gap.Round(time.Millisecond), bound, leaseDuration, observationAllowance(leaseDuration))
		}
	}
}

// waitRenewal waits for the next write of the Lease by id that keeps its
// epoch — a renewal — and returns it.
func waitRenewal(ctx context.Context, lease *cluster.History, id string) (leaseVersion, error) {
	vs, err := leaseVersions(lease.Versions())
	if err != nil {
		return leaseVersion{}, err
	}
	if len(vs) == 0 || vs[len(vs)-1].holder != id {
		return leaseVersion{}, fmt.Errorf("the Lease's last version is not %s's: %v", id, vs)
	}
	from := vs[len(vs)-1]
	var renewal leaseVersion
	err = examplee2e.Poll(ctx, 20*time.Millisecond, func(context.Context) error {
		vs, err := leaseVersions(lease.Versions())
		if err != nil {
			return examplee2e.Permanent(err)
		}
		for _, v := range vs {
			if v.ResourceVersion > from.ResourceVersion && v.holder == id && v.epoch == from.epoch {
				renewal = v
				return nil
			}
		}
		return fmt.Errorf("no renewal by %s after %s", id, from)
	})
	return renewal, err
}

// waitAcquisition waits (up to within) for the first write of the Lease
// after last with a holder and a higher epoch, and returns it with the
// writes in between that kept last's holder and epoch.
func waitAcquisition(ctx context.Context, lease *cluster.History, last leaseVersion, within time.Duration) (acq leaseVersion, inherited []leaseVersion, err error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	err = examplee2e.Poll(ctx, 20*time.Millisecond, func(context.Context) error {
		vs, err := leaseVersions(lease.Versions())
		if err != nil {
			return examplee2e.Permanent(err)
		}
		inherited = inherited[:0]
		for _, v := range vs {
			switch {
			case v.ResourceVersion <= last.ResourceVersion:
			case v.holder != "" && v.epoch > last.epoch:
				acq = v
				return nil
			case v.holder == last.holder && v.epoch == last.epoch:
				inherited = append(inherited, v)
			}
		}
		return fmt.Errorf("no acquisition after %s", last)
	})
	return acq, inherited, err
}
