package perf

import (
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"
	"time"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Files of the sharded benchmark's samples and plot.
const (
	// ShardsCSVFile holds the shards each replica held over a kill -9 and
	// a join (WriteShardsCSV).
	ShardsCSVFile = "shards-held.csv"
	// ShardsPlotFile is their plot (PlotShards).
	ShardsPlotFile = "shards-held.svg"
)

// ShardSample is one scrape of one replica's quietpatch_shard_held and
// quietpatch_shard_running, or, with Event set, a moment of the scenario
// ("kill -9 <identity>", "join <identity>") and no replica.
type ShardSample struct {
	// T is the time since sampling began.
	T time.Duration
	// Replica is the replica's identity ("" for an event).
	Replica string
	// Held and Running are the gauges scraped.
	Held, Running int
	// Event names what happened at T.
	Event string
}

// shardsLift is how far above its count PlotShards draws replica i's line,
// times i: replicas often hold the same count, and no line hides another.
const shardsLift = 0.1

var shardsHeader = []string{"t_s", "replica", "held", "running", "event"}

// WriteShardsCSV writes samples as CSV with a header line:
//
//	t_s,replica,held,running,event
//
// t_s is in seconds with millisecond precision; an event's row has no
// replica and zero counts.
func WriteShardsCSV(w io.Writer, samples []ShardSample) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(shardsHeader); err != nil {
		return err
	}
	for _, s := range samples {
		if err := cw.Write([]string{
			strconv.FormatFloat(s.T.Seconds(), 'f', 3, 64), s.Replica,
			strconv.Itoa(s.Held), strconv.Itoa(s.Running), s.Event,
		}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// ReadShardsCSV reads what WriteShardsCSV wrote. It returns an error
// wrapping ErrBadCSV, with the line number, when a line does not parse.
func ReadShardsCSV(r io.Reader) ([]ShardSample, error) {
	return readCSV(r, shardsHeader, func(rec []string) (ShardSample, error) {
		s := ShardSample{Replica: rec[1], Event: rec[4]}
		t, err := strconv.ParseFloat(rec[0], 64)
		if err != nil || t < 0 || math.IsInf(t, 0) || math.IsNaN(t) {
			return s, fmt.Errorf("t_s %q is not a time in seconds", rec[0])
		}
		s.T = time.Duration(math.Round(t*1e3)) * time.Millisecond
		if s.Held, err = strconv.Atoi(rec[2]); err != nil || s.Held < 0 {
			return s, fmt.Errorf("held %q is not a count", rec[2])
		}
		if s.Running, err = strconv.Atoi(rec[3]); err != nil || s.Running < 0 {
			return s, fmt.Errorf("running %q is not a count", rec[3])
		}
		if (s.Replica == "") == (s.Event == "") {
			return s, errors.New("a row names either a replica or an event")
		}
		return s, nil
	})
}

// PlotShards draws the shards each replica held over time, one step line
// per replica (a killed replica's line ends at its last scrape; lines
// lifted a little each so that equal counts stay visible), with a marker at
// each event, and saves the figure to path in the format of its
// extension.
func PlotShards(samples []ShardSample, shards int, path string) error {
	by := map[string]plotter.XYs{}
	var order []string
	type event struct {
		t    float64
		name string
	}
	var events []event
	sorted := slices.Clone(samples)
	slices.SortStableFunc(sorted, func(a, b ShardSample) int { return cmp.Compare(a.T, b.T) })
	for _, s := range sorted {
		if s.Event != "" {
			events = append(events, event{s.T.Seconds(), s.Event})
			continue
		}
		if _, ok := by[s.Replica]; !ok {
			order = append(order, s.Replica)
		}
		by[s.Replica] = append(by[s.Replica], plotter.XY{X: s.T.Seconds(), Y: float64(s.Held)})
	}
	if len(order) == 0 {
		return fmt.Errorf("%w for %s", ErrNoSamples, path)
	}
	slices.Sort(order)
	p := newPlot(fmt.Sprintf("shards held per replica (K = %d): a kill -9, then a join", shards), "shards held (quietpatch_shard_held)")
	p.X.Label.Text = fmt.Sprintf("time (s); replica i's line is drawn %.2f × i above its count", shardsLift)
	p.X.Min = 0
	green := color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	purple := color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}
	colors := []color.Color{blue, orange, red, green, purple}
	for i, id := range order {
		xys := slices.Clone(by[id])
		for j := range xys {
			xys[j].Y += shardsLift * float64(i)
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return fmt.Errorf("perf: plotting %s: %w", id, err)
		}
		l.StepStyle = plotter.PostStep
		l.Color = colors[i%len(colors)]
		l.Width = vg.Points(1.5)
		if i >= len(colors) {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(id, l)
	}
	top := float64(shards) + 1
	for _, e := range events {
		if err := marker(p, fmt.Sprintf("%s (%.1f s)", e.name, e.t), e.t, top); err != nil {
			return err
		}
	}
	p.Y.Max = top * 1.6 // room for the legend
	p.Y.Tick.Marker = plainTicks{}
	return save(p, path)
}

// WriteShards writes samples to dir as ShardsCSVFile and ShardsPlotFile,
// creating dir if needed, and returns the paths written.
func WriteShards(dir string, samples []ShardSample, shards int) ([]string, error) {
	if len(samples) == 0 {
		return nil, ErrNoSamples
	}
	return writeCSVAndPlot(dir, ShardsCSVFile, ShardsPlotFile,
		func(w io.Writer) error { return WriteShardsCSV(w, samples) },
		func(path string) error { return PlotShards(samples, shards, path) })
}
