package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/internal/queue"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
)

type tReconciler = Reconciler[*tObj, []metav1.Condition, tPayload]

// rig wires a reconciler to fakes. Its clock never ticks by itself.
type rig struct {
	obs   *fakeObserver
	src   *fakeSource
	comp  *tComputer
	queue *queue.Queue[types.NamespacedName]
	rec   *tReconciler
	logs  *captureHandler
	meter *testMeter
	clock *tickClock
}

func newRig(t *testing.T, capacity int, objs []*tObj, mutate ...func(*Options)) *rig {
	t.Helper()
	r := &rig{
		obs:   newFakeObserver("me"),
		src:   &fakeSource{objs: objs},
		comp:  &tComputer{},
		logs:  newCapture(slog.LevelDebug),
		meter: newTestMeter(t),
		clock: newTickClock(),
	}
	opts := Options{
		Name:     "test",
		Capacity: capacity,
		Interval: 10 * time.Second,
		Clock:    r.clock,
		Logger:   slog.New(r.logs),
	}
	for _, m := range mutate {
		m(&opts)
	}
	var err error
	if r.queue, err = newQueue(opts); err != nil {
		t.Fatal(err)
	}
	metrics := NewMetrics(r.meter.provider.Meter("test"), opts)
	if r.rec, err = NewReconciler(r.src, r.comp, r.queue, r.obs, opts, metrics); err != nil {
		t.Fatal(err)
	}
	unregister, err := metrics.Register(r.queue, r.rec.Stats, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unregister)
	return r
}

// lead makes "me" the leader under epoch.
func (r *rig) lead(epoch int64) {
	r.obs.Set(leader.Claim{Holder: "me", Expiry: r.clock.Now().Add(time.Hour), Epoch: epoch})
}

func (r *rig) loseTo(holder string, epoch int64) {
	r.obs.Set(leader.Claim{Holder: holder, Expiry: r.clock.Now().Add(time.Hour), Epoch: epoch})
}

func (r *rig) drain(t *testing.T) []string { t.Helper(); return drainKeys(t, r.queue) }

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

// startRun runs r.rec.Run until the test ends, and returns once Run has
// subscribed, made its ticker and handled the claim it started with.
func (r *rig) startRun(t *testing.T) {
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
	waitFor(t, "Run to subscribe", func() bool { return r.obs.subscribers() == 1 && r.clock.tickers.Load() == 1 })
	r.obs.settle(t)
}

func TestReconcileAllQueuesOnlyChangedKeysIntoThePassLane(t *testing.T) {
	objs := changedObjs("a", "b", "c", "d", "e")
	// b: the same condition with a transition time; d: up to date at
	// generation 0.
	objs[1].Conds = []metav1.Condition{readyCond(1)}
	objs[1].Conds[0].LastTransitionTime = metav1.NewTime(testStart())
	objs[3].Gen = 0
	objs[3].Conds = []metav1.Condition{readyCond(0)}
	r := newRig(t, 10, objs)
	r.lead(7)

	res, err := r.rec.ReconcileAll(context.Background())
	if err != nil {
		t.Fatalf("ReconcileAll: %v", err)
	}
	if want := (PassResult{Objects: 5, Visited: 5, Unchanged: 2, Changed: 3}); res != want {
		t.Errorf("result = %+v, want %+v", res, want)
	}
	if st := r.queue.Stats(); st.Depth != 3 || st.Fresh != 0 {
		t.Errorf("queue %+v: want 3 keys waiting, all in the pass lane", st)
	}
	if got, want := r.drain(t), nsNames("a", "c", "e"); !slices.Equal(got, want) {
		t.Errorf("queued keys = %v, want %v", got, want)
	}
	// The reconciler builds no patch, and names only the changed objects.
	if n := r.comp.patchCalls.Load(); n != 0 {
		t.Errorf("Patch called %d times by a pass, want 0: the dispatcher builds patches", n)
	}
	if n := r.comp.keyCalls.Load(); n != 3 {
		t.Errorf("Key called %d times, want 3 (changed objects only)", n)
	}
	for _, c := range []struct {
		result string
		want   int64
	}{{"unchanged", 2}, {"changed", 3}, {"error", 0}} {
		if v := r.meter.value(t, "quietpatch.reconcile.objects", resultAttr, c.result); v != c.want {
			t.Errorf("reconcile.objects{result=%s} = %d, want %d", c.result, v, c.want)
		}
		if v := r.rec.Stats().Objects[c.result]; v != c.want {
			t.Errorf("Stats().Objects[%s] = %d, want %d", c.result, v, c.want)
		}
	}
	if w := r.logs.records(slog.LevelInfo); len(w) != 0 {
		t.Errorf("records at info and above = %+v, want none", w)
	}
}

