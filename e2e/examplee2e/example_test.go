package examplee2e_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/e2e/examplee2e"
	"github.com/quietpatch/quietpatch/examples/httproute-status/fixtures"
	"github.com/quietpatch/quietpatch/examples/httproute-status/routestatus"
)

// Check routes against the fixtures' expectations. Here the statuses come
// from routestatus.Compute over the fixtures' own snapshot, so no cluster is
// needed; in a test they are read back from the API server (ListRoutes).
func ExampleExpectations_Census() {
	set, err := fixtures.Generate(fixtures.Config{Routes: 20, Namespaces: 2, ControllerName: "example.com/routes"})
	if err != nil {
		log.Fatal(err)
	}
	want := examplee2e.ExpectFixtures(set)

	var routes []gatewayv1.HTTPRoute
	for _, r := range set.Routes {
		routes = append(routes, *r)
	}
	fmt.Println("before:", want.Census(routes).Converged, "of", len(want))

	c, err := routestatus.NewComputer(set.Options())
	if err != nil {
		log.Fatal(err)
	}
	snap, now := set.Snapshot(), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range routes {
		routes[i].Status = c.Compute(&routes[i], snap, now)
	}
	census := want.Census(routes)
	fmt.Println("after:", census.Converged, "of", len(want), "done:", census.Done())
	// Output:
	// before: 0 of 20
	// after: 20 of 20 done: true
}

// Run three replicas of the example controller under the RBAC it ships,
// wait for its statuses and count its writes. (Not run by `go test`: it
// needs the binaries from `make bins`.)
func ExampleDeploy() {
	ctx := context.Background()
	cp, err := cluster.Start(ctx, cluster.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer cp.Stop()
	examples, err := examplee2e.ExamplesDir()
	if err != nil {
		log.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	binary, _, err := examplee2e.BuildController(ctx, examples, dir)
	if err != nil {
		log.Fatal(err)
	}
	rbac, err := examplee2e.LoadRBAC(examplee2e.DeployDir(examples))
	if err != nil {
		log.Fatal(err)
	}

	set, err := fixtures.Generate(fixtures.Config{Routes: 100, Namespaces: 2, ControllerName: "quietpatch.io/httproute-status"})
	if err != nil {
		log.Fatal(err)
	}
	if err := examplee2e.Install(ctx, cp, set.Objects(), 8, nil); err != nil {
		log.Fatal(err)
	}
	d, err := examplee2e.Deploy(ctx, cp, examplee2e.Config{
		Binary: binary, Dir: dir, RBAC: rbac,
		Namespace: "quietpatch-system", Replicas: 3,
		ControllerName:    "quietpatch.io/httproute-status",
		ReconcileInterval: 2 * time.Second,
		KubeQPS:           50, KubeBurst: 100,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Stop()

	if _, err := examplee2e.WaitConverged(ctx, cp.AdminGatewayClient(), examplee2e.ExpectFixtures(set), time.Second, nil); err != nil {
		log.Fatal(err)
	}
	leader, err := d.WaitLeader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// Let the patches computed from a cache that lagged behind the last
	// writes (409 Conflict) go out first.
	if err := examplee2e.Settle(ctx, []*examplee2e.Replica{leader}); err != nil {
		log.Fatal(err)
	}
	quiet, err := examplee2e.PatchesOver(ctx, cp, []*examplee2e.Replica{leader}, 3)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("status PATCHes over 3 intervals with nothing changed:", quiet)
}
