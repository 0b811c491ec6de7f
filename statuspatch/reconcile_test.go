package statuspatch

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quietpatch/quietpatch/leader"
)

type tReconciler = Reconciler[*tObj, []metav1.Condition, tPayload]
type tReconcilerConfig = ReconcilerConfig[*tObj, []metav1.Condition, tPayload]

// rig wires a reconciler to fakes.
type rig struct {
	obs   *fakeObserver
	src   *fakeSource
	comp  *tComputer
	queue *PatchQueue[Patch[tPayload]]
	rec   *tReconciler
	logs  *captureHandler
	meter *testMeter
	clock *clocktesting.FakeClock
}

// testStart is the fake clocks' start time.
func testStart() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

func newRig(t *testing.T, capacity int, objs []*tObj, mutate ...func(*tReconcilerConfig)) *rig {
	t.Helper()
	r := &rig{
		obs:   newFakeObserver("me"),
		src:   &fakeSource{objs: objs},
		comp:  &tComputer{},
		logs:  newCapture(slog.LevelDebug),
		meter: newTestMeter(t),
		clock: clocktesting.NewFakeClock(testStart()),
	}
	q, err := NewPatchQueue(QueueConfig[Patch[tPayload]]{Capacity: capacity, Key: PatchKey[tPayload], Clock: r.clock})
	if err != nil {
		t.Fatal(err)
	}
	r.queue = q
	cfg := tReconcilerConfig{
		Source:   r.src,
		Computer: r.comp,
		Queue:    q,
		Leader:   r.obs,
		Interval: 10 * time.Second,
		Clock:    r.clock,
		Logger:   slog.New(r.logs),
		Meter:    r.meter.provider.Meter("test"),
		Name:     "test",
	}
	for _, m := range mutate {
		m(&cfg)
	}
	r.rec, err = NewReconciler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// lead makes "me" the leader under epoch.
func (r *rig) lead(epoch int64) {
	r.obs.Set(leader.Claim{Holder: "me", Expiry: r.clock.Now().Add(time.Hour), Epoch: epoch})
}

// drain removes every queued patch and returns them in queue order.
func (r *rig) drain(t *testing.T) []Patch[tPayload] {
	t.Helper()
	var out []Patch[tPayload]
	for r.queue.Len() > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		it, err := r.queue.Receive(ctx)
		cancel()
		if err != nil {
			t.Fatalf("drain: %v", err)
		}
		out = append(out, it.Value)
		r.queue.Done(it)
	}
	return out
}

func keysOf(ps []Patch[tPayload]) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Key
	}
	return out
}

func TestReconcileAllQueuesOnlyChanged(t *testing.T) {
	objs := changedObjs("a", "b", "c", "d", "e")
	// b: same condition, another transition time; d: same conditions in
	// another order.
	objs[1].Conds = []metav1.Condition{readyCond(1)}
	objs[1].Conds[0].LastTransitionTime = metav1.NewTime(testStart())
	objs[3].Gen = 0 // desired Ready with generation 0
	objs[3].Conds = []metav1.Condition{readyCond(0)}
	r := newRig(t, 10, objs)
	r.lead(7)

	res, err := r.rec.ReconcileAll(context.Background())
	if err != nil {
		t.Fatalf("ReconcileAll: %v", err)
	}
	want := PassResult{Objects: 5, Visited: 5, Unchanged: 2, Changed: 3}
	if res != want {
		t.Errorf("result = %+v, want %+v", res, want)
	}
	got := r.drain(t)
	if k := keysOf(got); !slices.Equal(k, []string{"ns/a", "ns/c", "ns/e"}) {
		t.Errorf("queued keys = %v, want [ns/a ns/c ns/e]", k)
	}
	for _, p := range got {
		if p.Epoch != 7 || p.Payload.Gen != 1 || p.Payload.Key != p.Key {
			t.Errorf("patch %+v: want epoch 7, gen 1, payload key = key", p)
		}
	}
	for _, c := range []struct {
		result string
		want   int64
	}{{objUnchanged, 2}, {objChanged, 3}, {objError, 0}} {
		if v := r.meter.value(t, ReconcileObjectsMetric, ResultAttrKey, c.result); v != c.want {
			t.Errorf("%s{result=%s} = %d, want %d", ReconcileObjectsMetric, c.result, v, c.want)
		}
	}
	if v := r.meter.value(t, ReconcileDurationMetric, ResultAttrKey, passCompleted); v != 1 {
		t.Errorf("%s{result=completed} count = %d, want 1", ReconcileDurationMetric, v)
	}
	if w := r.logs.records(slog.LevelInfo); len(w) != 0 {
		t.Errorf("logs at info and above = %+v, want none", w)
	}
	diffs := 0
	for _, rec := range r.logs.records(slog.LevelDebug) {
		if rec.Message == "statuspatch: status changed, patch queued" && strings.Contains(rec.Attrs["diff"], "ObservedGeneration") {
			diffs++
		}
	}
	if diffs != 3 {
		t.Errorf("debug lines with a diff = %d, want one per changed object (3)", diffs)
	}
}

