package perf

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// File names WriteAll writes, and cmd/plots reads and writes.
const (
	// CSVFile holds the samples of the stalled-API scenario (WriteCSV).
	CSVFile = "stall-memory.csv"
	// DepthPlotFile is the plot of the quietpatch queue's depth and its
	// Peak-EWMA over time (PlotDepth).
	DepthPlotFile = "stall-depth.svg"
	// HeapPlotFile is the plot of the live heap over time, one line per
	// variant (PlotHeap).
	HeapPlotFile = "stall-heap.svg"
)

// ErrNoSamples is returned by the plotting functions when the samples hold
// nothing to draw.
var ErrNoSamples = errors.New("perf: no samples to plot")

// Plot size and colours.
var (
	plotWidth, plotHeight = 7 * vg.Inch, 3.5 * vg.Inch

	blue   = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	orange = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	red    = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	grey   = color.RGBA{R: 0x80, G: 0x80, B: 0x80, A: 0xff}
)

// of returns the samples of one variant, in time order.
func of(samples []Sample, variant string) []Sample {
	var out []Sample
	for _, s := range samples {
		if s.Variant == variant {
			out = append(out, s)
		}
	}
	slices.SortStableFunc(out, func(a, b Sample) int { return cmp.Compare(a.T, b.T) })
	return out
}

// stallEnd returns the time of the last stalled sample that a sample after
// the stall follows (the benchmark takes it right before it clears the
// stall), and false if the stall never ended in the samples.
func stallEnd(samples []Sample) (float64, bool) {
	for i, s := range samples {
		if !s.Stalled && i > 0 && samples[i-1].Stalled {
			return samples[i-1].T.Seconds(), true
		}
	}
	return 0, false
}

// line adds one line to p, with a legend entry.
func line(p *plot.Plot, name string, xys plotter.XYs, c color.Color, dashed bool) error {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return fmt.Errorf("perf: plotting %s: %w", name, err)
	}
	l.Color = c
	l.Width = vg.Points(1.5)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
	}
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}

// marker adds a dotted vertical line at x from 0 to top, labelled in the
// legend.
func marker(p *plot.Plot, name string, x, top float64) error {
	l, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: top}})
	if err != nil {
		return fmt.Errorf("perf: plotting %s: %w", name, err)
	}
	l.Color = grey
	l.Dashes = []vg.Length{vg.Points(1), vg.Points(2)}
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}

func newPlot(title, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "time since the first pass (s)"
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	return p
}

// PlotDepth draws, for the quietpatch variant of samples, the number of
// route keys waiting in the queue and the queue's Peak-EWMA gauge over time,
// with a marker where the stall was cleared, and saves the plot to path. The
// format follows path's extension (.svg, .png, .pdf, ...).
func PlotDepth(samples []Sample, path string) error {
	qp := of(samples, VariantQuietpatch)
	if len(qp) == 0 {
		return fmt.Errorf("%w: no %s samples for %s", ErrNoSamples, VariantQuietpatch, path)
	}
	depth := make(plotter.XYs, 0, len(qp))
	peak := make(plotter.XYs, 0, len(qp))
	top := 0.0
	for _, s := range qp {
		depth = append(depth, plotter.XY{X: s.T.Seconds(), Y: float64(s.Depth)})
		top = max(top, float64(s.Depth))
		if !math.IsNaN(s.DepthPeakEWMA) {
			peak = append(peak, plotter.XY{X: s.T.Seconds(), Y: s.DepthPeakEWMA})
			top = max(top, s.DepthPeakEWMA)
		}
	}
	p := newPlot("quietpatch queue while the API server is stalled", "keys waiting")
	if err := line(p, "depth (sampled)", depth, blue, false); err != nil {
		return err
	}
	if len(peak) > 0 {
		if err := line(p, "depth Peak-EWMA (quietpatch.queue.depth.peak_ewma)", peak, orange, true); err != nil {
			return err
		}
	}
	if x, ok := stallEnd(qp); ok {
		if err := marker(p, "stall cleared", x, top); err != nil {
			return err
		}
	}
	p.Y.Max = top * 1.25 // room for the legend
	return save(p, path)
}

