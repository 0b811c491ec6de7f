package otelprom_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/types"

	"github.com/quietpatch/quietpatch/integrations/otelprom"
	"github.com/quietpatch/quietpatch/statuspatch"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestQueueInstrumentsReachTheRegistry: a queue's instruments, created on
// the provider's meter, are gathered under the Prometheus names of the
// package quietpatch table, without scope labels.
func TestQueueInstrumentsReachTheRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	provider, err := otelprom.NewMeterProvider(reg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = provider.Shutdown(context.Background()) }()
	q, err := statuspatch.NewPatchQueue[types.NamespacedName](statuspatch.Options{Name: "widgets", Capacity: 7, Meter: provider.Meter(otelprom.MeterName)})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Add(types.NamespacedName{Namespace: "a", Name: "b"}, statuspatch.LaneFresh); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.HasPrefix(l.GetName(), "otel_scope") {
					t.Errorf("%s has the label %s", f.GetName(), l.GetName())
				}
			}
			switch {
			case m.GetGauge() != nil:
				got[f.GetName()] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				got[f.GetName()] += m.GetCounter().GetValue()
			}
		}
	}
	for name, want := range map[string]float64{"quietpatch_queue_capacity": 7, "quietpatch_queue_depth": 1, "quietpatch_queue_enqueued_total": 1} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v (gathered %v)", name, got[name], want, got)
		}
	}
	if _, ok := got["target_info"]; ok {
		t.Error("target_info is exported")
	}
}

func TestNewMeterProviderRejectsNil(t *testing.T) {
	if _, err := otelprom.NewMeterProvider(nil); err == nil {
		t.Fatal("a nil registry was accepted")
	}
}
