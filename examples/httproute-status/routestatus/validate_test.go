package routestatus

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func TestValidate(t *testing.T) {
	valid := func() gatewayv1.HTTPRouteStatus {
		return makeStatus([]gatewayv1.RouteParentStatus{
			entry(gatewayRef(infraNS, "gw", "http"), testController, "Accepted", "ResolvedRefs", 1, t0),
			entry(serviceRef("", "mesh"), otherController, "NoMatchingParent", "BackendNotFound", 1, t0),
		})
	}
	tests := []struct {
		label  string
		mutate func(s *gatewayv1.HTTPRouteStatus)
		path   string // "" when valid
	}{
		{label: "valid", mutate: func(*gatewayv1.HTTPRouteStatus) {}},
		{label: "empty", mutate: func(s *gatewayv1.HTTPRouteStatus) { s.Parents = nil }},
		{label: "32 parents", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			for len(s.Parents) < MaxParents {
				s.Parents = append(s.Parents, s.Parents[0])
			}
		}},
		{label: "33 parents", path: "parents has 33 entries", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			for len(s.Parents) <= MaxParents {
				s.Parents = append(s.Parents, s.Parents[0])
			}
		}},
		{label: "controllerName without path", path: "parents[1].controllerName", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[1].ControllerName = "example.org"
		}},
		{label: "parentRef without name", path: "parents[0].parentRef.name", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].ParentRef.Name = ""
		}},
		{label: "parentRef name of invalid UTF-8", path: "parents[0].parentRef.name", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].ParentRef.Name = "\xff"
		}},
		{label: "parentRef group upper-case", path: "parents[0].parentRef.group", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].ParentRef.Group = ptr(gatewayv1.Group("Example.com"))
		}},
		{label: "parentRef kind with slash", path: "parents[0].parentRef.kind", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].ParentRef.Kind = ptr(gatewayv1.Kind("a/b"))
		}},
		{label: "parentRef namespace with dot", path: "parents[0].parentRef.namespace", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].ParentRef.Namespace = ptr(gatewayv1.Namespace("a.b"))
		}},
		{label: "parentRef empty sectionName", path: "parents[0].parentRef.sectionName", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].ParentRef.SectionName = ptr(gatewayv1.SectionName(""))
		}},
		{label: "parentRef port 0", path: "parents[0].parentRef.port", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].ParentRef.Port = ptr(int32(0))
		}},
		{label: "no conditions", path: "parents[0].conditions", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].Conditions = nil
		}},
		{label: "9 conditions", path: "parents[0].conditions", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			for i := range 7 {
				c := s.Parents[0].Conditions[0]
				c.Type = "T" + string(rune('a'+i))
				s.Parents[0].Conditions = append(s.Parents[0].Conditions, c)
			}
		}},
		{label: "duplicate condition type", path: "parents[0].conditions[1].type", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].Conditions[1].Type = "Accepted"
		}},
		{label: "condition type invalid", path: "parents[0].conditions[0].type", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].Conditions[0].Type = "-x"
		}},
		{label: "condition status invalid", path: "parents[0].conditions[0].status", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].Conditions[0].Status = "true"
		}},
		{label: "reason with space", path: "parents[0].conditions[0].reason", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].Conditions[0].Reason = "Not Accepted"
		}},
		{label: "reason empty", path: "parents[0].conditions[0].reason", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].Conditions[0].Reason = ""
		}},
		{label: "reason of 1025 characters", path: "parents[0].conditions[0].reason", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].Conditions[0].Reason = strings.Repeat("A", 1025)
		}},
		{label: "message of 32768 characters", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].Conditions[0].Message = strings.Repeat("é", MaxMessageLength)
		}},
		{label: "message of 32769 characters", path: "parents[0].conditions[0].message", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].Conditions[0].Message = strings.Repeat("m", MaxMessageLength+1)
		}},
		{label: "message of invalid UTF-8", path: "parents[0].conditions[0].message", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].Conditions[0].Message = "a\xffb"
		}},
		{label: "negative observedGeneration", path: "parents[0].conditions[0].observedGeneration", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].Conditions[0].ObservedGeneration = -1
		}},
		{label: "zero lastTransitionTime", path: "parents[0].conditions[1].lastTransitionTime", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].Conditions[1].LastTransitionTime = metav1.Time{}
		}},
		{label: "lastTransitionTime after year 9999", path: "parents[0].conditions[1].lastTransitionTime", mutate: func(s *gatewayv1.HTTPRouteStatus) {
			s.Parents[0].Conditions[1].LastTransitionTime = metav1.NewTime(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.label, func(t *testing.T) {
			s := valid()
			tt.mutate(&s)
			err := Validate(s)
			if tt.path == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidStatus) || !strings.Contains(err.Error(), tt.path) {
				t.Fatalf("Validate = %v, want ErrInvalidStatus mentioning %q", err, tt.path)
			}
		})
	}
	t.Run("does not allocate when valid", func(t *testing.T) {
		s := valid()
		if n := testing.AllocsPerRun(100, func() { _ = Validate(s) }); n != 0 {
			t.Errorf("Validate allocates %v times per call", n)
		}
	})
}

