package cluster

import (
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// TestHistory: a route that existed before Record is in the initial list;
// a route created after, then changed in its metadata, then in its status,
// is recorded version by version in resourceVersion order, and only the
// status write is a StatusChanges entry.
func TestHistory(t *testing.T) {
	cp := shared.Get(t)
	ctx := testContext(t, time.Minute)
	ns, err := cp.NewNamespace(ctx, "history-")
	if err != nil {
		t.Fatal(err)
	}
	routes := cp.AdminGatewayClient().GatewayV1().HTTPRoutes(ns)
	newRoute := func(name string) *gatewayv1.HTTPRoute {
		r, err := routes.Create(ctx, &gatewayv1.HTTPRoute{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       gatewayv1.HTTPRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "gw"}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	newRoute("before")
	gvr := schema.GroupVersionResource{Group: gatewayv1.GroupName, Version: "v1", Resource: "httproutes"}
	h, err := cp.Record(ctx, gvr, ns, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Stop()

	r := newRoute("after")
	r, err = routes.Patch(ctx, r.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"a":"b"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.Status.Parents = []gatewayv1.RouteParentStatus{{
		ParentRef: r.Spec.ParentRefs[0], ControllerName: "quietpatch.io/e2e-history",
		Conditions: []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", LastTransitionTime: metav1.Now()}},
	}}
	r, err = routes.UpdateStatus(ctx, r, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rv, err := strconv.ParseUint(r.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := h.WaitFor(ctx, rv)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for i, v := range vs {
		names = append(names, v.Name)
		if i > 1 && v.ResourceVersion <= vs[i-1].ResourceVersion {
			t.Errorf("version %d (rv %d) after rv %d: not in resourceVersion order", i, v.ResourceVersion, vs[i-1].ResourceVersion)
		}
	}
	if len(vs) != 4 || !vs[0].Initial || vs[0].Name != "before" || vs[1].Initial || vs[3].ResourceVersion != rv {
		t.Fatalf("recorded %d versions %v, want before (initial), then after created, labelled, its status written (rv %d)", len(vs), names, rv)
	}
	var got gatewayv1.HTTPRoute
	if err := vs[3].Into(&got); err != nil || len(got.Status.Parents) != 1 {
		t.Errorf("Into: %v, %d status entries, want 1", err, len(got.Status.Parents))
	}
	sc := StatusChanges(vs)
	if len(sc) != 1 || sc[0].ResourceVersion != rv {
		t.Errorf("StatusChanges returned %d versions, want the status write (rv %d) alone", len(sc), rv)
	}
	if err := h.Err(); err != nil {
		t.Error(err)
	}
}
