package routestatus

import (
	"testing"
	"time"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func TestEqual(t *testing.T) {
	ref := gatewayRef(infraNS, "gw", "http")
	base := func() gatewayv1.HTTPRouteStatus {
		return makeStatus([]gatewayv1.RouteParentStatus{
			entry(ref, testController, "Accepted", "ResolvedRefs", 2, t0),
			entry(gatewayRef(infraNS, "foreign", ""), otherController, "Accepted", "BackendNotFound", 2, t0),
		})
	}
	tests := []struct {
		label  string
		mutate func(s *gatewayv1.HTTPRouteStatus)
		equal  bool
	}{
		{label: "identical", mutate: func(*gatewayv1.HTTPRouteStatus) {}, equal: true},
		{label: "lastTransitionTime ignored", equal: true, mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].Conditions[1].LastTransitionTime.Time = t0.Add(time.Hour)
		}},
		{label: "condition order ignored", equal: true, mutate: func(s *gatewayv1.HTTPRouteStatus) {
			c := s.Parents[0].Conditions
			c[0], c[1] = c[1], c[0]
		}},
		{label: "parentRef defaults: nil group and kind equal explicit ones", equal: true, mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].ParentRef.Group = nil
			s.Parents[0].ParentRef.Kind = nil
		}},
		{label: "parentRef: nil sectionName equals empty", equal: true, mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[1].ParentRef.SectionName = ptr(gatewayv1.SectionName(""))
		}},
		{label: "parent order matters", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0], s.Parents[1] = s.Parents[1], s.Parents[0]
		}},
		{label: "reason differs", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].Conditions[0].Reason = "NoMatchingParent"
		}},
		{label: "status differs", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].Conditions[0].Status = "False"
		}},
		{label: "message differs", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[1].Conditions[1].Message = "other"
		}},
		{label: "observedGeneration differs", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].Conditions[1].ObservedGeneration = 3
		}},
		{label: "type differs", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].Conditions[1].Type = "Other"
		}},
		{label: "extra condition", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].Conditions = append(s.Parents[0].Conditions, s.Parents[0].Conditions[0])
		}},
		{label: "duplicate condition instead of another", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].Conditions[1] = s.Parents[0].Conditions[0]
		}},
		{label: "controllerName differs", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[1].ControllerName = "example.org/third"
		}},
		{label: "parentRef name differs", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].ParentRef.Name = "gw2"
		}},
		{label: "parentRef group differs", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].ParentRef.Group = ptr(gatewayv1.Group(""))
		}},
		{label: "parentRef namespace differs", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].ParentRef.Namespace = nil
		}},
		{label: "parentRef port differs", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].ParentRef.Port = ptr(int32(80))
		}},
		{label: "entry missing", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents = s.Parents[:1]
		}},
	}
	for _, tt := range tests {
		t.Run(tt.label, func(t *testing.T) {
			a, b := base(), base()
			tt.mutate(&b)
			if got := Equal(a, b); got != tt.equal {
				t.Errorf("Equal(a, b) = %v, want %v", got, tt.equal)
			}
			if got := Equal(b, a); got != tt.equal {
				t.Errorf("Equal(b, a) = %v, want %v", got, tt.equal)
			}
		})
	}
	t.Run("nil and empty parents", func(t *testing.T) {
		if !Equal(gatewayv1.HTTPRouteStatus{}, makeStatus([]gatewayv1.RouteParentStatus{})) {
			t.Error("nil and empty parents differ")
		}
	})
	t.Run("does not allocate", func(t *testing.T) {
		a, b := base(), base()
		b.Parents[0].Conditions[0], b.Parents[0].Conditions[1] = b.Parents[0].Conditions[1], b.Parents[0].Conditions[0]
		if n := testing.AllocsPerRun(100, func() { Equal(a, b) }); n != 0 {
			t.Errorf("Equal allocates %v times per call", n)
		}
	})
}

func TestHostnamesIntersect(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"foo.example.com", "foo.example.com", true},
		{"foo.example.com", "bar.example.com", false},
		{"*.example.com", "foo.example.com", true},
		{"*.example.com", "a.b.example.com", true},
		{"*.example.com", "example.com", false},
		{"*.example.com", "fooexample.com", false},
		{"*.example.com", "foo.example.net", false},
		{"*.example.com", "*.example.com", true},
		{"*.example.com", "*.foo.example.com", true},
		{"*.ample.com", "*.example.com", false},
		{"*.example.com", "*.example.net", false},
		{"*.com", "foo.example.com", true},
	}
	for _, tt := range tests {
		t.Run(tt.a+" vs "+tt.b, func(t *testing.T) {
			if got := HostnamesIntersect(tt.a, tt.b); got != tt.want {
				t.Errorf("HostnamesIntersect(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
			}
			if got := HostnamesIntersect(tt.b, tt.a); got != tt.want {
				t.Errorf("HostnamesIntersect(%q, %q) = %v, want %v", tt.b, tt.a, got, tt.want)
			}
		})
	}
}
