package reliability_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/e2e/examplee2e"
	"github.com/quietpatch/quietpatch/examples/httproute-status/routestatus"
)

const (
	biController    gatewayv1.GatewayController = "quietpatch.io/e2e-badinput"
	biOther         gatewayv1.GatewayController = "other.example.com/controller"
	biInfra                                     = "bi-infra"
	biAppA, biAppB                              = "bi-app-a", "bi-app-b"
	biFieldManager                              = "quietpatch-e2e-badinput"
	defaultBIRoutes                             = 80
)

// biWorld creates the objects the generated routes refer to and returns
// them as the API server stored them.
func biWorld(ctx context.Context, t *testing.T, cp *cluster.ControlPlane) []runtime.Object {
	t.Helper()
	kube, gw := cp.AdminClient(), cp.AdminGatewayClient()
	var objs []runtime.Object
	must := func(o runtime.Object, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: biInfra}},
		{ObjectMeta: metav1.ObjectMeta{Name: biAppA, Labels: map[string]string{"team": "blue"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: biAppB}},
	} {
		must(kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}))
	}
	for _, ns := range []string{biAppA, biAppB} {
		for _, name := range []string{"s0", "s1", "headless"} {
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
			}
			if name == "headless" {
				svc.Spec.ClusterIP = corev1.ClusterIPNone
			}
			must(kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}))
		}
	}
	for name, ctl := range map[string]gatewayv1.GatewayController{"bi-ours": biController, "bi-theirs": biOther} {
		must(gw.GatewayV1().GatewayClasses().Create(ctx, &gatewayv1.GatewayClass{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: gatewayv1.GatewayClassSpec{ControllerName: ctl},
		}, metav1.CreateOptions{}))
	}
	all, sel := gatewayv1.NamespacesFromAll, gatewayv1.NamespacesFromSelector
	wild := gatewayv1.Hostname("*.example.com")
	exact := gatewayv1.Hostname("api.example.net")
	gateways := []*gatewayv1.Gateway{
		{ObjectMeta: metav1.ObjectMeta{Namespace: biInfra, Name: "gw-all"}, Spec: gatewayv1.GatewaySpec{
			GatewayClassName: "bi-ours",
			Listeners: []gatewayv1.Listener{
				{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType, Hostname: &wild, AllowedRoutes: &gatewayv1.AllowedRoutes{Namespaces: &gatewayv1.RouteNamespaces{From: &all}}},
				{Name: "exact", Port: 8081, Protocol: gatewayv1.HTTPProtocolType, Hostname: &exact, AllowedRoutes: &gatewayv1.AllowedRoutes{Namespaces: &gatewayv1.RouteNamespaces{From: &all}}},
				{Name: "same", Port: 8080, Protocol: gatewayv1.HTTPProtocolType},
			},
		}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: biInfra, Name: "gw-sel"}, Spec: gatewayv1.GatewaySpec{
			GatewayClassName: "bi-ours",
			Listeners: []gatewayv1.Listener{
				{Name: "blue", Port: 80, Protocol: gatewayv1.HTTPProtocolType, AllowedRoutes: &gatewayv1.AllowedRoutes{Namespaces: &gatewayv1.RouteNamespaces{
					From: &sel, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "blue"}},
				}}},
			},
		}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: biInfra, Name: "gw-theirs"}, Spec: gatewayv1.GatewaySpec{
			GatewayClassName: "bi-theirs",
			Listeners:        []gatewayv1.Listener{{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType}},
		}},
	}
	for _, g := range gateways {
		must(gw.GatewayV1().Gateways(biInfra).Create(ctx, g, metav1.CreateOptions{}))
	}
	s0 := gatewayv1.ObjectName("s0")
	must(gw.GatewayV1beta1().ReferenceGrants(biAppB).Create(ctx, &gatewayv1beta1.ReferenceGrant{
		ObjectMeta: metav1.ObjectMeta{Namespace: biAppB, Name: "from-a"},
		Spec: gatewayv1beta1.ReferenceGrantSpec{
			From: []gatewayv1beta1.ReferenceGrantFrom{{Group: gatewayv1.GroupName, Kind: "HTTPRoute", Namespace: biAppA}},
			To:   []gatewayv1beta1.ReferenceGrantTo{{Group: "", Kind: "Service", Name: &s0}},
		},
	}, metav1.CreateOptions{}))
	return objs
}

// biGen generates varied HTTPRoutes.
type biGen struct{ r *rand.Rand }

func pickOne[T any](g *biGen, xs ...T) T { return xs[g.r.IntN(len(xs))] }

var biHostnames = []gatewayv1.Hostname{
	"example.com", "*.example.com", "a.example.com", "api.example.net", "*.net", "xn--bcher-kva.example",
	"a.b.c.d.e.f.g.example.com", "x", "*.x", "0.example.com", "a-b--c.example.com",
	gatewayv1.Hostname(strings.Repeat("l", 63) + ".example.com"),
	gatewayv1.Hostname(strings.Repeat(strings.Repeat("d", 60)+".", 4) + "com"),
}