func TestReconcileHaltsOnFullQueueWithOneLogLine(t *testing.T) {
	r := newRig(t, 3, changedObjs(names(10)...))
	r.lead(1)

	res, err := r.rec.ReconcileAll(context.Background())
	if !errors.Is(err, ErrFull) {
		t.Fatalf("ReconcileAll error = %v, want ErrFull", err)
	}
	want := PassResult{Objects: 10, Visited: 3, Changed: 3, Halted: true}
	if res != want {
		t.Errorf("result = %+v, want %+v", res, want)
	}
	warns := r.logs.records(slog.LevelWarn)
	if len(warns) != 1 {
		t.Fatalf("got %d log lines at warn and above, want exactly 1: %+v", len(warns), warns)
	}
	w := warns[0]
	if !strings.Contains(w.Message, "halted") || !strings.Contains(w.Message, "capacity") {
		t.Errorf("message %q does not say the pass halted at capacity", w.Message)
	}
	for k, v := range map[string]string{"capacity": "3", "position": "3", "objects": "10", "resume_after": "ns/o02"} {
		if w.Attrs[k] != v {
			t.Errorf("attr %s = %q, want %q", k, w.Attrs[k], v)
		}
	}
	if !strings.Contains(w.Attrs["hint"], "SuggestCapacity") {
		t.Errorf("hint %q does not point at SuggestCapacity", w.Attrs["hint"])
	}
	if v := r.meter.value(t, ReconcileHaltedMetric, "", ""); v != 1 {
		t.Errorf("%s = %d, want 1", ReconcileHaltedMetric, v)
	}
	if v := r.meter.value(t, ReconcileDurationMetric, ResultAttrKey, passHalted); v != 1 {
		t.Errorf("%s{result=halted} count = %d, want 1", ReconcileDurationMetric, v)
	}
}

func TestReconcileResumesAfterCursor(t *testing.T) {
	// The source lists in a scrambled, stable order; patches are never
	// applied, so every object stays changed until the test says otherwise.
	r := newRig(t, 3, changedObjs("o04", "o01", "o06", "o00", "o03", "o05", "o02"))
	r.lead(1)
	allUnchanged := func() {
		for _, o := range r.src.objs {
			o.Conds = []metav1.Condition{readyCond(o.Gen)}
		}
	}
	steps := []struct {
		name        string
		before      func()
		wantKeys    []string
		wantHalted  bool
		wantResumed bool
	}{
		{name: "first pass in list order", wantKeys: []string{"ns/o04", "ns/o01", "ns/o06"}, wantHalted: true},
		{name: "resumes after o06 in key order, wrapping", wantKeys: []string{"ns/o00", "ns/o01", "ns/o02"}, wantHalted: true, wantResumed: true},
		{name: "resumes after o02", wantKeys: []string{"ns/o03", "ns/o04", "ns/o05"}, wantHalted: true, wantResumed: true},
		{name: "resumes after o05, wrapping", wantKeys: []string{"ns/o06", "ns/o00", "ns/o01"}, wantHalted: true, wantResumed: true},
		{name: "completes and clears the cursor", before: allUnchanged, wantKeys: nil, wantResumed: true},
		{name: "starts from the top again", wantKeys: nil},
	}
	for _, s := range steps {
		if s.before != nil {
			s.before()
		}
		res, err := r.rec.ReconcileAll(context.Background())
		if s.wantHalted != errors.Is(err, ErrFull) || (!s.wantHalted && err != nil) {
			t.Errorf("%s: err = %v, want halted=%v", s.name, err, s.wantHalted)
		}
		if res.Halted != s.wantHalted || res.Resumed != s.wantResumed {
			t.Errorf("%s: halted=%v resumed=%v, want %v %v", s.name, res.Halted, res.Resumed, s.wantHalted, s.wantResumed)
		}
		if got := keysOf(r.drain(t)); !slices.Equal(got, s.wantKeys) {
			t.Errorf("%s: queued %v, want %v", s.name, got, s.wantKeys)
		}
	}
	if n := len(r.logs.records(slog.LevelWarn)); n != 4 {
		t.Errorf("warnings = %d, want one per halted pass (4)", n)
	}
}

