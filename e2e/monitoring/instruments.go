package monitoring

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// RootDocFile is the documentation file whose section Metrics holds the
// table of every instrument (DocumentedInstruments).
const RootDocFile = "docs/metrics.md"

// ErrNoTable is wrapped by ParseInstrumentTable when the source holds no
// instrument table, or a row it cannot read.
var ErrNoTable = errors.New("monitoring: no instrument table")

// Instrument is one row of the instrument table of RootDocFile.
type Instrument struct {
	// Name is the OpenTelemetry instrument name, e.g.
	// quietpatch.queue.depth.peak_ewma.
	Name string
	// Kind is counter, gauge or histogram.
	Kind string
	// Unit is the instrument's unit as the table writes it: s, {patch},
	// (none), ...
	Unit string
	// Prometheus is the metric family name the OTel Prometheus exporter
	// makes of it, e.g. quietpatch_queue_depth_peak_ewma.
	Prometheus string
	// Attributes are the instrument's attributes as the exporter's labels
	// (dots to underscores), each with the values the table lists, sorted,
	// or nil where it lists none (any value).
	Attributes map[string][]string
}

// PrometheusName is the family name the OTel Prometheus exporter
// (UnderscoreEscapingWithSuffixes) gives an instrument: dots to
// underscores, _seconds for the unit s, then _total for a counter.
func PrometheusName(name, kind, unit string) string {
	n := strings.ReplaceAll(name, ".", "_")
	if unit == "s" {
		n += "_seconds"
	}
	if kind == "counter" {
		n += "_total"
	}
	return n
}

// DocumentedInstruments reads the instrument table of RootDocFile, in the
// repository Dir finds (whatever QP_MONITORING_DIR says).
func DocumentedInstruments() ([]Instrument, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(root, RootDocFile)
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	ins, err := ParseInstrumentTable(src)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ins, nil
}

// ParseInstrumentTable reads the instrument table from Markdown, where it
// is a fenced code block, or from Go source whose package comment holds it
// as a code block: a header line starting with "name" and ending with
// "Prometheus name", then one line per instrument (its OTel name, kind,
// unit, attributes, and its Prometheus name last), attribute lists
// continued on indented lines. The table ends at the first line that is
// not part of the code block.
//
// The attributes column lists items separated by "," or ";": an attribute
// name alone (any value), "name: v1 v2 ..." (those values), "name (as x)"
// (the values of attribute name of the instrument whose name ends in .x,
// or else of the attribute x of another row), or "lease attributes"
// (k8s.namespace.name and k8s.lease.name, any value).
func ParseInstrumentTable(src []byte) ([]Instrument, error) {
	var (
		out    []Instrument
		attrs  []string // the attributes column of each row, continuations joined
		inside bool
		fenced bool // inside a Markdown fence
		line   int
	)
	sc := bufio.NewScanner(bytes.NewReader(src))
	for sc.Scan() {
		line++
		text := sc.Text()
		if strings.HasPrefix(text, "```") {
			if fenced = !fenced; !fenced && inside {
				break
			}
			continue
		}
		row, isCode := strings.CutPrefix(text, "//\t")
		if fenced {
			row, isCode = text, true
		}
		if !inside {
			if isCode && strings.HasPrefix(row, "name ") && strings.HasSuffix(row, "Prometheus name") {
				inside = true
			}
			continue
		}
		if !isCode {
			break
		}
		if strings.HasPrefix(row, " ") {
			if len(attrs) == 0 {
				return nil, fmt.Errorf("%w: line %d: a continued attribute list before the first row", ErrNoTable, line)
			}
			attrs[len(attrs)-1] += " " + strings.Join(strings.Fields(row), " ")
			continue
		}
		f := strings.Fields(row)
		if len(f) < 5 {
			return nil, fmt.Errorf("%w: line %d: %q has fewer than 5 columns", ErrNoTable, line, text)
		}
		out = append(out, Instrument{Name: f[0], Kind: f[1], Unit: f[2], Prometheus: f[len(f)-1]})
		attrs = append(attrs, strings.Join(f[3:len(f)-1], " "))
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no code block with a header \"name ... Prometheus name\" followed by rows", ErrNoTable)
	}
	if err := parseAttributes(out, attrs); err != nil {
		return nil, err
	}
	return out, nil
}

// leaseAttributes are what the table's "lease attributes" stand for.
var leaseAttributes = []string{"k8s.namespace.name", "k8s.lease.name"}

// parseAttributes fills in the Attributes of each instrument from its
// attributes column, resolving "(as x)" references once every row is read.
func parseAttributes(ins []Instrument, cols []string) error {
	type ref struct {
		row      int
		attr, as string
	}
	var refs []ref
	for i, col := range cols {
		ins[i].Attributes = map[string][]string{}
		for _, item := range strings.FieldsFunc(col, func(r rune) bool { return r == ',' || r == ';' }) {
			item = strings.TrimSpace(item)
			if item == "lease attributes" {
				for _, a := range leaseAttributes {
					ins[i].Attributes[labelName(a)] = nil
				}
				continue
			}
			name, values, hasValues := strings.Cut(item, ":")
			name = strings.TrimSpace(name)
			if n, as, ok := strings.Cut(name, " (as "); ok && strings.HasSuffix(as, ")") && !hasValues {
				refs = append(refs, ref{i, labelName(n), strings.TrimSuffix(as, ")")})
				continue
			}
			if name == "" || strings.ContainsAny(name, " ()") {
				return fmt.Errorf("%w: %s: cannot read the attribute %q", ErrNoTable, ins[i].Name, item)
			}
			var vs []string
			if hasValues {
				if vs = strings.Fields(values); len(vs) == 0 {
					return fmt.Errorf("%w: %s: attribute %s lists no values after the colon", ErrNoTable, ins[i].Name, name)
				}
				slices.Sort(vs)
			}
			ins[i].Attributes[labelName(name)] = vs
		}
	}
	for _, r := range refs {
		vs := resolveAs(ins, r.attr, r.as)
		if vs == nil {
			return fmt.Errorf("%w: %s: %s (as %s): no instrument ending in .%s with values of %s, nor an attribute %s with values",
				ErrNoTable, ins[r.row].Name, r.attr, r.as, r.as, r.attr, r.as)
		}
		ins[r.row].Attributes[r.attr] = vs
	}
	return nil
}

// resolveAs returns the values of attribute attr of the instrument whose
// name ends in "."+as, or else of the first attribute named as that lists
// values.
func resolveAs(ins []Instrument, attr, as string) []string {
	for _, in := range ins {
		if strings.HasSuffix(in.Name, "."+as) && in.Attributes[attr] != nil {
			return in.Attributes[attr]
		}
	}
	for _, in := range ins {
		if vs := in.Attributes[labelName(as)]; vs != nil {
			return vs
		}
	}
	return nil
}

// labelName is the Prometheus label an attribute becomes: dots to
// underscores.
func labelName(attr string) string { return strings.ReplaceAll(attr, ".", "_") }
