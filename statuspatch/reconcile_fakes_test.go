package statuspatch

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/quietpatch/quietpatch/leader"
)

// Test doubles shared by the reconcile and dispatch tests.

// fakeObserver is a leader.Observer whose claim the test sets.
type fakeObserver struct {
	id string

	mu    sync.Mutex
	claim leader.Claim
	subs  map[int]chan leader.Claim
	next  int
}

func newFakeObserver(id string) *fakeObserver {
	return &fakeObserver{id: id, subs: make(map[int]chan leader.Claim)}
}

func (f *fakeObserver) Identity() string { return f.id }

func (f *fakeObserver) Current() leader.Claim {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.claim
}

func (f *fakeObserver) Subscribe() (<-chan leader.Claim, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := f.next
	f.next++
	ch := make(chan leader.Claim, 1)
	f.subs[id] = ch
	return ch, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.subs, id)
	}
}

// Set publishes c; a subscriber that has not read the previous claim gets
// the latest only.
func (f *fakeObserver) Set(c leader.Claim) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claim = c
	for _, ch := range f.subs {
		select {
		case <-ch:
		default:
		}
		ch <- c
	}
}

// setSilently changes the claim Current returns without notifying the
// subscribers (yet): a notification delayed behind a tick.
func (f *fakeObserver) setSilently(c leader.Claim) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claim = c
}

// pendingClaims is the number of claims sent and not yet received.
func (f *fakeObserver) pendingClaims() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, ch := range f.subs {
		n += len(ch)
	}
	return n
}

func (f *fakeObserver) subscribers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

// tObj is a test object: its desired status is one Ready condition with the
// object's generation; Fail makes Desired fail.
type tObj struct {
	Key   types.NamespacedName
	RV    string
	Gen   int64
	Conds []metav1.Condition
	Fail  bool
}

// tPayload is the test patch payload.
type tPayload struct {
	Key string
	Gen int64
}

func readyCond(gen int64) metav1.Condition {
	return metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Reconciled", ObservedGeneration: gen}
}

// tComputer is the StatusComputer of tObj.
type tComputer struct {
	desiredCalls atomic.Int64
	onDesired    func(o *tObj)     // optional hook
	panicOn      map[string]string // object name -> method that panics for it
}

func (c *tComputer) maybePanic(o *tObj, method string) {
	if c.panicOn[o.Key.Name] == method {
		panic("test panic in " + method)
	}
}

func (c *tComputer) Key(o *tObj) types.NamespacedName {
	c.maybePanic(o, "Key")
	return o.Key
}
func (c *tComputer) Current(o *tObj) []metav1.Condition {
	c.maybePanic(o, "Current")
	return o.Conds
}
func (c *tComputer) Equal(a, b []metav1.Condition) bool {
	if len(b) == 1 && b[0].Reason == "panic-equal" {
		panic("test panic in Equal")
	}
	return typedConditionsEqual(a, b)
}

// typedConditionsEqual compares condition lists in order, ignoring
// LastTransitionTime (package conditions, which has the real one, imports
// this package).
func typedConditionsEqual(a, b []metav1.Condition) bool {
	return slices.EqualFunc(a, b, func(x, y metav1.Condition) bool {
		return x.Type == y.Type && x.Status == y.Status && x.Reason == y.Reason &&
			x.Message == y.Message && x.ObservedGeneration == y.ObservedGeneration
	})
}

func (c *tComputer) Desired(o *tObj) ([]metav1.Condition, error) {
	c.desiredCalls.Add(1)
	c.maybePanic(o, "Desired")
	if c.panicOn[o.Key.Name] == "Equal" {
		cond := readyCond(o.Gen)
		cond.Reason = "panic-equal"
		return []metav1.Condition{cond}, nil
	}
	if c.onDesired != nil {
		c.onDesired(o)
	}
	if o.Fail {
		return nil, fmt.Errorf("cannot compute %s", o.Key.Name)
	}
	return []metav1.Condition{readyCond(o.Gen)}, nil
}
func (c *tComputer) Patch(o *tObj, desired []metav1.Condition) (tPayload, error) {
	c.maybePanic(o, "Patch")
	return tPayload{Key: keyString(o.Key), Gen: desired[0].ObservedGeneration}, nil
}

// fakeSource is an in-memory Source that returns its objects in insertion
// order, as a fresh slice like a lister does.
type fakeSource struct {
	mu    sync.Mutex
	objs  []*tObj
	lists atomic.Int64
	gets  atomic.Int64
	err   error
}

