package perf

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func testStormSamples() []StormSample {
	var out []StormSample
	for i := range 40 {
		out = append(out, StormSample{
			T: time.Duration(i) * 100 * time.Millisecond, Limit: min(1<<min(i, 6), 12), InFlight: min(i, 10),
			Latency: time.Duration(5+i)*time.Millisecond + 250*time.Microsecond, Depth: max(0, 1440-40*i), Capacity: 1440 + 10*i, Applied: int64(40 * i),
		})
	}
	return out
}

func TestStormCSVRoundTrip(t *testing.T) {
	in := testStormSamples()
	var buf bytes.Buffer
	if err := WriteStormCSV(&buf, in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadStormCSV(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("read %d samples, wrote %d", len(out), len(in))
	}
	for i := range in {
		if in[i] != out[i] {
			t.Errorf("sample %d: wrote %+v, read %+v", i, in[i], out[i])
		}
	}
}

func TestReadStormCSVErrors(t *testing.T) {
	const head = "t_s,limit,in_flight,latency_ms,depth,capacity,applied\n"
	for _, tc := range []struct {
		name, in string
	}{
		{"empty", ""},
		{"wrong header", "t,limit,in_flight,latency_ms,depth,capacity,applied\n"},
		{"short line", head + "0.1,1,1\n"},
		{"negative time", head + "-1,1,1,1,1,1,1\n"},
		{"bad limit", head + "0.1,x,1,1,1,1,1\n"},
		{"negative in flight", head + "0.1,1,-1,1,1,1,1\n"},
		{"bad latency", head + "0.1,1,1,NaN,1,1,1\n"},
		{"negative depth", head + "0.1,1,1,1,-1,1,1\n"},
		{"bad capacity", head + "0.1,1,1,1,1,1.5,1\n"},
		{"negative applied", head + "0.1,1,1,1,1,1,-1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ReadStormCSV(strings.NewReader(tc.in)); !errors.Is(err, ErrBadCSV) {
				t.Fatalf("ReadStormCSV(%q) = %v, want an ErrBadCSV", tc.in, err)
			}
		})
	}
}

func TestWriteStorm(t *testing.T) {
	dir := t.TempDir()
	written, err := WriteStorm(dir, testStormSamples())
	if err != nil {
		t.Fatal(err)
	}
	if len(written) != 2 || filepath.Base(written[0]) != StormCSVFile || filepath.Base(written[1]) != StormPlotFile {
		t.Fatalf("wrote %v, want %s and %s", written, StormCSVFile, StormPlotFile)
	}
	b, err := os.ReadFile(written[1])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", "in-flight limit", "latency estimate", "queue depth"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("%s lacks %q", written[1], want)
		}
	}
	if _, err := WriteStorm(dir, nil); !errors.Is(err, ErrNoSamples) {
		t.Errorf("WriteStorm(nil) = %v, want ErrNoSamples", err)
	}
	png := filepath.Join(dir, "storm.png")
	if err := PlotStorm(testStormSamples(), png); err != nil {
		t.Fatalf("PlotStorm to PNG: %v", err)
	}
}
