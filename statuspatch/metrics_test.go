package statuspatch

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// TestInstruments pins every instrument of the package — name, kind, unit
// and attribute keys — after a halted pass and a few dispatches: the table
// in the package documentation, dashboards and alerts depend on them.
func TestInstruments(t *testing.T) {
	r := newRig(t, 3, changedObjs(names(3)...))
	r.lead(1)
	if err := r.queue.TrySend(Patch[tPayload]{Key: "ns/stale", Epoch: 0}); err != nil {
		t.Fatal(err)
	}
	_, _ = r.rec.ReconcileAll(context.Background()) // 2 changed, then halted

	// The rig's queue has no meter: build a metered one for the dispatcher.
	q, err := NewPatchQueue(QueueConfig[Patch[tPayload]]{Capacity: 10, Key: PatchKey[tPayload], Meter: r.meter.provider.Meter("test"), Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		it, ok, _ := r.queue.TryReceive()
		if !ok {
			break
		}
		if err := q.TrySend(it.Value); err != nil {
			t.Fatal(err)
		}
		r.queue.Done(it)
	}
	d := &drig{obs: r.obs, queue: q, pat: &recordingPatcher{}, meter: r.meter}
	d.d, err = NewDispatcher(DispatcherConfig[tPayload]{Queue: q, Patcher: d.pat, Leader: r.obs, Meter: r.meter.provider.Meter("test"), Name: "test", Clock: r.clock})
	if err != nil {
		t.Fatal(err)
	}
	d.start(t)
	waitFor(t, "dispatches", func() bool {
		return d.outcome(t, outcome.OK) == 2 && d.dropped(t, DropStaleEpoch) == 1
	})

	type desc struct {
		kind  string
		unit  string
		attrs []string
	}
	want := map[string]desc{
		"quietpatch.queue.enqueued":             {"counter", "{patch}", []string{"pipeline"}},
		"quietpatch.queue.dequeued":             {"counter", "{patch}", []string{"pipeline"}},
		"quietpatch.queue.superseded":           {"counter", "{patch}", []string{"pipeline"}},
		"quietpatch.queue.dropped":              {"counter", "{patch}", []string{"pipeline", "reason"}},
		"quietpatch.queue.depth":                {"gauge", "{patch}", []string{"pipeline"}},
		"quietpatch.queue.depth.peak_ewma":      {"gauge", "{patch}", []string{"pipeline"}},
		"quietpatch.queue.capacity":             {"gauge", "{patch}", []string{"pipeline"}},
		"quietpatch.queue.wait":                 {"histogram", "s", []string{"pipeline"}},
		"quietpatch.reconcile.passes":           {"counter", "{pass}", []string{"pipeline", "result"}},
		"quietpatch.reconcile.duration":         {"histogram", "s", []string{"pipeline", "result"}},
		"quietpatch.reconcile.objects":          {"counter", "{object}", []string{"pipeline", "result"}},
		"quietpatch.reconcile.halted":           {"counter", "{pass}", []string{"pipeline"}},
		"quietpatch.dispatch.patches":           {"counter", "{patch}", []string{"outcome", "pipeline"}},
		"quietpatch.dispatch.duration":          {"histogram", "s", []string{"outcome", "pipeline"}},
		"quietpatch.dispatch.dropped":           {"counter", "{patch}", []string{"pipeline", "reason"}},
		"quietpatch.dispatch.in_flight":         {"gauge", "{patch}", []string{"pipeline"}},
		"quietpatch.dispatch.latency.peak_ewma": {"gauge", "s", []string{"pipeline"}},
		"quietpatch.dispatch.limit":             {"gauge", "{patch}", []string{"pipeline"}},
		"quietpatch.dispatch.backoff":           {"gauge", "s", []string{"pipeline"}},
		"quietpatch.dispatch.retry_after":       {"counter", "{wait}", []string{"pipeline"}},
	}
	seen := map[string]bool{}
	for _, sm := range r.meter.collect(t).ScopeMetrics {
		for _, m := range sm.Metrics {
			w, ok := want[m.Name]
			if !ok {
				t.Errorf("instrument %s is not in the table", m.Name)
				continue
			}
			seen[m.Name] = true
			var kind string
			var attrSets [][]string
			switch data := m.Data.(type) {
			case metricdata.Histogram[float64]:
				kind = "histogram"
				for _, p := range data.DataPoints {
					attrSets = append(attrSets, attrKeys(p.Attributes.ToSlice()))
				}
			case metricdata.Sum[int64]:
				kind = "counter"
				if !data.IsMonotonic {
					kind = "updowncounter"
				}
				for _, p := range data.DataPoints {
					attrSets = append(attrSets, attrKeys(p.Attributes.ToSlice()))
				}
			case metricdata.Gauge[int64]:
				kind = "gauge"
				for _, p := range data.DataPoints {
					attrSets = append(attrSets, attrKeys(p.Attributes.ToSlice()))
				}
			case metricdata.Gauge[float64]:
				kind = "gauge"
				for _, p := range data.DataPoints {
					attrSets = append(attrSets, attrKeys(p.Attributes.ToSlice()))
				}
			}
			if kind != w.kind || m.Unit != w.unit {
				t.Errorf("%s: %s in %q, want %s in %q", m.Name, kind, m.Unit, w.kind, w.unit)
			}
			for _, as := range attrSets {
				if !slices.Equal(as, w.attrs) {
					t.Errorf("%s: attributes %v, want %v", m.Name, as, w.attrs)
				}
			}
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("instrument %s not reported", name)
		}
	}
}

// BenchmarkInstrumentsPerPatch measures what the dispatcher's instruments
// cost per patch with the OpenTelemetry SDK installed: the queue-wait and
// duration histograms (the only instruments recorded per patch; counters
// are atomics read at collection) and the atomic counters themselves.
func BenchmarkInstrumentsPerPatch(b *testing.B) {
	for _, withMeter := range []bool{false, true} {
		name := "no-meter"
		if withMeter {
			name = "otel-sdk"
		}
		b.Run(name, func(b *testing.B) {
			m := newTestMeter(b)
			var d Dispatcher[tPayload]
			if withMeter {
				inst, err := newDispatchInstruments(m.provider.Meter("bench"), "bench", &d)
				if err != nil {
					b.Fatal(err)
				}
				d.inst = inst
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				d.inst.recordWait(ctx, 3*time.Millisecond)
				d.inst.recordCall(ctx, outcome.OK, 5*time.Millisecond)
				d.patches[0].Add(1)
				d.inFlight.Add(1)
				d.inFlight.Add(-1)
			}
		})
	}
}
