package main

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeRun is a failover in samples: r0 leads and drains a burst, is killed
// at 3 s; r1, a follower until then, leads from 4.5 s.
func fakeRun() ([]sample, []event) {
	var ss []sample
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for i := range 7 { // r0: 0 .. 3 s
		t := ms(500 * i)
		ss = append(ss, sample{t: t, replica: "r0", leader: true, depth: float64(300 - 50*i), ewma: float64(320 - 40*i), calls: float64(100 * i), limit: 4 + float64(i), latency: 0.008})
		ss = append(ss, sample{t: t + ms(5), replica: "r1"})
	}
	for i := range 4 { // r1: 3.5 .. 5 s, leader from 4.5 s
		t := ms(3500 + 500*i)
		ss = append(ss, sample{t: t, replica: "r1", leader: i >= 2, depth: 3, ewma: 5, calls: float64(10 * max(i-1, 0)), limit: 4, latency: 0.012})
	}
	return ss, []event{{t: ms(3000), label: "kill -9 r0", failover: true}, {t: ms(4400), label: "r1 holds the Lease"}}
}

func TestLeaderSegments(t *testing.T) {
	ss, _ := fakeRun()
	segs := leaderSegments(ss, 2*time.Second)
	if len(segs) != 2 {
		t.Fatalf("%d segments, want 2 (r0, then r1): %v", len(segs), segs)
	}
	if len(segs[0]) != 7 || len(segs[1]) != 2 {
		t.Errorf("segments of %d and %d points, want 7 and 2", len(segs[0]), len(segs[1]))
	}
	for _, tc := range []struct {
		name      string
		got, want float64
	}{
		{"r0's first rate (no earlier sample)", segs[0][0].rate, 0},
		{"r0's rate", segs[0][1].rate, 200},                                            // 100 calls in 0.5 s
		{"r1's first rate as leader (since its follower sample)", segs[1][0].rate, 20}, // 10 calls in 0.5 s
		{"r1's latency in ms", segs[1][0].latencyMS, 12},
		{"r1's first time", segs[1][0].t, 4.5},
	} {
		if diff := tc.got - tc.want; diff > 1e-9 || diff < -1e-9 {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	// A gap without leader samples longer than maxGap cuts a segment too.
	gap := []sample{{t: 0, replica: "r0", leader: true}, {t: 3 * time.Second, replica: "r0", leader: true}}
	if n := len(leaderSegments(gap, 2*time.Second)); n != 2 {
		t.Errorf("a 3 s gap gave %d segments, want 2", n)
	}
}

func TestPlotTimeline(t *testing.T) {
	ss, evs := fakeRun()
	path := filepath.Join(t.TempDir(), reportSVG)
	if err := plotTimeline(ss, evs, path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Well-formed XML whose root is an svg element.
	dec := xml.NewDecoder(strings.NewReader(string(b)))
	root := ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", path, err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Errorf("root element %q, want svg", root)
	}
	for _, want := range []string{"queue depth (sampled)", "depth Peak-EWMA", "patch calls/s (all outcomes)", "in-flight limit", "patch latency Peak-EWMA", "kill -9 r0", "r1 holds the Lease"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the plot does not mention %q", want)
		}
	}

	// Without a leader there is nothing to plot.
	if err := plotTimeline([]sample{{replica: "r1"}}, nil, path); !errors.Is(err, errNoLeaderSamples) {
		t.Errorf("no leader samples: err = %v, want errNoLeaderSamples", err)
	}
}

func TestRecorderWrite(t *testing.T) {
	ss, evs := fakeRun()
	r := &recorder{samples: ss, events: evs}
	dir := filepath.Join(t.TempDir(), "report")
	path, n, err := r.write(dir)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(ss) {
		t.Errorf("%d samples written, want %d", n, len(ss))
	}
	if path != filepath.Join(dir, reportSVG) {
		t.Errorf("path %s, want %s", path, filepath.Join(dir, reportSVG))
	}
	b, err := os.ReadFile(filepath.Join(dir, reportCSV))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != len(ss)+1 || !strings.HasPrefix(lines[0], "t_seconds,replica,leader,") || lines[1] != "0,r0,true,300,320,0,4,0.008" {
		t.Errorf("CSV of %d lines, want %d; head:\n%s", len(lines), len(ss)+1, strings.Join(lines[:min(3, len(lines))], "\n"))
	}
}