// PlotHeap draws the live heap over time, one line per variant found in
// samples, with a marker where the stall was cleared, and saves the plot to
// path.
func PlotHeap(samples []Sample, path string) error {
	p := newPlot("live heap while the API server is stalled", "live heap (MiB)")
	top, drawn := 0.0, 0
	var end []Sample
	for _, v := range []struct {
		name  string
		label string
		c     color.Color
	}{
		{VariantUnbounded, "unbounded queue (seed)", red},
		{VariantQuietpatch, "quietpatch", blue},
	} {
		ss := of(samples, v.name)
		if len(ss) == 0 {
			continue
		}
		if end == nil || v.name == VariantQuietpatch {
			end = ss
		}
		xys := make(plotter.XYs, 0, len(ss))
		for _, s := range ss {
			xys = append(xys, plotter.XY{X: s.T.Seconds(), Y: s.HeapMiB()})
			top = max(top, s.HeapMiB())
		}
		if err := line(p, v.label, xys, v.c, false); err != nil {
			return err
		}
		drawn++
	}
	if drawn == 0 {
		return fmt.Errorf("%w: no %s or %s samples for %s", ErrNoSamples, VariantQuietpatch, VariantUnbounded, path)
	}
	if x, ok := stallEnd(end); ok {
		if err := marker(p, "stall cleared", x, top); err != nil {
			return err
		}
	}
	p.Y.Max = top * 1.25
	return save(p, path)
}

func save(p *plot.Plot, path string) error {
	if err := p.Save(plotWidth, plotHeight, path); err != nil {
		return fmt.Errorf("perf: saving plot %s: %w", path, err)
	}
	return nil
}

// WriteAll writes samples to dir as CSVFile, and the plots DepthPlotFile
// and HeapPlotFile, creating dir if needed. It returns the paths written. A
// plot without samples to draw is skipped, not an error, so a run of one
// variant still writes what it can; only samples with nothing at all to draw
// fail, with ErrNoSamples.
func WriteAll(dir string, samples []Sample) ([]string, error) {
	if len(samples) == 0 {
		return nil, ErrNoSamples
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("perf: %w", err)
	}
	var buf bytes.Buffer
	if err := WriteCSV(&buf, samples); err != nil {
		return nil, fmt.Errorf("perf: %w", err)
	}
	csvPath := filepath.Join(dir, CSVFile)
	if err := os.WriteFile(csvPath, buf.Bytes(), 0o644); err != nil {
		return nil, fmt.Errorf("perf: %w", err)
	}
	written, err := WritePlots(dir, samples)
	return append([]string{csvPath}, written...), err
}

// WritePlots writes the plots DepthPlotFile and HeapPlotFile into dir from
// samples, skipping a plot that has nothing to draw, and returns the paths
// written. It fails with ErrNoSamples only when neither plot can be drawn.
func WritePlots(dir string, samples []Sample) ([]string, error) {
	var written []string
	var errs []error
	for _, w := range []struct {
		file string
		draw func([]Sample, string) error
	}{{DepthPlotFile, PlotDepth}, {HeapPlotFile, PlotHeap}} {
		path := filepath.Join(dir, w.file)
		if err := w.draw(samples, path); err != nil {
			errs = append(errs, err)
			continue
		}
		written = append(written, path)
	}
	if len(written) > 0 {
		// A missing variant is fine; anything else is reported.
		var real []error
		for _, err := range errs {
			if !errors.Is(err, ErrNoSamples) {
				real = append(real, err)
			}
		}
		return written, errors.Join(real...)
	}
	return nil, errors.Join(errs...)
}