// A pass leaves the keys that wait already where they are, uncounted: a
// second pass before the keys are served, and a key waiting in the fresh
// lane, are no new requests.
func TestReconcilePassDoesNotReAddWaitingKeys(t *testing.T) {
	r := newRig(t, 10, changedObjs("a", "b", "c"))
	r.lead(7)
	if err := r.queue.Add(nsKey("a"), queue.LaneFresh); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := r.rec.ReconcileAll(context.Background()); err != nil {
			t.Fatalf("ReconcileAll: %v", err)
		}
	}
	if st := r.queue.Stats(); st.Enqueued != 3 || st.Coalesced != 0 || st.Depth != 3 || st.Fresh != 1 {
		t.Errorf("queue %+v: want 3 keys enqueued once each, none superseded, a still in the fresh lane", st)
	}
	if v := r.rec.Stats().Objects["changed"]; v != 6 {
		t.Errorf("Stats().Objects[changed] = %d, want 6: the objects are still changed", v)
	}
}

// A full fresh lane does not halt a pass: the lanes are bounded apart.
func TestReconcilePassIgnoresAFullFreshLane(t *testing.T) {
	r := newRig(t, 2, changedObjs("a", "b"))
	r.lead(1)
	for _, k := range []string{"x", "y"} {
		if err := r.queue.Add(nsKey(k), queue.LaneFresh); err != nil {
			t.Fatal(err)
		}
	}
	res, err := r.rec.ReconcileAll(context.Background())
	if err != nil || res.Halted || res.Changed != 2 {
		t.Fatalf("pass = %+v, %v; want both keys queued", res, err)
	}
	if got, want := r.drain(t), nsNames("x", "y", "a", "b"); !slices.Equal(got, want) {
		t.Errorf("served %v, want %v", got, want)
	}
}

// The first halted pass — a start-up backlog larger than the lane — is
// normal: one info record, no warning.
func TestReconcileHaltsOnAFullPassLane(t *testing.T) {
	r := newRig(t, 3, changedObjs(names(10)...))
	r.lead(1)

	res, err := r.rec.ReconcileAll(context.Background())
	if !errors.Is(err, queue.ErrFull) {
		t.Fatalf("ReconcileAll error = %v, want queue.ErrFull", err)
	}
	if want := (PassResult{Objects: 10, Visited: 3, Changed: 3, Halted: true}); res != want {
		t.Errorf("result = %+v, want %+v", res, want)
	}
	if w := r.logs.records(slog.LevelWarn); len(w) != 0 {
		t.Errorf("warnings %+v, want none for a first halt", w)
	}
	recs := r.haltRecords(slog.LevelInfo)
	if len(recs) != 1 || recs[0].Level != slog.LevelInfo {
		t.Fatalf("records about the halt: %+v, want exactly one at info", recs)
	}
	for k, v := range map[string]string{"capacity": "3", "visited": "3", "objects": "10", "queued_this_pass": "3",
		"resume_after": "ns/o02", "halted_passes": "1", "pipeline": "test"} {
		if recs[0].Attrs[k] != v {
			t.Errorf("attr %s = %q, want %q", k, recs[0].Attrs[k], v)
		}
	}
	if st := r.rec.Stats(); st.Halted != 1 || st.Passes["halted"] != 1 {
		t.Errorf("Stats = %+v, want one halted pass", st)
	}
	if v := r.meter.value(t, "quietpatch.reconcile.halted", "", ""); v != 1 {
		t.Errorf("reconcile.halted = %d, want 1", v)
	}
	if v := r.meter.value(t, "quietpatch.reconcile.duration", resultAttr, "halted"); v != 1 {
		t.Errorf("reconcile.duration{result=halted} count = %d, want 1", v)
	}
}

