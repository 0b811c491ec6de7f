package routestatus

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Kinds and groups as they appear in references, after CRD defaulting.
const (
	kindGateway   = "Gateway"
	kindService   = "Service"
	kindHTTPRoute = "HTTPRoute"
)

// Options configures a Computer.
type Options struct {
	// ControllerName identifies this controller. It is written as
	// controllerName in every parent entry the Computer owns, and a Gateway is
	// handled only when its GatewayClass's spec.controllerName equals it.
	//
	// Required: DOMAIN "/" PATH, at most 253 characters, as the CRD demands
	// (e.g. "example.net/gateway-controller"). There is no default.
	ControllerName gatewayv1.GatewayController

	// Mesh makes the Computer handle Service parents (GAMMA: parentRef group
	// "" and kind Service). When false (the default) Service parents are left
	// to other controllers: they get no entry from this Computer.
	Mesh bool
}

// Computer computes the desired status of HTTPRoutes for one controller.
//
// A Computer is immutable and safe for concurrent use. Build one with
// NewComputer; the zero value and a nil *Computer own nothing: their Compute
// returns a copy of the route's current status.
type Computer struct {
	opts Options
	sels *selectorCache
}

// NewComputer returns a Computer for opts, or an error wrapping
// ErrInvalidOptions that names the invalid field.
func NewComputer(opts Options) (*Computer, error) {
	if !validControllerName(string(opts.ControllerName)) {
		return nil, fmt.Errorf(`%w: Options.ControllerName must be DOMAIN/PATH (e.g. "example.net/gateway-controller") of at most 253 characters, got %q`,
			ErrInvalidOptions, opts.ControllerName)
	}
	return &Computer{opts: opts, sels: &selectorCache{}}, nil
}

// Options returns the options the Computer was built with.
func (c *Computer) Options() Options {
	if c == nil {
		return Options{}
	}
	return c.opts
}

