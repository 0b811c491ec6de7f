package controller_test

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"

	"github.com/quietpatch/quietpatch/examples/httproute-status/controller"
	"github.com/quietpatch/quietpatch/examples/httproute-status/fixtures"
)

// The controller in-process, against fake clientsets holding three
// generated routes: it takes the lease, patches each route's status once,
// and on cancellation vacates the lease and returns nil. A binary passes
// a kubeconfig (Options.Kubeconfig) instead of clients.
func Example() {
	set, err := fixtures.Generate(fixtures.Config{Routes: 3, ControllerName: "example.com/route-status"})
	if err != nil {
		fmt.Println(err)
		return
	}
	var kubeObjs, gwObjs []runtime.Object
	for _, o := range set.Objects() {
		switch o := o.DeepCopyObject().(type) {
		case *gatewayv1.HTTPRoute:
			o.ResourceVersion = "1" // the fake API server assigns none
			gwObjs = append(gwObjs, o)
		case *gatewayv1.GatewayClass, *gatewayv1.ReferenceGrant:
			gwObjs = append(gwObjs, o)
		case *gatewayv1.Gateway: // created below
		default:
			kubeObjs = append(kubeObjs, o)
		}
	}
	kube := kubefake.NewClientset(kubeObjs...)
	gw := gwfake.NewSimpleClientset(gwObjs...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := gw.GatewayV1().Gateways(set.Gateway.Namespace).Create(ctx, set.Gateway, metav1.CreateOptions{}); err != nil {
		fmt.Println(err)
		return
	}

	c, err := controller.New(ctx, controller.Options{
		KubeClient:            kube,
		GatewayClient:         gw,
		ControllerName:        "example.com/route-status",
		Mesh:                  true,
		LeaseNamespace:        "default",
		Identity:              "example-replica",
		ReferenceGrantVersion: controller.ReferenceGrantV1,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	deadline := time.Now().Add(10 * time.Second)
	for _, r := range set.Routes {
		for {
			got, err := gw.GatewayV1().HTTPRoutes(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
			if err == nil && len(got.Status.Parents) > 0 {
				p := got.Status.Parents[0]
				fmt.Printf("%s: parent %s, controller %s\n", r.Name, p.ParentRef.Name, p.ControllerName)
				for _, cond := range p.Conditions {
					fmt.Printf("  %s=%s (%s)\n", cond.Type, cond.Status, cond.Reason)
				}
				break
			}
			if time.Now().After(deadline) {
				fmt.Println(r.Name, "has no status")
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	cancel()
	fmt.Println("Run:", <-done)
	// Output:
	// route-00000: parent gateway, controller example.com/route-status
	//   Accepted=True (Accepted)
	//   ResolvedRefs=True (ResolvedRefs)
	// route-00001: parent gateway, controller example.com/route-status
	//   Accepted=True (Accepted)
	//   ResolvedRefs=False (BackendNotFound)
	// route-00002: parent mesh, controller example.com/route-status
	//   Accepted=True (Accepted)
	//   ResolvedRefs=True (ResolvedRefs)
	// Run: <nil>
}
