package main

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/quietpatch/quietpatch/e2e/examplee2e"
)

// The report's files, written into the report directory (-report).
const (
	reportSVG = "demo-metrics.svg"
	reportCSV = "demo-metrics.csv"
)

// errNoLeaderSamples: no sample came from a replica holding the Lease, so
// there is nothing to plot.
var errNoLeaderSamples = errors.New("no sample of a replica holding the Lease")

// sample is one scrape of one replica's /metrics.
type sample struct {
	t       time.Duration // since the recorder's start
	replica string
	leader  bool    // quietpatch_leader_is_leader
	depth   float64 // quietpatch_queue_depth
	ewma    float64 // quietpatch_queue_depth_peak_ewma
	calls   float64 // quietpatch_dispatch_patches_total, all outcomes
	limit   float64 // quietpatch_dispatch_limit
	latency float64 // quietpatch_dispatch_latency_peak_ewma_seconds
}

func sampleOf(t time.Duration, replica string, m examplee2e.Metrics) sample {
	return sample{
		t:       t,
		replica: replica,
		leader:  m.Sum(examplee2e.MetricLeaderIsLeader) > 0,
		depth:   m.Sum(examplee2e.MetricQueueDepth),
		ewma:    m.Sum(examplee2e.MetricQueueDepthEWMA),
		calls:   m.Sum(examplee2e.MetricDispatchPatches),
		limit:   m.Sum(examplee2e.MetricDispatchLimit),
		latency: m.Sum(examplee2e.MetricDispatchLatencyEWMA),
	}
}

// event is a moment of the demo marked on the plot.
type event struct {
	t        time.Duration
	label    string
	failover bool // drawn in red
}

// recorder scrapes every live replica on a fixed period and keeps the
// samples and the demo's events, timed from start. Its methods are safe
// for concurrent use.
type recorder struct {
	start time.Time

	mu      sync.Mutex
	samples []sample
	events  []event
}

// run scrapes the replicas that replicas returns, one after the other,
// every period until ctx ends. A failed scrape (a replica killed or
// stopping) is skipped: that replica's series end.
func (r *recorder) run(ctx context.Context, period time.Duration, replicas func() []*examplee2e.Replica) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		for _, rep := range replicas() {
			sctx, cancel := context.WithTimeout(ctx, period)
			m, err := rep.Scrape(sctx)
			cancel()
			if err == nil {
				r.mu.Lock()
				r.samples = append(r.samples, sampleOf(time.Since(r.start), rep.Identity, m))
				r.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// mark records an event at time at.
func (r *recorder) mark(at time.Time, label string, failover bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{t: at.Sub(r.start), label: label, failover: failover})
}

// write writes the samples (CSV) and the plot (SVG) into dir, creating it,
// and returns the plot's path and the number of samples.
func (r *recorder) write(dir string) (string, int, error) {
	r.mu.Lock()
	samples, events := append([]sample(nil), r.samples...), append([]event(nil), r.events...)
	r.mu.Unlock()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", 0, err
	}
	if err := writeCSV(filepath.Join(dir, reportCSV), samples); err != nil {
		return "", 0, err
	}
	path := filepath.Join(dir, reportSVG)
	return path, len(samples), plotTimeline(samples, events, path)
}

func writeCSV(path string, samples []sample) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"t_seconds", "replica", "leader", "queue_depth", "queue_depth_peak_ewma", "patch_calls_total", "dispatch_limit", "latency_peak_ewma_seconds"})
	g := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	for _, s := range samples {
		_ = w.Write([]string{g(s.t.Seconds()), s.replica, strconv.FormatBool(s.leader), g(s.depth), g(s.ewma), g(s.calls), g(s.limit), g(s.latency)})
	}
	w.Flush()
	return errors.Join(w.Error(), f.Close())
}

// point is the leader's state at one sample, with its patch call rate since
// its previous sample.
type point struct {
	t                                   float64 // seconds
	depth, ewma, rate, limit, latencyMS float64
}

// leaderSegments returns the samples of replicas holding the Lease, in time
// order, cut into segments: a new one starts when another replica leads or
// when no leader was sampled for longer than maxGap (the failover). The
// rate is the replica's patch calls since its own previous sample, leader
// or not, per second (0 for its first sample or after a counter reset).
func leaderSegments(samples []sample, maxGap time.Duration) [][]point {
	var (
		out  [][]point
		prev = map[string]sample{}
		cur  string // replica of the open segment
		last time.Duration
	)
	for _, s := range samples {
		p, seen := prev[s.replica]
		prev[s.replica] = s
		if !s.leader {
			continue
		}
		rate := 0.0
		if seen && s.t > p.t && s.calls >= p.calls {
			rate = (s.calls - p.calls) / (s.t - p.t).Seconds()
		}
		if len(out) == 0 || s.replica != cur || s.t-last > maxGap {
			out = append(out, nil)
			cur = s.replica
		}
		last = s.t
		out[len(out)-1] = append(out[len(out)-1], point{t: s.t.Seconds(), depth: s.depth, ewma: s.ewma, rate: rate, limit: s.limit, latencyMS: s.latency * 1000})
	}
	return out
}

var (
	blue   = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	orange = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	green  = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	purple = color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}
	brown  = color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}
	red    = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	grey   = color.RGBA{R: 0x80, G: 0x80, B: 0x80, A: 0xff}
)

