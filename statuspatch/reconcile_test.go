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
	}{{objUnchanged, 2}, {objChanged, 3}, {objQueued, 0}, {objError, 0}} {
		if v := r.meter.value(t, reconcileObjectsMetric, resultAttr, c.result); v != c.want {
			t.Errorf("%s{result=%s} = %d, want %d", reconcileObjectsMetric, c.result, v, c.want)
		}
		if v := r.rec.Stats().Objects[c.result]; v != c.want {
			t.Errorf("Stats().Objects[%s] = %d, want %d", c.result, v, c.want)
		}
	}
	if v := r.meter.value(t, reconcileDurationMetric, resultAttr, passCompleted); v != 1 {
		t.Errorf("%s{result=completed} count = %d, want 1", reconcileDurationMetric, v)
	}
	if v := r.meter.value(t, reconcilePassesMetric, resultAttr, passCompleted); v != 1 || r.rec.Stats().Passes[passCompleted] != 1 {
		t.Errorf("%s{result=completed} = %d (Stats %d), want 1", reconcilePassesMetric, v, r.rec.Stats().Passes[passCompleted])
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

// haltRecords returns the records about halted passes at or above level.
func (r *rig) haltRecords(level slog.Level) []logRecord {
	var out []logRecord
	for _, rec := range r.logs.records(level) {
		if strings.Contains(rec.Message, "backlog") || strings.Contains(rec.Message, "keep halting") {
			out = append(out, rec)
		}
	}
	return out
}

// The first halted pass — a start-up backlog larger than the queue — is
// normal: one info record, no warning.
func TestReconcileHaltsOnFullQueueWithOneInfoRecord(t *testing.T) {
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
	if w := r.logs.records(slog.LevelWarn); len(w) != 0 {
		t.Errorf("warnings %+v, want none for a first halt", w)
	}
	recs := r.haltRecords(slog.LevelInfo)
	if len(recs) != 1 {
		t.Fatalf("got %d records about the halt, want exactly 1: %+v", len(recs), recs)
	}
	w := recs[0]
	if w.Level != slog.LevelInfo || !strings.Contains(w.Message, "backlog") {
		t.Errorf("record %q at %s, want an info record about a backlog", w.Message, w.Level)
	}
	for k, v := range map[string]string{"capacity": "3", "visited": "3", "objects": "10", "resume_after": "ns/o02", "halted_passes": "1"} {
		if w.Attrs[k] != v {
			t.Errorf("attr %s = %q, want %q", k, w.Attrs[k], v)
		}
	}
	if v := r.meter.value(t, reconcileHaltedMetric, "", ""); v != 1 {
		t.Errorf("%s = %d, want 1", reconcileHaltedMetric, v)
	}
	if v := r.meter.value(t, reconcileDurationMetric, resultAttr, passHalted); v != 1 {
		t.Errorf("%s{result=halted} count = %d, want 1", reconcileDurationMetric, v)
	}
}

// Passes that keep halting log at most once a minute: info while a backlog
// drains, a warning with the sizing hint once they have halted for longer
// than max(1 minute, 3 intervals), and one info record when a pass
// completes again.
func TestReconcileHaltLogsOncePerMinuteThenWarns(t *testing.T) {
	r := newRig(t, 1, changedObjs(names(3)...)) // interval 10s: warn after 1 minute
	r.lead(1)
	pass := func() {
		t.Helper()
		if _, err := r.rec.ReconcileAll(context.Background()); !errors.Is(err, ErrFull) {
			t.Fatalf("pass: %v, want halted", err)
		}
	}
	// Six passes in the first 50 s: one record.
	for range 6 {
		pass()
		r.clock.Step(10 * time.Second)
	}
	if recs := r.haltRecords(slog.LevelDebug); len(recs) != 1 || recs[0].Level != slog.LevelInfo {
		t.Fatalf("records in the first 50s: %+v, want one at info", recs)
	}
	// 60 s after the first halt: a warning with the hint.
	r.clock.Step(10 * time.Second)
	pass()
	warns := r.logs.records(slog.LevelWarn)
	if len(warns) != 1 || !strings.Contains(warns[0].Message, "keep halting") || !strings.Contains(warns[0].Attrs["hint"], "SuggestCapacity") {
		t.Fatalf("warnings after a minute of halts: %+v, want one with the sizing hint", warns)
	}
	if warns[0].Attrs["halted_passes"] != "7" {
		t.Errorf("halted_passes = %q, want 7", warns[0].Attrs["halted_passes"])
	}
	// The queue drains, the objects are unchanged: a pass completes.
	r.drain(t)
	for _, o := range r.src.objs {
		o.Conds = []metav1.Condition{readyCond(o.Gen)}
	}
	if _, err := r.rec.ReconcileAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs := r.haltRecords(slog.LevelInfo)
	if last := recs[len(recs)-1]; !strings.Contains(last.Message, "drained") || last.Level != slog.LevelInfo {
		t.Errorf("last record %q at %s, want the backlog drained at info", last.Message, last.Level)
	}
	if len(recs) != 3 {
		t.Errorf("%d records in all, want 3 (backlog, keep halting, drained): %+v", len(recs), recs)
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
	if n := len(r.haltRecords(slog.LevelInfo)); n != 2 {
		t.Errorf("records about halts = %d, want 2 (a backlog, drained): at most one a minute", n)
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
	if v := r.meter.value(t, reconcileObjectsMetric, resultAttr, objError); v != 2 {
		t.Errorf("%s{result=error} = %d, want 2", reconcileObjectsMetric, v)
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
	if h := r.rec.Healthy(); !errors.Is(h, ErrStopped) {
		t.Errorf("Healthy after Run returned = %v, want ErrStopped", h)
	}
	if err := r.rec.Run(context.Background()); !errors.Is(err, ErrAlreadyStarted) {
		t.Errorf("second Run = %v, want ErrAlreadyStarted", err)
	}
}

func TestReconcilerHealthy(t *testing.T) {
	r := newRig(t, 10, nil)
	if err := r.rec.Healthy(); !errors.Is(err, ErrNotStarted) {
		t.Errorf("Healthy before Run = %v, want ErrNotStarted", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.rec.Run(ctx) }()
	waitFor(t, "Run to start", func() bool { return r.rec.Healthy() == nil })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil after cancel", err)
	}
	if err := r.rec.Healthy(); !errors.Is(err, ErrStopped) {
		t.Errorf("Healthy after Run = %v, want ErrStopped", err)
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
		{"empty identity", func(c *tReconcilerConfig) { c.Leader = newFakeObserver("") }, "ReconcilerConfig.Leader must have a non-empty Identity()"},
		{"queue without key", func(c *tReconcilerConfig) { c.Queue = keylessQueue(t) }, "ReconcilerConfig.Queue must be built with QueueConfig.Key"},
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
			case c.wantErr != "" && !errors.Is(err, ErrInvalidConfig):
				t.Errorf("err = %v does not wrap ErrInvalidConfig", err)
			}
		})
	}
}

// A pass that finds the queue full lists and computes nothing, except the
// objects whose patches wait (so that a newer status replaces them).
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
	if n := r.src.lists.Load(); n != 0 {
		t.Errorf("listed %d times with no free slot", n)
	}
	if recs := r.haltRecords(slog.LevelInfo); len(recs) != 1 || recs[0].Attrs["visited"] != "0" {
		t.Errorf("records = %+v, want one with visited 0", recs)
	}
	if v := r.meter.value(t, reconcileHaltedMetric, "", ""); v != 1 {
		t.Errorf("%s = %d, want 1", reconcileHaltedMetric, v)
	}
}