// Compute returns the status route should have, given what lk says about
// the objects it refers to. It is a pure function of its arguments: it makes
// no API calls, does not read the clock (now is the time written into the
// lastTransitionTime of conditions that changed) and does not modify route or
// anything lk returns. The result shares no memory with them. A nil lk is an
// empty Lookup; a nil route yields an empty status.
//
// # Ownership
//
// Entries of status.parents are keyed by (parentRef, controllerName). Entries
// of other controllers are copied unchanged, in place. Entries of this
// controller are kept in place and updated when their parentRef is still in
// spec.parentRefs and is handled (see below); all others of ours are pruned,
// as are duplicates of an entry already kept. A handled parentRef with no
// entry of ours gets a new entry, appended after the existing ones, in
// spec.parentRefs order. parentRefs are matched after the CRD's defaulting
// (group gateway.networking.k8s.io, kind Gateway; an absent namespace,
// sectionName or port equals an empty one); the entry's parentRef is then
// a copy of the spec's, exactly as the server defaulted it.
//
// # Parents handled
//
//   - Gateways (group gateway.networking.k8s.io, kind Gateway) that exist and
//     whose GatewayClass exists and names Options.ControllerName. A Gateway
//     that does not exist, or belongs to another class or controller, gets no
//     entry: nobody can tell whose it would be.
//   - Services (group "", kind Service) when Options.Mesh is set, whether or
//     not they exist. A Service in another namespace (a GAMMA "consumer"
//     route) is evaluated like one in the route's namespace.
//   - A parentRef that the CRD would reject in a status entry, or that
//     repeats an earlier parentRef of the spec, gets no entry.
//
// # Conditions
//
// Each entry of ours carries Accepted and ResolvedRefs, with
// observedGeneration = metadata.generation (negative values are written as
// 0) and lastTransitionTime kept from the previous condition of the same
// type and status, else now truncated to seconds (the precision the API
// server stores): conditions.Merge and conditions.TransitionTime do it.
// Conditions of other types found in an entry of ours are kept in place —
// at most MaxConditions-2 of them, the first ones, and only those the CRD
// would accept — since this controller does not own them.
//
// Accepted, for a Gateway: the listeners considered are those matching the
// parentRef's sectionName and port (when set). None: False/NoMatchingParent.
// None of those allows the route (protocol HTTP or HTTPS, allowedRoutes.kinds
// empty or listing HTTPRoute, allowedRoutes.namespaces from Same (default),
// All or Selector matching the route namespace's labels):
// False/NotAllowedByListeners. None of the allowing listeners has a hostname
// intersecting the route's hostnames: False/NoMatchingListenerHostname.
// Otherwise True/Accepted. For a Service: missing, headless (clusterIP None),
// of type ExternalName, or without a port matching sectionName (port name)
// and port (number): False/NoMatchingParent; otherwise True/Accepted.
//
// ResolvedRefs (the same for every parent): every backendRef of every rule,
// and the backendRef of every RequestMirror filter (rule filters and
// backendRef filters), must be a Service (group "", kind Service; anything
// else: InvalidKind); one in another namespace needs a ReferenceGrant in that
// namespace from HTTPRoute in the route's namespace to Service (all, or that
// name) (else RefNotPermitted); and it must exist (else BackendNotFound). The
// first failing reference in spec order decides the reason and message.
// ExternalAuth filters are experimental-channel only and are not checked.
//
// # Limits
//
// The result has at most MaxParents entries (unless the foreign entries
// alone exceed it): entries of other controllers are never dropped, existing
// entries of ours keep their places, and new entries are added in
// spec.parentRefs order only while the list has fewer than MaxParents
// entries; the remaining parentRefs get no entry until room is made. (Should
// the current list itself exceed MaxParents — which the API server does not
// allow — entries of ours are dropped from the end.) Every field written by
// Compute passes Validate, provided now is a time between years 1 and 9999.
func (c *Computer) Compute(route *gatewayv1.HTTPRoute, lk Lookup, now time.Time) gatewayv1.HTTPRouteStatus {
	if route == nil {
		return makeStatus(make([]gatewayv1.RouteParentStatus, 0))
	}
	current := route.Status.Parents
	if c == nil || c.opts.ControllerName == "" {
		out := make([]gatewayv1.RouteParentStatus, len(current))
		for i := range current {
			current[i].DeepCopyInto(&out[i])
		}
		return makeStatus(out)
	}
	if lk == nil {
		lk = (*Snapshot)(nil)
	}
	controller := c.opts.ControllerName
	ev := evaluation{
		c:     c,
		route: route,
		lk:    lk,
		gen:   max(route.Generation, 0),
		now:   metav1.NewTime(now).Rfc3339Copy(),
	}

	refs := route.Spec.ParentRefs
	var buf [MaxParents]verdict
	verdicts := buf[:0]
	if len(refs) > len(buf) {
		verdicts = make([]verdict, 0, len(refs))
	}
	for i := range refs {
		verdicts = append(verdicts, ev.parent(refs, i))
	}
	var claimedBuf [MaxParents]bool
	var claimed []bool // claimed[i]: refs[i] already has its entry
	if len(refs) <= len(claimedBuf) {
		claimed = claimedBuf[:len(refs)]
	} else {
		claimed = make([]bool, len(refs))
	}

	out := make([]gatewayv1.RouteParentStatus, 0, min(len(current)+len(refs), MaxParents))
	for ei := range current {
		e := &current[ei]
		if e.ControllerName != controller {
			out = append(out, gatewayv1.RouteParentStatus{})
			e.DeepCopyInto(&out[len(out)-1])
			continue
		}
		i := -1
		for j := range refs {
			if verdicts[j].handled && !claimed[j] && parentRefEqual(&e.ParentRef, &refs[j]) {
				i = j
				break
			}
		}
		if i < 0 {
			continue // ours, but its parentRef left the spec or is no longer handled
		}
		claimed[i] = true
		out = append(out, ev.entry(&refs[i], &verdicts[i], e.Conditions))
	}
	for i := len(out) - 1; i >= 0 && len(out) > MaxParents; i-- {
		if out[i].ControllerName == controller {
			out = append(out[:i], out[i+1:]...)
		}
	}
	for i := range refs {
		if len(out) >= MaxParents {
			break
		}
		if verdicts[i].handled && !claimed[i] {
			out = append(out, ev.entry(&refs[i], &verdicts[i], nil))
		}
	}
	return makeStatus(out)
}

func makeStatus(parents []gatewayv1.RouteParentStatus) gatewayv1.HTTPRouteStatus {
	return gatewayv1.HTTPRouteStatus{RouteStatus: gatewayv1.RouteStatus{Parents: parents}}
}

// verdict is the outcome of evaluating one condition (and, for a parent,
// whether we handle it at all).
type verdict struct {
	handled bool
	status  metav1.ConditionStatus
	reason  gatewayv1.RouteConditionReason
	msg     message
}

func accepted(msg string) verdict {
	return verdict{handled: true, status: metav1.ConditionTrue, reason: gatewayv1.RouteReasonAccepted, msg: text(msg)}
}

func rejected(reason gatewayv1.RouteConditionReason, msg message) verdict {
	return verdict{handled: true, status: metav1.ConditionFalse, reason: reason, msg: msg}
}

// evaluation holds the per-call state of Compute, including results that are
// shared by all parents and computed at most once.
type evaluation struct {
	c     *Computer
	route *gatewayv1.HTTPRoute
	lk    Lookup
	gen   int64
	now   metav1.Time

	refsDone bool
	refs     verdict

	nsDone bool
	ns     *corev1.Namespace
}