func TestReconcileObjectErrorsDoNotStopPass(t *testing.T) {
	objs := changedObjs("a", "b", "c", "d")
	objs[0].Fail, objs[2].Fail = true, true
	r := newRig(t, 10, objs)
	r.lead(1)

	res, err := r.rec.ReconcileAll(context.Background())
	if err != nil {
		t.Fatalf("ReconcileAll: %v", err)
	}
	if res.Errors != 2 || res.Changed != 2 || res.Visited != 4 {
		t.Errorf("result = %+v, want 2 errors, 2 changed, 4 visited", res)
	}
	if got := keysOf(r.drain(t)); !slices.Equal(got, []string{"ns/b", "ns/d"}) {
		t.Errorf("queued %v, want [ns/b ns/d]", got)
	}
	warns := r.logs.records(slog.LevelWarn)
	if len(warns) != 1 || warns[0].Attrs["errors"] != "2" || warns[0].Attrs["first_key"] != "ns/a" {
		t.Errorf("warnings = %+v, want one summary with errors=2 first_key=ns/a", warns)
	}
	debugErrs := 0
	for _, rec := range r.logs.records(slog.LevelDebug) {
		if rec.Level == slog.LevelDebug && rec.Message == "statuspatch: object not reconciled" {
			debugErrs++
		}
	}
	if debugErrs != 2 {
		t.Errorf("debug error lines = %d, want 2", debugErrs)
	}
	if v := r.meter.value(t, ReconcileObjectsMetric, ResultAttrKey, objError); v != 2 {
		t.Errorf("%s{result=error} = %d, want 2", ReconcileObjectsMetric, v)
	}
}

func TestReconcileNotLeader(t *testing.T) {
	cases := []struct {
		name  string
		claim func(now time.Time) leader.Claim
	}{
		{"nobody holds the lease", func(time.Time) leader.Claim { return leader.Claim{} }},
		{"another holder", func(now time.Time) leader.Claim {
			return leader.Claim{Holder: "other", Expiry: now.Add(time.Hour), Epoch: 3}
		}},
		{"our claim expired", func(now time.Time) leader.Claim {
			return leader.Claim{Holder: "me", Expiry: now, Epoch: 3}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, 10, changedObjs("a"))
			r.obs.Set(c.claim(r.clock.Now()))
			if _, err := r.rec.ReconcileAll(context.Background()); !errors.Is(err, ErrNotLeader) {
				t.Errorf("ReconcileAll error = %v, want ErrNotLeader", err)
			}
			if _, err := r.rec.ReconcileKey(context.Background(), types.NamespacedName{Namespace: "ns", Name: "a"}); !errors.Is(err, ErrNotLeader) {
				t.Errorf("ReconcileKey error = %v, want ErrNotLeader", err)
			}
			if n := r.src.lists.Load() + r.src.gets.Load(); n != 0 {
				t.Errorf("source called %d times while not leader", n)
			}
			if r.queue.Len() != 0 {
				t.Errorf("queue holds %d patches", r.queue.Len())
			}
		})
	}
}

func TestReconcileLeadershipLostMidPass(t *testing.T) {
	r := newRig(t, 1000, changedObjs(names(600)...))
	r.lead(1)
	visited := 0
	r.comp.onDesired = func(*tObj) {
		visited++
		if visited == 100 {
			r.obs.Set(leader.Claim{Holder: "other", Expiry: r.clock.Now().Add(time.Hour), Epoch: 2})
		}
	}
	res, err := r.rec.ReconcileAll(context.Background())
	if !errors.Is(err, ErrNotLeader) {
		t.Fatalf("err = %v, want ErrNotLeader", err)
	}
	if res.Visited != leaderCheckEvery-1 {
		t.Errorf("visited %d objects, want the pass to stop at the check after %d", res.Visited, leaderCheckEvery-1)
	}
	r.drain(t)

	// Regained under a new epoch: the pass resumes after the last object
	// handled and tags patches with the new epoch.
	r.comp.onDesired = nil
	r.lead(3)
	res, err = r.rec.ReconcileAll(context.Background())
	if err != nil || !res.Resumed || res.Changed != 600 {
		t.Fatalf("pass after regaining: %+v, %v; want resumed, 600 changed", res, err)
	}
	got := r.drain(t)
	if got[0].Key != "ns/o255" {
		t.Errorf("resumed pass started at %s, want ns/o255", got[0].Key)
	}
	for _, p := range got {
		if p.Epoch != 3 {
			t.Fatalf("patch %s has epoch %d, want 3", p.Key, p.Epoch)
		}
	}
}

