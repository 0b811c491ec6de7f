package routestatus

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// benchStatuses returns two equal statuses (one parent, two conditions in
// different orders and with different lastTransitionTimes): the common case
// of a reconcile pass where nothing changed.
func benchStatuses() (gatewayv1.HTTPRouteStatus, gatewayv1.HTTPRouteStatus) {
	a := makeStatus([]gatewayv1.RouteParentStatus{entry(gatewayRef(infraNS, "gw", "http"), testController, "Accepted", "ResolvedRefs", 2, t0)})
	b := *a.DeepCopy()
	c := b.Parents[0].Conditions
	c[0], c[1] = c[1], c[0]
	c[0].LastTransitionTime = metav1.NewTime(t0.Add(1e9))
	return a, b
}

// BenchmarkEqual compares the typed comparator with the go-cmp equivalent
// (ignore lastTransitionTime, sort conditions by type).
func BenchmarkEqual(b *testing.B) {
	x, y := benchStatuses()
	b.Run("typed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !Equal(x, y) {
				b.Fatal("not equal")
			}
		}
	})
	b.Run("cmp.Equal", func(b *testing.B) {
		opts := cmp.Options{
			cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime"),
			cmpopts.SortSlices(func(p, q metav1.Condition) bool { return p.Type < q.Type }),
		}
		b.ReportAllocs()
		for b.Loop() {
			if !cmp.Equal(x, y, opts) {
				b.Fatal("not equal")
			}
		}
	})
}

// BenchmarkCompute measures one route with a Gateway parent, a mesh Service
// parent and two backends (one cross-namespace, granted), when the current
// status is already the desired one (steady) and when the route has no
// status yet (new).
func BenchmarkCompute(b *testing.B) {
	snap := snapshot(b, with(world(), grant("other", routeNS, ""))...)
	c := newComputer(b, true)
	r := route([]gatewayv1.ParentReference{gatewayRef(infraNS, "gw", "http"), serviceRef("", "mesh")},
		backend("", "backend"), backend("other", "remote"))
	steady := r.DeepCopy()
	steady.Status = c.Compute(r, snap, t0)
	for _, bc := range []struct {
		name  string
		route *gatewayv1.HTTPRoute
	}{{"steady", steady}, {"new", r}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				st := c.Compute(bc.route, snap, t0)
				if len(st.Parents) != 2 {
					b.Fatal("unexpected status")
				}
			}
		})
	}
	b.Run("steady+Equal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !Equal(c.Compute(steady, snap, t0), steady.Status) {
				b.Fatal("not equal")
			}
		}
	})
}
