package perf

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Files of the storm benchmark's samples and plot.
const (
	// StormCSVFile holds the samples of BenchmarkStorm's adaptive storm
	// (WriteStormCSV).
	StormCSVFile = "storm-dispatch.csv"
	// StormPlotFile is the plot of the in-flight limit, the latency
	// estimate and the queue over that storm (PlotStorm).
	StormPlotFile = "storm-dispatch.svg"
)

// StormSample is one observation of a controller during a storm, taken
// every QP_PERF_STORM_SAMPLE (100 ms) from Controller.Stats.
type StormSample struct {
	// T is the time since the storm began (the Gateway update was sent).
	T time.Duration
	// Limit is the dispatcher's in-flight limit (DispatcherStats.Limit);
	// InFlight the patch calls in progress.
	Limit, InFlight int
	// Latency is the dispatcher's latency estimate, the Peak-EWMA of the
	// patch latency (DispatcherStats.Latency).
	Latency time.Duration
	// Depth is the number of route keys waiting in the queue; Capacity
	// the capacity of each of its lanes.
	Depth, Capacity int
	// Applied counts the patches applied successfully since the storm
	// began.
	Applied int64
}

var stormHeader = []string{"t_s", "limit", "in_flight", "latency_ms", "depth", "capacity", "applied"}

// WriteStormCSV writes samples as CSV with a header line:
//
//	t_s,limit,in_flight,latency_ms,depth,capacity,applied
//
// t_s is in seconds and latency_ms in milliseconds, both with microsecond
// precision.
func WriteStormCSV(w io.Writer, samples []StormSample) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(stormHeader); err != nil {
		return err
	}
	for _, s := range samples {
		if err := cw.Write([]string{
			strconv.FormatFloat(s.T.Seconds(), 'f', 6, 64),
			strconv.Itoa(s.Limit),
			strconv.Itoa(s.InFlight),
			strconv.FormatFloat(float64(s.Latency)/float64(time.Millisecond), 'f', 3, 64),
			strconv.Itoa(s.Depth),
			strconv.Itoa(s.Capacity),
			strconv.FormatInt(s.Applied, 10),
		}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// ReadStormCSV reads what WriteStormCSV wrote. It returns an error wrapping
// ErrBadCSV, with the line number, when a line does not parse.
func ReadStormCSV(r io.Reader) ([]StormSample, error) {
	return readCSV(r, stormHeader, parseStormSample)
}

func parseStormSample(rec []string) (StormSample, error) {
	var s StormSample
	secs := func(field, v string, scale time.Duration) (time.Duration, error) {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
			return 0, fmt.Errorf("%s %q is not a non-negative number", field, v)
		}
		return time.Duration(math.Round(f * float64(scale))), nil
	}
	count := func(field, v string) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%s %q is not a count", field, v)
		}
		return n, nil
	}
	var err error
	if s.T, err = secs("t_s", rec[0], time.Second); err != nil {
		return s, err
	}
	if s.Limit, err = count("limit", rec[1]); err != nil {
		return s, err
	}
	if s.InFlight, err = count("in_flight", rec[2]); err != nil {
		return s, err
	}
	if s.Latency, err = secs("latency_ms", rec[3], time.Millisecond); err != nil {
		return s, err
	}
	if s.Depth, err = count("depth", rec[4]); err != nil {
		return s, err
	}
	if s.Capacity, err = count("capacity", rec[5]); err != nil {
		return s, err
	}
	if s.Applied, err = strconv.ParseInt(rec[6], 10, 64); err != nil || s.Applied < 0 {
		return s, fmt.Errorf("applied %q is not a count", rec[6])
	}
	return s, nil
}

// stormLine is one line of a storm plot: a legend and the value drawn.
type stormLine struct {
	name   string
	value  func(StormSample) float64
	dashed bool
}

// stormPanel draws lines over samples' time into one panel.
func stormPanel(samples []StormSample, title, ylabel string, lines ...stormLine) (*plot.Plot, error) {
	p := newPlot(title, ylabel)
	p.X.Label.Text = "time since the Gateway changed (s)"
	colors := []color.Color{blue, orange, red}
	top := 0.0
	for i, l := range lines {
		xys := make(plotter.XYs, len(samples))
		for j, s := range samples {
			xys[j] = plotter.XY{X: s.T.Seconds(), Y: l.value(s)}
			top = max(top, xys[j].Y)
		}
		if err := line(p, l.name, xys, colors[i%len(colors)], l.dashed); err != nil {
			return nil, err
		}
	}
	p.Y.Max = max(top*1.35, 1) // room for the legend
	p.Y.Tick.Marker = plainTicks{}
	return p, nil
}