// A halted pass keeps its cursor; the next passes go on after it in key
// order, wrapping, until one completes.
func TestReconcileResumesAfterCursor(t *testing.T) {
	// The source lists in a scrambled, stable order; patches are never
	// applied, so every object stays changed until the test says otherwise.
	r := newRig(t, 3, changedObjs("o04", "o01", "o06", "o00", "o03", "o05", "o02"))
	r.lead(1)
	steps := []struct {
		name        string
		before      func()
		wantKeys    []string
		wantHalted  bool
		wantResumed bool
	}{
		{name: "first pass in list order", wantKeys: nsNames("o04", "o01", "o06"), wantHalted: true},
		{name: "resumes after o06 in key order, wrapping", wantKeys: nsNames("o00", "o01", "o02"), wantHalted: true, wantResumed: true},
		{name: "resumes after o02", wantKeys: nsNames("o03", "o04", "o05"), wantHalted: true, wantResumed: true},
		{name: "resumes after o05, wrapping", wantKeys: nsNames("o06", "o00", "o01"), wantHalted: true, wantResumed: true},
		{name: "halted at its first object: the cursor stays", before: func() {
			r.queue.SetCapacity(1)
			_ = r.queue.Add(nsKey("filler"), queue.LanePass)
		}, wantKeys: nsNames("filler"), wantHalted: true, wantResumed: true},
		{name: "resumes after o01 still", before: func() { r.queue.SetCapacity(3) },
			wantKeys: nsNames("o02", "o03", "o04"), wantHalted: true, wantResumed: true},
		{name: "completes and clears the cursor", before: func() { r.src.setAll(upToDate) }, wantResumed: true},
		{name: "starts from the top again"},
	}
	for _, s := range steps {
		if s.before != nil {
			s.before()
		}
		res, err := r.rec.ReconcileAll(context.Background())
		if s.wantHalted != errors.Is(err, queue.ErrFull) || (!s.wantHalted && err != nil) {
			t.Errorf("%s: err = %v, want halted=%v", s.name, err, s.wantHalted)
		}
		if res.Halted != s.wantHalted || res.Resumed != s.wantResumed {
			t.Errorf("%s: halted=%v resumed=%v, want %v %v", s.name, res.Halted, res.Resumed, s.wantHalted, s.wantResumed)
		}
		if got := r.drain(t); !slices.Equal(got, s.wantKeys) {
			t.Errorf("%s: queued %v, want %v", s.name, got, s.wantKeys)
		}
	}
	if n := len(r.haltRecords(slog.LevelInfo)); n != 2 {
		t.Errorf("records about halts = %d, want 2 (a backlog, drained): at most one a minute", n)
	}
}

// No object starves: with more changed objects than the lane holds, every
// run of ⌈objects/capacity⌉ consecutive resumed passes queues every object.
func TestReconcileHaltedPassesDoNotStarveObjects(t *testing.T) {
	const objects, capacity, passes = 23, 5, 14
	var ns []string
	for i := range objects {
		ns = append(ns, fmt.Sprintf("k%02d", (i*7)%objects)) // scrambled list order
	}
	r := newRig(t, capacity, changedObjs(ns...))
	r.lead(1)
	var queued [][]string
	for p := range passes {
		res, err := r.rec.ReconcileAll(context.Background())
		if !errors.Is(err, queue.ErrFull) || res.Changed != capacity || res.Resumed != (p > 0) {
			t.Fatalf("pass %d: %+v, %v; want halted after %d keys", p, res, err, capacity)
		}
		queued = append(queued, r.drain(t))
	}
	window := (objects + capacity - 1) / capacity
	for from := 1; from+window <= passes; from++ {
		seen := map[string]bool{}
		for _, keys := range queued[from : from+window] {
			for _, k := range keys {
				seen[k] = true
			}
		}
		if len(seen) != objects {
			t.Errorf("passes %d..%d queued %d distinct objects, want all %d", from, from+window-1, len(seen), objects)
		}
	}
	if st := r.rec.Stats(); st.Halted != passes {
		t.Errorf("Stats().Halted = %d, want %d", st.Halted, passes)
	}
}

// Passes that keep halting log at most once a minute: info while a
// backlog drains, a warning with the sizing hint once they have halted
// for max(1 minute, 3 intervals), and one info record when a pass
// completes again.
func TestReconcileHaltLog(t *testing.T) {
	type rec struct {
		at    time.Duration // since the first halt
		level slog.Level
	}
	for _, tc := range []struct {
		interval time.Duration
		want     []rec
	}{
		{10 * time.Second, []rec{{0, slog.LevelInfo}, {time.Minute, slog.LevelWarn}, {2 * time.Minute, slog.LevelWarn}}},
		{30 * time.Second, []rec{{0, slog.LevelInfo}, {time.Minute, slog.LevelInfo}, {2 * time.Minute, slog.LevelWarn}}},
		{time.Minute, []rec{{0, slog.LevelInfo}, {time.Minute, slog.LevelInfo}, {2 * time.Minute, slog.LevelInfo}}},
	} {
		t.Run("interval "+tc.interval.String(), func(t *testing.T) {
			r := newRig(t, 1, changedObjs(names(3)...), func(o *Options) { o.Interval = tc.interval })
			r.lead(1)
			var got []rec
			// A halted pass every 10 s for 130 s; the lane never drains.
			for at := time.Duration(0); at <= 130*time.Second; at += 10 * time.Second {
				before := len(r.haltRecords(slog.LevelDebug))
				if _, err := r.rec.ReconcileAll(context.Background()); !errors.Is(err, queue.ErrFull) {
					t.Fatalf("pass at %s: %v, want halted", at, err)
				}
				for _, l := range r.haltRecords(slog.LevelDebug)[before:] {
					got = append(got, rec{at, l.Level})
					if l.Level == slog.LevelWarn && (!strings.Contains(l.Attrs["hint"], "capacity") || l.Attrs["halting_for"] != at.String()) {
						t.Errorf("warning at %s: %+v, want the sizing hint and halting_for", at, l.Attrs)
					}
				}
				r.clock.Step(10 * time.Second)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("records (since the first halt, level) = %v, want %v", got, tc.want)
			}
			// The lane drains, the objects are up to date: a pass completes.
			r.drain(t)
			r.src.setAll(upToDate)
			before := len(r.haltRecords(slog.LevelDebug))
			if _, err := r.rec.ReconcileAll(context.Background()); err != nil {
				t.Fatal(err)
			}
			drained := r.haltRecords(slog.LevelDebug)[before:]
			if len(drained) != 1 || drained[0].Level != slog.LevelInfo || !strings.Contains(drained[0].Message, "drained") ||
				drained[0].Attrs["halted_passes"] != "14" || drained[0].Attrs["after"] != "2m20s" {
				t.Errorf("records when the backlog drained: %+v, want one info record with halted_passes 14 after 2m20s", drained)
			}
			// A new backlog starts a new streak: info again.
			r.src.setAll(func(o *tObj) *tObj { c := *o; c.Gen++; return &c })
			before = len(r.haltRecords(slog.LevelDebug))
			_, _ = r.rec.ReconcileAll(context.Background())
			if again := r.haltRecords(slog.LevelDebug)[before:]; len(again) != 1 || again[0].Level != slog.LevelInfo {
				t.Errorf("records of a new backlog: %+v, want one at info", again)
			}
		})
	}
}