func TestReconcileKey(t *testing.T) {
	objs := changedObjs("changed", "same", "fails")
	objs[1].Conds = []metav1.Condition{readyCond(1)}
	objs[2].Fail = true
	cases := []struct {
		name     string
		key      string
		capacity int
		want     bool
		wantErr  error // nil, or a sentinel the error wraps
		anyErr   bool
	}{
		{name: "changed", key: "changed", capacity: 1, want: true},
		{name: "unchanged", key: "same", capacity: 1},
		{name: "missing", key: "gone", capacity: 1},
		{name: "desired fails", key: "fails", capacity: 1, anyErr: true},
		{name: "queue full", key: "changed", capacity: 0, wantErr: ErrFull},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, 1, objs)
			r.lead(1)
			if c.capacity == 0 {
				if err := r.queue.TrySend(Patch[tPayload]{Key: "ns/filler"}); err != nil {
					t.Fatal(err)
				}
			}
			got, err := r.rec.ReconcileKey(context.Background(), types.NamespacedName{Namespace: "ns", Name: c.key})
			switch {
			case c.wantErr != nil && !errors.Is(err, c.wantErr):
				t.Errorf("err = %v, want %v", err, c.wantErr)
			case c.anyErr && err == nil:
				t.Errorf("err = nil, want an error")
			case c.wantErr == nil && !c.anyErr && err != nil:
				t.Errorf("err = %v, want nil", err)
			}
			if got != c.want {
				t.Errorf("queued = %v, want %v", got, c.want)
			}
			if r.src.lists.Load() != 0 {
				t.Errorf("ReconcileKey listed the source")
			}
		})
	}
}

func TestEnqueueCoalescesAndOverflowsToFullPass(t *testing.T) {
	r := newRig(t, 10, nil, func(c *tReconcilerConfig) { c.MaxPendingKeys = 2 })
	k := func(n string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: n} }
	steps := []struct {
		name     string
		enqueue  []string
		wantKeys []string
		wantFull bool
	}{
		{name: "coalesces", enqueue: []string{"a", "b", "a", "b"}, wantKeys: []string{"a", "b"}},
		{name: "overflow turns into a full pass", enqueue: []string{"a", "b", "c", "d"}, wantFull: true},
		{name: "back to keys after the full pass was taken", enqueue: []string{"e"}, wantKeys: []string{"e"}},
	}
	for _, s := range steps {
		for _, n := range s.enqueue {
			r.rec.Enqueue(k(n))
		}
		keys, full := r.rec.takePending()
		var got []string
		for key := range keys {
			got = append(got, key.Name)
		}
		slices.Sort(got)
		if full != s.wantFull || !slices.Equal(got, s.wantKeys) {
			t.Errorf("%s: keys %v full %v, want %v %v", s.name, got, full, s.wantKeys, s.wantFull)
		}
	}
}

// startRun runs r.rec.Run until the test ends and waits until it subscribed
// and armed its ticker.
func (r *rig) startRun(t *testing.T) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.rec.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	waitFor(t, "Run to subscribe", func() bool { return r.obs.subscribers() == 1 && r.clock.HasWaiters() })
	return done
}

