package routestatus

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// byteSource turns fuzz bytes into choices; once exhausted it yields zeros.
type byteSource struct{ b []byte }

func (s *byteSource) next() byte {
	if len(s.b) == 0 {
		return 0
	}
	v := s.b[0]
	s.b = s.b[1:]
	return v
}

func (s *byteSource) intn(n int) int { return int(s.next()) % n }
func (s *byteSource) flip() bool     { return s.next()&1 == 1 }

func pick[T any](s *byteSource, xs ...T) T { return xs[s.intn(len(xs))] }

func optional[T any](s *byteSource, xs ...T) *T {
	if s.flip() {
		return nil
	}
	v := pick(s, xs...)
	return &v
}

var (
	fuzzNamespaces = []string{"a", "b"}
	fuzzGateways   = []string{"g0", "g1"}
	fuzzServices   = []string{"s0", "s1", "x"}
	fuzzNames      = []string{"g0", "s0", "s1", "x"}
)

// fuzzWorld builds a random cluster and route from s. Existing status entries
// are valid (as the API server would have stored them) and at most MaxParents.
func fuzzWorld(s *byteSource) (*gatewayv1.HTTPRoute, *Snapshot) {
	snap := &Snapshot{}
	for _, ns := range fuzzNamespaces {
		n := namespace(ns, nil)
		if team := pick(s, "", "blue", "red"); team != "" {
			n.Labels = map[string]string{"team": team}
		}
		if s.intn(4) != 0 {
			mustAdd(snap, n)
		}
	}
	mustAdd(snap, gatewayClass("ours", testController))
	mustAdd(snap, gatewayClass("theirs", otherController))
	for range 1 + s.intn(4) {
		gw := gateway(pick(s, fuzzNamespaces...), pick(s, fuzzGateways...), pick(s, "ours", "ours", "ours", "theirs", "missing"))
		for range s.intn(5) {
			l := gatewayv1.Listener{
				Name:     gatewayv1.SectionName(pick(s, "l0", "l1", "l2")),
				Port:     pick[int32](s, 80, 443, 8080),
				Protocol: pick(s, gatewayv1.HTTPProtocolType, gatewayv1.HTTPSProtocolType, gatewayv1.TCPProtocolType),
				Hostname: optional[gatewayv1.Hostname](s, "*.example.com", "a.example.com", "*.b.example.com", "c.example.net"),
			}
			if s.flip() {
				l.AllowedRoutes = &gatewayv1.AllowedRoutes{}
				if s.flip() {
					l.AllowedRoutes.Namespaces = &gatewayv1.RouteNamespaces{
						From: optional(s, gatewayv1.NamespacesFromAll, gatewayv1.NamespacesFromSame,
							gatewayv1.NamespacesFromSelector, gatewayv1.NamespacesFromNone, "Bogus"),
					}
					switch s.intn(4) {
					case 0:
						l.AllowedRoutes.Namespaces.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "blue"}}
					case 1:
						l.AllowedRoutes.Namespaces.Selector = &metav1.LabelSelector{}
					case 2:
						l.AllowedRoutes.Namespaces.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Bogus"}}}
					}
				}
				for range s.intn(3) {
					l.AllowedRoutes.Kinds = append(l.AllowedRoutes.Kinds, gatewayv1.RouteGroupKind{
						Group: optional[gatewayv1.Group](s, gatewayv1.GroupName, ""),
						Kind:  pick[gatewayv1.Kind](s, "HTTPRoute", "GRPCRoute"),
					})
				}
			}
			gw.Spec.Listeners = append(gw.Spec.Listeners, l)
		}
		mustAdd(snap, gw)
	}
	for range s.intn(6) {
		svc := service(pick(s, fuzzNamespaces...), pick(s, fuzzServices...))
		switch s.intn(4) {
		case 0:
			svc.Spec.ClusterIP = corev1.ClusterIPNone
		case 1:
			svc.Spec.Type = corev1.ServiceTypeExternalName
		}
		if s.flip() {
			svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "grpc", Port: 81})
		}
		mustAdd(snap, svc)
	}
	for range s.intn(3) {
		name := ""
		if s.flip() {
			name = pick(s, fuzzServices...)
		}
		mustAdd(snap, grant(pick(s, fuzzNamespaces...), pick(s, fuzzNamespaces...), name))
	}

	r := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{
		Namespace:       pick(s, fuzzNamespaces...),
		Name:            "r",
		Generation:      int64(int8(s.next())),
		ResourceVersion: "1",
	}}
	for range s.intn(3) {
		r.Spec.Hostnames = append(r.Spec.Hostnames, pick[gatewayv1.Hostname](s, "a.example.com", "*.example.com", "z.b.example.com", "q.example.org"))
	}
	nrefs := s.intn(8)
	if s.intn(8) == 0 {
		nrefs = 30 + s.intn(12) // over the limit, with foreign entries
	}
	for range nrefs {
		r.Spec.ParentRefs = append(r.Spec.ParentRefs, fuzzParentRef(s))
	}
	for range s.intn(3) {
		var rule gatewayv1.HTTPRouteRule
		for range s.intn(3) {
			b := backend("", pick(s, fuzzServices...))
			if s.intn(3) == 0 {
				b.Namespace = ptr(gatewayv1.Namespace(pick(s, fuzzNamespaces...)))
			}
			b.Group = optional[gatewayv1.Group](s, "", "", "example.com")
			b.Kind = optional[gatewayv1.Kind](s, "Service", "Service", "Bucket")
			if s.intn(4) == 0 {
				m := backend(pick(s, fuzzNamespaces...), pick(s, fuzzServices...))
				b.Filters = append(b.Filters, gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterRequestMirror,
					RequestMirror: &gatewayv1.HTTPRequestMirrorFilter{BackendRef: m.BackendObjectReference}})
			}
			rule.BackendRefs = append(rule.BackendRefs, b)
		}
		if s.intn(4) == 0 {
			m := backend("", pick(s, fuzzServices...))
			rule.Filters = append(rule.Filters, gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterRequestMirror,
				RequestMirror: &gatewayv1.HTTPRequestMirrorFilter{BackendRef: m.BackendObjectReference}})
		}
		r.Spec.Rules = append(r.Spec.Rules, rule)
	}

	// Existing status: a mix of foreign entries and entries of ours, for refs
	// of the spec or not, at most MaxParents in all.
	for range s.intn(MaxParents + 1) {
		var ref gatewayv1.ParentReference
		if len(r.Spec.ParentRefs) > 0 && s.flip() {
			r.Spec.ParentRefs[s.intn(len(r.Spec.ParentRefs))].DeepCopyInto(&ref)
			if !checkParentRefOK(&ref) {
				ref = fuzzValidParentRef(s)
			}
		} else {
			ref = fuzzValidParentRef(s)
		}
		e := gatewayv1.RouteParentStatus{
			ParentRef:      ref,
			ControllerName: pick(s, testController, testController, otherController, "example.org/third"),
		}
		for range 1 + s.intn(4) {
			c := metav1.Condition{
				Type:               pick(s, "Accepted", "ResolvedRefs", "Accepted", "ResolvedRefs", "example.com/Other", "Programmed"),
				Status:             pick(s, metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown),
				Reason:             pick(s, "Accepted", "Pending", "BackendNotFound"),
				Message:            pick(s, "", "old"),
				ObservedGeneration: int64(s.intn(4)),
				LastTransitionTime: metav1.NewTime(t0.Add(-time.Duration(s.intn(100)) * time.Hour)),
			}
			if !hasType(e.Conditions, c.Type) {
				e.Conditions = append(e.Conditions, c)
			}
		}
		r.Status.Parents = append(r.Status.Parents, e)
	}
	return r, snap
}