func TestReconcileObjectErrorsDoNotStopThePass(t *testing.T) {
	objs := changedObjs("a", "b", "c", "d")
	objs[0].Fail, objs[2].Fail = true, true
	r := newRig(t, 10, objs)
	r.lead(1)

	res, err := r.rec.ReconcileAll(context.Background())
	if err != nil {
		t.Fatalf("ReconcileAll: %v", err)
	}
	if want := (PassResult{Objects: 4, Visited: 4, Changed: 2, Errors: 2}); res != want {
		t.Errorf("result = %+v, want %+v", res, want)
	}
	if got, want := r.drain(t), nsNames("b", "d"); !slices.Equal(got, want) {
		t.Errorf("queued %v, want %v", got, want)
	}
	warns := r.logs.records(slog.LevelWarn)
	if len(warns) != 1 || warns[0].Attrs["errors"] != "2" || !strings.HasPrefix(warns[0].Attrs["first_error"], "ns/a: ") {
		t.Errorf("warnings = %+v, want one summary with errors=2 and the first error naming ns/a", warns)
	}
	if v := r.meter.value(t, "quietpatch.reconcile.objects", resultAttr, "error"); v != 2 {
		t.Errorf("reconcile.objects{result=error} = %d, want 2", v)
	}
}

// A panic in the StatusComputer is an error for that object and the pass
// goes on — also in a resumed pass, which calls Key on every object to
// sort them.
func TestReconcileRecoversFromComputerPanics(t *testing.T) {
	for _, resumed := range []bool{false, true} {
		for _, stage := range []string{"Current", "Desired", "Equal", "Key"} {
			name := stage
			if resumed {
				name += " in a resumed pass"
			}
			t.Run(name, func(t *testing.T) {
				r := newRig(t, 10, changedObjs("a", "boom", "c"))
				r.lead(1)
				want := nsNames("a", "c")
				if resumed {
					// A pass halted after a: the next one sorts by key
					// and resumes after a.
					r.queue.SetCapacity(1)
					if _, err := r.rec.ReconcileAll(context.Background()); !errors.Is(err, queue.ErrFull) {
						t.Fatalf("first pass: %v, want halted after a", err)
					}
					r.drain(t)
					r.queue.SetCapacity(10)
					want = nsNames("c", "a")
				}
				r.comp.panicOn = map[string]string{"boom": stage}
				res, err := r.rec.ReconcileAll(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if wantRes := (PassResult{Objects: 3, Visited: 3, Changed: 2, Errors: 1, Resumed: resumed}); res != wantRes {
					t.Errorf("result %+v, want %+v", res, wantRes)
				}
				if got := r.drain(t); !slices.Equal(got, want) {
					t.Errorf("queued %v, want %v", got, want)
				}
				if n := r.rec.Stats().Objects["error"]; n != 1 {
					t.Errorf("Stats().Objects[error] = %d, want 1", n)
				}
				warns := r.logs.records(slog.LevelWarn)
				if len(warns) != 1 || !strings.Contains(warns[0].Attrs["first_error"], "test panic in "+stage) {
					t.Errorf("warnings %+v, want one naming the panic in %s", warns, stage)
				}
			})
		}
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
			r := newRig(t, 100, changedObjs("a"))
			r.obs.Set(c.claim(r.clock.Now()))
			if _, err := r.rec.ReconcileAll(context.Background()); !errors.Is(err, ErrNotLeader) {
				t.Errorf("ReconcileAll error = %v, want ErrNotLeader", err)
			}
			r.rec.Enqueue(nsKey("a"))
			r.rec.Enqueue(make([]types.NamespacedName, FreshFanout+1)...)
			if n := r.src.lists.Load() + r.src.gets.Load(); n != 0 {
				t.Errorf("source called %d times while not leader", n)
			}
			if r.queue.Stats().Depth != 0 || len(r.rec.kick) != 0 {
				t.Errorf("queue holds %d keys, resync asked %v: want nothing while not leader", r.queue.Stats().Depth, len(r.rec.kick) != 0)
			}
			if st := r.rec.Stats(); st.Passes["not_leader"] != 1 {
				t.Errorf("Stats().Passes = %v, want one not_leader", st.Passes)
			}
		})
	}
}

