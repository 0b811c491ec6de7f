package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/internal/queue"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// docInstrument is one row of the instrument table in docs/metrics.md.
type docInstrument struct {
	name, kind, unit, prometheus string
	attrs                        map[string][]string // attribute → values; nil: any value
}

// docInstruments parses the rows of the table under the given prefixes.
func docInstruments(t *testing.T, prefixes ...string) map[string]docInstrument {
	t.Helper()
	src, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`^(quietpatch\.\S+)\s+(counter|gauge|histogram)\s+(\S+)\s+(.+?)\s{2,}(quietpatch_\S+)$`)
	more := regexp.MustCompile(`^ {40,}(\S.*)$`)
	var rows []*docInstrument
	attrText := map[*docInstrument]string{}
	for _, line := range strings.Split(string(src), "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			d := &docInstrument{name: m[1], kind: m[2], unit: m[3], prometheus: m[5]}
			rows = append(rows, d)
			attrText[d] = m[4]
		} else if m := more.FindStringSubmatch(line); m != nil && len(rows) > 0 {
			attrText[rows[len(rows)-1]] += " " + m[1]
		}
	}
	byName := map[string]*docInstrument{}
	for _, d := range rows {
		byName[d.name] = d
	}
	// "pipeline, reason: full closed", "pipeline, result (as passes)"
	asRef := regexp.MustCompile(`^(\w+) \(as (\w+)\)$`)
	out := map[string]docInstrument{}
	for _, d := range rows {
		if !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(d.name, p) }) {
			continue
		}
		d.attrs = map[string][]string{}
		for _, spec := range strings.Split(attrText[d], ", ") {
			key, values, enumerated := strings.Cut(spec, ": ")
			switch m := asRef.FindStringSubmatch(spec); {
			case m != nil:
				ref := byName[d.name[:strings.LastIndex(d.name, ".")+1]+m[2]]
				if ref == nil {
					t.Fatalf("%s: attribute %q refers to no instrument", d.name, spec)
				}
				refText := attrText[ref]
				i := strings.Index(refText, m[1]+": ")
				if i < 0 {
					t.Fatalf("%s: attribute %q: %s has no values of %s", d.name, spec, ref.name, m[1])
				}
				d.attrs[m[1]] = strings.Fields(strings.SplitN(refText[i+len(m[1])+2:], ",", 2)[0])
			case enumerated:
				d.attrs[key] = strings.Fields(values)
			default:
				d.attrs[key] = nil
			}
		}
		out[d.name] = *d
	}
	if len(out) == 0 {
		t.Fatal("no instrument found in docs/metrics.md")
	}
	return out
}