// plainTicks are gonum's default ticks labelled without trailing zeros
// ("2500", not "2500.00").
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'f', -1, 64)
		}
	}
	return ticks
}

// PlotStorm draws samples in three panels sharing the time axis — the
// in-flight limit and the calls in flight; the latency estimate; the
// queue's depth and capacity — and saves the figure to path, in the format
// of its extension (.svg, .png, .pdf, ...).
func PlotStorm(samples []StormSample, path string) error {
	if len(samples) == 0 {
		return fmt.Errorf("%w for %s", ErrNoSamples, path)
	}
	limit, err := stormPanel(samples, "quietpatch during a storm: every route's status changes at once", "patch calls",
		stormLine{"in-flight limit (quietpatch.dispatch.limit)", func(s StormSample) float64 { return float64(s.Limit) }, false},
		stormLine{"calls in flight", func(s StormSample) float64 { return float64(s.InFlight) }, true})
	if err != nil {
		return err
	}
	latency, err := stormPanel(samples, "", "latency (ms)",
		stormLine{"latency estimate, Peak-EWMA (quietpatch.dispatch.latency.peak_ewma)", func(s StormSample) float64 {
			return float64(s.Latency) / float64(time.Millisecond)
		}, false})
	if err != nil {
		return err
	}
	queue, err := stormPanel(samples, "", "patches",
		stormLine{"queue depth", func(s StormSample) float64 { return float64(s.Depth) }, false},
		stormLine{"queue capacity (each lane)", func(s StormSample) float64 { return float64(s.Capacity) }, true})
	if err != nil {
		return err
	}
	return saveTiles([]*plot.Plot{limit, latency, queue}, plotWidth, 2.6*plotHeight, path)
}

// WriteStorm writes samples to dir as StormCSVFile and StormPlotFile,
// creating dir if needed, and returns the paths written.
func WriteStorm(dir string, samples []StormSample) ([]string, error) {
	if len(samples) == 0 {
		return nil, ErrNoSamples
	}
	return writeCSVAndPlot(dir, StormCSVFile, StormPlotFile,
		func(w io.Writer) error { return WriteStormCSV(w, samples) },
		func(path string) error { return PlotStorm(samples, path) })
}

// writeCSVAndPlot writes dir/csvFile with writeCSV and dir/plotFile with
// draw, creating dir if needed, and returns the paths written.
func writeCSVAndPlot(dir, csvFile, plotFile string, writeCSV func(io.Writer) error, draw func(path string) error) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("perf: %w", err)
	}
	var buf bytes.Buffer
	if err := writeCSV(&buf); err != nil {
		return nil, fmt.Errorf("perf: %w", err)
	}
	csvPath := filepath.Join(dir, csvFile)
	if err := os.WriteFile(csvPath, buf.Bytes(), 0o644); err != nil {
		return nil, fmt.Errorf("perf: %w", err)
	}
	plotPath := filepath.Join(dir, plotFile)
	if err := draw(plotPath); err != nil {
		return []string{csvPath}, err
	}
	return []string{csvPath, plotPath}, nil
}

// saveTiles draws plots one above the other, aligned on their axes, into
// a figure of width × height saved to path in the format of its extension.
func saveTiles(plots []*plot.Plot, width, height vg.Length, path string) error {
	format := strings.TrimPrefix(filepath.Ext(path), ".")
	c, err := draw.NewFormattedCanvas(width, height, format)
	if err != nil {
		return fmt.Errorf("perf: plotting %s: %w", path, err)
	}
	rows := make([][]*plot.Plot, len(plots))
	for i, p := range plots {
		rows[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadY: 3 * vg.Millimeter,
		PadTop: vg.Millimeter, PadBottom: vg.Millimeter, PadLeft: vg.Millimeter, PadRight: 2 * vg.Millimeter}
	canvases := plot.Align(rows, tiles, draw.New(c))
	for i, p := range plots {
		p.Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("perf: saving plot %s: %w", path, err)
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("perf: saving plot %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("perf: saving plot %s: %w", path, err)
	}
	return nil
}
