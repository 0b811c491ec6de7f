package routestatus

import (
	"strconv"
	"unicode/utf8"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// msgKind says which sentence a message is.
type msgKind uint8

const (
	msgText            msgKind = iota // text as it is (a constant sentence)
	msgServiceNotFound                // "Service <ns>/<name> not found."
	msgNoListener                     // "The Gateway has no listener <section>."
	msgNoServicePort                  // "The Service has no port <section>."
	msgNotAllowed                     // NotAllowedByListeners, with its counts and namespace
	msgBackend                        // the first unresolved backend reference, and how many more
)

// message is a condition message kept as the parts it is made of: Compute
// renders it (String), UpToDate compares it with a message already written
// (matches) without building a string. Both go through appendTo, so the
// two cannot disagree.
type message struct {
	kind   msgKind
	text   string                         // msgText
	s1, s2 string                         // names: namespace, name, section, kind, group
	s3     string                         // the route's namespace (msgBackend)
	n1, n2 int                            // counts, ports, spec indexes
	n3, n4 int                            //
	reason gatewayv1.RouteConditionReason // msgBackend: which failure
}

func text(s string) message { return message{kind: msgText, text: s} }

// String returns the message as Compute writes it: valid UTF-8 of at most
// MaxMessageLength bytes (constant texts are both already).
func (m *message) String() string {
	if m.kind == msgText {
		return m.text
	}
	return sanitize(string(m.appendTo(nil)))
}

// matches reports whether s is the message m renders to. It allocates
// nothing unless the message is longer than a few hundred bytes or not
// valid UTF-8 (then it renders it).
func (m *message) matches(s string) bool {
	if m.kind == msgText {
		return s == m.text
	}
	var buf [384]byte
	b := m.appendTo(buf[:0])
	if len(b) <= MaxMessageLength && utf8.Valid(b) {
		return string(b) == s
	}
	return m.String() == s
}

// appendTo appends the unsanitized message to b.
func (m *message) appendTo(b []byte) []byte {
	switch m.kind {
	case msgText:
		b = append(b, m.text...)
	case msgServiceNotFound:
		b = appendServiceNotFound(b, m.s1, m.s2)
	case msgNoListener:
		b = append(b, "The Gateway has no listener "...)
		b = appendSection(b, m.s1, int32(m.n1))
		b = append(b, '.')
	case msgNoServicePort:
		b = append(b, "The Service has no port "...)
		b = appendSection(b, m.s1, int32(m.n1))
		b = append(b, '.')
	case msgNotAllowed:
		b = append(b, "No matching listener allows this route: "...)
		b = strconv.AppendInt(b, int64(m.n1), 10)
		b = append(b, " of "...)
		b = strconv.AppendInt(b, int64(m.n2), 10)
		b = append(b, " do not accept HTTPRoutes (protocol or allowedRoutes.kinds), "...)
		b = strconv.AppendInt(b, int64(m.n3), 10)
		b = append(b, " do not allow routes from namespace "...)
		b = appendQuoted(b, m.s3)
		b = append(b, '.')
	case msgBackend:
		b = backendPath{rule: m.n1, backend: m.n2, filter: m.n3}.appendTo(b)
		b = append(b, ": "...)
		switch m.reason {
		case gatewayv1.RouteReasonInvalidKind:
			b = append(b, "unsupported backend kind "...)
			b = appendQuoted(b, m.s1)
			b = append(b, " in group "...)
			b = appendQuoted(b, m.s2)
			b = append(b, `; only Services (group "") are supported.`...)
		case gatewayv1.RouteReasonRefNotPermitted:
			b = append(b, "Service "...)
			b = append(b, m.s1...)
			b = append(b, '/')
			b = append(b, m.s2...)
			b = append(b, " is in another namespace and no ReferenceGrant there allows HTTPRoutes from namespace "...)
			b = appendQuoted(b, m.s3)
			b = append(b, " to refer to it."...)
		default:
			b = appendServiceNotFound(b, m.s1, m.s2)
		}
		if m.n4 > 0 {
			b = append(b, " ("...)
			b = strconv.AppendInt(b, int64(m.n4), 10)
			b = append(b, " more unresolved references)"...)
		}
	}
	return b
}

// appendQuoted appends s quoted as %q (strconv.Quote) does; names of
// Kubernetes objects are printable ASCII, which needs no escaping.
func appendQuoted(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' || c == '"' || c == '\\' {
			return strconv.AppendQuote(b, s)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func appendServiceNotFound(b []byte, ns, name string) []byte {
	b = append(b, "Service "...)
	b = append(b, ns...)
	b = append(b, '/')
	b = append(b, name...)
	return append(b, " not found."...)
}

// appendSection renders a sectionName/port selector: `named "http" with
// port 80`, `named "http"` or `with port 80`.
func appendSection(b []byte, section string, port int32) []byte {
	if section != "" {
		b = append(b, "named "...)
		b = appendQuoted(b, section)
		if port == 0 {
			return b
		}
		b = append(b, ' ')
	}
	b = append(b, "with port "...)
	return strconv.AppendInt(b, int64(port), 10)
}
