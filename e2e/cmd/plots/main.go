// Command plots redraws the plots of the stalled-API benchmark
// (BenchmarkStalledMemory in package perf) from the samples it recorded, so
// that the figures in docs/ can be restyled or checked without running the
// benchmark again.
//
// Usage (from the e2e module):
//
//	go run ./cmd/plots [-in ../docs/stall-memory.csv] [-out ../docs] [-format svg]
//
// It writes stall-depth.<format> (the quietpatch queue's depth and its
// Peak-EWMA over time) and stall-heap.<format> (the live heap of both
// variants over time) into -out. -format is svg (the default) or any format
// gonum.org/v1/plot saves: png, pdf, eps, jpg, tif.
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
	in := fs.String("in", filepath.Join("..", "docs", perf.CSVFile), "samples CSV written by BenchmarkStalledMemory")
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
	f, err := os.Open(*in)
	if err != nil {
		return err
	}
	samples, err := perf.ReadCSV(f)
	f.Close()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	ext := "." + *format
	var errs []error
	for _, p := range []struct {
		file string
		draw func([]perf.Sample, string) error
	}{{perf.DepthPlotFile, perf.PlotDepth}, {perf.HeapPlotFile, perf.PlotHeap}} {
		path := filepath.Join(*out, strings.TrimSuffix(p.file, filepath.Ext(p.file))+ext)
		if err := p.draw(samples, path); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Println(path)
	}
	return errors.Join(errs...)
}
