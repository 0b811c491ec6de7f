package perf

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func testSamples() []Sample {
	var out []Sample
	for i := range 12 {
		t := time.Duration(i) * 500 * time.Millisecond
		stalled := i > 0 && i < 8
		out = append(out,
			Sample{Variant: VariantQuietpatch, T: t, Stalled: stalled, Depth: min(i*400, 1000), DepthPeakEWMA: float64(min(i*400, 1000)), HeapBytes: 100 << 20},
			Sample{Variant: VariantUnbounded, T: t, Stalled: stalled, Depth: i * 10000, DepthPeakEWMA: math.NaN(), HeapBytes: uint64(100+i*20) << 20},
		)
	}
	return out
}

func TestCSVRoundTrip(t *testing.T) {
	in := testSamples()
	var buf bytes.Buffer
	if err := WriteCSV(&buf, in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadCSV(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("read %d samples, wrote %d", len(out), len(in))
	}
	for i := range in {
		a, b := in[i], out[i]
		nanOK := math.IsNaN(a.DepthPeakEWMA) && math.IsNaN(b.DepthPeakEWMA)
		if a.Variant != b.Variant || a.T != b.T || a.Stalled != b.Stalled || a.Depth != b.Depth ||
			a.HeapBytes != b.HeapBytes || (!nanOK && a.DepthPeakEWMA != b.DepthPeakEWMA) {
			t.Errorf("sample %d: wrote %+v, read %+v", i, a, b)
		}
	}
}

func TestReadCSVErrors(t *testing.T) {
	const head = "variant,t_s,stalled,depth,depth_peak_ewma,heap_bytes\n"
	for _, tc := range []struct {
		name, in string
	}{
		{"empty", ""},
		{"wrong header", "variant,t,stalled,depth,depth_peak_ewma,heap_bytes\n"},
		{"short line", head + "quietpatch,0.5,true,1\n"},
		{"empty variant", head + ",0.5,true,1,1,1\n"},
		{"negative time", head + "quietpatch,-1,true,1,1,1\n"},
		{"bad stalled", head + "quietpatch,0.5,maybe,1,1,1\n"},
		{"negative depth", head + "quietpatch,0.5,true,-1,1,1\n"},
		{"bad ewma", head + "quietpatch,0.5,true,1,x,1\n"},
		{"bad heap", head + "quietpatch,0.5,true,1,1,-5\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadCSV(strings.NewReader(tc.in))
			if !errors.Is(err, ErrBadCSV) {
				t.Fatalf("ReadCSV(%q) = %v, want an ErrBadCSV", tc.in, err)
			}
		})
	}
}

func TestWriteAll(t *testing.T) {
	for _, tc := range []struct {
		name    string
		samples []Sample
		want    []string
		wantErr error
	}{
		{"both variants", testSamples(), []string{CSVFile, DepthPlotFile, HeapPlotFile}, nil},
		{"unbounded only", of(testSamples(), VariantUnbounded), []string{CSVFile, HeapPlotFile}, nil},
		{"nothing", nil, nil, ErrNoSamples},
		{"unknown variant only", []Sample{{Variant: "other", T: time.Second}}, []string{CSVFile}, ErrNoSamples},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			written, err := WriteAll(dir, tc.samples)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("WriteAll: error %v, want %v", err, tc.wantErr)
			}
			var got []string
			for _, p := range written {
				got = append(got, filepath.Base(p))
				st, err := os.Stat(p)
				if err != nil || st.Size() == 0 {
					t.Errorf("%s: %v, size %d", p, err, st.Size())
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("wrote %v, want %v", got, tc.want)
			}
			for _, p := range written {
				if filepath.Ext(p) != ".svg" {
					continue
				}
				b, _ := os.ReadFile(p)
				if !bytes.Contains(b, []byte("<svg")) || !bytes.Contains(b, []byte("stall cleared")) {
					t.Errorf("%s is not an SVG with a stall marker", p)
				}
			}
		})
	}
}

func TestStallEnd(t *testing.T) {
	s := func(sec float64, stalled bool) Sample {
		return Sample{T: time.Duration(sec * float64(time.Second)), Stalled: stalled}
	}
	for _, tc := range []struct {
		name    string
		samples []Sample
		want    float64
		ok      bool
	}{
		{"none", nil, 0, false},
		{"never stalled", []Sample{s(0, false), s(1, false)}, 0, false},
		{"still stalled", []Sample{s(0, false), s(1, true), s(2, true)}, 0, false},
		{"cleared", []Sample{s(0, false), s(1, true), s(2, true), s(3, false)}, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := stallEnd(tc.samples)
			if got != tc.want || ok != tc.ok {
				t.Errorf("stallEnd = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