// metricsScenario runs a queue, a reconciler and a dispatcher on one SDK
// meter through a halted pass, a coalesced key, a conflict, drops and a
// refused add to the closed queue.
func metricsScenario(t *testing.T) (*testMeter, *queue.Queue[types.NamespacedName], *tReconciler, *tDispatcher) {
	t.Helper()
	m := newTestMeter(t)
	clk := clocktesting.NewFakeClock(testStart())
	opts := Options{Name: "test", Capacity: 3, Workers: 2, Clock: clk, Logger: slog.New(slog.DiscardHandler)}
	metrics := NewMetrics(m.provider.Meter("quietpatch"), opts)
	obs := newFakeObserver("me")
	obs.Set(leader.Claim{Holder: "me", Expiry: clk.Now().Add(time.Hour), Epoch: 1})
	src := &fakeSource{objs: changedObjs(names(5)...)}
	comp := &tComputer{}
	pat := &recordingPatcher{fn: func(_ context.Context, p tPayload) error {
		if p.Key == "ns/o01" {
			return apierrors.NewConflict(schema.GroupResource{Resource: "widgets"}, "o01", errors.New("changed"))
		}
		return nil
	}}
	q, err := newQueue(opts)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := NewReconciler(src, comp, q, obs, opts, metrics)
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDispatcher(q, src, comp, pat, obs, opts, metrics)
	if err != nil {
		t.Fatal(err)
	}
	unregister, err := metrics.Register(q, rec.Stats, d.Stats)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unregister)
	rec.Enqueue(nsKey("o00"))                                                             // fresh lane
	rec.Enqueue(nsKey("o00"))                                                             // coalesces
	if _, err := rec.ReconcileAll(context.Background()); !errors.Is(err, queue.ErrFull) { // o00 waits already, o01-o03, o04 refused
		t.Fatalf("pass: %v, want halted", err)
	}
	src.set(upToDate(&tObj{Key: nsKey("o02"), RV: "1", Gen: 1})) // unchanged by the time it is served
	src.remove(nsKey("o03"))                                     // deleted
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	waitFor(t, "the keys served", func() bool {
		st := d.Stats()
		return q.Stats().Depth == 0 && st.InFlight == 0 && st.Patches[outcome.OK]+st.Patches[outcome.Conflict]+st.Dropped[dropUnchanged]+st.Dropped[dropDeleted] == 4
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	q.Close()
	if err := q.Add(nsKey("late"), queue.LaneFresh); !errors.Is(err, queue.ErrClosed) {
		t.Fatalf("Add after Close: %v", err)
	}
	return m, q, rec, d
}

// Every instrument of the table under quietpatch.queue, .reconcile and
// .dispatch is exported with the documented kind, unit, attributes and
// attribute values, and reports what the parts' Stats say; the table's
// Prometheus names follow from the names.
func TestInstrumentsMatchTheDocTable(t *testing.T) {
	doc := docInstruments(t, "quietpatch.queue.", "quietpatch.reconcile.", "quietpatch.dispatch.")
	m, q, rec, d := metricsScenario(t)
	qs, rs, ds := q.Stats(), rec.Stats(), d.Stats()
	if qs.DroppedFull != 1 || qs.DroppedClosed != 1 || qs.Coalesced != 1 || rs.Halted != 1 ||
		ds.Patches[outcome.Conflict] != 1 || ds.Dropped[dropUnchanged] != 1 || ds.Dropped[dropDeleted] != 1 {
		t.Fatalf("scenario: queue %+v, reconciler %+v, dispatcher %+v", qs, rs, ds)
	}
	// What each observable reports, by attribute value ("" when it has
	// only the pipeline attribute).
	patches := map[string]float64{}
	for _, o := range base.Outcomes() {
		patches[string(o)] = float64(ds.Patches[o])
	}
	dropped := map[string]float64{}
	for _, r := range dropReasons {
		dropped[string(r)] = float64(ds.Dropped[r])
	}
	byResult := func(m map[string]int64) map[string]float64 {
		out := map[string]float64{}
		for _, r := range passResults {
			out[r] = float64(m[r])
		}
		for _, r := range objResults {
			out[r] = float64(m[r])
		}
		return out
	}
	total := func(m map[string]float64) float64 {
		var s float64
		for _, v := range m {
			s += v
		}
		return s
	}
	want := map[string]map[string]float64{
		"quietpatch.queue.enqueued":             {"": float64(qs.Enqueued)},
		"quietpatch.queue.dequeued":             {"": float64(qs.Dequeued)},
		"quietpatch.queue.superseded":           {"": float64(qs.Coalesced)},
		"quietpatch.queue.dropped":              {"full": float64(qs.DroppedFull), "closed": float64(qs.DroppedClosed)},
		"quietpatch.queue.depth":                {"": float64(qs.Depth)},
		"quietpatch.queue.capacity":             {"": float64(q.Cap())},
		"quietpatch.queue.wait":                 {"": float64(qs.Dequeued)},
		"quietpatch.reconcile.passes":           byResult(rs.Passes),
		"quietpatch.reconcile.objects":          byResult(rs.Objects),
		"quietpatch.reconcile.halted":           {"": float64(rs.Halted)},
		"quietpatch.dispatch.patches":           patches,
		"quietpatch.dispatch.dropped":           dropped,
		"quietpatch.dispatch.in_flight":         {"": float64(ds.InFlight)},
		"quietpatch.dispatch.limit":             {"": float64(ds.Limit)},
		"quietpatch.dispatch.latency.peak_ewma": {"": ds.Latency.Seconds()},
		"quietpatch.dispatch.backoff":           {"": ds.Backoff.Seconds()},
		"quietpatch.dispatch.retry_after":       {"": float64(ds.RetryAfters)},
		"quietpatch.dispatch.echoes":            {"": float64(ds.Echoes)},
	}
	histTotal := map[string]float64{ // histograms: the count of all points
		"quietpatch.reconcile.duration": total(byResult(rs.Passes)),
		"quietpatch.dispatch.duration":  total(patches),
	}

	seen := map[string]bool{}
	points := m.points(t)
	for _, sm := range m.collect(t).ScopeMetrics {
		for _, md := range sm.Metrics {
			w, ok := doc[md.Name]
			if !ok {
				t.Errorf("instrument %s is not in the table of docs/metrics.md", md.Name)
				continue
			}
			seen[md.Name] = true
			kind := map[bool]string{true: "counter", false: "updowncounter"}
			var got string
			switch data := md.Data.(type) {
			case metricdata.Histogram[float64]:
				got = "histogram"
			case metricdata.Sum[int64]:
				got = kind[data.IsMonotonic]
			case metricdata.Gauge[int64], metricdata.Gauge[float64]:
				got = "gauge"
			}
			if got != w.kind || md.Unit != w.unit {
				t.Errorf("%s: %s in %q, want %s in %q as documented", md.Name, got, md.Unit, w.kind, w.unit)
			}
			var sum float64
			for _, p := range points[md.Name] {
				var keys []string
				for _, kv := range p.attrs.ToSlice() {
					keys = append(keys, string(kv.Key))
					values, documented := w.attrs[string(kv.Key)]
					switch {
					case !documented:
						t.Errorf("%s: attribute %s is not documented", md.Name, kv.Key)
					case kv.Key == pipelineAttr && kv.Value.Emit() != "test":
						t.Errorf("%s: pipeline = %q, want the Options' Name", md.Name, kv.Value.Emit())
					case values != nil && !slices.Contains(values, kv.Value.Emit()):
						t.Errorf("%s: %s = %q, not among the documented %v", md.Name, kv.Key, kv.Value.Emit(), values)
					}
				}
				if len(keys) != len(w.attrs) {
					t.Errorf("%s: point with attributes %v, want all of %v", md.Name, keys, w.attrs)
				}
				val := ""
				for k := range w.attrs {
					if k != pipelineAttr {
						v, _ := p.attrs.Value(attribute.Key(k))
						val = v.Emit()
					}
				}
				if exp, ok := want[md.Name]; ok {
					if e, ok := exp[val]; !ok || math.Abs(e-p.value) > 1e-9 {
						t.Errorf("%s{%s} = %v, want %v", md.Name, val, p.value, e)
					}
				}
				sum += p.value
			}
			// Counters with an enumerated attribute report every value.
			for k, values := range w.attrs {
				if values == nil || w.kind != "counter" {
					continue
				}
				for _, v := range values {
					if !slices.ContainsFunc(points[md.Name], func(p metricPoint) bool { x, _ := p.attrs.Value(attribute.Key(k)); return x.Emit() == v }) {
						t.Errorf("%s: no point with %s=%s", md.Name, k, v)
					}
				}
			}
			if h, ok := histTotal[md.Name]; ok && sum != h {
				t.Errorf("%s: %v observations, want %v", md.Name, sum, h)
			}
			if md.Name == "quietpatch.queue.depth.peak_ewma" && sum <= 0 {
				t.Errorf("%s = %v after the lane held 4 keys, want > 0", md.Name, sum)
			}
		}
	}
	for name, w := range doc {
		if !seen[name] {
			t.Errorf("instrument %s of the table is not exported", name)
		}
		prom := strings.ReplaceAll(name, ".", "_")
		if w.unit == "s" {
			prom += "_seconds"
		}
		if w.kind == "counter" {
			prom += "_total"
		}
		if w.prometheus != prom {
			t.Errorf("%s: the table says Prometheus name %s, the exporter makes %s", name, w.prometheus, prom)
		}
	}
}

// A nil or noop Meter creates no instrument; the Stats work either way.
func TestNoInstrumentsWithoutAMeter(t *testing.T) {
	for _, tc := range []struct {
		label string
		meter metric.Meter
	}{{"nil", nil}, {"noop", noop.NewMeterProvider().Meter("x")}} {
		t.Run(tc.label, func(t *testing.T) {
			opts := Options{Capacity: 10}
			metrics := NewMetrics(tc.meter, opts)
			obs := newFakeObserver("me")
			obs.Set(leader.Claim{Holder: "me", Expiry: time.Now().Add(time.Hour), Epoch: 1})
			src := &fakeSource{objs: changedObjs("a", "b")}
			q, err := newQueue(opts)
			if err != nil {
				t.Fatal(err)
			}
			if metrics != nil {
				t.Errorf("instruments created with a %s meter", tc.label)
			}
			rec, err := NewReconciler(src, &tComputer{}, q, obs, opts, metrics)
			if err != nil {
				t.Fatal(err)
			}
			d, err := NewDispatcher(q, src, &tComputer{}, &recordingPatcher{}, obs, opts, metrics)
			if err != nil {
				t.Fatal(err)
			}
			unregister, err := metrics.Register(q, rec.Stats, d.Stats)
			if err != nil {
				t.Fatal(err)
			}
			defer unregister()
			if _, err := rec.ReconcileAll(context.Background()); err != nil {
				t.Fatal(err)
			}
			q.Close()
			if err := d.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			if qs, rs, ds := q.Stats(), rec.Stats(), d.Stats(); qs.Dequeued != 2 || rs.Objects["changed"] != 2 || ds.Patches[outcome.OK] != 2 {
				t.Errorf("Stats without a meter: queue %+v, reconciler %+v, dispatcher %+v", qs, rs, ds)
			}
		})
	}
}

// failingMeter fails to create observable counters.
type failingMeter struct{ metric.Meter }

func (failingMeter) Int64ObservableCounter(string, ...metric.Int64ObservableCounterOption) (metric.Int64ObservableCounter, error) {
	return nil, errors.New("no more instruments")
}

// A meter that cannot create the instruments is a config error of Meter,
// when they are registered.
func TestMeterFailureIsAConfigError(t *testing.T) {
	metrics := NewMetrics(failingMeter{newTestMeter(t).provider.Meter("x")}, Options{})
	unregister, err := metrics.Register(nil, nil, nil)
	var ce *base.ConfigError
	if !errors.As(err, &ce) || ce.Field != "Meter" || !strings.Contains(ce.Reason, "no more instruments") {
		t.Errorf("Register: %v, want a *base.ConfigError for Meter", err)
	}
	if unregister != nil {
		t.Error("Register returned an unregister function with its error")
	}
}

// BenchmarkInstrumentsPerCall measures what the dispatcher records per
// patch call with the OpenTelemetry SDK installed: the duration histogram
// (counters are atomics read at collection).
func BenchmarkInstrumentsPerCall(b *testing.B) {
	for _, withMeter := range []bool{false, true} {
		name := "no-meter"
		var meter metric.Meter
		if withMeter {
			name = "otel-sdk"
			meter = newTestMeter(b).provider.Meter("bench")
		}
		b.Run(name, func(b *testing.B) {
			opts, _ := Options{}.Complete()
			d := Dispatcher[*tObj, []int, tPayload]{patches: base.NewCounters(base.Outcomes()...), metrics: NewMetrics(meter, opts)}
			b.ReportAllocs()
			for b.Loop() {
				d.metrics.recordCall(outcome.OK, 5*time.Millisecond)
				d.patches.Add(outcome.OK)
			}
		})
	}
}
