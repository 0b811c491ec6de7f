package monitoring

import (
	"errors"
	"fmt"
	"strings"
)

// ErrSyntax is wrapped by the errors of Selectors for an expression it cannot
// read: an unterminated string, brace, bracket or parenthesis, a label
// matcher without an operator or a value, a character PromQL does not have.
var ErrSyntax = errors.New("monitoring: PromQL syntax")

// Selector is one vector or matrix selector of a PromQL expression.
type Selector struct {
	// Name is the metric name: the identifier before the braces, or the
	// value of an equality matcher on __name__ (or of a quoted name alone
	// in the braces, Prometheus 3's syntax for names that are not
	// identifiers). It is empty when the selector names no single metric,
	// e.g. {__name__=~"quietpatch_.*"}.
	Name string
	// Matchers are the label matchers in the braces, in order, without the
	// one that gave Name.
	Matchers []Matcher
}

// Matcher is one label matcher of a selector.
type Matcher struct {
	Label string // label name
	Op    string // "=", "!=", "=~" or "!~"
	Value string // the string's value, escapes resolved
}

// String formats the matcher as PromQL.
func (m Matcher) String() string { return fmt.Sprintf("%s%s%q", m.Label, m.Op, m.Value) }

// PromQL keywords that read like identifiers but are no metric names:
// aggregation operators, binary set and comparison modifiers, vector
// matching, offset, and the number literals Inf and NaN.
var keywords = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true,
	"stddev": true, "stdvar": true, "count": true, "count_values": true,
	"bottomk": true, "topk": true, "quantile": true, "limitk": true,
	"limit_ratio": true,
	"and":         true, "or": true, "unless": true, "atan2": true, "bool": true,
	"by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true,
	"offset": true,
	"inf":    true, "nan": true,
}

// Keywords followed by a parenthesised list of label names.
var labelListKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true,
}

// Selectors returns the selectors of a PromQL expression in the order they
// appear. It is a small lexer, not a parser: it knows strings, comments,
// label matchers in braces, ranges and subqueries in brackets, label lists
// after by/without/on/ignoring/group_left/group_right, function calls (an
// identifier followed by a parenthesis), keywords and numbers, and it skips
// Grafana's template variables ($name, ${name}, [[name]]) wherever they
// stand. Every other identifier is a metric name. That is exact for the
// expressions of dashboards and alerting rules; it does not check that the
// expression is otherwise valid (promtool does).
func Selectors(expr string) ([]Selector, error) {
	l := lexer{src: expr}
	var out []Selector
	for {
		l.skipSpace()
		if l.eof() {
			return out, nil
		}
		c := l.peek()
		switch {
		case c == '"' || c == '\'' || c == '`':
			if _, err := l.str(); err != nil {
				return nil, err
			}
		case c == '{':
			sel, err := l.matchers()
			if err != nil {
				return nil, err
			}
			out = append(out, sel)
		case c == '[':
			if l.hasPrefix("[[") { // Grafana's old [[variable]] syntax
				if err := l.skipTo("]]"); err != nil {
					return nil, err
				}
				continue
			}
			if err := l.skipTo("]"); err != nil {
				return nil, err
			}
		case c == '$':
			if err := l.variable(); err != nil {
				return nil, err
			}
		case isDigit(c) || (c == '.' && l.pos+1 < len(l.src) && isDigit(l.src[l.pos+1])):
			l.number()
		case isIdentStart(c):
			id := l.ident()
			l.skipSpace()
			lower := strings.ToLower(id)
			switch {
			case labelListKeywords[lower]:
				if !l.eof() && l.peek() == '(' {
					if err := l.skipParens(); err != nil {
						return nil, err
					}
				}
			case keywords[lower]:
			case !l.eof() && l.peek() == '(':
				// A function call; its arguments are lexed as usual.
			default:
				sel := Selector{Name: id}
				if !l.eof() && l.peek() == '{' {
					m, err := l.matchers()
					if err != nil {
						return nil, err
					}
					if m.Name != "" {
						return nil, fmt.Errorf("%w: %q names the metric twice (%s and %s)", ErrSyntax, expr, id, m.Name)
					}
					sel.Matchers = m.Matchers
				}
				out = append(out, sel)
			}
		case strings.IndexByte("+-*/%^=!<>,():@", c) >= 0:
			l.pos++
		default:
			return nil, fmt.Errorf("%w: unexpected %q at offset %d of %q", ErrSyntax, c, l.pos, expr)
		}
	}
}

type lexer struct {
	src string
	pos int
}

func (l *lexer) eof() bool               { return l.pos >= len(l.src) }
func (l *lexer) peek() byte              { return l.src[l.pos] }
func (l *lexer) hasPrefix(s string) bool { return strings.HasPrefix(l.src[l.pos:], s) }

func (l *lexer) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s at offset %d of %q", ErrSyntax, fmt.Sprintf(format, args...), l.pos, l.src)
}

// skipSpace skips white space and # comments.
func (l *lexer) skipSpace() {
	for !l.eof() {
		switch c := l.peek(); {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			l.pos++
		case c == '#':
			for !l.eof() && l.peek() != '\n' {
				l.pos++
			}
		default:
			return
		}
	}
}