// A pass checks the claim every 256 objects and stops as soon as it
// changed; the next pass resumes after the last object handled.
func TestReconcileLeadershipLostMidPass(t *testing.T) {
	for _, tc := range []struct {
		label string
		next  func(r *rig)
	}{
		{"another holder", func(r *rig) { r.loseTo("other", 2) }},
		{"a new epoch of ours", func(r *rig) { r.lead(2) }},
	} {
		t.Run(tc.label, func(t *testing.T) {
			r := newRig(t, 1000, changedObjs(fmtNames(600)...))
			r.lead(1)
			visited := 0
			r.comp.hook = func(method string, _ *tObj) {
				if method == "Desired" {
					if visited++; visited == 100 {
						tc.next(r)
					}
				}
			}
			res, err := r.rec.ReconcileAll(context.Background())
			if !errors.Is(err, ErrNotLeader) {
				t.Fatalf("err = %v, want ErrNotLeader", err)
			}
			if res.Visited != leaderCheckEvery-1 {
				t.Errorf("visited %d objects, want the pass to stop at the check after %d", res.Visited, leaderCheckEvery-1)
			}
			if st := r.rec.Stats(); st.Passes["not_leader"] != 1 {
				t.Errorf("Stats().Passes = %v, want one not_leader", st.Passes)
			}
			r.drain(t)
			r.comp.hook = nil
			r.lead(3)
			res, err = r.rec.ReconcileAll(context.Background())
			if err != nil || !res.Resumed || res.Changed != 600 {
				t.Fatalf("pass after regaining: %+v, %v; want resumed, 600 changed", res, err)
			}
			if got := r.drain(t); got[0] != "ns/k0255" {
				t.Errorf("resumed pass started at %s, want ns/k0255", got[0])
			}
		})
	}
}

// fmtNames returns k0000 … k<n-1>, which sort as they are numbered.
func fmtNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("k%04d", i)
	}
	return out
}

// Enqueue is the keys of one event: up to FreshFanout go to the fresh
// lane, more — or a full fresh lane — ask for a pass instead, and nothing
// happens while we do not lead.
func TestEnqueue(t *testing.T) {
	keys := func(n int) []types.NamespacedName {
		out := make([]types.NamespacedName, n)
		for i := range out {
			out[i] = nsKey(fmt.Sprintf("e%02d", i))
		}
		return out
	}
	for _, tc := range []struct {
		label      string
		capacity   int
		notLeader  bool
		inPassLane []string
		enqueue    []types.NamespacedName
		wantFresh  int
		wantPass   int
		wantResync bool
	}{
		{label: "no keys", capacity: 100},
		{label: "one key", capacity: 100, enqueue: keys(1), wantFresh: 1},
		{label: "FreshFanout keys", capacity: 100, enqueue: keys(FreshFanout), wantFresh: FreshFanout},
		{label: "one more: a pass instead", capacity: 100, enqueue: keys(FreshFanout + 1), wantResync: true},
		{label: "a full fresh lane: a pass", capacity: 2, enqueue: keys(3), wantFresh: 2, wantResync: true},
		{label: "the same key twice coalesces", capacity: 100, enqueue: []types.NamespacedName{nsKey("a"), nsKey("a")}, wantFresh: 1},
		{label: "a key waiting in the pass lane moves to the fresh lane", capacity: 100, inPassLane: []string{"a", "b"},
			enqueue: []types.NamespacedName{nsKey("a")}, wantFresh: 1, wantPass: 1},
		{label: "not leader: one key", capacity: 100, notLeader: true, enqueue: keys(1)},
		{label: "not leader: many keys", capacity: 100, notLeader: true, enqueue: keys(FreshFanout + 1)},
	} {
		t.Run(tc.label, func(t *testing.T) {
			r := newRig(t, tc.capacity, nil)
			if !tc.notLeader {
				r.lead(1)
			}
			for _, k := range tc.inPassLane {
				if err := r.queue.Add(nsKey(k), queue.LanePass); err != nil {
					t.Fatal(err)
				}
			}
			r.rec.Enqueue(tc.enqueue...)
			st := r.queue.Stats()
			if st.Fresh != tc.wantFresh || st.Depth-st.Fresh != tc.wantPass {
				t.Errorf("fresh lane %d, pass lane %d keys; want %d, %d", st.Fresh, st.Depth-st.Fresh, tc.wantFresh, tc.wantPass)
			}
			if resync := len(r.rec.kick) == 1; resync != tc.wantResync {
				t.Errorf("pass asked: %v, want %v", resync, tc.wantResync)
			}
			if r.src.lists.Load()+r.src.gets.Load() != 0 {
				t.Error("Enqueue read the source")
			}
		})
	}
}

