// Command plots redraws the plots of the stalled-API benchmark
// (BenchmarkStalledMemory in package perf) and of the storm benchmark
// (BenchmarkStorm) from the samples they recorded, so that the figures in
// docs/ can be restyled or checked without running the benchmarks again.
//
// Usage (from the e2e module):
//
//	go run ./cmd/plots [-in ../docs/stall-memory.csv] [-storm-in ../docs/storm-dispatch.csv]
//	    [-shards-in ../docs/shards-held.csv -shards 8] [-curve-in ../docs/politeness-curve.csv]
//	    [-knee-in ../docs/knee-10000.csv]
//	    [-out ../docs] [-format svg]
//
// It writes stall-depth.<format> (the quietpatch queue's depth and its
// Peak-EWMA over time) and stall-heap.<format> (the live heap of both
// variants over time) from -in, and storm-dispatch.<format> (the in-flight
// limit, the latency estimate and the queue over a storm) from -storm-in,
// and shards-held.<format> (the shards each replica held over a kill -9
// and a join, BenchmarkSharded; K is -shards) from -shards-in, and
// politeness-curve.<format> (each storm's rate against the competing
// client's p99, BenchmarkPoliteness) from -curve-in, and knee-<routes>.<format>
// (BenchmarkKnee's modes on the same axes) from -knee-in, into -out; an input
// set to "" is skipped. -format is svg (the default)
// or any format gonum.org/v1/plot saves: png, pdf, eps, jpg, tif.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/quietpatch/quietpatch/e2e/perf"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "plots:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("plots", flag.ContinueOnError)
	in := fs.String("in", filepath.Join("..", "docs", perf.CSVFile), "samples CSV written by BenchmarkStalledMemory (\"\": skip)")
	stormIn := fs.String("storm-in", filepath.Join("..", "docs", perf.StormCSVFile), "samples CSV written by BenchmarkStorm (\"\": skip)")
	shardsIn := fs.String("shards-in", filepath.Join("..", "docs", perf.ShardsCSVFile), "samples CSV written by BenchmarkSharded (\"\": skip)")
	shards := fs.Int("shards", 8, "K of the samples of -shards-in")
	curveIn := fs.String("curve-in", "", "trade-off points CSV written by BenchmarkPoliteness, e.g. ../docs/"+perf.CurveCSVFile+" (\"\": skip)")
	kneeIn := fs.String("knee-in", "", "points CSV written by BenchmarkKnee, knee-<routes>.csv, e.g. ../docs/knee-10000.csv (\"\": skip)")
	out := fs.String("out", filepath.Join("..", "docs"), "directory to write the plots into")
	format := fs.String("format", "svg", "image format: svg, png, pdf, eps, jpg or tif")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch *format {
	case "svg", "png", "pdf", "eps", "jpg", "jpeg", "tif", "tiff":
	default:
		return fmt.Errorf("-format must be svg, png, pdf, eps, jpg or tif, got %q", *format)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	ext := "." + *format
	outPath := func(file string) string {
		return filepath.Join(*out, strings.TrimSuffix(file, filepath.Ext(file))+ext)
	}
	var errs []error
	// drawn records what draw(path) did with the plot at path.
	drawn := func(path string, draw func(string) error) {
		if err := draw(path); err != nil {
			errs = append(errs, err)
			return
		}
		fmt.Println(path)
	}
	if samples, err := readFile(*in, perf.ReadCSV); err != nil {
		return err
	} else if samples != nil {
		drawn(outPath(perf.DepthPlotFile), func(path string) error { return perf.PlotDepth(samples, path) })
		drawn(outPath(perf.HeapPlotFile), func(path string) error { return perf.PlotHeap(samples, path) })
	}
	if samples, err := readFile(*stormIn, perf.ReadStormCSV); err != nil {
		return err
	} else if samples != nil {
		drawn(outPath(perf.StormPlotFile), func(path string) error { return perf.PlotStorm(samples, path) })
	}
	if samples, err := readFile(*shardsIn, perf.ReadShardsCSV); err != nil {
		return err
	} else if samples != nil {
		drawn(outPath(perf.ShardsPlotFile), func(path string) error { return perf.PlotShards(samples, *shards, path) })
	}
	if *kneeIn != "" {
		var routes int
		if _, err := fmt.Sscanf(filepath.Base(*kneeIn), "knee-%d.csv", &routes); err != nil {
			return fmt.Errorf("-knee-in: the file's name is not knee-<routes>.csv: %s", *kneeIn)
		}
		points, err := readFile(*kneeIn, perf.ReadCurveCSV)
		if err != nil {
			return err
		}
		drawn(outPath(fmt.Sprintf("knee-%d", routes)), func(path string) error { return perf.PlotKneeCurve(points, routes, path) })
	}
	if points, err := readFile(*curveIn, perf.ReadCurveCSV); err != nil {
		return err
	} else if points != nil {
		drawn(outPath(perf.CurvePlotFile), func(path string) error { return perf.PlotCurve(points, path) })
	}
	return errors.Join(errs...)
}

// readFile reads the file at path with read; a path of "" reads nothing
// and returns nil.
func readFile[T any](path string, read func(io.Reader) ([]T, error)) ([]T, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return read(f)
}