// crdPatterns are the patterns of the HTTPRoute CRD (v1.6.3, standard channel)
// that validate.go implements by hand, with the length limits that go with them.
func crdPatterns() []struct {
	name    string
	re      *regexp.Regexp
	minLen  int
	maxLen  int
	handled func(string) bool
} {
	const subdomain = `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`
	return []struct {
		name    string
		re      *regexp.Regexp
		minLen  int
		maxLen  int
		handled func(string) bool
	}{
		{"namespace", regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`), 1, 63,
			func(s string) bool { return len(s) <= 63 && isDNSLabel(s) }},
		{"sectionName", regexp.MustCompile(`^` + subdomain + `$`), 1, 253,
			func(s string) bool { return len(s) <= 253 && isDNSSubdomain(s) }},
		{"group", regexp.MustCompile(`^$|^` + subdomain + `$`), 0, 253,
			func(s string) bool { return s == "" || len(s) <= 253 && isDNSSubdomain(s) }},
		{"kind", regexp.MustCompile(`^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$`), 1, 63, isKind},
		{"reason", regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`), 1, 1024, validReason},
		{"controllerName", regexp.MustCompile(`^` + subdomain + `\/[A-Za-z0-9\/\-._~%!$&'()*+,;=:]+$`), 1, 253, validControllerName},
		{"conditionType", regexp.MustCompile(`^(` + subdomain + `/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$`), 1, 316, validConditionType},
	}
}

func checkPatterns(t *testing.T, s string) {
	t.Helper()
	n := utf8.RuneCountInString(s)
	for _, p := range crdPatterns() {
		want := p.re.MatchString(s) && n >= p.minLen && n <= p.maxLen
		if got := p.handled(s); got != want {
			t.Errorf("%s(%q) = %v, CRD pattern says %v", p.name, s, got, want)
		}
	}
}

func TestPatternsMatchCRD(t *testing.T) {
	for _, s := range patternSeeds() {
		checkPatterns(t, s)
	}
}

// FuzzPatterns checks the hand-written validators against the CRD's regular
// expressions on arbitrary strings.
func FuzzPatterns(f *testing.F) {
	for _, s := range patternSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkPatterns(t, s) })
}

func patternSeeds() []string {
	return []string{
		"", "a", "A", "0", "-", "a-", "-a", "a-b", "a.b", "a..b", ".a", "a.", "a/b", "/b", "a/", "a//b",
		"example.net/gateway-controller", "Example.net/x", "example.net/a b", "example.net/~%!$&'()*+,;=:",
		"Accepted", "A:b", "A:", "A_", "A,b", "a1", "1a", "ResolvedRefs", "x.y/Z", "x.y/-Z", "x.y/Z.", "x.y/Z_z",
		"k8s.io/Ready", "Kind", "Kind-", "K-1", "a_b", "a\n", "\na", "é", "a\xff",
		strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a.", 126) + "a", strings.Repeat("a", 254),
		"example.net/" + strings.Repeat("p", 241), "example.net/" + strings.Repeat("p", 242),
		strings.Repeat("A", 1024), strings.Repeat("A", 1025),
		strings.Repeat("a", 253) + "/" + strings.Repeat("B", 62), strings.Repeat("a", 253) + "/" + strings.Repeat("B", 63),
	}
}
