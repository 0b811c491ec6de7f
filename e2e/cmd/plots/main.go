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
	if *in != "" {
		f, err := os.Open(*in)
		if err != nil {
			return err
		}
		samples, err := perf.ReadCSV(f)
		f.Close()
		if err != nil {
			return err
		}
		for _, p := range []struct {
			file string
			draw func([]perf.Sample, string) error
		}{{perf.DepthPlotFile, perf.PlotDepth}, {perf.HeapPlotFile, perf.PlotHeap}} {
			path := outPath(p.file)
			if err := p.draw(samples, path); err != nil {
				errs = append(errs, err)
				continue
			}
			fmt.Println(path)
		}
	}
	if *stormIn != "" {
		f, err := os.Open(*stormIn)
		if err != nil {
			return err
		}
		samples, err := perf.ReadStormCSV(f)
		f.Close()
		if err != nil {
			return err
		}
		path := outPath(perf.StormPlotFile)
		if err := perf.PlotStorm(samples, path); err != nil {
			errs = append(errs, err)
		} else {
			fmt.Println(path)
		}
	}
	if *shardsIn != "" {
		f, err := os.Open(*shardsIn)
		if err != nil {
			return err
		}
		samples, err := perf.ReadShardsCSV(f)
		f.Close()
		if err != nil {
			return err
		}
		path := outPath(perf.ShardsPlotFile)
		if err := perf.PlotShards(samples, *shards, path); err != nil {
			errs = append(errs, err)
		} else {
			fmt.Println(path)
		}
	}
	if *kneeIn != "" {
		var routes int
		if _, err := fmt.Sscanf(filepath.Base(*kneeIn), "knee-%d.csv", &routes); err != nil {
			return fmt.Errorf("-knee-in: the file's name is not knee-<routes>.csv: %s", *kneeIn)
		}
		f, err := os.Open(*kneeIn)
		if err != nil {
			return err
		}
		points, err := perf.ReadCurveCSV(f)
		f.Close()
		if err != nil {
			return err
		}
		path := outPath(fmt.Sprintf("knee-%d", routes))
		if err := perf.PlotKneeCurve(points, routes, path); err != nil {
			errs = append(errs, err)
		} else {
			fmt.Println(path)
		}
	}
	if *curveIn != "" {
		f, err := os.Open(*curveIn)
		if err != nil {
			return err
		}
		points, err := perf.ReadCurveCSV(f)
		f.Close()
		if err != nil {
			return err
		}
		path := outPath(perf.CurvePlotFile)
		if err := perf.PlotCurve(points, path); err != nil {
			errs = append(errs, err)
		} else {
			fmt.Println(path)
		}
	}
	return errors.Join(errs...)
}
