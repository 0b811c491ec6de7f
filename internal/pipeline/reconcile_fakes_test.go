package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
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
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quietpatch/quietpatch/internal/queue"
	"github.com/quietpatch/quietpatch/leader"
)

// Test doubles shared by the reconcile, dispatch and metrics tests.

// testStart is the fake clocks' start time.
func testStart() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

// fakeObserver is a Leader whose claim the test sets. Like the
// claimer's hub, a subscription receives the current claim at once, then
// the latest claim published (a slow subscriber loses intermediate ones),
// and its channel is closed when it is cancelled.
type fakeObserver struct {
	id string

	mu    sync.Mutex
	claim leader.Claim
	subs  map[chan leader.Claim]struct{}
}

func newFakeObserver(id string) *fakeObserver {
	return &fakeObserver{id: id, subs: map[chan leader.Claim]struct{}{}}
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
	ch := make(chan leader.Claim, 1)
	f.subs[ch] = struct{}{}
	ch <- f.claim
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			delete(f.subs, ch)
			close(ch)
		})
	}
}

// Set publishes c.
func (f *fakeObserver) Set(c leader.Claim) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claim = c
	f.notifyLocked(c)
}

// setSilently changes the claim Current returns without notifying the
// subscribers (yet): a notification delayed behind a tick.
func (f *fakeObserver) setSilently(c leader.Claim) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claim = c
}

// notifyOnly sends c to the subscribers without making it current, as a
// notification lagging behind the claim.
func (f *fakeObserver) notifyOnly(c leader.Claim) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.notifyLocked(c)
}

func (f *fakeObserver) notifyLocked(c leader.Claim) {
	for ch := range f.subs {
		select {
		case <-ch:
		default:
		}
		ch <- c
	}
}

// pendingClaims is the number of claims sent and not yet received.
func (f *fakeObserver) pendingClaims() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for ch := range f.subs {
		n += len(ch)
	}
	return n
}

func (f *fakeObserver) subscribers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