// str reads a string literal and returns its value.
func (l *lexer) str() (string, error) {
	q := l.peek()
	start := l.pos
	l.pos++
	var b strings.Builder
	for !l.eof() {
		c := l.peek()
		l.pos++
		switch {
		case c == q:
			return b.String(), nil
		case c == '\\' && q != '`':
			if l.eof() {
				break
			}
			e := l.peek()
			l.pos++
			switch e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			default: // \\ \" \' and the rest: the character itself
				b.WriteByte(e)
			}
		default:
			b.WriteByte(c)
		}
	}
	l.pos = start
	return "", l.errorf("unterminated string")
}

// ident reads an identifier (metric names may contain colons).
func (l *lexer) ident() string {
	start := l.pos
	for !l.eof() && (isIdentStart(l.peek()) || isDigit(l.peek())) {
		l.pos++
	}
	return l.src[start:l.pos]
}

// number reads a number or a duration: 0.5, 1e-3, 0x1f, 5m, 1h30m.
func (l *lexer) number() {
	for !l.eof() {
		c := l.peek()
		switch {
		case isDigit(c) || isIdentStart(c) || c == '.':
			l.pos++
		case (c == '+' || c == '-') && (l.src[l.pos-1] == 'e' || l.src[l.pos-1] == 'E') && !strings.HasPrefix(l.src[l.tokenStart():], "0x"):
			l.pos++
		default:
			return
		}
	}
}

// tokenStart returns the start of the number token the lexer is in.
func (l *lexer) tokenStart() int {
	i := l.pos
	for i > 0 && (isDigit(l.src[i-1]) || isIdentStart(l.src[i-1]) || l.src[i-1] == '.') {
		i--
	}
	return i
}

// variable skips a Grafana template variable: $name or ${name...}.
func (l *lexer) variable() error {
	l.pos++
	if !l.eof() && l.peek() == '{' {
		return l.skipTo("}")
	}
	if l.eof() || !isIdentStart(l.peek()) {
		return l.errorf("$ without a variable name")
	}
	l.ident()
	return nil
}

// skipTo skips past the next occurrence of end, minding strings.
func (l *lexer) skipTo(end string) error {
	start := l.pos
	for !l.eof() {
		if l.hasPrefix(end) {
			l.pos += len(end)
			return nil
		}
		if c := l.peek(); c == '"' || c == '\'' || c == '`' {
			if _, err := l.str(); err != nil {
				return err
			}
			continue
		}
		l.pos++
	}
	l.pos = start
	return l.errorf("no closing %q", end)
}

// skipParens skips a balanced parenthesised group (a label list).
func (l *lexer) skipParens() error {
	start := l.pos
	depth := 0
	for !l.eof() {
		switch c := l.peek(); c {
		case '"', '\'', '`':
			if _, err := l.str(); err != nil {
				return err
			}
			continue
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				l.pos++
				return nil
			}
		}
		l.pos++
	}
	l.pos = start
	return l.errorf("no closing parenthesis")
}

// matchers reads {label op "value", ...}. A __name__ equality matcher, or a
// quoted name standing alone, sets the selector's Name.
func (l *lexer) matchers() (Selector, error) {
	var sel Selector
	l.pos++ // {
	for {
		l.skipSpace()
		if l.eof() {
			return sel, l.errorf("no closing brace")
		}
		c := l.peek()
		if c == '}' {
			l.pos++
			return sel, nil
		}
		var label string
		quoted := false
		switch {
		case c == '"' || c == '\'' || c == '`':
			s, err := l.str()
			if err != nil {
				return sel, err
			}
			label, quoted = s, true
		case isIdentStart(c):
			label = l.ident()
		default:
			return sel, l.errorf("expected a label name, got %q", c)
		}
		l.skipSpace()
		if l.eof() {
			return sel, l.errorf("no closing brace")
		}
		if quoted && (l.peek() == ',' || l.peek() == '}') {
			// {"metric.name", ...}: the metric name, quoted.
			if sel.Name != "" {
				return sel, l.errorf("metric named twice")
			}
			sel.Name = label
		} else {
			var op string
			for _, o := range []string{"=~", "!~", "!=", "="} {
				if l.hasPrefix(o) {
					op = o
					break
				}
			}
			if op == "" {
				return sel, l.errorf("expected a matcher operator after %q", label)
			}
			l.pos += len(op)
			l.skipSpace()
			if l.eof() || (l.peek() != '"' && l.peek() != '\'' && l.peek() != '`') {
				return sel, l.errorf("expected a string after %s%s", label, op)
			}
			value, err := l.str()
			if err != nil {
				return sel, err
			}
			if label == "__name__" && op == "=" && sel.Name == "" {
				sel.Name = value
			} else {
				sel.Matchers = append(sel.Matchers, Matcher{Label: label, Op: op, Value: value})
			}
		}
		l.skipSpace()
		if !l.eof() && l.peek() == ',' {
			l.pos++
		}
	}
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}