// The reviewer's case: capacity 1, "v1" waits, "v2" is wanted. The newer
// status replaces the waiting patch although the queue is full: superseded,
// not dropped, no halt of a pass that has nothing else to do.
func TestReconcileReplacesWaitingPatchAtCapacity(t *testing.T) {
	objs := changedObjs("a")
	r := newRig(t, 1, objs)
	r.lead(1)
	if _, err := r.rec.ReconcileAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.src.set(&tObj{Key: objs[0].Key, RV: "2", Gen: 2})
	res, _ := r.rec.ReconcileAll(context.Background())
	if res.Changed != 1 {
		t.Errorf("second pass %+v, want the object changed (its patch replaced)", res)
	}
	st := r.queue.Stats()
	if st.Superseded != 1 || st.DroppedFull != 0 {
		t.Errorf("queue stats %+v: want 1 superseded, 0 dropped", st)
	}
	if got := r.drain(t); len(got) != 1 || got[0].Payload.Gen != 2 {
		t.Fatalf("queue delivers %+v, want the generation-2 patch only", got)
	}
}

// Same, behind a cursor: a pass that halts does not reach the objects
// before its cursor, so it refreshes the patches waiting from earlier
// passes itself.
func TestReconcileHaltedPassRefreshesOlderWaitingPatches(t *testing.T) {
	objs := changedObjs("a", "b", "c", "d")
	r := newRig(t, 2, objs)
	r.lead(1)
	if _, err := r.rec.ReconcileAll(context.Background()); !errors.Is(err, ErrFull) {
		t.Fatalf("first pass: %v, want halted (a and b queued)", err)
	}
	// The dispatcher takes a; b changes.
	it, ok, _ := r.queue.TryReceive()
	if !ok || it.Value.Key != "ns/a" {
		t.Fatalf("received %+v, want ns/a", it.Value)
	}
	defer r.queue.Done(it)
	r.src.set(&tObj{Key: objs[1].Key, RV: "2", Gen: 2})
	// Second pass: resumes after b (c queued, d halts), then refreshes b.
	res, err := r.rec.ReconcileAll(context.Background())
	if !errors.Is(err, ErrFull) || !res.Resumed {
		t.Fatalf("second pass %+v, %v; want resumed and halted", res, err)
	}
	if w, ok := r.queue.Waiting("ns/b"); !ok || w.Payload.Gen != 2 {
		t.Errorf("waiting patch of b: %+v, want generation 2", w.Payload)
	}
	if w, ok := r.queue.Waiting("ns/c"); !ok || w.Payload.Gen != 1 {
		t.Errorf("waiting patch of c: %+v %v, want generation 1", w.Payload, ok)
	}
}

