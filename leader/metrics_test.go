package leader

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// points collects the instruments' data points as "name{attr=value,...}" → value.
func points(t *testing.T, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	key := func(name string, set attribute.Set) string {
		var kv []string
		for _, a := range set.ToSlice() {
			if a.Key == attrNamespace || a.Key == attrLease {
				continue
			}
			kv = append(kv, string(a.Key)+"="+a.Value.Emit())
		}
		sort.Strings(kv)
		return name + "{" + strings.Join(kv, ",") + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if v, _ := p.Attributes.Value(attrLease); v.AsString() != testName {
						t.Errorf("%s: lease attribute %q", m.Name, v.AsString())
					}
					out[key(m.Name, p.Attributes)] = p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] = p.Value
				}
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out
}

func TestMetrics(t *testing.T) {
	h := newHarness(t)
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = provider.Shutdown(context.Background()) }()
	var failing atomic.Bool
	failUpdates(h, &failing, apierrors.NewInternalError(errors.New("boom")))

	cfg := h.config("a")
	cfg.Meter = provider.Meter("test")
	a := h.start(cfg)
	h.settle()
	h.stepTo(5 * time.Second) // renew ok
	failing.Store(true)
	h.stepTo(10 * time.Second) // renew fails, retried at 12, 14
	h.stepTo(12 * time.Second)
	h.stepTo(14 * time.Second)
	h.stepTo(20 * time.Second) // claim ran out at 20s; acquire fails
	failing.Store(false)
	h.stepTo(22 * time.Second) // re-acquire

	got := points(t, reader)
	want := map[string]int64{
		"quietpatch.leader.is_leader{identity=a}":                    1,
		"quietpatch.leader.epoch{}":                                  2,
		"quietpatch.leader.transitions{direction=acquired}":          2,
		"quietpatch.leader.transitions{direction=lost}":              1,
		"quietpatch.leader.requests{operation=get,result=not_found}": 1,
		"quietpatch.leader.requests{operation=create,result=ok}":     1,
		"quietpatch.leader.requests{operation=renew,result=ok}":      1,
		"quietpatch.leader.requests{operation=renew,result=error}":   3,
		"quietpatch.leader.requests{operation=acquire,result=error}": 1,
		"quietpatch.leader.requests{operation=acquire,result=ok}":    1,
		"quietpatch.leader.requests{operation=watch,result=ok}":      1,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected point %s = %d", k, got[k])
		}
	}

	if err := a.relinquish(time.Hour); err != nil {
		t.Fatal(err)
	}
	h.settle()
	got = points(t, reader)
	for k, v := range map[string]int64{
		"quietpatch.leader.is_leader{identity=a}":                0,
		"quietpatch.leader.transitions{direction=lost}":          2,
		"quietpatch.leader.requests{operation=vacate,result=ok}": 1,
	} {
		if got[k] != v {
			t.Errorf("after relinquish: %s = %d, want %d", k, got[k], v)
		}
	}

	if err := a.stop(); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if _, ok := points(t, reader)["quietpatch.leader.is_leader{identity=a}"]; ok {
		t.Error("is_leader still observed after Run returned")
	}
}
