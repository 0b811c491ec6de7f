package monitoring

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDashboardUpToDate(t *testing.T) {
	want, err := generateDashboard()
	if err != nil {
		t.Fatal(err)
	}
	checkGenerated(t, DashboardFile, want)
}

// jsonPanel is what TestDashboardStructure reads of a panel.
type jsonPanel struct {
	ID          int            `json:"id"`
	Type        string         `json:"type"`
	Title       string         `json:"title"`
	Description string         `json:"description"`
	Datasource  map[string]any `json:"datasource"`
	GridPos     struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID        string         `json:"refId"`
		Expr         string         `json:"expr"`
		LegendFormat string         `json:"legendFormat"`
		Datasource   map[string]any `json:"datasource"`
	} `json:"targets"`
	Panels []jsonPanel `json:"panels"`
}

// TestDashboardStructure checks the dashboard JSON as Grafana would load
// it, independently of the generator: valid JSON, the variables, the
// datasource of every panel and query, the filters, ids and layout.
func TestDashboardStructure(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(monitoringDir(t), DashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(b) {
		t.Fatalf("%s is not valid JSON", DashboardFile)
	}
	var d struct {
		UID        string      `json:"uid"`
		Title      string      `json:"title"`
		Panels     []jsonPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name       string          `json:"name"`
				Type       string          `json:"type"`
				Query      json.RawMessage `json:"query"`
				Datasource map[string]any  `json:"datasource"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: want both", d.UID, d.Title)
	}

	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		switch v.Type {
		case "datasource":
			var q string
			if err := json.Unmarshal(v.Query, &q); err != nil || q != "prometheus" {
				t.Errorf("variable %s: query %s, want \"prometheus\"", v.Name, v.Query)
			}
		case "query":
			if uid := v.Datasource["uid"]; uid != "${datasource}" {
				t.Errorf("variable %s: datasource uid %v, want ${datasource}", v.Name, uid)
			}
		}
	}
	if vars["datasource"] != "datasource" {
		t.Errorf("no datasource variable of type datasource: %v", vars)
	}
	if vars["pipeline"] != "query" {
		t.Errorf("no pipeline query variable: %v", vars)
	}

	ids := map[int]string{}
	type cell struct{ x, y int }
	taken := map[cell]string{}
	var walk func([]jsonPanel)
	walk = func(ps []jsonPanel) {
		for _, p := range ps {
			if prev, dup := ids[p.ID]; dup || p.ID == 0 {
				t.Errorf("panel %q: id %d missing or also used by %q", p.Title, p.ID, prev)
			}
			ids[p.ID] = p.Title
			g := p.GridPos
			if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 || g.Y < 0 {
				t.Errorf("panel %q: gridPos %+v is off Grafana's 24-column grid", p.Title, g)
			}
			for x := g.X; x < g.X+g.W; x++ {
				for y := g.Y; y < g.Y+g.H; y++ {
					if other, ok := taken[cell{x, y}]; ok {
						t.Errorf("panel %q overlaps %q at (%d,%d)", p.Title, other, x, y)
						y, x = g.Y+g.H, g.X+g.W // once per pair is enough
						continue
					}
					taken[cell{x, y}] = p.Title
				}
			}
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if p.Title == "" || strings.TrimSpace(p.Description) == "" {
				t.Errorf("panel %d %q: want a title and a description", p.ID, p.Title)
			}
			if uid := p.Datasource["uid"]; uid != "${datasource}" {
				t.Errorf("panel %q: datasource uid %v, want ${datasource}", p.Title, uid)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no queries", p.Title)
			}
			for _, tg := range p.Targets {
				if uid := tg.Datasource["uid"]; uid != "${datasource}" {
					t.Errorf("panel %q target %s: datasource uid %v, want ${datasource}", p.Title, tg.RefID, uid)
				}
				if tg.LegendFormat == "" {
					t.Errorf("panel %q target %s: no legend", p.Title, tg.RefID)
				}
				checkFilters(t, p.Title+" target "+tg.RefID, tg.Expr)
			}
		}
	}
	walk(d.Panels)
}

// checkFilters checks that every selector of a dashboard query filters on
// $job, and the pipeline's instruments also on $pipeline.
func checkFilters(t *testing.T, where, expr string) {
	t.Helper()
	sels, err := Selectors(expr)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	for _, s := range sels {
		has := map[string]bool{}
		for _, m := range s.Matchers {
			has[m.String()] = true
		}
		if !has[`job=~"$job"`] {
			t.Errorf("%s: %s does not filter job=~\"$job\"", where, s.Name)
		}
		if inst, ok := scheme[FamilyName(s.Name)]; ok && inst.pipeline && !has[`pipeline=~"$pipeline"`] {
			t.Errorf("%s: %s does not filter pipeline=~\"$pipeline\"", where, s.Name)
		}
	}
}
