package monitoring

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// RootDocFile is the root package's documentation file, whose section
// Metrics holds the table of every instrument (DocumentedInstruments).
const RootDocFile = "doc.go"

// ErrNoTable is wrapped by ParseInstrumentTable when the source holds no
// instrument table, or a row it cannot read.
var ErrNoTable = errors.New("monitoring: no instrument table")

// Instrument is one row of the instrument table in the root package's
// documentation.
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

// DocumentedInstruments reads the instrument table of the root package's
// doc.go, in the repository Dir finds (whatever QP_MONITORING_DIR says).
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

// ParseInstrumentTable reads the instrument table from Go source whose
// package comment holds it as a code block: a header line starting with
// "name" and ending with "Prometheus name", then one line per instrument
// (its OTel name, kind, unit, attributes, and its Prometheus name last),
// attribute lists continued on indented lines. The table ends at the first
// line that is not part of the code block.
func ParseInstrumentTable(src []byte) ([]Instrument, error) {
	var (
		out    []Instrument
		inside bool
		line   int
	)
	sc := bufio.NewScanner(bytes.NewReader(src))
	for sc.Scan() {
		line++
		text := sc.Text()
		row, isCode := strings.CutPrefix(text, "//\t")
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
			continue // attributes continued
		}
		f := strings.Fields(row)
		if len(f) < 4 {
			return nil, fmt.Errorf("%w: line %d: %q has fewer than 4 columns", ErrNoTable, line, text)
		}
		out = append(out, Instrument{Name: f[0], Kind: f[1], Unit: f[2], Prometheus: f[len(f)-1]})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no code block with a header \"name ... Prometheus name\" followed by rows", ErrNoTable)
	}
	return out, nil
}
