package routestatus

import (
	"fmt"
	"strconv"
	"testing"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// The messages render as the fmt verbs they replace would: %q as
// strconv.Quote (escaping included), %d as decimal.
func TestMessagesRenderAsFmt(t *testing.T) {
	names := []string{"", "default", "a-b.c", `with "quotes"`, "back\\slash", "tab\there", "ünïcode", "\xff"}
	for _, n := range names {
		if got, want := string(appendQuoted(nil, n)), strconv.Quote(n); got != want {
			t.Errorf("appendQuoted(%q) = %s, want %s", n, got, want)
		}
		cases := []struct {
			m    message
			want string
		}{
			{message{kind: msgServiceNotFound, s1: n, s2: "svc"}, fmt.Sprintf("Service %s/%s not found.", n, "svc")},
			{message{kind: msgNoListener, s1: n, n1: 80}, "The Gateway has no listener " + describeSection(n, 80) + "."},
			{message{kind: msgNoListener, s1: n}, "The Gateway has no listener " + describeSection(n, 0) + "."},
			{message{kind: msgNoServicePort, s1: n, n1: 8080}, "The Service has no port " + describeSection(n, 8080) + "."},
			{message{kind: msgNotAllowed, n1: 1, n2: 3, n3: 2, s3: n}, fmt.Sprintf(
				"No matching listener allows this route: %d of %d do not accept HTTPRoutes (protocol or allowedRoutes.kinds), %d do not allow routes from namespace %q.",
				1, 3, 2, n)},
			{message{kind: msgBackend, reason: gatewayv1.RouteReasonInvalidKind, n1: 2, n2: -1, n3: 1, s1: n, s2: "example.com", n4: 2},
				fmt.Sprintf("spec.rules[%d].filters[%d].requestMirror.backendRef: unsupported backend kind %q in group %q; only Services (group \"\") are supported. (%d more unresolved references)",
					2, 1, n, "example.com", 2)},
			{message{kind: msgBackend, reason: gatewayv1.RouteReasonRefNotPermitted, n1: 0, n2: 3, n3: -1, s1: "other", s2: n, s3: "apps"},
				fmt.Sprintf("spec.rules[%d].backendRefs[%d]: Service %s/%s is in another namespace and no ReferenceGrant there allows HTTPRoutes from namespace %q to refer to it.",
					0, 3, "other", n, "apps")},
			{message{kind: msgBackend, reason: gatewayv1.RouteReasonBackendNotFound, n1: 1, n2: 0, n3: 4, s1: "apps", s2: n},
				fmt.Sprintf("spec.rules[%d].backendRefs[%d].filters[%d].requestMirror.backendRef: Service %s/%s not found.", 1, 0, 4, "apps", n)},
		}
		for _, c := range cases {
			want := sanitize(c.want)
			if got := c.m.String(); got != want {
				t.Errorf("%+v renders %q, want %q", c.m, got, want)
			}
			if !c.m.matches(want) || c.m.matches(want+".") {
				t.Errorf("%+v: matches(%q) disagrees with String", c.m, want)
			}
		}
	}
}

// describeSection is how the messages described a sectionName/port
// selector with fmt before they were kept as parts.
func describeSection(section string, port int32) string {
	switch {
	case section != "" && port != 0:
		return fmt.Sprintf("named %q with port %d", section, port)
	case section != "":
		return fmt.Sprintf("named %q", section)
	default:
		return fmt.Sprintf("with port %d", port)
	}
}