// parent evaluates refs[i]: whether we handle it and, if so, its Accepted
// condition.
func (ev *evaluation) parent(refs []gatewayv1.ParentReference, i int) verdict {
	ref := &refs[i]
	if f, _, _ := checkParentRef(ref); f != "" {
		return verdict{}
	}
	for j := 0; j < i; j++ {
		if parentRefEqual(&refs[j], ref) {
			return verdict{}
		}
	}
	ns := ev.route.Namespace
	if ref.Namespace != nil && *ref.Namespace != "" {
		ns = string(*ref.Namespace)
	}
	group, kind := parentGroup(ref), parentKind(ref)
	switch {
	case group == gatewayv1.GroupName && kind == kindGateway:
		return ev.gatewayParent(ref, ns)
	case group == "" && kind == kindService && ev.c.opts.Mesh:
		return ev.serviceParent(ref, ns)
	}
	return verdict{}
}

func (ev *evaluation) serviceParent(ref *gatewayv1.ParentReference, ns string) verdict {
	name := string(ref.Name)
	svc, ok := ev.lk.Service(ns, name)
	if !ok || svc == nil {
		return rejected(gatewayv1.RouteReasonNoMatchingParent, message{kind: msgServiceNotFound, s1: ns, s2: name})
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return rejected(gatewayv1.RouteReasonNoMatchingParent,
			text("The Service is of type ExternalName; only ClusterIP Services can be mesh parents."))
	}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return rejected(gatewayv1.RouteReasonNoMatchingParent,
			text("The Service is headless (clusterIP: None); only ClusterIP Services can be mesh parents."))
	}
	section := deref(ref.SectionName)
	port := deref(ref.Port)
	if section != "" || port != 0 {
		found := false
		for pi := range svc.Spec.Ports {
			p := &svc.Spec.Ports[pi]
			if (section == "" || p.Name == string(section)) && (port == 0 || p.Port == port) {
				found = true
				break
			}
		}
		if !found {
			return rejected(gatewayv1.RouteReasonNoMatchingParent, message{kind: msgNoServicePort, s1: string(section), n1: int(port)})
		}
	}
	return accepted("Accepted by the mesh for this Service.")
}

// entry builds our parent entry for ref, merging with the conditions of our
// previous entry for it (nil when new).
func (ev *evaluation) entry(ref *gatewayv1.ParentReference, acc *verdict, prev []metav1.Condition) gatewayv1.RouteParentStatus {
	rr := ev.resolvedRefs()
	e := gatewayv1.RouteParentStatus{ControllerName: ev.c.opts.ControllerName}
	ref.DeepCopyInto(&e.ParentRef)
	ours := [2]metav1.Condition{
		{
			Type:               string(gatewayv1.RouteConditionAccepted),
			Status:             acc.status,
			ObservedGeneration: ev.gen,
			Reason:             string(acc.reason),
			Message:            acc.msg.String(),
		},
		{
			Type:               string(gatewayv1.RouteConditionResolvedRefs),
			Status:             rr.status,
			ObservedGeneration: ev.gen,
			Reason:             string(rr.reason),
			Message:            rr.msg.String(),
		},
	}
	e.Conditions = mergeConditions(prev, ours[:], ev.now)
	return e
}

// sanitize makes s a valid condition message: valid UTF-8 of at most
// MaxMessageLength bytes (cut at a character boundary).
func sanitize(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= MaxMessageLength {
		return s
	}
	const ellipsis = "..."
	cut := MaxMessageLength - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

// parentGroup returns the group of ref after CRD defaulting.
func parentGroup(ref *gatewayv1.ParentReference) string {
	if ref.Group == nil {
		return gatewayv1.GroupName
	}
	return string(*ref.Group)
}

// parentKind returns the kind of ref after CRD defaulting.
func parentKind(ref *gatewayv1.ParentReference) string {
	if ref.Kind == nil {
		return kindGateway
	}
	return string(*ref.Kind)
}

// parentRefEqual reports whether a and b designate the same parent section
// after CRD defaulting: nil group and kind mean gateway.networking.k8s.io and
// Gateway; nil namespace, sectionName and port equal empty ones.
func parentRefEqual(a, b *gatewayv1.ParentReference) bool {
	return a.Name == b.Name &&
		deref(a.Namespace) == deref(b.Namespace) &&
		deref(a.SectionName) == deref(b.SectionName) &&
		deref(a.Port) == deref(b.Port) &&
		parentGroup(a) == parentGroup(b) &&
		parentKind(a) == parentKind(b)
}
