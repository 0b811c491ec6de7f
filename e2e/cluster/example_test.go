package cluster_test

import (
	"context"
	"fmt"
	"log"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/quietpatch/quietpatch/e2e/cluster"
)

// Start a control plane, run a least-privilege identity that may only patch
// HTTPRoute status, and count its PATCH requests from the API server's
// metrics. (Not run by `go test`: it needs the binaries from `make bins`.)
func Example() {
	ctx := context.Background()
	cp, err := cluster.Start(ctx, cluster.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer cp.Stop()
	fmt.Println("export KUBECONFIG=" + cp.KubeconfigPath())

	ns, err := cp.NewNamespace(ctx, "demo-")
	if err != nil {
		log.Fatal(err)
	}
	cfg, err := cp.ConfigFor(ctx, ns, "status-writer")
	if err != nil {
		log.Fatal(err)
	}
	err = cp.Grant(ctx, ns, "status-writer", rbacv1.PolicyRule{
		APIGroups: []string{"gateway.networking.k8s.io"},
		Resources: []string{"httproutes/status"},
		Verbs:     []string{"get", "patch"},
	})
	if err != nil {
		log.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 50, 100 // the controller's own client limits
	gw, err := gatewayclient.NewForConfig(cfg)
	if err != nil {
		log.Fatal(err)
	}
	_, _ = gw.GatewayV1().HTTPRoutes(ns).List(ctx, metav1.ListOptions{}) // Forbidden: no list right

	patches, err := cp.RequestCount(ctx, cluster.RequestFilter{
		Verb: "PATCH", Resource: "httproutes", Subresource: "status", Code: "200",
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("status patches so far:", patches)
}

// Put a fault proxy between a controller and the API server and make every
// request stall until the fault is cleared.
func ExampleFaultProxy() {
	ctx := context.Background()
	cp, err := cluster.Start(ctx, cluster.Options{SkipGatewayAPI: true})
	if err != nil {
		log.Fatal(err)
	}
	defer cp.Stop()
	p, err := cp.NewFaultProxy()
	if err != nil {
		log.Fatal(err)
	}
	cfg, err := p.ConfigFor(ctx, "default", "controller") // bearer token: identity kept
	if err != nil {
		log.Fatal(err)
	}
	_ = cfg // hand it to the controller under test

	_ = p.SetFault(cluster.Fault{Stall: true})
	time.Sleep(time.Second) // the controller's calls hang; its timeouts fire
	p.ClearFault()          // stalled calls go through

	_ = p.SetFault(cluster.Fault{ErrorProbability: 0.5, ErrorCode: 503})
	fmt.Printf("%+v\n", p.Stats())
}