func mustAdd(s *Snapshot, o runtime.Object) {
	if err := s.Add(o); err != nil {
		panic(err) // a bug in this test
	}
}

func checkParentRefOK(ref *gatewayv1.ParentReference) bool {
	f, _, _ := checkParentRef(ref)
	return f == ""
}

// fuzzParentRef returns a parentRef as a client might write it; some are
// invalid in a status entry (the API server would not have accepted them in
// the spec either, but Compute must not copy them).
func fuzzParentRef(s *byteSource) gatewayv1.ParentReference {
	ref := fuzzValidParentRef(s)
	switch s.intn(12) {
	case 0:
		ref.SectionName = ptr(gatewayv1.SectionName("Bad_Name"))
	case 1:
		ref.Port = ptr(int32(0))
	case 2:
		ref.Name = ""
	}
	return ref
}

func fuzzValidParentRef(s *byteSource) gatewayv1.ParentReference {
	ref := gatewayv1.ParentReference{Name: gatewayv1.ObjectName(pick(s, fuzzNames...))}
	switch s.intn(5) {
	case 0, 1:
		ref.Name = gatewayv1.ObjectName(pick(s, fuzzGateways...))
		ref.Group = optional[gatewayv1.Group](s, gatewayv1.GroupName)
		ref.Kind = optional[gatewayv1.Kind](s, "Gateway")
	case 2, 3:
		ref.Name = gatewayv1.ObjectName(pick(s, fuzzServices...))
		ref.Group = ptr(gatewayv1.Group(""))
		ref.Kind = ptr(gatewayv1.Kind("Service"))
	default:
		ref.Group = ptr(gatewayv1.Group(pick(s, "example.com", "")))
		ref.Kind = ptr(gatewayv1.Kind(pick(s, "Mesh", "Gateway")))
	}
	if s.flip() {
		ref.Namespace = ptr(gatewayv1.Namespace(pick(s, fuzzNamespaces...)))
	}
	if s.intn(3) == 0 {
		ref.SectionName = ptr(gatewayv1.SectionName(pick(s, "l0", "l1", "http", "grpc")))
	}
	if s.intn(4) == 0 {
		ref.Port = ptr(pick[int32](s, 80, 443, 81))
	}
	return ref
}

