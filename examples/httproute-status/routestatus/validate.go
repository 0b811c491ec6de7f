package routestatus

import (
	"fmt"
	"strings"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Limits of the HTTPRoute status schema (sigs.k8s.io/gateway-api v1.6.3,
// standard channel).
const (
	// MaxParents is the maximum number of entries in status.parents.
	MaxParents = 32
	// MaxConditions is the maximum number of conditions in one parent entry
	// (the minimum is 1).
	MaxConditions = 8
	// MaxMessageLength is the maximum length of a condition message, in
	// characters. Compute keeps its own messages within this many bytes.
	MaxMessageLength = 32768
	// MaxReasonLength is the maximum length of a condition reason.
	MaxReasonLength = 1024
)

// Validate reports whether status would be accepted by the HTTPRoute CRD's
// OpenAPI schema for status.parents. It checks:
//
//   - at most MaxParents entries;
//   - controllerName: 1..253 characters, DOMAIN "/" PATH;
//   - parentRef: name 1..253 characters, group (empty or DNS subdomain),
//     kind, namespace (DNS label), sectionName (DNS subdomain) and port
//     (1..65535) by their patterns and lengths;
//   - conditions: 1..MaxConditions, unique types (the list is a map keyed by
//     type), type pattern and length, status True/False/Unknown, reason pattern
//     and length, message at most MaxMessageLength characters of valid UTF-8,
//     observedGeneration >= 0, lastTransitionTime set and between years 1 and
//     9999 (it must serialize as an RFC 3339 date-time).
//
// It returns nil or the first violation found, wrapping ErrInvalidStatus and
// naming the offending path, e.g. "parents[3].conditions[0].reason".
// Validate does not allocate unless it reports an error.
func Validate(status gatewayv1.HTTPRouteStatus) error {
	if n := len(status.Parents); n > MaxParents {
		return fmt.Errorf("%w: parents has %d entries, at most %d allowed", ErrInvalidStatus, n, MaxParents)
	}
	for i := range status.Parents {
		if err := validateParentStatus(&status.Parents[i]); err != nil {
			return fmt.Errorf("%w: parents[%d].%s", ErrInvalidStatus, i, err.msg())
		}
	}
	return nil
}

// fieldErr is a cheap, allocation-free description of one violation; it is
// only formatted into an error when Validate reports it.
type fieldErr struct {
	field string
	index int // condition index, or -1
	value string
	rule  string
}

func (e *fieldErr) msg() string {
	if e.index >= 0 {
		return fmt.Sprintf("conditions[%d].%s %q: %s", e.index, e.field, e.value, e.rule)
	}
	return fmt.Sprintf("%s %q: %s", e.field, e.value, e.rule)
}

func validateParentStatus(p *gatewayv1.RouteParentStatus) *fieldErr {
	if !validControllerName(string(p.ControllerName)) {
		return &fieldErr{field: "controllerName", index: -1, value: string(p.ControllerName),
			rule: "must be DOMAIN/PATH, at most 253 characters"}
	}
	if f, v, rule := checkParentRef(&p.ParentRef); f != "" {
		return &fieldErr{field: "parentRef." + f, index: -1, value: v, rule: rule}
	}
	n := len(p.Conditions)
	if n < 1 || n > MaxConditions {
		return &fieldErr{field: "conditions", index: -1, value: fmt.Sprint(n),
			rule: fmt.Sprintf("must have 1..%d entries", MaxConditions)}
	}
	for i := range p.Conditions {
		c := &p.Conditions[i]
		if f, v, rule := checkCondition(c); f != "" {
			return &fieldErr{field: f, index: i, value: v, rule: rule}
		}
		for j := 0; j < i; j++ {
			if p.Conditions[j].Type == c.Type {
				return &fieldErr{field: "type", index: i, value: c.Type, rule: "duplicate condition type"}
			}
		}
	}
	return nil
}

// checkParentRef returns the name of the first invalid field, its value and
// the rule it breaks, or "" when ref is valid in a status entry.
func checkParentRef(ref *gatewayv1.ParentReference) (field, value, rule string) {
	if n := utf8.RuneCountInString(string(ref.Name)); n < 1 || n > 253 || !utf8.ValidString(string(ref.Name)) {
		return "name", string(ref.Name), "must be 1..253 characters of valid UTF-8"
	}
	if ref.Group != nil && *ref.Group != "" && (len(*ref.Group) > 253 || !isDNSSubdomain(string(*ref.Group))) {
		return "group", string(*ref.Group), "must be empty or a DNS subdomain"
	}
	if ref.Kind != nil && !isKind(string(*ref.Kind)) {
		return "kind", string(*ref.Kind), "must match ^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$, 1..63 characters"
	}
	if ref.Namespace != nil && (len(*ref.Namespace) > 63 || !isDNSLabel(string(*ref.Namespace))) {
		return "namespace", string(*ref.Namespace), "must be a DNS label"
	}
	if ref.SectionName != nil && (len(*ref.SectionName) > 253 || !isDNSSubdomain(string(*ref.SectionName))) {
		return "sectionName", string(*ref.SectionName), "must be a DNS subdomain"
	}
	if ref.Port != nil && (*ref.Port < 1 || *ref.Port > 65535) {
		return "port", fmt.Sprint(*ref.Port), "must be 1..65535"
	}
	return "", "", ""
}

// checkCondition returns the first invalid field of c, its value and the rule,
// or "" when c is valid.
func checkCondition(c *metav1.Condition) (field, value, rule string) {
	if !validConditionType(c.Type) {
		return "type", c.Type, "must be [DNS-subdomain/]name, at most 316 characters"
	}
	switch c.Status {
	case metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown:
	default:
		return "status", string(c.Status), `must be "True", "False" or "Unknown"`
	}
	if !validReason(c.Reason) {
		return "reason", c.Reason, "must match ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$, 1..1024 characters"
	}
	if len(c.Message) > MaxMessageLength && utf8.RuneCountInString(c.Message) > MaxMessageLength {
		return "message", c.Message[:64] + "...", fmt.Sprintf("must be at most %d characters", MaxMessageLength)
	}
	if !utf8.ValidString(c.Message) {
		return "message", strings.ToValidUTF8(c.Message, "\uFFFD"), "must be valid UTF-8"
	}
	if c.ObservedGeneration < 0 {
		return "observedGeneration", fmt.Sprint(c.ObservedGeneration), "must be >= 0"
	}
	if c.LastTransitionTime.IsZero() {
		return "lastTransitionTime", "", "must be set"
	}
	if y := c.LastTransitionTime.UTC().Year(); y < 1 || y > 9999 {
		return "lastTransitionTime", c.LastTransitionTime.UTC().String(), "year must be within 1..9999"
	}
	return "", "", ""
}

// isDNSLabel reports whether s matches ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$.
func isDNSLabel(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// isDNSSubdomain reports whether s matches
// ^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$
// (no length limit: callers check it).
func isDNSSubdomain(s string) bool {
	for {
		i := strings.IndexByte(s, '.')
		if i < 0 {
			return isDNSLabel(s)
		}
		if !isDNSLabel(s[:i]) {
			return false
		}
		s = s[i+1:]
	}
}

// isKind reports whether s matches ^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$ and
// has 1..63 characters.
func isKind(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// validReason reports whether s matches
// ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$ and has 1..1024 characters.
func validReason(s string) bool {
	if s == "" || len(s) > MaxReasonLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case (c >= '0' && c <= '9' || c == '_') && i > 0:
		case (c == ',' || c == ':') && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// validControllerName reports whether s is a valid GatewayController: at most
// 253 characters matching
// ^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/[A-Za-z0-9\/\-._~%!$&'()*+,;=:]+$
func validControllerName(s string) bool {
	if len(s) > 253 {
		return false
	}
	i := strings.IndexByte(s, '/')
	if i < 0 || !isDNSSubdomain(s[:i]) {
		return false
	}
	path := s[i+1:]
	if path == "" {
		return false
	}
	for j := 0; j < len(path); j++ {
		c := path[j]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("/-._~%!$&'()*+,;=:", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validConditionType reports whether s is at most 316 characters matching
// ^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$
func validConditionType(s string) bool {
	if len(s) > 316 {
		return false
	}
	name := s
	if i := strings.IndexByte(s, '/'); i >= 0 {
		if !isDNSSubdomain(s[:i]) {
			return false
		}
		name = s[i+1:]
	}
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case (c == '-' || c == '_' || c == '.') && i > 0 && i < len(name)-1:
		default:
			return false
		}
	}
	return true
}