// With Options.Settle, the keys of events close together wait until no
// event came for Settle (or settleMax × Settle after the first) and enter
// the fresh lane together, each once: a burst costs one serve per key.
func TestEnqueueSettlesABurst(t *testing.T) {
	const settle = 50 * time.Millisecond
	r := newRig(t, 100, nil, func(o *Options) { o.Settle = settle })
	r.lead(1)
	r.startRun(t)
	fresh := func() int { return r.queue.Stats().Fresh }
	timers := func(n int) func() bool { return func() bool { return r.clock.Waiters() >= n } }
	r.rec.Enqueue(nsKey("a"), nsKey("b"))
	waitFor(t, "the batch's timer", timers(1))
	for range 3 { // events 40 ms apart: the batch goes on
		r.clock.Step(40 * time.Millisecond)
		r.rec.Enqueue(nsKey("a"), nsKey("c"))
		waitFor(t, "the batch's timer", timers(1))
		if n := fresh(); n != 0 {
			t.Fatalf("%d keys in the fresh lane during the burst, want 0", n)
		}
	}
	r.clock.Step(settle) // quiet for Settle: a, b, c at once, each once
	waitFor(t, "the batch in the fresh lane", func() bool { return fresh() == 3 })
	if st := r.queue.Stats(); st.Enqueued != 3 || st.Coalesced != 0 {
		t.Errorf("enqueued %d, coalesced %d; want 3 keys once each", st.Enqueued, st.Coalesced)
	}
	r.drain(t)
	// Events that never stop: the batch is due settleMax × Settle after
	// its first key.
	r.rec.Enqueue(nsKey("d"))
	for elapsed := time.Duration(0); elapsed < settleMax*settle; elapsed += 30 * time.Millisecond {
		waitFor(t, "the batch's timer", timers(1))
		if n := fresh(); n != 0 {
			t.Fatalf("%d keys in the fresh lane %v after the first, want 0", n, elapsed)
		}
		r.clock.Step(30 * time.Millisecond)
		r.rec.Enqueue(nsKey("d"))
	}
	waitFor(t, "the batch due at settleMax × Settle", func() bool { return fresh() == 1 })
}

// Under Run, an event with more keys than FreshFanout makes a pass, which
// queues only what changed.
func TestRunEnqueueOfManyKeysMakesAPass(t *testing.T) {
	r := newRig(t, 100, changedObjs(names(FreshFanout+1)...))
	r.src.setAll(upToDate)
	r.lead(1)
	r.startRun(t)
	waitFor(t, "the first pass", func() bool { return r.src.lists.Load() == 1 })
	r.src.set(&tObj{Key: nsKey("o03"), RV: "2", Gen: 2})
	var ks []types.NamespacedName
	for _, n := range names(FreshFanout + 1) {
		ks = append(ks, nsKey(n))
	}
	r.rec.Enqueue(ks...)
	waitFor(t, "the pass", func() bool { return r.src.lists.Load() == 2 && r.queue.Stats().Depth == 1 })
	if st := r.queue.Stats(); st.Fresh != 0 {
		t.Errorf("%d keys in the fresh lane, want none", st.Fresh)
	}
	if got := r.drain(t); !slices.Equal(got, nsNames("o03")) {
		t.Errorf("queued %v, want the changed object only", got)
	}
}

func TestRunPassOnGainingLeadership(t *testing.T) {
	r := newRig(t, 100, changedObjs(names(5)...))
	r.startRun(t)
	if n := r.src.lists.Load(); n != 0 {
		t.Fatalf("listed %d times before leading", n)
	}
	r.lead(1) // no tick: the pass is immediate
	waitFor(t, "the pass on gaining leadership", func() bool { return r.queue.Stats().Depth == 5 })
	r.drain(t)

	// A renewal (same epoch) is not a gain: no pass.
	r.obs.Set(leader.Claim{Holder: "me", Expiry: r.clock.Now().Add(2 * time.Hour), Epoch: 1})
	r.obs.settle(t)
	if n := r.src.lists.Load(); n != 1 {
		t.Errorf("listed %d times after a renewal, want 1", n)
	}

	// Lost, then gained under a new epoch: another immediate pass.
	r.loseTo("other", 2)
	r.obs.settle(t)
	r.lead(3)
	waitFor(t, "the pass on regaining leadership", func() bool { return r.queue.Stats().Depth == 5 })
	if n := r.src.lists.Load(); n != 2 {
		t.Errorf("listed %d times, want 2", n)
	}
}