func fuzzSeeds() [][]byte {
	seeds := [][]byte{nil, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 64 {
		b := make([]byte, 64+rng.IntN(1024))
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		seeds = append(seeds, b)
	}
	return seeds
}

// FuzzCompute builds random routes and clusters from the fuzz input and
// checks the properties Compute promises: no panic, a status the CRD
// accepts, foreign entries untouched, at most one entry of ours per spec
// parentRef, inputs unmodified, determinism, and idempotence — computing again
// from the result, later, yields the same status with the same
// lastTransitionTimes. `go test` runs the seed corpus.
func FuzzCompute(f *testing.F) {
	for _, b := range fuzzSeeds() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &byteSource{b: data}
		r, snap := fuzzWorld(s)
		mesh := s.flip()
		now := t0.Add(time.Duration(s.intn(256)) * time.Minute)
		c, err := NewComputer(Options{ControllerName: testController, Mesh: mesh})
		if err != nil {
			t.Fatal(err)
		}
		before := r.DeepCopy()
		got := c.Compute(r, snap, now)
		if !reflect.DeepEqual(before, r) {
			t.Fatal("Compute modified the route")
		}
		if err := Validate(got); err != nil {
			t.Fatalf("Validate(Compute(...)) = %v", err)
		}
		if _, err := MergePatch(r, got); err != nil {
			t.Fatalf("MergePatch = %v", err)
		}

		var foreignIn, foreignOut []gatewayv1.RouteParentStatus
		for _, p := range r.Status.Parents {
			if p.ControllerName != testController {
				foreignIn = append(foreignIn, p)
			}
		}
		for i, p := range got.Parents {
			if p.ControllerName != testController {
				foreignOut = append(foreignOut, p)
				continue
			}
			inSpec := false
			for j := range r.Spec.ParentRefs {
				if reflect.DeepEqual(p.ParentRef, r.Spec.ParentRefs[j]) {
					inSpec = true
				}
			}
			if !inSpec {
				t.Fatalf("parents[%d]: our parentRef %+v is not a copy of a spec parentRef", i, p.ParentRef)
			}
			for k := 0; k < i; k++ {
				if got.Parents[k].ControllerName == testController && parentRefEqual(&got.Parents[k].ParentRef, &p.ParentRef) {
					t.Fatalf("parents[%d] and parents[%d] are both ours for the same parentRef", k, i)
				}
			}
			if cond(p, gatewayv1.RouteConditionAccepted) == nil || cond(p, gatewayv1.RouteConditionResolvedRefs) == nil {
				t.Fatalf("parents[%d] lacks Accepted or ResolvedRefs: %+v", i, p.Conditions)
			}
		}
		if !reflect.DeepEqual(foreignIn, foreignOut) {
			t.Fatal("foreign entries were changed, dropped or reordered")
		}

		if again := c.Compute(r, snap, now); !reflect.DeepEqual(again, got) {
			t.Fatal("Compute is not deterministic")
		}

		r2 := r.DeepCopy()
		r2.Status = *got.DeepCopy()
		got2 := c.Compute(r2, snap, now.Add(time.Hour))
		if !Equal(got, got2) {
			t.Fatalf("not idempotent:\nfirst  %+v\nsecond %+v", got.Parents, got2.Parents)
		}
		if !reflect.DeepEqual(got, got2) {
			t.Fatalf("second Compute changed more than Equal sees (lastTransitionTime?):\nfirst  %+v\nsecond %+v", got.Parents, got2.Parents)
		}
	})
}

