package perf

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"
)

// Variants of the stalled-API scenario, the values of Sample.Variant.
const (
	// VariantQuietpatch is the bounded PatchQueue, reconciler and
	// dispatcher.
	VariantQuietpatch = "quietpatch"
	// VariantUnbounded is the seed controller: one patch per route per
	// pass into an unbounded queue drained by one dispatcher without a
	// timeout.
	VariantUnbounded = "unbounded"
)

// Sample is one observation of the stalled-API scenario
// (BenchmarkStalledMemory), taken every sampling period.
type Sample struct {
	// Variant is VariantQuietpatch or VariantUnbounded.
	Variant string
	// T is the time since the variant's scenario started.
	T time.Duration
	// Stalled reports whether the API server was stalled when the sample
	// was taken (false during the recovery that follows the stall).
	Stalled bool
	// Depth is the number of items waiting in the queue: route keys for
	// quietpatch, patches for the unbounded queue.
	Depth int
	// DepthPeakEWMA is the queue's quietpatch.queue.depth.peak_ewma gauge
	// as an OpenTelemetry reader collected it; NaN for a queue that has
	// none (the unbounded one).
	DepthPeakEWMA float64
	// HeapBytes is the live heap of the process, runtime.MemStats.HeapAlloc
	// read right after a forced garbage collection.
	HeapBytes uint64
}

// HeapMiB returns HeapBytes in mebibytes.
func (s Sample) HeapMiB() float64 { return float64(s.HeapBytes) / (1 << 20) }

// ErrBadCSV is wrapped by ReadCSV when its input is not what WriteCSV
// writes.
var ErrBadCSV = errors.New("perf: malformed samples CSV")

// csvHeader is the first line WriteCSV writes and ReadCSV expects.
var csvHeader = []string{"variant", "t_s", "stalled", "depth", "depth_peak_ewma", "heap_bytes"}

// WriteCSV writes samples as CSV with a header line:
//
//	variant,t_s,stalled,depth,depth_peak_ewma,heap_bytes
//
// t_s is in seconds with millisecond precision; depth_peak_ewma is empty
// when it is NaN.
func WriteCSV(w io.Writer, samples []Sample) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	for _, s := range samples {
		ewma := ""
		if !math.IsNaN(s.DepthPeakEWMA) {
			ewma = strconv.FormatFloat(s.DepthPeakEWMA, 'f', 1, 64)
		}
		rec := []string{
			s.Variant,
			strconv.FormatFloat(s.T.Seconds(), 'f', 3, 64),
			strconv.FormatBool(s.Stalled),
			strconv.Itoa(s.Depth),
			ewma,
			strconv.FormatUint(s.HeapBytes, 10),
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// ReadCSV reads what WriteCSV wrote. It returns an error wrapping ErrBadCSV,
// with the line number, when a line does not parse.
func ReadCSV(r io.Reader) ([]Sample, error) {
	return readCSV(r, csvHeader, parseSample)
}

// readCSV reads a CSV whose first line must be header, parsing every later
// line with parse. Its errors wrap ErrBadCSV and name the line.
func readCSV[T any](r io.Reader, header []string, parse func([]string) (T, error)) ([]T, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = len(header)
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrBadCSV, err)
	}
	for i, h := range header {
		if head[i] != h {
			return nil, fmt.Errorf("%w: header column %d is %q, want %q", ErrBadCSV, i+1, head[i], h)
		}
	}
	var out []T
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadCSV, err)
		}
		v, err := parse(rec)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrBadCSV, line, err)
		}
		out = append(out, v)
	}
}

func parseSample(rec []string) (Sample, error) {
	s := Sample{Variant: rec[0], DepthPeakEWMA: math.NaN()}
	if s.Variant == "" {
		return s, errors.New("empty variant")
	}
	t, err := strconv.ParseFloat(rec[1], 64)
	if err != nil || t < 0 || math.IsInf(t, 0) || math.IsNaN(t) {
		return s, fmt.Errorf("t_s %q is not a time in seconds", rec[1])
	}
	s.T = time.Duration(math.Round(t*1e3)) * time.Millisecond
	if s.Stalled, err = strconv.ParseBool(rec[2]); err != nil {
		return s, fmt.Errorf("stalled %q is not a boolean", rec[2])
	}
	if s.Depth, err = strconv.Atoi(rec[3]); err != nil || s.Depth < 0 {
		return s, fmt.Errorf("depth %q is not a count", rec[3])
	}
	if rec[4] != "" {
		if s.DepthPeakEWMA, err = strconv.ParseFloat(rec[4], 64); err != nil {
			return s, fmt.Errorf("depth_peak_ewma %q is not a number", rec[4])
		}
	}
	if s.HeapBytes, err = strconv.ParseUint(rec[5], 10, 64); err != nil {
		return s, fmt.Errorf("heap_bytes %q is not a byte count", rec[5])
	}
	return s, nil
}