// A pass that computes the status a waiting patch already carries builds
// nothing (result queued): no rebuild, no supersede.
func TestReconcileDoesNotRebuildAnIdenticalWaitingPatch(t *testing.T) {
	r := newRig(t, 10, changedObjs("a", "b"))
	r.lead(1)
	for range 3 {
		if _, err := r.rec.ReconcileAll(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	st := r.rec.Stats()
	if st.Objects[objChanged] != 2 || st.Objects[objQueued] != 4 {
		t.Errorf("objects %v, want 2 changed then 4 queued", st.Objects)
	}
	if qs := r.queue.Stats(); qs.Superseded != 0 || qs.Enqueued != 2 {
		t.Errorf("queue %+v, want 2 enqueued and none superseded", qs)
	}
	// Under a new epoch the waiting patches are stale: rebuilt.
	r.lead(2)
	if _, err := r.rec.ReconcileAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if qs := r.queue.Stats(); qs.Superseded != 2 {
		t.Errorf("after a new epoch: %d superseded, want 2", qs.Superseded)
	}
}

// A panic in the StatusComputer is an error for that object; its
// reservation is released and the pass goes on.
func TestReconcileRecoversFromComputerPanics(t *testing.T) {
	for _, stage := range []string{"Current", "Desired", "Equal", "Key", "Patch"} {
		t.Run(stage, func(t *testing.T) {
			objs := changedObjs("a", "boom", "c")
			r := newRig(t, 3, objs)
			r.lead(1)
			r.comp.panicOn = map[string]string{"boom": stage}
			res, err := r.rec.ReconcileAll(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if res.Errors != 1 || res.Changed != 2 {
				t.Errorf("result %+v, want 1 error and 2 changed", res)
			}
			if st := r.queue.Stats(); st.Reserved != 0 || st.Depth != 2 {
				t.Errorf("queue %+v: want no reservation left, 2 waiting", st)
			}
			warns := r.logs.records(slog.LevelWarn)
			if len(warns) != 1 || !strings.Contains(warns[0].Attrs["first_error"], "StatusComputer."+stage+" panicked") {
				t.Errorf("warnings %+v, want one naming the panic in %s", warns, stage)
			}
		})
	}
}

// The pass on gaining leadership of a new epoch must not depend on the order
// in which a tick and the claim's notification arrive. Here the tick comes
// first, half an interval after the last pass — the case where the periodic
// pass is skipped as too soon — and sees the new epoch in Current(): it must
// make the pass at once; the notification that follows must not make a
// second one.
func TestRunPassOnRegainingLeadershipTickBeforeNotification(t *testing.T) {
	r := newRig(t, 100, changedObjs(names(3)...))
	r.startRun(t)
	r.clock.Step(9 * time.Second)
	r.lead(1)
	waitFor(t, "the pass on gaining epoch 1", func() bool { return r.src.lists.Load() == 1 })
	r.drain(t)
	r.obs.Set(leader.Claim{Holder: "other", Expiry: r.clock.Now().Add(time.Hour), Epoch: 2})
	waitFor(t, "the loss to be consumed", func() bool { return r.obs.pendingClaims() == 0 })

	regained := leader.Claim{Holder: "me", Expiry: r.clock.Now().Add(time.Hour), Epoch: 3}
	r.obs.setSilently(regained)   // Current() says so; no notification yet
	r.clock.Step(1 * time.Second) // the tick at 10s, 1s after the last pass
	waitFor(t, "the pass on regaining leadership, at the tick", func() bool { return r.src.lists.Load() == 2 })
	for _, p := range r.drain(t) {
		if p.Epoch != 3 {
			t.Errorf("patch %s epoch %d, want 3", p.Key, p.Epoch)
		}
	}
	r.obs.Set(regained) // the late notification
	waitFor(t, "the notification to be consumed", func() bool { return r.obs.pendingClaims() == 0 })
	r.rec.Enqueue(types.NamespacedName{Namespace: "ns", Name: "o00"}) // handled after it
	waitFor(t, "the enqueued key", func() bool { return r.src.gets.Load() == 1 })
	if n := r.src.lists.Load(); n != 2 {
		t.Errorf("%d passes, want 2: the late notification of an epoch already seen made another", n)
	}
}

// The other order: the notification first, then a tick within half an
// interval: one pass, made at once.
func TestRunPassOnRegainingLeadershipNotificationBeforeTick(t *testing.T) {
	r := newRig(t, 100, changedObjs(names(3)...))
	r.startRun(t)
	r.clock.Step(9 * time.Second)
	r.lead(1)
	waitFor(t, "the pass on gaining epoch 1", func() bool { return r.src.lists.Load() == 1 })
	r.obs.Set(leader.Claim{Holder: "other", Expiry: r.clock.Now().Add(time.Hour), Epoch: 2})
	waitFor(t, "the loss to be consumed", func() bool { return r.obs.pendingClaims() == 0 })
	r.lead(3)
	waitFor(t, "the pass on regaining leadership", func() bool { return r.src.lists.Load() == 2 })
	r.clock.Step(1 * time.Second) // tick at 10s: too soon after the pass
	r.rec.Enqueue(types.NamespacedName{Namespace: "ns", Name: "o00"})
	waitFor(t, "the enqueued key", func() bool { return r.src.gets.Load() == 1 })
	if n := r.src.lists.Load(); n != 2 {
		t.Errorf("%d passes, want 2", n)
	}
}

// receiveN takes n patches off the queue (as a dispatcher would) and
// returns their keys.
func (r *rig) receiveN(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		it, err := r.queue.Receive(ctx)
		cancel()
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		out = append(out, it.Value.Key)
		r.queue.Done(it)
	}
	return out
}

// A pass halted on a full queue resumes, after its cursor, as soon as half
// of the queue is free again — not at the next tick: a backlog larger than
// the queue keeps the dispatcher busy. The clock never moves here.
func TestRunResumesHaltedPassWhenHalfTheQueueIsFree(t *testing.T) {
	r := newRig(t, 4, changedObjs(names(10)...))
	r.lead(1)
	r.startRun(t)
	waitFor(t, "the first pass to fill the queue", func() bool { return r.queue.Len() == 4 })
	if n := r.src.lists.Load(); n != 1 {
		t.Fatalf("%d passes, want 1", n)
	}
	var got []string
	for len(got) < 10 {
		lists := r.src.lists.Load()
		// One patch leaves: 1 of 4 free, less than half: no pass. Then
		// a second: half the queue is free, the pass resumes.
		got = append(got, r.receiveN(t, 1)...)
		if len(got) == 10 {
			break
		}
		got = append(got, r.receiveN(t, 1)...)
		if len(got) >= 10 {
			break
		}
		waitFor(t, "the halted pass to resume", func() bool {
			return r.src.lists.Load() == lists+1 && r.queue.Len() == 4
		})
	}
	var want []string
	for _, n := range names(10) {
		want = append(want, "ns/"+n)
	}
	if !slices.Equal(got, want) {
		t.Errorf("patches applied in the order %v, want %v (each once, resuming after the cursor)", got, want)
	}
	if h := r.rec.Stats().Halted; h < 3 {
		t.Errorf("Stats().Halted = %d, want the halted passes counted (at least 3)", h)
	}
}

// On-demand keys that find the queue full are forgotten, and a full pass
// covers them as soon as half the queue is free.
func TestRunResumesHaltedOnDemandKeysWithAFullPass(t *testing.T) {
	objs := changedObjs(names(5)...)
	for _, o := range objs {
		o.Conds = []metav1.Condition{readyCond(1)}
	}
	r := newRig(t, 2, objs, func(c *tReconcilerConfig) { c.MaxPendingKeys = 100 })
	r.lead(1)
	r.startRun(t)
	waitFor(t, "the first pass", func() bool { return r.src.lists.Load() == 1 })
	for _, o := range objs {
		r.src.set(&tObj{Key: o.Key, RV: "2", Gen: 2, Conds: []metav1.Condition{readyCond(1)}})
		r.rec.Enqueue(o.Key)
	}
	waitFor(t, "the enqueued keys to fill the queue", func() bool { return r.queue.Len() == 2 })
	seen := map[string]bool{}
	for len(seen) < 5 {
		for _, k := range r.receiveN(t, 1) {
			seen[k] = true
		}
		if len(seen) < 5 {
			waitFor(t, "more patches", func() bool { return r.queue.Len() > 0 })
		}
	}
	if n := r.src.lists.Load(); n < 2 {
		t.Errorf("%d passes, want a full pass after the on-demand keys halted", n)
	}
}