// A pass every tick of Interval while leading, skipping a tick less than
// Interval/2 after the last pass; none while not leading.
func TestRunPeriodicPasses(t *testing.T) {
	r := newRig(t, 100, changedObjs(names(3)...))
	r.lead(1)
	r.startRun(t)
	steps := []struct {
		label      string
		step       time.Duration
		lose       bool
		wantPasses int64
	}{
		{label: "the pass on gaining leadership", wantPasses: 1},
		{label: "a tick an interval later", step: 10 * time.Second, wantPasses: 2},
		{label: "another", step: 10 * time.Second, wantPasses: 3},
		{label: "a tick 4s after the last pass: skipped", step: 4 * time.Second, wantPasses: 3},
		{label: "a tick Interval/2 after it", step: time.Second, wantPasses: 4},
		{label: "a tick while not leading", step: 10 * time.Second, lose: true, wantPasses: 4},
	}
	for _, s := range steps {
		if s.lose {
			r.loseTo("other", 2)
			r.obs.settle(t)
		}
		if s.step > 0 {
			r.clock.Step(s.step)
			r.clock.tick(t)
		}
		r.obs.settle(t) // the tick has been handled
		if n := r.src.lists.Load(); n != s.wantPasses {
			t.Errorf("%s: %d passes, want %d", s.label, n, s.wantPasses)
		}
	}
	// The passes' keys coalesced in the pass lane: one per object.
	if n := r.queue.Stats().Depth; n != 3 {
		t.Errorf("queue holds %d keys, want 3 (one per object)", n)
	}
}

// The pass on gaining leadership of a new epoch must not depend on the order
// in which a tick and the claim's notification arrive. Here the tick comes
// first, one second after the last pass — the case where the periodic pass
// is skipped as too soon — and sees the new epoch in Current(): it must
// make the pass at once; the notification that follows must not make a
// second one.
func TestRunPassOnRegainingLeadershipTickBeforeNotification(t *testing.T) {
	r := newRig(t, 100, changedObjs(names(3)...))
	r.startRun(t)
	r.clock.Step(9 * time.Second)
	r.lead(1)
	waitFor(t, "the pass on gaining epoch 1", func() bool { return r.src.lists.Load() == 1 })
	r.loseTo("other", 2)
	r.obs.settle(t)

	regained := leader.Claim{Holder: "me", Expiry: r.clock.Now().Add(time.Hour), Epoch: 3}
	r.obs.setSilently(regained) // Current() says so; no notification yet
	r.clock.Step(time.Second)   // the tick at 10s, 1s after the last pass
	r.clock.tick(t)
	waitFor(t, "the pass on regaining leadership, at the tick", func() bool { return r.src.lists.Load() == 2 })
	r.obs.Set(regained) // the late notification
	r.obs.settle(t)
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
	r.loseTo("other", 2)
	r.obs.settle(t)
	r.lead(3)
	waitFor(t, "the pass on regaining leadership", func() bool { return r.src.lists.Load() == 2 })
	r.clock.Step(time.Second) // tick at 10s: too soon after the pass
	r.clock.tick(t)
	r.obs.settle(t)
	if n := r.src.lists.Load(); n != 2 {
		t.Errorf("%d passes, want 2", n)
	}
}

// A pass halted on a full pass lane resumes, after its cursor, as soon as
// half of the lane is free again — not at the next tick: no tick comes in
// this test and the clock never moves.
func TestRunResumesHaltedPassWhenHalfTheLaneIsFree(t *testing.T) {
	r := newRig(t, 4, changedObjs(names(10)...))
	r.lead(1)
	r.startRun(t)
	waitFor(t, "the first pass to fill the lane", func() bool { return r.queue.Stats().Depth == 4 })
	var got []string
	for len(got) < 10 {
		lists := r.src.lists.Load()
		// One key leaves: 1 of 4 free, less than half: no pass. A second:
		// half the lane is free, the pass resumes and fills it.
		got = append(got, takeKeys(t, r.queue, 1)...)
		if n := r.src.lists.Load(); n != lists {
			t.Fatalf("a pass with a quarter of the lane free (%d passes, want %d)", n, lists)
		}
		got = append(got, takeKeys(t, r.queue, 1)...)
		if len(got) >= 10 {
			break
		}
		waitFor(t, "the halted pass to resume", func() bool {
			return r.src.lists.Load() == lists+1 && r.queue.Stats().Depth == 4
		})
	}
	if want := nsNames(names(10)...); !slices.Equal(got, want) {
		t.Errorf("keys served in the order %v, want %v (each once, resuming after the cursor)", got, want)
	}
	if h := r.rec.Stats().Halted; h < 4 {
		t.Errorf("Stats().Halted = %d, want the halted passes counted (at least 4)", h)
	}
}