// settle publishes the current claim again, twice, waiting each time for
// the subscribers to take it: a subscriber that handles its claims one at
// a time has then finished with every claim published before.
func (f *fakeObserver) settle(t testing.TB) {
	t.Helper()
	for range 2 {
		f.Set(f.Current())
		waitFor(t, "the claim to be received", func() bool { return f.pendingClaims() == 0 })
	}
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

// GetResourceVersion is RV, as an API object tells its version.
func (o *tObj) GetResourceVersion() string { return o.RV }

// tPayload is the test patch: what the patch was built from.
type tPayload struct {
	Key string
	RV  string
	Gen int64
}

func readyCond(gen int64) metav1.Condition {
	return metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Reconciled", ObservedGeneration: gen}
}

// upToDate returns o with the status it wants.
func upToDate(o *tObj) *tObj {
	c := *o
	c.Conds = []metav1.Condition{readyCond(o.Gen)}
	return &c
}

// tComputer is the StatusComputer of tObj. Its hooks are set before the
// part that calls it runs.
type tComputer struct {
	panicOn map[string]string // object name -> method that panics for it
	// hook, when set, is called at the start of Key, Current, Desired and
	// Patch with the method's name.
	hook func(method string, o *tObj)

	keyCalls, desiredCalls, patchCalls atomic.Int64
}

func (c *tComputer) enter(o *tObj, method string) {
	if c.hook != nil {
		c.hook(method, o)
	}
	if c.panicOn[o.Key.Name] == method {
		panic("test panic in " + method)
	}
}

func (c *tComputer) Key(o *tObj) types.NamespacedName {
	c.keyCalls.Add(1)
	c.enter(o, "Key")
	return o.Key
}

func (c *tComputer) Current(o *tObj) []metav1.Condition {
	c.enter(o, "Current")
	return o.Conds
}

func (c *tComputer) Desired(o *tObj) ([]metav1.Condition, error) {
	c.desiredCalls.Add(1)
	c.enter(o, "Desired")
	if c.panicOn[o.Key.Name] == "Equal" {
		cond := readyCond(o.Gen)
		cond.Reason = "panic-equal"
		return []metav1.Condition{cond}, nil
	}
	if o.Fail {
		return nil, fmt.Errorf("cannot compute %s", o.Key.Name)
	}
	return []metav1.Condition{readyCond(o.Gen)}, nil
}

func (c *tComputer) Equal(a, b []metav1.Condition) bool {
	if len(b) == 1 && b[0].Reason == "panic-equal" {
		panic("test panic in Equal")
	}
	return typedConditionsEqual(a, b)
}

func (c *tComputer) Patch(o *tObj, desired []metav1.Condition) (tPayload, error) {
	c.patchCalls.Add(1)
	c.enter(o, "Patch")
	if c.panicOn[o.Key.Name] == "Patch error" {
		return tPayload{}, fmt.Errorf("cannot build the patch of %s", o.Key.Name)
	}
	return tPayload{Key: o.Key.String(), RV: o.RV, Gen: desired[0].ObservedGeneration}, nil
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

// fakeSource is an in-memory Source that lists its objects in insertion
// order, in a fresh slice as a lister does. Objects are replaced, never
// modified, as in an informer's cache.
type fakeSource struct {
	mu      sync.Mutex
	objs    []*tObj
	listErr error
	// onGet, when set (before use), is called first by Get; its error is
	// Get's.
	onGet func(key types.NamespacedName) error

	lists, gets atomic.Int64
}

func (s *fakeSource) List() ([]*tObj, error) {
	s.lists.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listErr != nil {
		return nil, s.listErr
	}
	return slices.Clone(s.objs), nil
}

func (s *fakeSource) Get(key types.NamespacedName) (*tObj, bool, error) {
	s.gets.Add(1)
	if s.onGet != nil {
		if err := s.onGet(key); err != nil {
			return nil, false, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.objs {
		if o.Key == key {
			return o, true, nil
		}
	}
	return nil, false, nil
}

// has reports whether the source has an object with key, without
// counting a Get.
func (s *fakeSource) has(key types.NamespacedName) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.objs, func(o *tObj) bool { return o.Key == key })
}

// set replaces the object with o's key, or adds o.
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

// setAll replaces every object by f of it.
func (s *fakeSource) setAll(f func(*tObj) *tObj) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, o := range s.objs {
		s.objs[i] = f(o)
	}
}

func (s *fakeSource) remove(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objs = slices.DeleteFunc(s.objs, func(o *tObj) bool { return o.Key == key })
}

// nsKey is the key of object name in namespace "ns".
func nsKey(name string) types.NamespacedName {
	return types.NamespacedName{Namespace: "ns", Name: name}
}

// changedObjs returns objects in namespace "ns", named by names, whose
// status needs a patch (no conditions, generation 1).
func changedObjs(names ...string) []*tObj {
	objs := make([]*tObj, len(names))
	for i, n := range names {
		objs[i] = &tObj{Key: nsKey(n), RV: "1", Gen: 1}
	}
	return objs
}

// names returns o00, o01, ... o<n-1>.
func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("o%02d", i)
	}
	return out
}

// nsNames returns "ns/<name>" of each name.
func nsNames(ns ...string) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = "ns/" + n
	}
	return out
}

// drainKeys takes every key waiting in q, as a consumer would (Get, Done),
// and returns them in the order served.
func drainKeys(t testing.TB, q *queue.Queue[types.NamespacedName]) []string {
	t.Helper()
	done, cancel := context.WithCancel(context.Background())
	cancel() // Get still returns a ready key
	var out []string
	for {
		k, err := q.Get(done)
		if err != nil {
			return out
		}
		out = append(out, k.String())
		q.Done(k)
	}
}

// takeKeys takes n keys from q, as a consumer would.
func takeKeys(t testing.TB, q *queue.Queue[types.NamespacedName], n int) []string {
	t.Helper()
	var out []string
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		k, err := q.Get(ctx)
		cancel()
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		out = append(out, k.String())
		q.Done(k)
	}
	return out
}

