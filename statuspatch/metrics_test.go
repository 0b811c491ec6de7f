package statuspatch

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func TestReconcileDispatchInstrumentNames(t *testing.T) {
	// The names are a stable contract: pin them.
	got := []string{
		ReconcileDurationMetric, ReconcileObjectsMetric, ReconcileHaltedMetric,
		DispatchDurationMetric, DispatchPatchesMetric, DispatchDroppedMetric, DispatchInFlightMetric,
		ReconcilerAttrKey, DispatcherAttrKey, ResultAttrKey, OutcomeAttrKey, DropReasonAttrKey,
	}
	want := []string{
		"statuspatch.reconcile.duration", "statuspatch.reconcile.objects", "statuspatch.reconcile.halted",
		"statuspatch.dispatch.duration", "statuspatch.dispatch.patches", "statuspatch.dispatch.dropped", "statuspatch.dispatch.in_flight",
		"reconciler", "dispatcher", "result", "outcome", "reason",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("names (-want +got):\n%s", d)
	}
}

// TestReconcileDispatchInstruments checks kind, unit and attributes of every
// instrument after a halted pass and a few dispatches.
func TestReconcileDispatchInstruments(t *testing.T) {
	r := newRig(t, 3, changedObjs(names(3)...))
	r.lead(1)
	if err := r.queue.TrySend(Patch[tPayload]{Key: "ns/stale", Epoch: 0}); err != nil {
		t.Fatal(err)
	}
	_, _ = r.rec.ReconcileAll(context.Background()) // 2 changed, then halted

	d := &drig{obs: r.obs, queue: r.queue, pat: &recordingPatcher{}, meter: r.meter}
	var err error
	d.d, err = NewDispatcher(DispatcherConfig[tPayload]{Queue: r.queue, Patcher: d.pat, Leader: r.obs, Meter: r.meter.provider.Meter("test"), Name: "test", Clock: r.clock})
	if err != nil {
		t.Fatal(err)
	}
	d.start(t)
	waitFor(t, "dispatches", func() bool {
		return d.outcome(t, OutcomeOK) == 2 && d.dropped(t, DropStaleEpoch) == 1
	})

	type desc struct {
		unit  string
		kind  string
		attrs []string
	}
	want := map[string]desc{
		ReconcileDurationMetric: {"s", "histogram", []string{ReconcilerAttrKey, ResultAttrKey}},
		ReconcileObjectsMetric:  {"{object}", "counter", []string{ReconcilerAttrKey, ResultAttrKey}},
		ReconcileHaltedMetric:   {"{pass}", "counter", []string{ReconcilerAttrKey}},
		DispatchDurationMetric:  {"s", "histogram", []string{DispatcherAttrKey, OutcomeAttrKey}},
		DispatchPatchesMetric:   {"{patch}", "counter", []string{DispatcherAttrKey, OutcomeAttrKey}},
		DispatchDroppedMetric:   {"{patch}", "counter", []string{DispatcherAttrKey, DropReasonAttrKey}},
		DispatchInFlightMetric:  {"{patch}", "updowncounter", []string{DispatcherAttrKey}},
	}
	seen := map[string]bool{}
	for _, sm := range r.meter.collect(t).ScopeMetrics {
		for _, m := range sm.Metrics {
			w, ok := want[m.Name]
			if !ok {
				continue // the queue's own
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
