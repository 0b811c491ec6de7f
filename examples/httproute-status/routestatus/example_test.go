package routestatus_test

import (
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch/examples/httproute-status/routestatus"
)

func ptr[T any](v T) *T { return &v }

// exampleWorld returns a Lookup with GatewayClass "demo" of controller
// example.net/quietpatch, Gateway infra/gw with one HTTP listener "http"
// open to all namespaces, and Service shop/cart.
func exampleWorld() *routestatus.Snapshot {
	lk, err := routestatus.NewSnapshot(
		&gatewayv1.GatewayClass{
			ObjectMeta: metav1.ObjectMeta{Name: "demo"},
			Spec:       gatewayv1.GatewayClassSpec{ControllerName: "example.net/quietpatch"},
		},
		&gatewayv1.Gateway{
			ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "gw"},
			Spec: gatewayv1.GatewaySpec{GatewayClassName: "demo", Listeners: []gatewayv1.Listener{{
				Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType,
				AllowedRoutes: &gatewayv1.AllowedRoutes{Namespaces: &gatewayv1.RouteNamespaces{From: ptr(gatewayv1.NamespacesFromAll)}},
			}}},
		},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart"}},
	)
	if err != nil {
		panic(err)
	}
	return lk
}

// exampleRoute returns shop/cart attached to infra/gw, forwarding to the
// Services named.
func exampleRoute(backends ...string) *gatewayv1.HTTPRoute {
	r := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart", Generation: 1, ResourceVersion: "100"}}
	r.Spec.ParentRefs = []gatewayv1.ParentReference{{
		Group: ptr(gatewayv1.Group(gatewayv1.GroupName)), Kind: ptr(gatewayv1.Kind("Gateway")),
		Namespace: ptr(gatewayv1.Namespace("infra")), Name: "gw",
	}}
	var rule gatewayv1.HTTPRouteRule
	for _, b := range backends {
		rule.BackendRefs = append(rule.BackendRefs, gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{
			BackendObjectReference: gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(b), Port: ptr(gatewayv1.PortNumber(80))},
		}})
	}
	r.Spec.Rules = []gatewayv1.HTTPRouteRule{rule}
	return r
}

