package perf_test

import (
	"bytes"
	"fmt"
	"math"
	"time"

	"github.com/quietpatch/quietpatch/e2e/perf"
)

// Samples go to CSV and come back unchanged, so plots can be redrawn later
// (cmd/plots) without running the benchmark again.
func ExampleWriteCSV() {
	samples := []perf.Sample{
		{Variant: perf.VariantQuietpatch, T: 500 * time.Millisecond, Stalled: true, Depth: 1000, DepthPeakEWMA: 1000, HeapBytes: 96 << 20},
		{Variant: perf.VariantUnbounded, T: 500 * time.Millisecond, Stalled: true, Depth: 20000, DepthPeakEWMA: math.NaN(), HeapBytes: 130 << 20},
	}
	var buf bytes.Buffer
	if err := perf.WriteCSV(&buf, samples); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(buf.String())
	back, err := perf.ReadCSV(&buf)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range back {
		fmt.Printf("%s at %v: %d waiting, live heap %.0f MiB\n", s.Variant, s.T, s.Depth, s.HeapMiB())
	}
	// Output:
	// variant,t_s,stalled,depth,depth_peak_ewma,heap_bytes
	// quietpatch,0.500,true,1000,1000.0,100663296
	// unbounded,0.500,true,20000,,136314880
	// quietpatch at 500ms: 1000 waiting, live heap 96 MiB
	// unbounded at 500ms: 20000 waiting, live heap 130 MiB
}
