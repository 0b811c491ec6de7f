package cluster

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// RequestTotalMetric is the API server's request counter.
const RequestTotalMetric = "apiserver_request_total"

// NoSubresource, as RequestFilter.Subresource or AuditFilter.Subresource,
// matches only requests to the main resource (no subresource).
const NoSubresource = "<none>"

// RequestTotal is one series of apiserver_request_total: the number of
// requests the API server completed with these labels since it started
// (a restart resets it).
type RequestTotal struct {
	Verb        string // upper case: GET, LIST, WATCH, CREATE, UPDATE, PATCH, DELETE, APPLY, ...
	Group       string // "" for the core group
	Version     string
	Resource    string
	Subresource string
	Scope       string // "resource", "namespace", "cluster"
	Component   string // "apiserver"
	Code        string // HTTP status code, e.g. "200"
	DryRun      string
	Value       float64
}

// RequestFilter selects apiserver_request_total series. An empty field
// matches anything; Subresource NoSubresource matches only the main resource.
// Verb is compared case-insensitively (the metric uses upper case).
type RequestFilter struct {
	Verb        string
	Group       string
	Resource    string
	Subresource string
	Code        string
}

// Matches reports whether the series passes the filter.
func (f RequestFilter) Matches(r RequestTotal) bool {
	return (f.Verb == "" || strings.EqualFold(f.Verb, r.Verb)) &&
		(f.Group == "" || f.Group == r.Group) &&
		(f.Resource == "" || f.Resource == r.Resource) &&
		matchSubresource(f.Subresource, r.Subresource) &&
		(f.Code == "" || f.Code == r.Code)
}

func matchSubresource(want, got string) bool {
	switch want {
	case "":
		return true
	case NoSubresource:
		return got == ""
	default:
		return want == got
	}
}

// SumRequests adds up the series that match f.
func SumRequests(series []RequestTotal, f RequestFilter) float64 {
	var n float64
	for _, s := range series {
		if f.Matches(s) {
			n += s.Value
		}
	}
	return n
}

// MetricFamilies fetches the API server's /metrics as the admin and parses
// the families named (all of them if none are named; the full set is a few
// MB, so name what you need).
func (cp *ControlPlane) MetricFamilies(ctx context.Context, names ...string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cp.Host()+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := cp.httpClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cluster: GET /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("cluster: GET /metrics: %s: %s", resp.Status, b)
	}
	return ParseMetrics(resp.Body, names...)
}

// ParseMetrics parses Prometheus text exposition format, keeping only the
// families named (all if none are named).
func ParseMetrics(r io.Reader, names ...string) (map[string]*dto.MetricFamily, error) {
	in := r
	if len(names) > 0 {
		var buf bytes.Buffer
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Bytes()
			if keepMetricLine(line, names) {
				buf.Write(line)
				buf.WriteByte('\n')
			}
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("cluster: reading metrics: %w", err)
		}
		in = &buf
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(in)
	if err != nil {
		return nil, fmt.Errorf("cluster: parsing metrics: %w", err)
	}
	return fams, nil
}

// keepMetricLine reports whether a line is a sample or the HELP/TYPE comment
// of one of the named families.
func keepMetricLine(line []byte, names []string) bool {
	s := string(line)
	if rest, ok := strings.CutPrefix(s, "# "); ok {
		if r, ok := strings.CutPrefix(rest, "HELP "); ok {
			s = r
		} else if r, ok := strings.CutPrefix(rest, "TYPE "); ok {
			s = r
		} else {
			return false
		}
	}
	for _, n := range names {
		if rest, ok := strings.CutPrefix(s, n); ok && rest != "" && (rest[0] == '{' || rest[0] == ' ') {
			return true
		}
	}
	return false
}

// RequestTotals reads every series of apiserver_request_total.
func (cp *ControlPlane) RequestTotals(ctx context.Context) ([]RequestTotal, error) {
	fams, err := cp.MetricFamilies(ctx, RequestTotalMetric)
	if err != nil {
		return nil, err
	}
	return RequestTotalsFrom(fams), nil
}

// RequestTotalsFrom extracts apiserver_request_total series from parsed families.
func RequestTotalsFrom(fams map[string]*dto.MetricFamily) []RequestTotal {
	fam := fams[RequestTotalMetric]
	if fam == nil {
		return nil
	}
	out := make([]RequestTotal, 0, len(fam.GetMetric()))
	for _, m := range fam.GetMetric() {
		var r RequestTotal
		for _, l := range m.GetLabel() {
			v := l.GetValue()
			switch l.GetName() {
			case "verb":
				r.Verb = v
			case "group":
				r.Group = v
			case "version":
				r.Version = v
			case "resource":
				r.Resource = v
			case "subresource":
				r.Subresource = v
			case "scope":
				r.Scope = v
			case "component":
				r.Component = v
			case "code":
				r.Code = v
			case "dry_run":
				r.DryRun = v
			}
		}
		switch {
		case m.GetCounter() != nil:
			r.Value = m.GetCounter().GetValue()
		case m.GetUntyped() != nil:
			r.Value = m.GetUntyped().GetValue()
		}
		out = append(out, r)
	}
	return out
}

// RequestCount is the sum of the apiserver_request_total series matching f,
// read now. Compare two readings to count the requests in between.
func (cp *ControlPlane) RequestCount(ctx context.Context, f RequestFilter) (float64, error) {
	series, err := cp.RequestTotals(ctx)
	if err != nil {
		return 0, err
	}
	return SumRequests(series, f), nil
}