func (s *fakeSource) List() ([]*tObj, error) {
	s.lists.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	return slices.Clone(s.objs), nil
}

func (s *fakeSource) Get(key types.NamespacedName) (*tObj, bool, error) {
	s.gets.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.objs {
		if o.Key == key {
			return o, true, nil
		}
	}
	return nil, false, nil
}

// set replaces the object with the same key (objects are immutable once
// listed, like an informer's cache).
func (s *fakeSource) set(o *tObj) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.objs {
		if s.objs[i].Key == o.Key {
			s.objs[i] = o
			return
		}
	}
	s.objs = append(s.objs, o)
}

// changedObjs returns n objects in namespace "ns" whose status needs a
// patch, named by names (or o00, o01, ... when names is nil).
func changedObjs(names ...string) []*tObj {
	objs := make([]*tObj, len(names))
	for i, n := range names {
		objs[i] = &tObj{Key: types.NamespacedName{Namespace: "ns", Name: n}, RV: "1", Gen: 1}
	}
	return objs
}

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("o%02d", i)
	}
	return out
}

// logRecord is one captured log record.
type logRecord struct {
	Level   slog.Level
	Message string
	Attrs   map[string]string
}

// captureHandler is a slog.Handler that keeps every record at or above its
// level.
type captureHandler struct {
	level slog.Level
	mu    *sync.Mutex
	recs  *[]logRecord
	attrs []slog.Attr
}

func newCapture(level slog.Level) *captureHandler {
	return &captureHandler{level: level, mu: new(sync.Mutex), recs: new([]logRecord)}
}

func (h *captureHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{Level: r.Level, Message: r.Message, Attrs: map[string]string{}}
	for _, a := range h.attrs {
		rec.Attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.Attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	*h.recs = append(*h.recs, rec)
	h.mu.Unlock()
	return nil
}

func (h *captureHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(slices.Clone(h.attrs), as...)
	return &c
}

func (h *captureHandler) WithGroup(string) slog.Handler { return h }

// records returns the records at or above level.
func (h *captureHandler) records(level slog.Level) []logRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []logRecord
	for _, r := range *h.recs {
		if r.Level >= level {
			out = append(out, r)
		}
	}
	return out
}

// testMeter is an OTel SDK meter with a manual reader.
type testMeter struct {
	reader   *sdkmetric.ManualReader
	provider *sdkmetric.MeterProvider
}

func newTestMeter(t testing.TB) *testMeter {
	r := sdkmetric.NewManualReader()
	p := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return &testMeter{reader: r, provider: p}
}

func (m *testMeter) collect(t testing.TB) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect metrics: %v", err)
	}
	return rm
}

// value returns the sum of the data points of instrument name whose
// attribute key has value val ("" key: all points). Counters and up-down
// counters give their sum, histograms their count.
func (m *testMeter) value(t testing.TB, name, key, val string) int64 {
	t.Helper()
	rm := m.collect(t)
	var total int64
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			if md.Name != name {
				continue
			}
			match := func(set attribute.Set) bool {
				if key == "" {
					return true
				}
				v, ok := set.Value(attribute.Key(key))
				return ok && v.Emit() == val
			}
			switch d := md.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if match(p.Attributes) {
						total += p.Value
					}
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					if match(p.Attributes) {
						total += p.Value
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if match(p.Attributes) {
						total += int64(p.Count)
					}
				}
			}
		}
	}
	return total
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// recordingPatcher records the payloads it applies; fn, when set, decides
// the error.
type recordingPatcher struct {
	mu      sync.Mutex
	applied []tPayload
	fn      func(ctx context.Context, p tPayload) error
	calls   atomic.Int64
}

func (r *recordingPatcher) Patch(ctx context.Context, p tPayload) error {
	r.calls.Add(1)
	if r.fn != nil {
		if err := r.fn(ctx, p); err != nil {
			return err
		}
	}
	r.mu.Lock()
	r.applied = append(r.applied, p)
	r.mu.Unlock()
	return nil
}

func (r *recordingPatcher) appliedKeys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, p := range r.applied {
		out = append(out, p.Key)
	}
	return out
}

// attrKeys returns the sorted keys of attributes.
func attrKeys(kvs []attribute.KeyValue) []string {
	out := make([]string, len(kvs))
	for i, kv := range kvs {
		out[i] = string(kv.Key)
	}
	slices.Sort(out)
	return out
}