func TestRunReturnsWhenQueueClosed(t *testing.T) {
	r := newRig(t, 100, changedObjs("a"))
	r.lead(1)
	r.queue.Close()
	if err := r.rec.Run(context.Background()); !errors.Is(err, queue.ErrClosed) {
		t.Fatalf("Run = %v, want queue.ErrClosed", err)
	}
	if h := r.rec.Healthy(); !errors.Is(h, ErrNotRunning) || !strings.Contains(h.Error(), "closed") {
		t.Errorf("Healthy after Run returned = %v, want ErrNotRunning saying why", h)
	}
	if err := r.rec.Run(context.Background()); !errors.Is(err, base.ErrAlreadyStarted) {
		t.Errorf("second Run = %v, want ErrAlreadyStarted", err)
	}
	if st := r.rec.Stats(); st.Passes["closed"] != 1 {
		t.Errorf("Stats().Passes = %v, want one closed", st.Passes)
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

// Every pass is counted by result in Stats and the instruments, and
// ReconcileAll's error says why it ended.
func TestReconcilePassResults(t *testing.T) {
	listErr := errors.New("cache gone")
	for _, tc := range []struct {
		result  string
		objects int
		setup   func(r *rig) context.Context
		wantErr error
	}{
		{"completed", 3, func(r *rig) context.Context { return context.Background() }, nil},
		{"halted", 3, func(r *rig) context.Context { r.queue.SetCapacity(1); return context.Background() }, queue.ErrFull},
		{"not_leader", 3, func(r *rig) context.Context { r.loseTo("other", 2); return context.Background() }, ErrNotLeader},
		{"error", 3, func(r *rig) context.Context { r.src.listErr = listErr; return context.Background() }, listErr},
		{"canceled", 300, func(r *rig) context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}, context.Canceled},
		{"closed", 3, func(r *rig) context.Context { r.queue.Close(); return context.Background() }, queue.ErrClosed},
	} {
		t.Run(tc.result, func(t *testing.T) {
			r := newRig(t, 1000, changedObjs(fmtNames(tc.objects)...))
			r.lead(1)
			ctx := tc.setup(r)
			_, err := r.rec.ReconcileAll(ctx)
			if (tc.wantErr == nil) != (err == nil) || !errors.Is(err, tc.wantErr) {
				t.Errorf("ReconcileAll error = %v, want %v", err, tc.wantErr)
			}
			st := r.rec.Stats()
			if len(st.Passes) != 1 || st.Passes[tc.result] != 1 {
				t.Errorf("Stats().Passes = %v, want {%s: 1}", st.Passes, tc.result)
			}
			if v := r.meter.value(t, "quietpatch.reconcile.passes", resultAttr, tc.result); v != 1 {
				t.Errorf("reconcile.passes{result=%s} = %d, want 1", tc.result, v)
			}
			if v := r.meter.value(t, "quietpatch.reconcile.duration", resultAttr, tc.result); v != 1 {
				t.Errorf("reconcile.duration{result=%s} count = %d, want 1", tc.result, v)
			}
		})
	}
}

func TestNewReconcilerValidation(t *testing.T) {
	q, err := newQueue(Options{Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	type args struct {
		src  statuspatch.Source[*tObj]
		comp statuspatch.StatusComputer[*tObj, []metav1.Condition, tPayload]
		q    *queue.Queue[types.NamespacedName]
		l    Leader
		opts Options
	}
	valid := func() args {
		return args{src: &fakeSource{}, comp: &tComputer{}, q: q, l: newFakeObserver("me")}
	}
	cases := []struct {
		name      string
		mutate    func(*args)
		wantField string // "" means valid
	}{
		{"valid with defaults", func(*args) {}, ""},
		{"no source", func(a *args) { a.src = nil }, "Source"},
		{"no computer", func(a *args) { a.comp = nil }, "Computer"},
		{"no queue", func(a *args) { a.q = nil }, "Queue"},
		{"no leader", func(a *args) { a.l = nil }, "Leader"},
		{"empty identity", func(a *args) { a.l = newFakeObserver("") }, "Leader"},
		{"negative interval", func(a *args) { a.opts.Interval = -time.Second }, "Interval"},
		{"negative capacity", func(a *args) { a.opts.Capacity = -1 }, "Capacity"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := valid()
			c.mutate(&a)
			r, err := NewReconciler(a.src, a.comp, a.q, a.l, a.opts, nil)
			if c.wantField == "" {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				if r.opts.Interval != DefaultInterval || r.opts.Name != DefaultName {
					t.Errorf("defaults: interval %s name %q, want %s %q", r.opts.Interval, r.opts.Name, DefaultInterval, DefaultName)
				}
				return
			}
			var ce *base.ConfigError
			if !errors.As(err, &ce) || ce.Field != c.wantField || !errors.Is(err, base.ErrInvalidConfig) {
				t.Errorf("err = %v, want a *base.ConfigError for %s wrapping ErrInvalidConfig", err, c.wantField)
			}
		})
	}
}