// series is one line of a panel: its legend name, style and value.
type series struct {
	name   string
	c      color.Color
	dashed bool
	y      func(point) float64
}

// panels of the plot, top to bottom.
var panels = []struct {
	title, ylabel string
	lines         []series
}{
	{"the leader's queue (leader: quietpatch_leader_is_leader = 1)", "keys waiting", []series{
		{"queue depth (sampled)", blue, false, func(p point) float64 { return p.depth }},
		{"depth Peak-EWMA", orange, true, func(p point) float64 { return p.ewma }},
	}},
	{"the leader's patch calls", "calls/s", []series{
		{"patch calls/s (all outcomes)", green, false, func(p point) float64 { return p.rate }},
	}},
	{"the leader's dispatcher", "in-flight limit", []series{
		{"in-flight limit", purple, false, func(p point) float64 { return p.limit }},
	}},
	{"", "latency (ms)", []series{
		{"patch latency Peak-EWMA", brown, false, func(p point) float64 { return p.latencyMS }},
	}},
}

// plotTimeline draws the leader's queue depth and its Peak-EWMA, its patch
// calls per second, its in-flight limit and its latency Peak-EWMA over the
// demo, one panel each with a shared time axis, the events as vertical
// lines (the failover's in red) labelled in a lane under the first panel,
// and saves it to path (format by extension: .svg, .png, .pdf).
func plotTimeline(samples []sample, events []event, path string) error {
	segs := leaderSegments(samples, 2*time.Second)
	if len(segs) == 0 {
		return errNoLeaderSamples
	}
	xmax := samples[len(samples)-1].t.Seconds()
	for _, e := range events {
		xmax = max(xmax, e.t.Seconds())
	}
	rows := make([][]*plot.Plot, len(panels))
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.Y.Label.Text = pn.ylabel
		p.X.Min, p.X.Max, p.Y.Min = 0, xmax, 0
		p.Y.Tick.Marker = nonNegativeTicks
		p.Add(plotter.NewGrid())
		p.Legend.Top, p.Legend.Left = true, true
		top := 0.0
		for _, s := range pn.lines {
			for j, seg := range segs {
				xys := make(plotter.XYs, len(seg))
				for k, pt := range seg {
					xys[k] = plotter.XY{X: pt.t, Y: s.y(pt)}
					top = max(top, xys[k].Y)
				}
				l, err := plotter.NewLine(xys)
				if err != nil {
					return fmt.Errorf("plotting %s: %w", s.name, err)
				}
				l.Color, l.Width = s.c, vg.Points(1.5)
				if s.dashed {
					l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
				}
				p.Add(l)
				if j == 0 {
					p.Legend.Add(s.name, l)
				}
			}
		}
		top = max(top, 1) * 1.5 // room for the legend
		p.Y.Max = top
		if err := markEvents(p, events, xmax, top, i == 0); err != nil {
			return err
		}
		if i == len(panels)-1 {
			p.X.Label.Text = "seconds since the replicas started"
		}
		rows[i] = []*plot.Plot{p}
	}
	const w, h = 8 * vg.Inch, 11 * vg.Inch
	c, err := draw.NewFormattedCanvas(w, h, filepath.Ext(path)[1:])
	if err != nil {
		return err
	}
	tiles := draw.Tiles{Rows: len(rows), Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(12), PadY: vg.Points(10)}
	canvases := plot.Align(rows, tiles, draw.New(c))
	for i := range rows {
		rows[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = c.WriteTo(f)
	return errors.Join(err, f.Close())
}

// nonNegativeTicks are plot's default ticks from zero up, so that the
// events' lane under a panel has no tick labels.
var nonNegativeTicks = plot.TickerFunc(func(lo, hi float64) []plot.Tick {
	return plot.DefaultTicks{}.Ticks(max(lo, 0), hi)
})

// markEvents draws each event as a vertical line up to top. If labelled,
// it also makes a lane under zero and writes each label there, next to its
// line, staggered over three rows, left of the line in the right half so
// that no label runs off the plot.
func markEvents(p *plot.Plot, events []event, xmax, top float64, labelled bool) error {
	bottom := 0.0
	if labelled && len(events) > 0 {
		bottom = -0.35 * top
		p.Y.Min = bottom
	}
	var labels plotter.XYLabels
	for i, e := range events {
		x := e.t.Seconds()
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: bottom}, {X: x, Y: top}})
		if err != nil {
			return err
		}
		l.Color, l.Dashes = grey, []vg.Length{vg.Points(1), vg.Points(2)}
		if e.failover {
			l.Color, l.Dashes = red, []vg.Length{vg.Points(4), vg.Points(2)}
		}
		p.Add(l)
		labels.XYs = append(labels.XYs, plotter.XY{X: x, Y: bottom * (0.2 + 0.3*float64(i%3))})
		labels.Labels = append(labels.Labels, " "+e.label+" ")
	}
	if !labelled || len(events) == 0 {
		return nil
	}
	ls, err := plotter.NewLabels(labels)
	if err != nil {
		return err
	}
	for i := range ls.TextStyle {
		ls.TextStyle[i].Font.Size = vg.Points(9)
		ls.TextStyle[i].YAlign = draw.YCenter
		if labels.XYs[i].X > xmax/2 {
			ls.TextStyle[i].XAlign = draw.XRight
		}
		if events[i].failover {
			ls.TextStyle[i].Color = red
		}
	}
	p.Add(ls)
	return nil
}
