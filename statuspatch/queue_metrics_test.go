package statuspatch_test

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/quietpatch/quietpatch/statuspatch"
)

// queueCollect collects reader and flattens the quietpatch.queue.*
// instruments to "name{k=v,...}" → value; histograms give "#count" and
// "#sum" entries.
func queueCollect(t *testing.T, reader *sdkmetric.ManualReader) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	out := map[string]float64{}
	name := func(m string, set attribute.Set) string {
		var kv []string
		for _, a := range set.ToSlice() {
			kv = append(kv, string(a.Key)+"="+a.Value.Emit())
		}
		sort.Strings(kv)
		return m + "{" + strings.Join(kv, ",") + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if !strings.HasPrefix(m.Name, "quietpatch.queue.") {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[name(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[name(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					out[name(m.Name, p.Attributes)] = p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[name(m.Name, p.Attributes)+"#count"] = float64(p.Count)
					out[name(m.Name, p.Attributes)+"#sum"] = p.Sum
				}
			default:
				t.Fatalf("instrument %s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out
}

func TestQueueInstruments(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(queueT0)
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = provider.Shutdown(context.Background()) }()
	q, err := statuspatch.NewPatchQueue(statuspatch.QueueConfig[string]{
		Capacity: 3, Key: queueTestKey, MaxAge: time.Minute, Clock: clk,
		Meter: provider.Meter("test"), DepthTau: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Three in, one superseded, one rejected, one expires, two delivered
	// after 2s and 3s of waiting.
	must(q.TrySend("a#1"))
	must(q.TrySend("b#1"))
	must(q.TrySend("c#1"))
	must(q.TrySend("a#2"))
	if err := q.TrySend("d#1"); err != statuspatch.ErrFull {
		t.Fatalf("TrySend(d#1) = %v, want ErrFull", err)
	}
	clk.SetTime(queueT0.Add(2 * time.Second))
	it, ok, err := q.TryReceive()
	if !ok || err != nil || it.Value != "a#2" {
		t.Fatalf("TryReceive = %q %v %v", it.Value, ok, err)
	}
	q.Done(it)
	clk.SetTime(queueT0.Add(3 * time.Second))
	it, ok, _ = q.TryReceive()
	if !ok || it.Value != "b#1" {
		t.Fatalf("TryReceive = %q %v", it.Value, ok)
	}
	clk.SetTime(queueT0.Add(2 * time.Minute))
	if _, ok, _ := q.TryReceive(); ok {
		t.Fatal("c#1 should have expired")
	}

	got := queueCollect(t, reader)
	// The depth went 1, 2, 3 at t0, 2 at t0+2s, 1 at t0+3s, 0 at t0+2m;
	// the Peak-EWMA jumped to 3 and decays towards 0 with τ = 10s.
	peak := got["quietpatch.queue.depth.peak_ewma{pipeline=statuspatch}"]
	if peak <= 0 || peak >= 3 {
		t.Errorf("peak_ewma = %v, want in (0, 3)", peak)
	}
	delete(got, "quietpatch.queue.depth.peak_ewma{pipeline=statuspatch}")
	want := map[string]float64{
		"quietpatch.queue.enqueued{pipeline=statuspatch}":               4,
		"quietpatch.queue.superseded{pipeline=statuspatch}":             1,
		"quietpatch.queue.dequeued{pipeline=statuspatch}":               2,
		"quietpatch.queue.dropped{pipeline=statuspatch,reason=full}":    1,
		"quietpatch.queue.dropped{pipeline=statuspatch,reason=closed}":  0,
		"quietpatch.queue.dropped{pipeline=statuspatch,reason=expired}": 1,
		"quietpatch.queue.depth{pipeline=statuspatch}":                  0,
		"quietpatch.queue.capacity{pipeline=statuspatch}":               3,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("instruments (-want +got):\n%s", d)
	}

	// Close: the rejection is counted (Stats), the instruments are
	// unregistered.
	q.Close()
	if err := q.TrySend("e#1"); err != statuspatch.ErrClosed {
		t.Fatalf("TrySend after Close = %v", err)
	}
	if st := q.Stats(); st.DroppedClosed != 1 {
		t.Errorf("DroppedClosed = %d, want 1", st.DroppedClosed)
	}
	got = queueCollect(t, reader)
	for k := range got {
		t.Errorf("%s still reported after Close", k)
	}
}

func TestQueueInstrumentsPeakEWMA(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(queueT0)
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = provider.Shutdown(context.Background()) }()
	q, err := statuspatch.NewPatchQueue(statuspatch.QueueConfig[int]{
		Capacity: 10, Clock: clk, Meter: provider.Meter("test"), Name: "burst", DepthTau: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	const key = "quietpatch.queue.depth.peak_ewma{pipeline=burst}"
	// A burst of 8 that drains at once is reported at its full height...
	for i := range 8 {
		if err := q.TrySend(i); err != nil {
			t.Fatal(err)
		}
	}
	for range 8 {
		it, _, _ := q.TryReceive()
		q.Done(it)
	}
	if got := queueCollect(t, reader)[key]; got != 8 {
		t.Errorf("peak_ewma right after the burst = %v, want 8", got)
	}
	// ...and decays by e^-1 per τ once it is over.
	clk.SetTime(queueT0.Add(10 * time.Second))
	if got, want := queueCollect(t, reader)[key], 8*0.36787944117144233; got < want-1e-9 || got > want+1e-9 {
		t.Errorf("peak_ewma one τ later = %v, want %v", got, want)
	}
}