// parentRef returns parentRef number i of a route: every parent of a route
// is a distinct object, so that the CRD's rules on repeated parents hold.
func (g *biGen) parentRef(i int, ns string) gatewayv1.ParentReference {
	var p gatewayv1.ParentReference
	switch n := g.r.IntN(10); {
	case i < 3 && n < 6: // one of the real Gateways
		p.Name = gatewayv1.ObjectName([]string{"gw-all", "gw-sel", "gw-theirs"}[i])
		p.Namespace = ptr.To(gatewayv1.Namespace(biInfra))
		if g.r.IntN(2) == 0 {
			p.SectionName = ptr.To(gatewayv1.SectionName(pickOne(g, "http", "exact", "same", "blue", "nope")))
		}
		if g.r.IntN(3) == 0 {
			p.Port = ptr.To(gatewayv1.PortNumber(pickOne(g, 80, 8080, 8081, 9999)))
		}
	case n < 4: // a Gateway that does not exist
		p.Name = gatewayv1.ObjectName(fmt.Sprintf("gw-missing-%d", i))
		if g.r.IntN(2) == 0 {
			p.Namespace = ptr.To(gatewayv1.Namespace(pickOne(g, biInfra, biAppA, "nowhere")))
		}
		if g.r.IntN(2) == 0 {
			p.Group = ptr.To(gatewayv1.Group(gatewayv1.GroupName))
			p.Kind = ptr.To(gatewayv1.Kind("Gateway"))
		}
	default: // a Service parent (GAMMA), existing or not, here or elsewhere
		p.Group = ptr.To(gatewayv1.Group(""))
		p.Kind = ptr.To(gatewayv1.Kind("Service"))
		if i < 3 {
			p.Name = gatewayv1.ObjectName([]string{"s0", "s1", "headless"}[i])
		} else {
			p.Name = gatewayv1.ObjectName(fmt.Sprintf("svc-%02d", i))
		}
		if g.r.IntN(3) == 0 {
			p.Namespace = ptr.To(gatewayv1.Namespace(pickOne(g, biAppA, biAppB)))
		}
		if g.r.IntN(2) == 0 {
			p.Port = ptr.To(gatewayv1.PortNumber(pickOne(g, 80, 81)))
		}
	}
	return p
}

func (g *biGen) backendRef(ns string) gatewayv1.BackendObjectReference {
	b := gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(pickOne(g, "s0", "s1", "headless", "missing")), Port: ptr.To(gatewayv1.PortNumber(80))}
	switch g.r.IntN(8) {
	case 0: // cross-namespace, granted or not
		b.Namespace = ptr.To(gatewayv1.Namespace(pickOne(g, biAppA, biAppB, "elsewhere")))
	case 1: // not a Service
		b.Group = ptr.To(gatewayv1.Group("example.com"))
		b.Kind = ptr.To(gatewayv1.Kind("Bucket"))
		b.Port = nil
	case 2:
		b.Group = ptr.To(gatewayv1.Group(""))
		b.Kind = ptr.To(gatewayv1.Kind("Service"))
	}
	return b
}

func (g *biGen) route(i int, ns string) *gatewayv1.HTTPRoute {
	r := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("bi-%04d", i)}}
	n := 1 + g.r.IntN(routestatus.MaxParents)
	if g.r.IntN(4) == 0 {
		n = routestatus.MaxParents
	}
	for j := range n {
		r.Spec.ParentRefs = append(r.Spec.ParentRefs, g.parentRef(j, ns))
	}
	for range g.r.IntN(5) {
		r.Spec.Hostnames = append(r.Spec.Hostnames, pickOne(g, biHostnames...))
	}
	for range g.r.IntN(5) {
		var rule gatewayv1.HTTPRouteRule
		for range g.r.IntN(17) {
			rule.BackendRefs = append(rule.BackendRefs, gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{
				BackendObjectReference: g.backendRef(ns), Weight: ptr.To(int32(g.r.IntN(10))),
			}})
		}
		if g.r.IntN(4) == 0 {
			rule.Filters = append(rule.Filters, gatewayv1.HTTPRouteFilter{
				Type: gatewayv1.HTTPRouteFilterRequestMirror, RequestMirror: &gatewayv1.HTTPRequestMirrorFilter{BackendRef: g.backendRef(ns)},
			})
		}
		r.Spec.Rules = append(r.Spec.Rules, rule)
	}
	return r
}