func printStatus(st gatewayv1.HTTPRouteStatus) {
	for _, p := range st.Parents {
		fmt.Printf("%s %s/%s:\n", p.ControllerName, *p.ParentRef.Namespace, p.ParentRef.Name)
		for _, c := range p.Conditions {
			fmt.Printf("  %s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
		}
	}
}

// One reconcile step: compute, compare, build the patch.
func Example() {
	computer, err := routestatus.NewComputer(routestatus.Options{ControllerName: "example.net/quietpatch"})
	if err != nil {
		panic(err)
	}
	lk := exampleWorld()
	route := exampleRoute("cart", "payments")
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

	desired := computer.Compute(route, lk, now)
	printStatus(desired)
	if !routestatus.Equal(route.Status, desired) {
		patch, err := routestatus.MergePatch(route, desired)
		if err != nil {
			panic(err)
		}
		fmt.Printf("patch: %.80s...\n", patch)
	}

	// Once the patch is applied, the next pass finds nothing to do.
	route.Status = desired
	fmt.Println("equal next time:", routestatus.Equal(route.Status, computer.Compute(route, lk, now.Add(10*time.Second))))
	// Output:
	// example.net/quietpatch infra/gw:
	//   Accepted=True Accepted: Accepted by the Gateway.
	//   ResolvedRefs=False BackendNotFound: spec.rules[0].backendRefs[1]: Service shop/payments not found.
	// patch: {"metadata":{"resourceVersion":"100"},"status":{"parents":[{"parentRef":{"group"...
	// equal next time: true
}

// Entries written by other controllers are kept as they are, in place.
func ExampleComputer_Compute_foreignEntries() {
	computer, _ := routestatus.NewComputer(routestatus.Options{ControllerName: "example.net/quietpatch"})
	route := exampleRoute("cart")
	route.Status.Parents = []gatewayv1.RouteParentStatus{{
		ParentRef:      gatewayv1.ParentReference{Namespace: ptr(gatewayv1.Namespace("infra")), Name: "other-gw"},
		ControllerName: "example.org/other",
		Conditions: []metav1.Condition{{Type: "Accepted", Status: "True", Reason: "Accepted", Message: "theirs",
			LastTransitionTime: metav1.NewTime(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))}},
	}}
	printStatus(computer.Compute(route, exampleWorld(), time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
	// Output:
	// example.org/other infra/other-gw:
	//   Accepted=True Accepted: theirs
	// example.net/quietpatch infra/gw:
	//   Accepted=True Accepted: Accepted by the Gateway.
	//   ResolvedRefs=True ResolvedRefs: All references resolved.
}

// UpToDate answers what a pass asks of every route — is its status
// already the one Compute would return? — without building a status.
func ExampleComputer_UpToDate() {
	computer, _ := routestatus.NewComputer(routestatus.Options{ControllerName: "example.net/quietpatch"})
	lk := exampleWorld()
	route := exampleRoute("cart", "payments")
	fmt.Println("before the first patch:", computer.UpToDate(route, lk))
	route.Status = computer.Compute(route, lk, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	fmt.Println("once written:", computer.UpToDate(route, lk))
	route.Generation++ // the spec changed: observedGeneration is behind
	fmt.Println("after a spec change:", computer.UpToDate(route, lk))
	// Output:
	// before the first patch: false
	// once written: true
	// after a spec change: false
}

func ExampleNewComputer() {
	_, err := routestatus.NewComputer(routestatus.Options{ControllerName: "quietpatch"})
	fmt.Println(errors.Is(err, routestatus.ErrInvalidOptions))
	fmt.Println(err)
	// Output:
	// true
	// routestatus: invalid options: Options.ControllerName must be DOMAIN/PATH (e.g. "example.net/gateway-controller") of at most 253 characters, got "quietpatch"
}

// Equal ignores lastTransitionTime and the order of conditions.
func ExampleEqual() {
	cond := func(typ string, ltt time.Time) metav1.Condition {
		return metav1.Condition{Type: typ, Status: "True", Reason: typ, Message: "ok", LastTransitionTime: metav1.NewTime(ltt)}
	}
	t1 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t2 := t1.Add(time.Hour)
	entry := func(conds ...metav1.Condition) gatewayv1.HTTPRouteStatus {
		var st gatewayv1.HTTPRouteStatus
		st.Parents = []gatewayv1.RouteParentStatus{{
			ParentRef: gatewayv1.ParentReference{Name: "gw"}, ControllerName: "example.net/quietpatch", Conditions: conds,
		}}
		return st
	}
	a := entry(cond("Accepted", t1), cond("ResolvedRefs", t1))
	b := entry(cond("ResolvedRefs", t2), cond("Accepted", t2))
	fmt.Println(routestatus.Equal(a, b))
	b.Parents[0].Conditions[0].Reason = "BackendNotFound"
	fmt.Println(routestatus.Equal(a, b))
	// Output:
	// true
	// false
}

func ExampleMergePatch() {
	route := exampleRoute()
	var desired gatewayv1.HTTPRouteStatus
	desired.Parents = []gatewayv1.RouteParentStatus{{
		ParentRef:      gatewayv1.ParentReference{Group: ptr(gatewayv1.Group("")), Kind: ptr(gatewayv1.Kind("Service")), Name: "cart"},
		ControllerName: "example.net/quietpatch",
		Conditions: []metav1.Condition{{Type: "Accepted", Status: "True", Reason: "Accepted", Message: "ok",
			ObservedGeneration: 1, LastTransitionTime: metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))}},
	}}
	patch, err := routestatus.MergePatch(route, desired)
	fmt.Println(string(patch), err)

	route.ResourceVersion = ""
	_, err = routestatus.MergePatch(route, desired)
	fmt.Println(errors.Is(err, routestatus.ErrNoResourceVersion))
	// Output:
	// {"metadata":{"resourceVersion":"100"},"status":{"parents":[{"parentRef":{"group":"","kind":"Service","name":"cart"},"controllerName":"example.net/quietpatch","conditions":[{"type":"Accepted","status":"True","observedGeneration":1,"lastTransitionTime":"2026-01-02T03:04:05Z","reason":"Accepted","message":"ok"}]}]}} <nil>
	// true
}

func ExampleValidate() {
	var st gatewayv1.HTTPRouteStatus
	st.Parents = []gatewayv1.RouteParentStatus{{
		ParentRef:      gatewayv1.ParentReference{Name: "gw"},
		ControllerName: "example.net/quietpatch",
		Conditions: []metav1.Condition{{Type: "Accepted", Status: "True", Reason: "All good!", Message: "ok",
			LastTransitionTime: metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))}},
	}}
	err := routestatus.Validate(st)
	fmt.Println(errors.Is(err, routestatus.ErrInvalidStatus))
	fmt.Println(err)
	// Output:
	// true
	// routestatus: invalid status: parents[0].conditions[0].reason "All good!": must match ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$, 1..1024 characters
}

func ExampleHostnamesIntersect() {
	fmt.Println(routestatus.HostnamesIntersect("*.example.com", "shop.example.com"))
	fmt.Println(routestatus.HostnamesIntersect("*.example.com", "example.com"))
	fmt.Println(routestatus.HostnamesIntersect("*.example.com", "*.eu.example.com"))
	// Output:
	// true
	// false
	// true
}
