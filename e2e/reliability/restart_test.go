package reliability_test

import (
	"context"
	"errors"
	"testing"
	"time"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch/e2e/examplee2e"
	"github.com/quietpatch/quietpatch/examples/httproute-status/fixtures"
)

// TestRecoversFromRestarts: a running controller outlives a restart of etcd
// and then of kube-apiserver: routes whose status is taken away after each
// restart get it back, without the controller being restarted. A restarted
// API server refuses requests (403) until its RBAC authorizer has synced;
// the lease claimer must ride that out rather than stop.
func TestRecoversFromRestarts(t *testing.T) {
	cp, binary, rbac := shared.get(t)
	ctx := testContext(t, 3*time.Minute)
	const controller gatewayv1.GatewayController = "quietpatch.io/e2e-restart"
	set := installSet(t, ctx, cp, fixtures.Config{Routes: 60, Namespaces: 2, Prefix: "rs", ControllerName: controller})
	want := examplee2e.ExpectFixtures(set)
	cfg := baseConfig(t, binary, rbac, "rs-system", controller)
	d := deploy(t, ctx, cp, cfg)
	if _, err := examplee2e.WaitConverged(ctx, cp.AdminGatewayClient(), want, poll, nil); err != nil {
		t.Fatal(err)
	}
	replica := d.Replicas()[0]
	// Stop waiting as soon as the controller exits.
	ctx, cancel := context.WithCancelCause(ctx)
	watcher := make(chan struct{})
	go func() {
		defer close(watcher)
		select {
		case <-replica.Done():
			cancel(errors.New("the controller exited"))
		case <-ctx.Done():
		}
	}()
	t.Cleanup(func() { cancel(nil); <-watcher })

	for i, step := range []struct {
		name    string
		restart func(context.Context) error
	}{
		{"etcd", cp.RestartEtcd},
		{"kube-apiserver", cp.RestartAPIServer},
	} {
		begin := time.Now()
		if err := step.restart(ctx); err != nil {
			t.Fatalf("restarting %s: %v", step.name, err)
		}
		if err := cp.WaitReady(ctx); err != nil {
			t.Fatalf("after restarting %s: %v", step.name, err)
		}
		restarted := time.Since(begin)
		// Change routes after the restart: the controller must notice
		// (its watches resume) and write them again.
		changed := set.Routes[i*10 : i*10+10]
		changedAt := time.Now()
		for _, r := range changed {
			dropEntry(ctx, t, cp, routeName(r), controller)
		}
		if _, err := examplee2e.WaitConverged(ctx, cp.AdminGatewayClient(), want, poll, nil); err != nil {
			t.Fatalf("after restarting %s: %v (cause: %v)", step.name, err, context.Cause(ctx))
		}
		t.Logf("%s restarted in %v; %d routes changed afterwards converged in %v", step.name,
			restarted.Round(time.Millisecond), len(changed), time.Since(changedAt).Round(time.Millisecond))
		if replica.Exited() {
			t.Fatalf("the controller exited after the %s restart: %v", step.name, replica.ExitError())
		}
	}
	// The same process did it all.
	if got := len(d.Replicas()); got != 1 || d.Replicas()[0] != replica {
		t.Errorf("the replica was replaced")
	}
}