// existing returns status entries another controller (and this one, for
// parents no longer in the spec) already wrote, as the API server stores
// them.
func (g *biGen) existing(now metav1.Time, gen int64) []gatewayv1.RouteParentStatus {
	var out []gatewayv1.RouteParentStatus
	entry := func(ctl gatewayv1.GatewayController, name string) gatewayv1.RouteParentStatus {
		return gatewayv1.RouteParentStatus{
			ParentRef:      gatewayv1.ParentReference{Name: gatewayv1.ObjectName(name)},
			ControllerName: ctl,
			Conditions: []metav1.Condition{{
				Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", Message: "theirs",
				ObservedGeneration: gen, LastTransitionTime: now,
			}},
		}
	}
	if g.r.IntN(3) == 0 {
		for k := range 1 + g.r.IntN(routestatus.MaxParents-1) {
			out = append(out, entry(biOther, fmt.Sprintf("theirs-%d", k)))
		}
	}
	if g.r.IntN(4) == 0 && len(out) < routestatus.MaxParents-3 {
		for k := range 1 + g.r.IntN(3) {
			out = append(out, entry(biController, fmt.Sprintf("gone-%d", k)))
		}
	}
	return out
}

// TestGeneratedRoutesPassCRDValidation: the example's status computation,
// on varied generated routes (QP_RELIABILITY_ROUTES of them, default 80;
// seed QP_RELIABILITY_SEED, default random and logged), yields merge patches
// the API server's CRD validation accepts, every one (no 422), and whose
// result computes to itself (nothing left to patch).
func TestGeneratedRoutesPassCRDValidation(t *testing.T) {
	cp := shared.controlPlane(t)
	ctx := testContext(t, 2*time.Minute)
	n := envInt(t, "QP_RELIABILITY_ROUTES", defaultBIRoutes)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("QP_RELIABILITY_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("QP_RELIABILITY_SEED: %v", err)
		}
	}
	t.Logf("seed %d (set QP_RELIABILITY_SEED to repeat), %d routes", seed, n)
	g := &biGen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}

	world := biWorld(ctx, t, cp)
	// The controllers of the other tests handle Service parents too: leave
	// them no routes of this test to write to.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := examplee2e.DeleteRoutes(ctx, cp, biAppA, biAppB); err != nil {
			t.Errorf("deleting routes: %v", err)
		}
	})
	snap, err := routestatus.NewSnapshot(world...)
	if err != nil {
		t.Fatal(err)
	}
	computer, err := routestatus.NewComputer(routestatus.Options{ControllerName: biController, Mesh: true})
	if err != nil {
		t.Fatal(err)
	}
	gw := cp.AdminGatewayClient().GatewayV1()
	var created, rejectedSpecs, patched, full, prefilled int
	for i := 0; created < n; i++ {
		if i > 10*n {
			t.Fatalf("only %d of %d generated routes passed the CRD at creation (%d rejected)", created, n, rejectedSpecs)
		}
		ns := pickOne(g, biAppA, biAppB)
		spec := g.route(i, ns)
		routes := gw.HTTPRoutes(ns)
		route, err := routes.Create(ctx, spec, metav1.CreateOptions{})
		if apierrors.IsInvalid(err) {
			rejectedSpecs++ // the generator's problem, not the computation's
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		created++
		if prev := g.existing(metav1.NewTime(time.Now().Truncate(time.Second)), route.Generation); len(prev) > 0 {
			route.Status.Parents = prev
			if route, err = routes.UpdateStatus(ctx, route, metav1.UpdateOptions{FieldManager: biFieldManager}); err != nil {
				t.Fatalf("pre-filling the status of %s/%s: %v", ns, spec.Name, err)
			}
			prefilled++
		}
		desired := computer.Compute(route, snap, time.Now())
		if len(desired.Parents) == routestatus.MaxParents {
			full++
		}
		patch, err := routestatus.MergePatch(route, desired)
		if err != nil {
			t.Errorf("%s/%s: MergePatch refused the computed status: %v\nroute: %s", ns, route.Name, err, dump(route))
			continue
		}
		got, err := routes.Patch(ctx, route.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: biFieldManager}, "status")
		switch {
		case apierrors.IsInvalid(err):
			t.Errorf("%s/%s: the API server rejected the status patch (422): %v\npatch: %s\nroute: %s", ns, route.Name, err, patch, dump(route))
			continue
		case err != nil:
			t.Fatalf("%s/%s: status patch: %v", ns, route.Name, err)
		}
		patched++
		if again := computer.Compute(got, snap, time.Now()); !routestatus.Equal(again, got.Status) {
			t.Errorf("%s/%s: the stored status computes to a different one: a controller would patch it again", ns, route.Name)
		}
	}
	t.Logf("%d routes created (%d specs rejected by the CRD at creation, regenerated), %d with pre-filled status entries; %d status patches accepted, %d of them with the full %d parents",
		created, rejectedSpecs, prefilled, patched, full, routestatus.MaxParents)
	// Exercise the limits: the sample must have reached them.
	if full == 0 && n >= defaultBIRoutes {
		t.Errorf("no computed status had %d parents: the generator does not reach the limit", routestatus.MaxParents)
	}
}

func dump(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// envInt reads a positive integer from the environment, or returns def.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v <= 0 {
		t.Fatalf("%s must be a positive integer, got %q", name, s)
	}
	return v
}
