package perf

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCurveCSVRoundTripAndPlot(t *testing.T) {
	points := []CurvePoint{
		{Mode: "fixed-1", Limit: 1, RoutesPerSecond: 155.6, P99Ms: 36.65, AloneP99Ms: 18.89, P50Ms: 5.9, AloneP50Ms: 4.4},
		{Mode: "adaptive", Limit: 5, RoutesPerSecond: 180.8, P99Ms: 164.7, AloneP99Ms: 18.89, P50Ms: 30.6, AloneP50Ms: 4.4},
	}
	var buf bytes.Buffer
	if err := WriteCurveCSV(&buf, points); err != nil {
		t.Fatal(err)
	}
	got, err := ReadCurveCSV(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(points, got); d != "" {
		t.Fatalf("round trip (-want +got):\n%s", d)
	}
	written, err := WriteCurve(t.TempDir(), points)
	if err != nil || len(written) != 2 {
		t.Fatalf("WriteCurve = %v, %v", written, err)
	}
	svg, err := os.ReadFile(written[1])
	if err != nil || !strings.Contains(string(svg), "adaptive") {
		t.Fatalf("the plot %s does not label the points: %v", filepath.Base(written[1]), err)
	}
	for _, bad := range []string{
		"mode,limit\nx,1\n",
		"mode,limit,routes_per_s,p99_ms,alone_p99_ms,p50_ms,alone_p50_ms\nx,1,2,3,0,1,1\n",
		"mode,limit,routes_per_s,p99_ms,alone_p99_ms,p50_ms,alone_p50_ms\nx,1,-2,3,4,1,1\n",
	} {
		if _, err := ReadCurveCSV(strings.NewReader(bad)); !errors.Is(err, ErrBadCSV) {
			t.Errorf("ReadCurveCSV(%q) = %v, want ErrBadCSV", bad, err)
		}
	}
	if _, err := WriteCurve(t.TempDir(), nil); !errors.Is(err, ErrNoSamples) {
		t.Errorf("WriteCurve(nil) = %v, want ErrNoSamples", err)
	}
}

func TestKneeCurveNamesItsFilesAndGoals(t *testing.T) {
	points := []CurvePoint{
		{Mode: "fixed-2", Limit: 2, RoutesPerSecond: 277, P99Ms: 30.9, AloneP99Ms: 13, P50Ms: 6.7, AloneP50Ms: 2.94},
		{Mode: "adaptive", Limit: 2, RoutesPerSecond: 267, P99Ms: 30.9, AloneP99Ms: 13, P50Ms: 7.7, AloneP50Ms: 2.94},
	}
	dir := t.TempDir()
	written, err := WriteKneeCurve(dir, 10000, points)
	want := []string{filepath.Join(dir, "knee-10000.csv"), filepath.Join(dir, "knee-10000.svg")}
	if err != nil || !slices.Equal(written, want) {
		t.Fatalf("WriteKneeCurve = %v, %v; want %v", written, err, want)
	}
	svg, err := os.ReadFile(want[1])
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"10000 routes", "adaptive", "p50 ≤ 2.5× alone", "p99 ≤ 8× alone"} {
		if !strings.Contains(string(svg), s) {
			t.Errorf("the plot does not show %q", s)
		}
	}
	if _, err := WriteKneeCurve(dir, 1, nil); !errors.Is(err, ErrNoSamples) {
		t.Errorf("WriteKneeCurve(nil) = %v, want ErrNoSamples", err)
	}
}