// tickClock is a fake clock whose tickers tick only when the test calls
// tick, which returns once the ticker's reader has received the tick: the
// test knows the tick was taken, and that no tick comes by itself.
type tickClock struct {
	*clocktesting.FakeClock
	ticks   chan time.Time
	tickers atomic.Int32
}

func newTickClock() *tickClock {
	return &tickClock{FakeClock: clocktesting.NewFakeClock(testStart()), ticks: make(chan time.Time)}
}

func (c *tickClock) NewTicker(time.Duration) clock.Ticker {
	c.tickers.Add(1)
	return manualTicker{c.ticks}
}

// tick delivers one tick at the clock's time.
func (c *tickClock) tick(t testing.TB) {
	t.Helper()
	select {
	case c.ticks <- c.Now():
	case <-time.After(10 * time.Second):
		t.Fatal("nobody took the tick")
	}
}

type manualTicker struct{ c chan time.Time }

func (m manualTicker) C() <-chan time.Time { return m.c }
func (manualTicker) Stop()                 {}

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

// withMessage returns the records at or above level whose message is msg.
func (h *captureHandler) withMessage(level slog.Level, msg string) []logRecord {
	var out []logRecord
	for _, r := range h.records(level) {
		if r.Message == msg {
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

// metricPoint is one data point: its attributes and its value (a histogram's
// count).
type metricPoint struct {
	attrs attribute.Set
	value float64
}

// points returns the data points of every instrument, by name.
func (m *testMeter) points(t testing.TB) map[string][]metricPoint {
	t.Helper()
	out := map[string][]metricPoint{}
	for _, sm := range m.collect(t).ScopeMetrics {
		for _, md := range sm.Metrics {
			switch d := md.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[md.Name] = append(out[md.Name], metricPoint{p.Attributes, float64(p.Value)})
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[md.Name] = append(out[md.Name], metricPoint{p.Attributes, float64(p.Value)})
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					out[md.Name] = append(out[md.Name], metricPoint{p.Attributes, p.Value})
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[md.Name] = append(out[md.Name], metricPoint{p.Attributes, float64(p.Count)})
				}
			}
		}
	}
	return out
}

// value returns the sum of the data points of instrument name whose
// attribute key has value val ("" key: all points). Counters and gauges
// give their value, histograms their count.
func (m *testMeter) value(t testing.TB, name, key, val string) int64 {
	t.Helper()
	var total float64
	for _, p := range m.points(t)[name] {
		if key != "" {
			v, ok := p.attrs.Value(attribute.Key(key))
			if !ok || v.Emit() != val {
				continue
			}
		}
		total += p.value
	}
	return int64(total)
}

// waitFor polls cond until it holds, or fails the test after 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
		time.Sleep(100 * time.Microsecond)
	}
}

// eventually polls cond until it holds (true) or 10 s have passed (false),
// for goroutines other than the test's.
func eventually(cond func() bool) bool {
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		runtime.Gosched()
		time.Sleep(100 * time.Microsecond)
	}
	return true
}

// recordingPatcher records the patches it applies; fn, when set, is
// called first and its error returned.
type recordingPatcher struct {
	fn func(ctx context.Context, p tPayload) error

	mu      sync.Mutex
	applied []tPayload
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

func (r *recordingPatcher) appliedPatches() []tPayload {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.applied)
}

func (r *recordingPatcher) appliedKeys() []string {
	var out []string
	for _, p := range r.appliedPatches() {
		out = append(out, p.Key)
	}
	return out
}

// newQueue is the pipeline's queue for opts, as quietpatch.New builds it:
// opts' Capacity (completed) and, with a meter in the test, its Clock.
func newQueue(opts Options) (*queue.Queue[types.NamespacedName], error) {
	opts, err := opts.Complete()
	if err != nil {
		return nil, err
	}
	return queue.New[types.NamespacedName](opts.Capacity, opts.Clock), nil
}
