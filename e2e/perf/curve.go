package perf

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
	"strconv"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Files of BenchmarkPoliteness's trade-off curve.
const (
	// CurveCSVFile holds one CurvePoint per storm of BenchmarkPoliteness
	// (WriteCurveCSV).
	CurveCSVFile = "politeness-curve.csv"
	// CurvePlotFile is the plot of those points (PlotCurve).
	CurvePlotFile = "politeness-curve.svg"
)

// CurvePoint is one storm of BenchmarkPoliteness: how fast the storm went
// and what it cost the competing client, at one setting of the dispatcher.
type CurvePoint struct {
	// Mode is the dispatcher's setting: "adaptive" or "fixed-N".
	Mode string
	// Limit is the median in-flight limit over the storm.
	Limit float64
	// RoutesPerSecond is the storm's rate.
	RoutesPerSecond float64
	// P99Ms is the competitor's p99 during the storm, AloneP99Ms its p99
	// alone; P50Ms and AloneP50Ms the same for the median; all in
	// milliseconds.
	P99Ms, AloneP99Ms, P50Ms, AloneP50Ms float64
}

// Ratio is the competitor's p99 during the storm over its p99 alone.
func (p CurvePoint) Ratio() float64 { return p.P99Ms / p.AloneP99Ms }

// Ratio50 is the same for the median.
func (p CurvePoint) Ratio50() float64 { return p.P50Ms / p.AloneP50Ms }

var curveHeader = []string{"mode", "limit", "routes_per_s", "p99_ms", "alone_p99_ms", "p50_ms", "alone_p50_ms"}

// WriteCurveCSV writes points as CSV with a header line:
//
//	mode,limit,routes_per_s,p99_ms,alone_p99_ms,p50_ms,alone_p50_ms
func WriteCurveCSV(w io.Writer, points []CurvePoint) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(curveHeader); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	for _, p := range points {
		if err := cw.Write([]string{p.Mode, f(p.Limit), f(p.RoutesPerSecond), f(p.P99Ms), f(p.AloneP99Ms), f(p.P50Ms), f(p.AloneP50Ms)}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// ReadCurveCSV reads what WriteCurveCSV wrote. It returns an error wrapping
// ErrBadCSV, with the line number, when a line does not parse.
func ReadCurveCSV(r io.Reader) ([]CurvePoint, error) {
	return readCSV(r, curveHeader, func(rec []string) (CurvePoint, error) {
		p := CurvePoint{Mode: rec[0]}
		for i, v := range []*float64{&p.Limit, &p.RoutesPerSecond, &p.P99Ms, &p.AloneP99Ms, &p.P50Ms, &p.AloneP50Ms} {
			x, err := strconv.ParseFloat(rec[i+1], 64)
			if err != nil || x < 0 {
				return p, fmt.Errorf("%s %q is not a non-negative number", curveHeader[i+1], rec[i+1])
			}
			*v = x
		}
		if p.AloneP99Ms == 0 || p.AloneP50Ms == 0 {
			return p, fmt.Errorf("alone_p99_ms or alone_p50_ms is 0")
		}
		return p, nil
	})
}

// PlotCurve draws the trade-off: each storm's rate (x) against the
// competitor's p99 and p50 over its p99 and p50 alone (y), labelled with
// the mode, and saves it to path in the format of its extension.
func PlotCurve(points []CurvePoint, path string) error {
	return plotCurve(points, path, "a storm's rate against what it costs another client", goalLine{"goal: p99 ≤ 3× alone", 3, red})
}

// goalLine is a horizontal line of a trade-off plot.
type goalLine struct {
	name string
	y    float64
	c    color.Color
}

func plotCurve(points []CurvePoint, path, title string, goals ...goalLine) error {
	if len(points) == 0 {
		return fmt.Errorf("%w for %s", ErrNoSamples, path)
	}
	p := newPlot(title, "competitor's latency during the storm / alone")
	p.X.Label.Text = "storm rate (routes/s)"
	top := 0.0
	for _, series := range []struct {
		name  string
		ratio func(CurvePoint) float64
		c     color.Color
		shape draw.GlyphDrawer
		label bool
	}{
		{"p99", CurvePoint.Ratio, blue, draw.CircleGlyph{}, true},
		{"p50", CurvePoint.Ratio50, orange, draw.TriangleGlyph{}, false},
	} {
		xys := make(plotter.XYs, len(points))
		labels := make([]string, len(points))
		for i, pt := range points {
			xys[i] = plotter.XY{X: pt.RoutesPerSecond, Y: series.ratio(pt)}
			labels[i] = pt.Mode
			top = max(top, xys[i].Y)
		}
		sc, err := plotter.NewScatter(xys)
		if err != nil {
			return fmt.Errorf("perf: plotting %s: %w", path, err)
		}
		sc.GlyphStyle.Color = series.c
		sc.GlyphStyle.Shape = series.shape
		sc.GlyphStyle.Radius = vg.Points(3)
		p.Add(sc)
		p.Legend.Add("competitor's "+series.name+" / alone", sc)
		if !series.label {
			continue
		}
		lb, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
		if err != nil {
			return fmt.Errorf("perf: plotting %s: %w", path, err)
		}
		for i := range lb.TextStyle {
			lb.TextStyle[i].Font.Size = vg.Points(8)
			lb.TextStyle[i].XAlign = draw.XLeft
		}
		lb.Offset = vg.Point{X: vg.Points(4), Y: vg.Points(2)}
		p.Add(lb)
	}
	for _, g := range goals {
		if err := line(p, g.name, plotter.XYs{{X: p.X.Min, Y: g.y}, {X: p.X.Max, Y: g.y}}, g.c, true); err != nil {
			return err
		}
	}
	p.Y.Max = top * 1.15
	p.Y.Tick.Marker = plainTicks{}
	return save(p, path)
}

// WriteKneeCurve writes the storms of BenchmarkKnee at n routes to dir as
// knee-<n>.csv (as WriteCurveCSV) and knee-<n>.svg, creating dir if needed,
// and returns the paths written; the plot is PlotKneeCurve's.
func WriteKneeCurve(dir string, n int, points []CurvePoint) ([]string, error) {
	if len(points) == 0 {
		return nil, ErrNoSamples
	}
	name := fmt.Sprintf("knee-%d", n)
	return writeCSVAndPlot(dir, name+".csv", name+".svg",
		func(w io.Writer) error { return WriteCurveCSV(w, points) },
		func(path string) error { return PlotKneeCurve(points, n, path) })
}

// PlotKneeCurve draws BenchmarkKnee's modes at n routes as PlotCurve does,
// with the default's goals beside its neighbour as dashed lines (p50 ≤
// 2.5× and p99 ≤ 8× alone), and saves it to path in the format of its
// extension.
func PlotKneeCurve(points []CurvePoint, n int, path string) error {
	return plotCurve(points, path, fmt.Sprintf("%d routes: the rate against what it costs a neighbour", n),
		goalLine{"goal: p99 ≤ 8× alone", 8, blue}, goalLine{"goal: p50 ≤ 2.5× alone", 2.5, orange})
}

// WriteCurve writes points to dir as CurveCSVFile and CurvePlotFile,
// creating dir if needed, and returns the paths written.
func WriteCurve(dir string, points []CurvePoint) ([]string, error) {
	if len(points) == 0 {
		return nil, ErrNoSamples
	}
	return writeCSVAndPlot(dir, CurveCSVFile, CurvePlotFile,
		func(w io.Writer) error { return WriteCurveCSV(w, points) },
		func(path string) error { return PlotCurve(points, path) })
}