func TestRunPassOnGainingLeadership(t *testing.T) {
	r := newRig(t, 100, changedObjs(names(5)...))
	r.startRun(t)
	if n := r.src.lists.Load(); n != 0 {
		t.Fatalf("listed %d times before leading", n)
	}

	r.lead(1) // no clock step: the pass is immediate
	waitFor(t, "the pass on gaining leadership", func() bool { return r.queue.Len() == 5 })
	for _, p := range r.drain(t) {
		if p.Epoch != 1 {
			t.Errorf("patch %s epoch %d, want 1", p.Key, p.Epoch)
		}
	}

	// A renewal (same epoch) is not a gain: no pass. Enqueue is handled by
	// the same loop, after the renewal, so once its Get happened the
	// renewal was handled too.
	r.obs.Set(leader.Claim{Holder: "me", Expiry: r.clock.Now().Add(2 * time.Hour), Epoch: 1})
	waitFor(t, "the renewal to be consumed", func() bool { return r.obs.pendingClaims() == 0 })
	r.rec.Enqueue(types.NamespacedName{Namespace: "ns", Name: "o00"})
	waitFor(t, "the enqueued key", func() bool { return r.src.gets.Load() == 1 })
	if n := r.src.lists.Load(); n != 1 {
		t.Errorf("listed %d times after a renewal, want 1", n)
	}
	r.drain(t)

	// Lost, then gained under a new epoch: another immediate pass.
	r.obs.Set(leader.Claim{Holder: "other", Expiry: r.clock.Now().Add(time.Hour), Epoch: 2})
	waitFor(t, "the loss to be consumed", func() bool { return r.obs.pendingClaims() == 0 })
	r.lead(3)
	waitFor(t, "the pass on regaining leadership", func() bool { return r.queue.Len() == 5 })
	for _, p := range r.drain(t) {
		if p.Epoch != 3 {
			t.Errorf("patch %s epoch %d, want 3", p.Key, p.Epoch)
		}
	}
}

func TestRunPeriodicPasses(t *testing.T) {
	r := newRig(t, 100, changedObjs(names(3)...))
	r.lead(1)
	r.startRun(t)
	waitFor(t, "the first pass", func() bool { return r.src.lists.Load() == 1 })
	for i := int64(2); i <= 4; i++ {
		r.clock.Step(10 * time.Second)
		waitFor(t, "a pass per interval", func() bool { return r.src.lists.Load() == i })
	}
	// The queue coalesced the passes' patches per key.
	if n := r.queue.Len(); n != 3 {
		t.Errorf("queue holds %d patches, want 3 (one per key)", n)
	}
}

func TestRunReconcilesEnqueuedKeys(t *testing.T) {
	objs := changedObjs(names(4)...)
	for _, o := range objs {
		o.Conds = []metav1.Condition{readyCond(1)}
	}
	r := newRig(t, 100, objs)
	r.lead(1)
	r.startRun(t)
	waitFor(t, "the first pass", func() bool { return r.src.lists.Load() == 1 })
	if r.queue.Len() != 0 {
		t.Fatalf("unchanged objects queued %d patches", r.queue.Len())
	}

	r.src.set(&tObj{Key: types.NamespacedName{Namespace: "ns", Name: "o02"}, RV: "2", Gen: 2, Conds: []metav1.Condition{readyCond(1)}})
	r.rec.Enqueue(types.NamespacedName{Namespace: "ns", Name: "o02"})
	waitFor(t, "the enqueued key's patch", func() bool { return r.queue.Len() == 1 })
	got := r.drain(t)
	if got[0].Key != "ns/o02" || got[0].Payload.Gen != 2 {
		t.Errorf("patch = %+v, want ns/o02 generation 2", got[0])
	}
	if n := r.src.lists.Load(); n != 1 {
		t.Errorf("an on-demand reconcile listed the source (%d lists)", n)
	}
}

func TestRunReturnsWhenQueueClosed(t *testing.T) {
	r := newRig(t, 100, changedObjs("a"))
	r.lead(1)
	r.queue.Close()
	err := r.rec.Run(context.Background())
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("Run = %v, want ErrClosed", err)
	}
	if h := r.rec.Healthy(); !errors.Is(h, ErrNotRunning) {
		t.Errorf("Healthy after Run returned = %v, want ErrNotRunning", h)
	}
	if err := r.rec.Run(context.Background()); !errors.Is(err, ErrAlreadyRunning) {
		t.Errorf("second Run = %v, want ErrAlreadyRunning", err)
	}
}

func TestReconcilerHealthy(t *testing.T) {
	r := newRig(t, 10, nil)
	if err := r.rec.Healthy(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Healthy before Run = %v, want ErrNotRunning", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.rec.Run(ctx) }()
	waitFor(t, "Run to start", func() bool { return r.rec.Healthy() == nil })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil after cancel", err)
	}
	if err := r.rec.Healthy(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Healthy after Run = %v, want ErrNotRunning", err)
	}
}

