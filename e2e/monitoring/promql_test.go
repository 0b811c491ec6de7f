package monitoring

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func sel(name string, ms ...string) Selector {
	s := Selector{Name: name}
	for i := 0; i+2 < len(ms); i += 3 {
		s.Matchers = append(s.Matchers, Matcher{Label: ms[i], Op: ms[i+1], Value: ms[i+2]})
	}
	return s
}

func TestSelectors(t *testing.T) {
	for _, tc := range []struct {
		label string
		expr  string
		want  []Selector
	}{
		{"bare name", `up`, []Selector{sel("up")}},
		{"matchers", `x_total{a="1", b!="2",c=~"3|4" , d!~'5'}`, []Selector{sel("x_total", "a", "=", "1", "b", "!=", "2", "c", "=~", "3|4", "d", "!~", "5")}},
		{"space before brace", `x {a="1"}`, []Selector{sel("x", "a", "=", "1")}},
		{"trailing comma", `x{a="1",}`, []Selector{sel("x", "a", "=", "1")}},
		{"functions and range", `rate(x_total[5m])`, []Selector{sel("x_total")}},
		{"aggregation by after", `sum(rate(a[1m])) by (job, le)`, []Selector{sel("a")}},
		{"aggregation by before", `sum by (job) (b) / ignoring(x) group_left (y) c`, []Selector{sel("b"), sel("c")}},
		{"without", `count without (instance) (d)`, []Selector{sel("d")}},
		{"on, group_right without list", `e * on(job) group_right f`, []Selector{sel("e"), sel("f")}},
		{"set operators and bool", `g > bool 1 and h or i unless j`, []Selector{sel("g"), sel("h"), sel("i"), sel("j")}},
		{"histogram_quantile", `histogram_quantile(0.99, sum by (le) (rate(k_bucket{x="y"}[5m])))`, []Selector{sel("k_bucket", "x", "=", "y")}},
		{"offset and @", `l offset -5m + m @ start() + n @ 1609746000`, []Selector{sel("l"), sel("m"), sel("n")}},
		{"subquery", `max_over_time(o[1h:5m])`, []Selector{sel("o")}},
		{"numbers", `1e-3 * p + 0x1f - .5 + Inf - NaN + 2E+2`, []Selector{sel("p")}},
		{"strings hold no names", `label_replace(q, "dst", "$1 {x} rate(y)", "src", "(.*)")`, []Selector{sel("q")}},
		{"escapes in strings", `r{a="say \"hi\"\n", b='it\'s'}`, []Selector{sel("r", "a", "=", "say \"hi\"\n", "b", "=", "it's")}},
		{"raw string", "s{a=`c:\\d+`}", []Selector{sel("s", "a", "=", `c:\d+`)}},
		{"comment", "t # u is a comment\n+ v", []Selector{sel("t"), sel("v")}},
		{"colons", `job:w:rate5m`, []Selector{sel("job:w:rate5m")}},
		{"__name__ equality", `{__name__="x", a="b"}`, []Selector{sel("x", "a", "=", "b")}},
		{"__name__ regex", `{__name__=~"q_.*"}`, []Selector{sel("", "__name__", "=~", "q_.*")}},
		{"quoted name", `{"my.metric", a="b"}`, []Selector{sel("my.metric", "a", "=", "b")}},
		{"grafana variables", `rate(x{job=~"$job"}[$__rate_interval]) / ${y} * [[z]] + $__range_s`, []Selector{sel("x", "job", "=~", "$job")}},
		{"count_values and topk", `topk(3, count_values("v", w))`, []Selector{sel("w")}},
		{"keywords are case-insensitive", `SUM BY (a) (x) AND y`, []Selector{sel("x"), sel("y")}},
		{"vector()", `vector(1) < 0`, nil},
		{"empty", ``, nil},
	} {
		t.Run(tc.label, func(t *testing.T) {
			got, err := Selectors(tc.expr)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Selectors(%q) (-want +got):\n%s", tc.expr, diff)
			}
		})
	}
}

func TestSelectorsErrors(t *testing.T) {
	for _, tc := range []struct{ label, expr string }{
		{"unterminated string", `x{a="b}`},
		{"unclosed brace", `x{a="b"`},
		{"unclosed bracket", `rate(x[5m)`},
		{"unclosed label list", `sum by (a x`},
		{"no operator", `x{a "b"}`},
		{"no value", `x{a=}`},
		{"value not a string", `x{a=b}`},
		{"name twice", `x{__name__="y"}`},
		{"bare $", `x + $`},
		{"unexpected character", `x; y`},
	} {
		t.Run(tc.label, func(t *testing.T) {
			got, err := Selectors(tc.expr)
			if !errors.Is(err, ErrSyntax) {
				t.Errorf("Selectors(%q) = %v, %v; want an error wrapping ErrSyntax", tc.expr, got, err)
			}
		})
	}
}

func TestNames(t *testing.T) {
	got, err := Names([]Query{
		{File: "a", Where: "1", Expr: `rate(b_total[5m]) / rate(a_total[5m])`},
		{File: "a", Where: "2", Expr: `a_total + c`},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a_total", "b_total", "c"}; !cmp.Equal(got, want) {
		t.Errorf("Names = %v, want %v", got, want)
	}
	if _, err := Names([]Query{{File: "a", Where: "1", Expr: `{__name__=~"x.*"}`}}); err == nil {
		t.Error("Names accepted a selector without a metric name")
	}
	if _, err := Names([]Query{{File: "a", Where: "1", Expr: `x{`}}); !errors.Is(err, ErrSyntax) {
		t.Errorf("Names of a broken expression: %v, want ErrSyntax", err)
	}
}

func TestDashboardQueriesVariables(t *testing.T) {
	qs, err := dashboardQueries([]byte(`{
	  "panels": [{"id": 1, "title": "row", "type": "row", "panels": [
	    {"id": 2, "title": "p", "targets": [{"refId": "A", "expr": "a"}]}]}],
	  "annotations": {"list": [{"name": "n", "expr": "b > 0"}, {"name": "builtin"}]},
	  "templating": {"list": [
	    {"name": "ds", "type": "datasource", "query": "prometheus"},
	    {"name": "v1", "type": "query", "query": "label_values(c{x=\"y\"}, job)"},
	    {"name": "v2", "type": "query", "query": {"query": "label_values(job)", "refId": "R"}},
	    {"name": "v3", "type": "query", "query": {"query": "query_result(sum(d))"}}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Query{
		{File: DashboardFile, Where: `panel 2 "p" target A`, Expr: "a"},
		{File: DashboardFile, Where: `annotation "n"`, Expr: "b > 0"},
		{File: DashboardFile, Where: `variable "v1"`, Expr: `c{x="y"}`, Variable: true},
		{File: DashboardFile, Where: `variable "v3"`, Expr: `sum(d)`, Variable: true},
	}
	if diff := cmp.Diff(want, qs); diff != "" {
		t.Errorf("dashboardQueries (-want +got):\n%s", diff)
	}
	if _, err := dashboardQueries([]byte(`{"templating": {"list": [{"name": "v", "type": "query", "query": "metrics(x)"}]}}`)); err == nil {
		t.Error("dashboardQueries accepted a variable query it cannot read")
	}
}