// checkUpToDate checks that UpToDate agrees with Equal(status,
// Compute(...)) on the random route data describes, on the status Compute
// returns for it (up to date), and on that status with one change chosen
// by mutation: an entry swapped, removed or duplicated, a condition's
// message, reason, generation or type changed, a condition added or
// removed.
func checkUpToDate(t *testing.T, data []byte, mutation int) {
	t.Helper()
	s := &byteSource{b: data}
	r, snap := fuzzWorld(s)
	c, err := NewComputer(Options{ControllerName: testController, Mesh: s.flip()})
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, r *gatewayv1.HTTPRoute) {
		t.Helper()
		want := Equal(r.Status, c.Compute(r, snap, t0))
		if got := c.UpToDate(r, snap); got != want {
			t.Fatalf("%s (mutation %d): UpToDate = %v, Equal(status, Compute) = %v; status %+v", what, mutation, got, want, r.Status.Parents)
		}
	}
	check("random status", r)
	r2 := r.DeepCopy()
	r2.Status = c.Compute(r, snap, t0)
	if !c.UpToDate(r2, snap) {
		t.Fatalf("the status Compute returned is not up to date: %+v", r2.Status.Parents)
	}
	ps := r2.Status.Parents
	if len(ps) == 0 {
		return
	}
	i := s.intn(len(ps))
	conds := ps[i].Conditions
	k := 0
	if len(conds) > 0 {
		k = s.intn(len(conds))
	}
	switch mutation % 10 {
	case 0:
		j := s.intn(len(ps))
		ps[i], ps[j] = ps[j], ps[i]
	case 1:
		r2.Status.Parents = append(ps[:i:i], ps[i+1:]...)
	case 2:
		r2.Status.Parents = append(ps[:i+1:i+1], ps[i:]...)
	case 3:
		if len(conds) > 0 {
			conds[k].Message += pick(s, ".", "x", " (1 more unresolved references)")
		}
	case 4:
		if len(conds) > 0 {
			conds[k].Reason = pick(s, "Accepted", "NoMatchingParent", "BackendNotFound")
		}
	case 5:
		if len(conds) > 0 {
			conds[k].ObservedGeneration++
		}
	case 6:
		if len(conds) > 0 {
			conds[k].Type = pick(s, "Accepted", "ResolvedRefs", "Other")
		}
	case 7:
		ps[i].Conditions = append(conds, metav1.Condition{Type: pick(s, "Other", "Accepted", "x/Y"), Status: metav1.ConditionTrue,
			Reason: "Some", Message: "m", LastTransitionTime: metav1.NewTime(t0)})
	case 8:
		if len(conds) > 0 {
			ps[i].Conditions = conds[:len(conds)-1]
		}
	case 9:
		if len(conds) > 0 {
			conds[k].Status = pick(s, metav1.ConditionTrue, metav1.ConditionFalse)
		}
	}
	check("changed status", r2)
}

// TestUpToDateAgrees runs checkUpToDate on 5,000 random routes, each
// mutation in turn.
func TestUpToDateAgrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 5_000 {
		b := make([]byte, 16+rng.IntN(512))
		for j := range b {
			b[j] = byte(rng.UintN(256))
		}
		checkUpToDate(t, b, i)
	}
}

// FuzzUpToDate is checkUpToDate on fuzz input. `go test` runs the seed
// corpus.
func FuzzUpToDate(f *testing.F) {
	for _, b := range fuzzSeeds() {
		f.Add(b, uint8(0))
	}
	f.Fuzz(func(t *testing.T, data []byte, mutation uint8) { checkUpToDate(t, data, int(mutation)) })
}