func TestNewReconcilerValidation(t *testing.T) {
	q, err := NewPatchQueue(QueueConfig[Patch[tPayload]]{Capacity: 1, Key: PatchKey[tPayload]})
	if err != nil {
		t.Fatal(err)
	}
	valid := func() tReconcilerConfig {
		return tReconcilerConfig{Source: &fakeSource{}, Computer: &tComputer{}, Queue: q, Leader: newFakeObserver("me")}
	}
	cases := []struct {
		name    string
		mutate  func(*tReconcilerConfig)
		wantErr string // "" means valid
	}{
		{"valid with defaults", func(*tReconcilerConfig) {}, ""},
		{"no source", func(c *tReconcilerConfig) { c.Source = nil }, "ReconcilerConfig.Source"},
		{"no computer", func(c *tReconcilerConfig) { c.Computer = nil }, "ReconcilerConfig.Computer"},
		{"no queue", func(c *tReconcilerConfig) { c.Queue = nil }, "ReconcilerConfig.Queue"},
		{"no leader", func(c *tReconcilerConfig) { c.Leader = nil }, "ReconcilerConfig.Leader"},
		{"empty identity", func(c *tReconcilerConfig) { c.Leader = newFakeObserver("") }, "ReconcilerConfig.Leader.Identity"},
		{"negative interval", func(c *tReconcilerConfig) { c.Interval = -time.Second }, "ReconcilerConfig.Interval"},
		{"negative pending", func(c *tReconcilerConfig) { c.MaxPendingKeys = -1 }, "ReconcilerConfig.MaxPendingKeys"},
		{"incomplete ComputerFuncs", func(c *tReconcilerConfig) {
			c.Computer = ComputerFuncs[*tObj, []metav1.Condition, tPayload]{KeyFunc: (&tComputer{}).Key}
		}, "ComputerFuncs.CurrentFunc"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := valid()
			c.mutate(&cfg)
			r, err := NewReconciler(cfg)
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("err = %v, want nil", err)
			case c.wantErr == "" && r.interval != 10*time.Second:
				t.Errorf("default interval = %s, want 10s", r.interval)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Errorf("err = %v, want one naming %s", err, c.wantErr)
			}
		})
	}
}

func TestReconcileFullQueueAtStartHaltsBeforeComputing(t *testing.T) {
	r := newRig(t, 1, changedObjs(names(5)...))
	r.lead(1)
	if err := r.queue.TrySend(Patch[tPayload]{Key: "ns/filler"}); err != nil {
		t.Fatal(err)
	}
	res, err := r.rec.ReconcileAll(context.Background())
	if !errors.Is(err, ErrFull) || !res.Halted || res.Visited != 0 {
		t.Fatalf("pass = %+v, %v; want halted before the first object", res, err)
	}
	if n := r.comp.desiredCalls.Load(); n != 0 {
		t.Errorf("Desired called %d times with no free slot", n)
	}
	warns := r.logs.records(slog.LevelWarn)
	if len(warns) != 1 || warns[0].Attrs["position"] != "0" {
		t.Errorf("warnings = %+v, want one at position 0", warns)
	}
	if v := r.meter.value(t, ReconcileHaltedMetric, "", ""); v != 1 {
		t.Errorf("%s = %d, want 1", ReconcileHaltedMetric, v)
	}
}

func TestReconcileUnchangedDoesNotAllocate(t *testing.T) {
	objs := benchObjs(1000, false)
	q, err := NewPatchQueue(QueueConfig[Patch[benchPatch]]{Capacity: 1, Key: PatchKey[benchPatch]})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := NewReconciler(ReconcilerConfig[*benchObj, []metav1.Condition, benchPatch]{
		Source: sliceSource[*benchObj]{objs}, Computer: &benchComputer{equal: ConditionsEqual},
		Queue: q, Leader: staticLeader{},
	})
	if err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(20, func() {
		if res, err := rec.ReconcileAll(context.Background()); err != nil || res.Unchanged != len(objs) {
			t.Fatalf("pass: %+v, %v", res, err)
		}
	})
	if allocs != 0 {
		t.Errorf("a pass over %d unchanged objects allocates %v times, want 0", len(objs), allocs)
	}
}
