package routestatus

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// gatewayParent evaluates a Gateway parentRef; it is handled only when the
// Gateway and its GatewayClass exist and the class names our controller.
func (ev *evaluation) gatewayParent(ref *gatewayv1.ParentReference, ns string) verdict {
	gw, ok := ev.lk.Gateway(ns, string(ref.Name))
	if !ok || gw == nil {
		return verdict{}
	}
	gc, ok := ev.lk.GatewayClass(string(gw.Spec.GatewayClassName))
	if !ok || gc == nil || gc.Spec.ControllerName != ev.c.opts.ControllerName {
		return verdict{}
	}
	section := deref(ref.SectionName)
	port := deref(ref.Port)
	var matched, kindDenied, nsDenied, attached int
	for li := range gw.Spec.Listeners {
		l := &gw.Spec.Listeners[li]
		if section != "" && l.Name != section {
			continue
		}
		if port != 0 && l.Port != port {
			continue
		}
		matched++
		if !routeKindAllowed(l) {
			kindDenied++
			continue
		}
		if !ev.namespaceAllowed(l, gw.Namespace) {
			nsDenied++
			continue
		}
		if ev.hostnameAllowed(l) {
			attached++
			break // accepted; the counts above only feed rejection messages
		}
	}
	switch {
	case matched == 0:
		if section == "" && port == 0 {
			return rejected(gatewayv1.RouteReasonNoMatchingParent, text("The Gateway has no listeners."))
		}
		return rejected(gatewayv1.RouteReasonNoMatchingParent, message{kind: msgNoListener, s1: string(section), n1: int(port)})
	case kindDenied+nsDenied == matched:
		return rejected(gatewayv1.RouteReasonNotAllowedByListeners,
			message{kind: msgNotAllowed, n1: kindDenied, n2: matched, n3: nsDenied, s3: ev.route.Namespace})
	case attached == 0:
		return rejected(gatewayv1.RouteReasonNoMatchingListenerHostname,
			text("No listener that allows this route has a hostname intersecting the route's hostnames."))
	}
	return accepted("Accepted by the Gateway.")
}

// routeKindAllowed reports whether listener l accepts HTTPRoutes: its
// protocol must be HTTP or HTTPS and allowedRoutes.kinds, when not empty, must
// list HTTPRoute (group defaulting to gateway.networking.k8s.io).
func routeKindAllowed(l *gatewayv1.Listener) bool {
	if l.Protocol != gatewayv1.HTTPProtocolType && l.Protocol != gatewayv1.HTTPSProtocolType {
		return false
	}
	if l.AllowedRoutes == nil || len(l.AllowedRoutes.Kinds) == 0 {
		return true
	}
	for i := range l.AllowedRoutes.Kinds {
		k := &l.AllowedRoutes.Kinds[i]
		group := gatewayv1.GroupName
		if k.Group != nil {
			group = string(*k.Group)
		}
		if group == gatewayv1.GroupName && k.Kind == kindHTTPRoute {
			return true
		}
	}
	return false
}

// namespaceAllowed applies allowedRoutes.namespaces of listener l (of a
// Gateway in gatewayNamespace) to the route's namespace. An absent "from"
// means Same (the CRD default); "None" and unknown values allow nothing; a
// Selector is matched against the labels of the route's Namespace, which must
// be known to the Lookup (an unknown namespace, or an invalid selector, is not
// allowed).
func (ev *evaluation) namespaceAllowed(l *gatewayv1.Listener, gatewayNamespace string) bool {
	from := gatewayv1.NamespacesFromSame
	var sel *metav1.LabelSelector
	if l.AllowedRoutes != nil && l.AllowedRoutes.Namespaces != nil {
		if l.AllowedRoutes.Namespaces.From != nil {
			from = *l.AllowedRoutes.Namespaces.From
		}
		sel = l.AllowedRoutes.Namespaces.Selector
	}
	switch from {
	case gatewayv1.NamespacesFromAll:
		return true
	case gatewayv1.NamespacesFromSame:
		return gatewayNamespace == ev.route.Namespace
	case gatewayv1.NamespacesFromSelector:
		ns := ev.routeNamespace()
		if ns == nil {
			return false
		}
		s, ok := ev.c.sels.get(sel)
		return ok && s.Matches(labels.Set(ns.Labels))
	}
	return false
}

// routeNamespace looks up the route's Namespace once per Compute.
func (ev *evaluation) routeNamespace() *corev1.Namespace {
	if !ev.nsDone {
		ev.nsDone = true
		if ns, ok := ev.lk.Namespace(ev.route.Namespace); ok {
			ev.ns = ns
		}
	}
	return ev.ns
}

// hostnameAllowed reports whether listener l's hostname intersects the
// route's hostnames; a listener without hostname, or a route without
// hostnames, matches everything.
func (ev *evaluation) hostnameAllowed(l *gatewayv1.Listener) bool {
	if l.Hostname == nil || *l.Hostname == "" || len(ev.route.Spec.Hostnames) == 0 {
		return true
	}
	for _, h := range ev.route.Spec.Hostnames {
		if HostnamesIntersect(string(*l.Hostname), string(h)) {
			return true
		}
	}
	return false
}

// HostnamesIntersect reports whether two Gateway API hostnames can match a
// common host. A hostname is either precise ("foo.example.com") or a wildcard
// whose first label is "*" ("*.example.com"), which matches any host with at
// least one more label in front of the suffix (foo.example.com and
// a.b.example.com, not example.com). So:
//
//   - two precise hostnames intersect when equal;
//   - a wildcard and a precise hostname when the precise one matches it;
//   - two wildcards when one's suffix is a suffix of the other's
//     ("*.example.com" and "*.foo.example.com" share foo.foo.example.com).
//
// Comparison is exact (the CRD allows only lower-case hostnames).
func HostnamesIntersect(a, b string) bool {
	aw, bw := strings.HasPrefix(a, "*."), strings.HasPrefix(b, "*.")
	switch {
	case !aw && !bw:
		return a == b
	case aw && !bw:
		return wildcardMatches(a[1:], b)
	case !aw && bw:
		return wildcardMatches(b[1:], a)
	default:
		return strings.HasSuffix(a[1:], b[1:]) || strings.HasSuffix(b[1:], a[1:])
	}
}

// wildcardMatches reports whether host matches "*" + suffix, where suffix
// starts with a dot: host must end with suffix and have a non-empty label in
// front of it.
func wildcardMatches(suffix, host string) bool {
	return len(host) > len(suffix) && strings.HasSuffix(host, suffix) && host[len(host)-len(suffix)-1] != '.'
}
