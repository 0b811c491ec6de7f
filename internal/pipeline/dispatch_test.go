package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/internal/queue"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

type tDispatcher = Dispatcher[*tObj, []metav1.Condition, tPayload]

// drig wires a dispatcher to fakes. Set the hooks of comp, src and pat
// before start.
type drig struct {
	obs   *fakeObserver
	src   *fakeSource
	comp  *tComputer
	queue *queue.Queue[types.NamespacedName]
	pat   *recordingPatcher
	d     *tDispatcher
	meter *testMeter
	logs  *captureHandler
	clock *clocktesting.FakeClock
}

func newDrig(t *testing.T, mutate ...func(*Options)) *drig {
	t.Helper()
	r := &drig{
		obs:   newFakeObserver("me"),
		src:   &fakeSource{},
		comp:  &tComputer{},
		pat:   &recordingPatcher{},
		meter: newTestMeter(t),
		logs:  newCapture(slog.LevelDebug),
		clock: clocktesting.NewFakeClock(testStart()),
	}
	opts := Options{
		Name:         "test",
		Capacity:     100,
		PatchTimeout: 10 * time.Second,
		Clock:        r.clock,
		Logger:       slog.New(r.logs),
	}
	for _, m := range mutate {
		m(&opts)
	}
	var err error
	if r.queue, err = newQueue(opts); err != nil {
		t.Fatal(err)
	}
	metrics := NewMetrics(r.meter.provider.Meter("test"), opts)
	if r.d, err = NewDispatcher(r.queue, r.src, r.comp, r.pat, r.obs, opts, metrics); err != nil {
		t.Fatal(err)
	}
	unregister, err := metrics.Register(r.queue, nil, r.d.Stats)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unregister)
	return r
}

func withWorkers(n int) func(*Options) { return func(o *Options) { o.Workers = n } }

func (r *drig) lead(epoch int64) {
	r.obs.Set(leader.Claim{Holder: "me", Expiry: r.clock.Now().Add(time.Hour), Epoch: epoch})
}

// add puts changed objects with these names in the source (unless there
// already) and their keys in the pass lane.
func (r *drig) add(t *testing.T, ns ...string) {
	t.Helper()
	for _, n := range ns {
		if !r.src.has(nsKey(n)) {
			r.src.set(&tObj{Key: nsKey(n), RV: "1", Gen: 1})
		}
		if err := r.queue.Add(nsKey(n), queue.LanePass); err != nil {
			t.Fatalf("add %s: %v", n, err)
		}
	}
}

// start runs the dispatcher until stop (called at the end of the test at
// the latest), which cancels it and returns Run's result.
func (r *drig) start(t *testing.T) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.d.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	waitFor(t, "Run to subscribe", func() bool { return r.obs.subscribers() == 1 })
	return stop
}

// outcome returns the calls of outcome o, checking that the instrument
// agrees with Stats.
func (r *drig) outcome(t *testing.T, o outcome.Outcome) int64 {
	t.Helper()
	s := r.d.Stats().Patches[o] // read first: the counter only grows
	v := r.meter.value(t, "quietpatch.dispatch.patches", outcomeAttr, string(o))
	if v < s {
		t.Fatalf("Stats().Patches[%s] = %d, then the instrument reported %d", o, s, v)
	}
	return v
}

// dropped returns the keys dropped for reason, checking that the
// instrument agrees with Stats.
func (r *drig) dropped(t *testing.T, reason string) int64 {
	t.Helper()
	s := r.d.Stats().Dropped[reason]
	v := r.meter.value(t, "quietpatch.dispatch.dropped", reasonAttr, string(reason))
	if v < s {
		t.Fatalf("Stats().Dropped[%s] = %d, then the instrument reported %d", reason, s, v)
	}
	return v
}

// acquireWaiters is the number of goroutines waiting for a slot (only
// Run takes slots; only Run and Quiesce wait).
func (r *drig) acquireWaiters() int {
	f := r.d.flight
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waiting
}

// quiesced reports whether epoch is quiesced in the fence.
func (r *drig) quiesced(epoch int64) bool {
	f := r.d.flight
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.epoch != nil && f.epoch.epoch == epoch && f.epoch.quiesced
}

// idle reports whether every key was served and done.
func (r *drig) idle() bool {
	st := r.queue.Stats()
	return st.Depth == 0 && st.Held == 0
}

// hookGate is closed by the test to let hooks blocked on it go on; arrived
// counts them.
type hookGate struct {
	open    chan struct{}
	arrived atomic.Int64
}

func newHookGate() *hookGate { return &hookGate{open: make(chan struct{})} }

// wait blocks until the gate opens, at most 10 s.
func (g *hookGate) wait() {
	g.arrived.Add(1)
	select {
	case <-g.open:
	case <-time.After(10 * time.Second):
	}
}

func TestDispatchAppliesWhileLeader(t *testing.T) {
	r := newDrig(t, withWorkers(1))
	r.lead(1)
	r.add(t, "a", "b", "c")
	r.start(t)
	waitFor(t, "three patches applied", func() bool { return r.outcome(t, outcome.OK) == 3 })
	if got, want := r.pat.appliedKeys(), nsNames("a", "b", "c"); !slices.Equal(got, want) {
		t.Errorf("applied %v, want %v", got, want)
	}
	if v := r.meter.value(t, "quietpatch.dispatch.duration", outcomeAttr, string(outcome.OK)); v != 3 {
		t.Errorf("dispatch.duration{outcome=ok} count = %d, want 3", v)
	}
	waitFor(t, "the calls to end", func() bool { return r.d.Stats().InFlight == 0 })
	if err := r.d.Healthy(); err != nil {
		t.Errorf("Healthy = %v while running", err)
	}
}

// Compute late: the patch is built from the object as the Source has it
// when the key is served, not when it was queued.
func TestDispatchComputesThePatchWhenTheKeyIsServed(t *testing.T) {
	r := newDrig(t, withWorkers(1))
	r.lead(1)
	release := make(chan struct{})
	r.pat.fn = func(_ context.Context, p tPayload) error {
		if p.Key == "ns/first" {
			<-release
		}
		return nil
	}
	r.add(t, "first", "late")
	r.start(t)
	waitFor(t, "the first call", func() bool { return r.pat.calls.Load() == 1 })
	// "late" waits in the queue; its object changes in the cache.
	r.src.set(&tObj{Key: nsKey("late"), RV: "7", Gen: 3})
	close(release)
	waitFor(t, "both patches", func() bool { return r.outcome(t, outcome.OK) == 2 })
	if got, want := r.pat.appliedPatches()[1], (tPayload{Key: "ns/late", RV: "7", Gen: 3}); got != want {
		t.Errorf("patch of late = %+v, want %+v: built from the object when served", got, want)
	}
	if n := r.comp.patchCalls.Load(); n != 2 {
		t.Errorf("Patch built %d times, want 2", n)
	}
	var diffs int
	for _, rec := range r.logs.withMessage(slog.LevelDebug, "statuspatch: sending patch") {
		if rec.Attrs["key"] == "ns/late" && strings.Contains(rec.Attrs["diff"], "ObservedGeneration") {
			diffs++
		}
	}
	if diffs != 1 {
		t.Errorf("debug records with the diff of ns/late: %d, want 1", diffs)
	}
}

// A key served without a call: counted by reason, logged at debug, its
// permit given back (the next key is served).
func TestDispatchDropsWithoutACall(t *testing.T) {
	boom := func(method string) func(r *drig) {
		return func(r *drig) { r.comp.panicOn = map[string]string{"k": method} }
	}
	for _, tc := range []struct {
		label  string
		setup  func(r *drig)
		reason string
		built  bool // the computer built a patch
	}{
		{"the status is right by then", func(r *drig) { r.src.set(upToDate(&tObj{Key: nsKey("k"), RV: "1", Gen: 1})) }, dropUnchanged, false},
		{"the object is gone", func(r *drig) { r.src.remove(nsKey("k")) }, dropDeleted, false},
		{"Source.Get fails", func(r *drig) {
			r.src.onGet = func(k types.NamespacedName) error {
				if k.Name == "k" {
					return errors.New("cache broken")
				}
				return nil
			}
		}, dropError, false},
		{"Source.Get panics", func(r *drig) {
			r.src.onGet = func(k types.NamespacedName) error {
				if k.Name == "k" {
					panic("lister panicked")
				}
				return nil
			}
		}, dropError, false},
		{"Desired fails", func(r *drig) { r.src.set(&tObj{Key: nsKey("k"), RV: "1", Gen: 1, Fail: true}) }, dropError, false},
		{"Current panics", boom("Current"), dropError, false},
		{"Desired panics", boom("Desired"), dropError, false},
		{"Equal panics", boom("Equal"), dropError, false},
		{"Patch panics", boom("Patch"), dropError, true},
		{"Patch fails", boom("Patch error"), dropError, true},
	} {
		t.Run(tc.label, func(t *testing.T) {
			r := newDrig(t, withWorkers(1))
			r.lead(1)
			r.add(t, "k", "next")
			tc.setup(r)
			r.start(t)
			waitFor(t, "the next key's patch", func() bool { return r.outcome(t, outcome.OK) == 1 })
			if got := r.dropped(t, tc.reason); got != 1 {
				t.Errorf("dropped{%s} = %d, want 1", tc.reason, got)
			}
			if got := r.pat.appliedKeys(); !slices.Equal(got, nsNames("next")) {
				t.Errorf("applied %v, want only ns/next", got)
			}
			if built := r.comp.patchCalls.Load() == 2; built != tc.built {
				t.Errorf("patch of k built: %v, want %v", built, tc.built)
			}
			recs := r.logs.withMessage(slog.LevelDebug, "statuspatch: no patch sent")
			if len(recs) != 1 || recs[0].Attrs["key"] != "ns/k" || recs[0].Attrs["reason"] != string(tc.reason) {
				t.Errorf("debug records of drops: %+v, want one for ns/k, reason %s", recs, tc.reason)
			}
			if w := r.logs.records(slog.LevelWarn); len(w) != 0 {
				t.Errorf("warnings %+v, want none for a drop", w)
			}
		})
	}
}

func TestDispatchDropsWhenNotLeader(t *testing.T) {
	for _, c := range []struct {
		name  string
		claim func(now time.Time) leader.Claim
	}{
		{"nobody holds the lease", func(time.Time) leader.Claim { return leader.Claim{} }},
		{"another holder", func(now time.Time) leader.Claim {
			return leader.Claim{Holder: "other", Expiry: now.Add(time.Hour), Epoch: 1}
		}},
		{"our claim expired", func(now time.Time) leader.Claim {
			return leader.Claim{Holder: "me", Expiry: now, Epoch: 1}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newDrig(t)
			r.add(t, names(5)...)
			r.obs.Set(c.claim(r.clock.Now()))
			r.start(t)
			waitFor(t, "five drops", func() bool { return r.dropped(t, dropNotLeader) == 5 })
			if n := r.pat.calls.Load() + r.src.gets.Load(); n != 0 {
				t.Errorf("patcher or source called %d times while not leader", n)
			}
			if r.queue.Stats().Depth != 0 {
				t.Errorf("queue still holds %d keys", r.queue.Stats().Depth)
			}
		})
	}
}

// No call starts with less than the claim margin left.
func TestDispatchClaimMargin(t *testing.T) {
	for _, tc := range []struct {
		label  string
		margin time.Duration
		left   time.Duration
		drop   bool
	}{
		{"default margin, 100ms left", 0, 100 * time.Millisecond, true},
		{"default margin, 2s left", 0, 2 * time.Second, false},
		{"margin 3s, 2s left", 3 * time.Second, 2 * time.Second, true},
	} {
		t.Run(tc.label, func(t *testing.T) {
			r := newDrig(t, func(o *Options) { o.ClaimMargin = tc.margin })
			r.obs.Set(leader.Claim{Holder: "me", Expiry: r.clock.Now().Add(tc.left), Epoch: 1})
			r.add(t, "a")
			r.start(t)
			waitFor(t, "the key handled", func() bool {
				return r.dropped(t, dropClaimEnding)+r.outcome(t, outcome.OK) == 1
			})
			if got := r.dropped(t, dropClaimEnding) == 1; got != tc.drop {
				t.Errorf("dropped for claim_ending: %v, want %v", got, tc.drop)
			}
		})
	}
}

// The default margin follows the latency but never above PatchTimeout/2:
// after slow calls, a claim that a healthy holder keeps (more than half a
// PatchTimeout left) still gets calls — the estimate only moves when calls
// are made, so a margin above the claim would stop them for good.
func TestDispatchClaimMarginIsCapped(t *testing.T) {
	r := newDrig(t, func(o *Options) { o.PatchTimeout = 2 * time.Second })
	r.lead(1)
	var slow atomic.Bool
	slow.Store(true)
	r.pat.fn = func(context.Context, tPayload) error {
		if slow.Load() {
			r.clock.Step(3 * time.Second) // a slow call: latency 3s
		}
		return nil
	}
	r.add(t, "slow")
	r.start(t)
	waitFor(t, "the slow call", func() bool { return r.outcome(t, outcome.OK) == 1 })
	if got := r.d.claimMargin(); got != time.Second {
		t.Errorf("margin %v after a 3s call, want PatchTimeout/2 = 1s", got)
	}
	slow.Store(false)
	r.obs.Set(leader.Claim{Holder: "me", Expiry: r.clock.Now().Add(1500 * time.Millisecond), Epoch: 1})
	r.add(t, "next")
	waitFor(t, "the next call", func() bool { return r.outcome(t, outcome.OK) == 2 })
}

// A key whose claim was read under an epoch older than one calls were
// already made under is dropped: the fence is checked when the call is
// made, after the patch was built.
func TestDispatchStaleEpoch(t *testing.T) {
	r := newDrig(t, withWorkers(2))
	r.lead(7)
	g := newHookGate()
	r.comp.hook = func(method string, o *tObj) {
		if method == "Patch" && o.Key.Name == "old" {
			g.wait()
		}
	}
	r.add(t, "old")
	r.start(t)
	waitFor(t, "old built under epoch 7", func() bool { return g.arrived.Load() == 1 })
	r.lead(8) // lost and regained: calls are made under epoch 8 now
	r.add(t, "new")
	waitFor(t, "the call under epoch 8", func() bool { return r.outcome(t, outcome.OK) == 1 })
	close(g.open)
	waitFor(t, "old dropped", func() bool { return r.dropped(t, dropStaleEpoch) == 1 })
	if got := r.pat.appliedKeys(); !slices.Equal(got, nsNames("new")) {
		t.Errorf("applied %v, want only the epoch-8 patch", got)
	}
}

// A call in flight is cancelled as soon as the claim it runs under ends
// involuntarily, not left to its deadline (an hour here).
func TestDispatchCancelsCallsWhenTheClaimEnds(t *testing.T) {
	for _, tc := range []struct {
		label string
		next  func(r *drig) leader.Claim
	}{
		{"a new epoch of ours", func(r *drig) leader.Claim {
			return leader.Claim{Holder: "me", Expiry: r.clock.Now().Add(time.Hour), Epoch: 8}
		}},
		{"another holder", func(r *drig) leader.Claim {
			return leader.Claim{Holder: "other", Expiry: r.clock.Now().Add(time.Hour), Epoch: 8}
		}},
		{"ours, run out", func(r *drig) leader.Claim {
			return leader.Claim{Holder: "me", Expiry: r.clock.Now(), Epoch: 7}
		}},
		{"nobody", func(*drig) leader.Claim { return leader.Claim{Epoch: 7} }},
	} {
		t.Run(tc.label, func(t *testing.T) {
			r := newDrig(t, withWorkers(1), func(o *Options) { o.PatchTimeout = time.Hour })
			r.lead(7)
			ended := make(chan error, 1)
			r.pat.fn = func(ctx context.Context, _ tPayload) error {
				<-ctx.Done()
				ended <- ctx.Err()
				return ctx.Err()
			}
			r.add(t, "a")
			r.start(t)
			waitFor(t, "the call in flight", func() bool { return r.pat.calls.Load() == 1 })
			r.obs.Set(tc.next(r))
			select {
			case err := <-ended:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("call ended with %v, want canceled", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the call is still running after its claim ended")
			}
			waitFor(t, "the canceled outcome", func() bool { return r.outcome(t, outcome.Canceled) == 1 })
			if u := r.d.Stats().Unanswered; u != 1 {
				t.Errorf("Unanswered = %d, want 1", u)
			}
		})
	}
}

// A renewal of the same claim (same epoch, later expiry) cancels nothing.
// A notification that lags behind the claim — here an older claim, not
// ours, delivered after a call began under the current one — does not end
// the current claim's calls: the fence reads the claim when it is told.
// (It did: a shard's dispatcher then dropped every key, not_leader, for
// the rest of an epoch it held.)
func TestDispatchLaggingNotificationDoesNotEndTheClaim(t *testing.T) {
	r := newDrig(t, withWorkers(1))
	r.lead(2)
	inCall, release := make(chan context.Context, 1), make(chan struct{})
	r.pat.fn = func(ctx context.Context, p tPayload) error {
		if p.Key == "ns/a" {
			inCall <- ctx
			<-release
		}
		return nil
	}
	r.add(t, "a")
	r.start(t)
	ctx := <-inCall
	r.obs.notifyOnly(leader.Claim{Holder: "other", Epoch: 1, Expiry: r.clock.Now().Add(time.Minute)})
	waitFor(t, "the notification taken", func() bool { return r.obs.pendingClaims() == 0 })
	r.obs.notifyOnly(r.obs.Current()) // a second one: the first was handled once this one is taken
	waitFor(t, "the notification taken", func() bool { return r.obs.pendingClaims() == 0 })
	if ctx.Err() != nil {
		t.Error("the call of the current claim was cancelled by a lagging notification")
	}
	close(release)
	r.add(t, "b")
	waitFor(t, "b patched", func() bool { return r.outcome(t, outcome.OK) == 2 })
	if n := r.dropped(t, dropNotLeader); n != 0 {
		t.Errorf("%d keys dropped not_leader under the current claim", n)
	}
}

func TestDispatchRenewalDoesNotCancel(t *testing.T) {
	r := newDrig(t, withWorkers(1))
	r.lead(3)
	release := make(chan struct{})
	r.pat.fn = func(ctx context.Context, _ tPayload) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.add(t, "a")
	r.start(t)
	waitFor(t, "the call in flight", func() bool { return r.pat.calls.Load() == 1 })
	r.clock.Step(time.Minute)
	r.lead(3) // renewed
	r.obs.settle(t)
	close(release)
	waitFor(t, "the ok outcome", func() bool { return r.outcome(t, outcome.OK) == 1 })
}

// Quiesce — the claimer giving its claim up on purpose — stops new calls
// (keys served are dropped, released), waits for the call in flight
// without cancelling it, and reports whether every call got an answer.
func TestDispatchQuiesce(t *testing.T) {
	gr := schema.GroupResource{Resource: "widgets"}
	for _, tc := range []struct {
		label    string
		result   error // of the call in flight
		ctxLimit time.Duration
		want     bool
	}{
		{"answered: ok", nil, time.Hour, true},
		{"answered: conflict", apierrors.NewConflict(gr, "a", errors.New("changed")), time.Hour, true},
		{"answered: not found", apierrors.NewNotFound(gr, "a"), time.Hour, true},
		{"no answer: server timeout", apierrors.NewTimeoutError("gave up", 1), time.Hour, false},
		{"no answer: 500", apierrors.NewInternalError(errors.New("etcd")), time.Hour, false},
		{"no answer: connection reset", errors.New("connection reset by peer"), time.Hour, false},
		{"the call outlives Quiesce's context", nil, 50 * time.Millisecond, false},
	} {
		t.Run(tc.label, func(t *testing.T) {
			r := newDrig(t, withWorkers(2))
			r.lead(4)
			release := make(chan struct{})
			var cancelled atomic.Bool
			r.pat.fn = func(ctx context.Context, p tPayload) error {
				if p.Key != "ns/first" {
					return nil
				}
				select {
				case <-release:
					return tc.result
				case <-ctx.Done():
					cancelled.Store(true)
					return ctx.Err()
				}
			}
			r.add(t, "first")
			r.start(t)
			waitFor(t, "the call in flight", func() bool { return r.pat.calls.Load() == 1 })
			ctx, cancel := context.WithTimeout(context.Background(), tc.ctxLimit)
			defer cancel()
			got := make(chan bool, 1)
			go func() { got <- r.d.Quiesce(ctx, 4) }()
			if tc.ctxLimit < time.Second {
				if v := <-got; v != tc.want {
					t.Errorf("Quiesce = %v, want %v", v, tc.want)
				}
				close(release)
				return
			}
			waitFor(t, "the epoch quiesced", func() bool { return r.quiesced(4) })
			r.add(t, "second") // a free permit: served at once, and dropped
			waitFor(t, "the key served after Quiesce dropped", func() bool { return r.dropped(t, dropReleased) == 1 })
			select {
			case v := <-got:
				t.Fatalf("Quiesce returned %v with a call in flight", v)
			default:
			}
			close(release)
			if v := <-got; v != tc.want {
				t.Errorf("Quiesce = %v, want %v", v, tc.want)
			}
			if cancelled.Load() {
				t.Error("the call in flight was cancelled by Quiesce")
			}
			if n := r.pat.calls.Load(); n != 1 {
				t.Errorf("%d calls, want 1: none may start after Quiesce", n)
			}
			// A later epoch dispatches again.
			r.lead(5)
			r.add(t, "third")
			waitFor(t, "the next epoch's patch applied", func() bool { return r.pat.calls.Load() == 2 })
		})
	}
}

// Quiesce with no call in flight answers at once: true when no call was
// made under a newer epoch.
func TestDispatchQuiesceWithoutCalls(t *testing.T) {
	r := newDrig(t)
	r.lead(3)
	r.add(t, "a")
	r.start(t)
	waitFor(t, "a call under epoch 3", func() bool { return r.outcome(t, outcome.OK) == 1 })
	for _, tc := range []struct {
		epoch int64
		want  bool
	}{{3, true}, {9, true}, {3, false}} { // after 9, epoch 3 is older than the newest
		if got := r.d.Quiesce(context.Background(), tc.epoch); got != tc.want {
			t.Errorf("Quiesce(%d) = %v, want %v", tc.epoch, got, tc.want)
		}
	}
}

// The StatusComputer and the Patcher are never called twice at once for
// one key, while several keys are served at once.
func TestDispatchKeysAreExclusiveAcrossWorkers(t *testing.T) {
	const nWorkers, nKeys, readds = 4, 8, 400
	r := newDrig(t, withWorkers(nWorkers))
	r.lead(1)
	var (
		mu       sync.Mutex
		active   = map[string]int{} // key → serves between Source.Get and the end of its call
		overlaps []string
		maxKeys  int
		served   = map[string]int{}
	)
	r.src.onGet = func(k types.NamespacedName) error {
		mu.Lock()
		defer mu.Unlock()
		if active[k.String()]++; active[k.String()] > 1 {
			overlaps = append(overlaps, "serve of "+k.String())
		}
		maxKeys = max(maxKeys, len(active))
		return nil
	}
	r.comp.hook = func(method string, o *tObj) {
		mu.Lock()
		defer mu.Unlock()
		if active[o.Key.String()] != 1 {
			overlaps = append(overlaps, fmt.Sprintf("%s of %s in %d serves", method, o.Key, active[o.Key.String()]))
		}
	}
	barrier := newHookGate()
	r.pat.fn = func(_ context.Context, p tPayload) error {
		if barrier.arrived.Load() < nWorkers {
			if barrier.arrived.Add(1) == nWorkers {
				close(barrier.open)
			}
			select { // the first calls wait for each other: all workers busy
			case <-barrier.open:
			case <-time.After(10 * time.Second):
			}
		}
		runtime.Gosched()
		mu.Lock()
		defer mu.Unlock()
		if active[p.Key] != 1 {
			overlaps = append(overlaps, fmt.Sprintf("Patch of %s in %d serves", p.Key, active[p.Key]))
		}
		served[p.Key]++
		if active[p.Key]--; active[p.Key] == 0 {
			delete(active, p.Key)
		}
		return nil
	}
	r.add(t, names(nKeys)...)
	r.start(t)
	for i := range readds { // keys come back while they are served
		lane := queue.LanePass
		if i%3 == 0 {
			lane = queue.LaneFresh
		}
		_ = r.queue.Add(nsKey(fmt.Sprintf("o%02d", i%nKeys)), lane)
		runtime.Gosched()
	}
	waitFor(t, "every key served", func() bool { return r.idle() && r.d.Stats().InFlight == 0 })
	mu.Lock()
	defer mu.Unlock()
	if len(overlaps) > 0 {
		t.Errorf("one key served twice at once: %v", overlaps)
	}
	if maxKeys != nWorkers {
		t.Errorf("at most %d keys served at once, want %d", maxKeys, nWorkers)
	}
	if len(served) != nKeys {
		t.Errorf("%d keys served, want %d", len(served), nKeys)
	}
}

// Never more calls in flight than the limit, and no goroutine per waiting
// key: the dispatcher starts one per call it may make.
func TestDispatchCallsNeverExceedWorkers(t *testing.T) {
	const nWorkers, nKeys = 3, 20
	r := newDrig(t, withWorkers(nWorkers))
	r.lead(1)
	release := make(chan struct{})
	var inFlight, maxInFlight atomic.Int64
	r.pat.fn = func(context.Context, tPayload) error {
		n := inFlight.Add(1)
		for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
		}
		<-release
		inFlight.Add(-1)
		return nil
	}
	r.add(t, names(nKeys)...)
	before := runtime.NumGoroutine()
	r.start(t)
	waitFor(t, "the workers busy", func() bool { return inFlight.Load() == nWorkers })
	if st := r.queue.Stats(); st.Held != nWorkers || st.Depth != nKeys-nWorkers {
		t.Errorf("queue %+v: want %d keys held and the others waiting", st, nWorkers)
	}
	if st := r.d.Stats(); st.InFlight != nWorkers || st.Limit != nWorkers {
		t.Errorf("Stats: in flight %d, limit %d; want %d, %d", st.InFlight, st.Limit, nWorkers, nWorkers)
	}
	// Run, the claim watch and one goroutine per call.
	if n := runtime.NumGoroutine() - before; n > nWorkers+2 {
		t.Errorf("%d goroutines started with %d calls in flight and %d keys waiting, want at most %d",
			n, nWorkers, nKeys-nWorkers, nWorkers+2)
	}
	close(release)
	waitFor(t, "every patch", func() bool { return r.outcome(t, outcome.OK) == nKeys })
	if m := maxInFlight.Load(); m != nWorkers {
		t.Errorf("up to %d calls in flight, want %d", m, nWorkers)
	}
}

// A 429's Retry-After holds back every call, including those of workers
// that had their key and built its patch before the 429 came back: the
// window is checked when a call is made. They build their patch again
// once it is over.
func TestDispatchRetryAfterHoldsEveryWorker(t *testing.T) {
	r := newDrig(t, withWorkers(4))
	r.lead(1)
	built := newHookGate() // b, c and d built their patch and wait on it
	r.comp.hook = func(method string, o *tObj) {
		if method == "Patch" && o.Key.Name != "a" && r.comp.patchCalls.Load() <= 4 {
			built.wait()
		}
	}
	var (
		mu     sync.Mutex
		starts []time.Time // fake time at which each call after the 429 began
	)
	r.pat.fn = func(_ context.Context, p tPayload) error {
		if p.Key == "ns/a" {
			eventually(func() bool { return built.arrived.Load() == 3 }) // the others built
			return apierrors.NewTooManyRequests("slow down", 1)          // Retry-After: 1s
		}
		mu.Lock()
		starts = append(starts, r.clock.Now())
		mu.Unlock()
		return nil
	}
	r.add(t, "a", "b", "c", "d")
	r.start(t)
	waitFor(t, "the 429", func() bool { return r.d.Stats().RetryAfters == 1 })
	t429 := r.clock.Now()
	if b := r.d.Stats().Backoff; b != time.Second {
		t.Errorf("Backoff = %s after the 429, want 1s", b)
	}
	close(built.open)
	// Whoever must act when the window ends waits on the clock: the three
	// workers about to call, and Run, holding the permit the 429 gave
	// back, before it takes another key.
	// (Or calls begin: the failure this test is about.)
	waitFor(t, "the workers and Run to wait for the window", func() bool {
		return r.clock.Waiters() == 4 || r.pat.calls.Load() > 1
	})
	r.clock.Step(999 * time.Millisecond)
	if n := r.pat.calls.Load(); n != 1 {
		t.Errorf("%d calls before the window ended, want 1 (the 429)", n)
	}
	r.clock.Step(time.Millisecond)
	waitFor(t, "the calls after the window", func() bool { return r.outcome(t, outcome.OK) == 3 })
	mu.Lock()
	defer mu.Unlock()
	for _, at := range starts {
		if at.Before(t429.Add(time.Second)) {
			t.Errorf("a call began %s after the 429, inside its 1s Retry-After window", at.Sub(t429))
		}
	}
	if n := r.comp.patchCalls.Load(); n != 7 {
		t.Errorf("%d patches built, want 7: b, c and d built again after the window", n)
	}
	if st := r.d.Stats(); st.RetryAfters != 1 || st.Backoff != 0 || st.Patches[outcome.Throttled] != 1 {
		t.Errorf("Stats %+v, want one Retry-After honoured, no back-off left, one throttled call", st)
	}
}

// With one call allowed (fixed, or the adaptive limit at its start), the
// key after a 429 is served once the Retry-After window is over: the
// dispatcher waiting for a permit does not sleep through it.
func TestDispatchRetryAfterDoesNotStall(t *testing.T) {
	for _, tc := range []struct {
		label   string
		workers int
	}{{"one worker", 1}, {"adaptive", 0}} {
		t.Run(tc.label, func(t *testing.T) {
			r := newDrig(t, withWorkers(tc.workers))
			r.lead(1)
			r.pat.fn = func(_ context.Context, p tPayload) error {
				if p.Key == "ns/a" {
					return apierrors.NewTooManyRequests("slow down", 1)
				}
				return nil
			}
			r.add(t, "a", "b")
			r.start(t)
			waitFor(t, "the 429", func() bool { return r.d.Stats().RetryAfters == 1 })
			// The window is waited out on a timer of the fake clock: step it
			// once the timer exists, or the step comes before it.
			waitFor(t, "the dispatcher waiting out the window", r.clock.HasWaiters)
			r.clock.Step(time.Second)
			waitFor(t, "the next key served after the window", func() bool { return r.outcome(t, outcome.OK) == 1 })
		})
	}
}

// Stopping the dispatcher: no new call, the call in flight runs to its
// answer (not cancelled: a cancelled write may still be executed), the
// keys still queued are dropped (shutdown), then Run returns.
func TestDispatchStop(t *testing.T) {
	r := newDrig(t, withWorkers(1))
	r.lead(1)
	release := make(chan struct{})
	var cancelled atomic.Bool
	r.pat.fn = func(ctx context.Context, _ tPayload) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			cancelled.Store(true)
			return ctx.Err()
		}
	}
	r.add(t, names(4)...)
	stop := r.start(t)
	waitFor(t, "a call in flight", func() bool { return r.pat.calls.Load() == 1 && r.acquireWaiters() == 1 })
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	waitFor(t, "Run to stop waiting for a permit", func() bool { return r.acquireWaiters() == 0 })
	select {
	case err := <-stopped:
		t.Fatalf("Run returned (%v) with a call in flight", err)
	default:
	}
	if r.queue.Stats().Depth != 3 || r.d.Healthy() != nil {
		t.Errorf("queue holds %d keys, Healthy = %v: want the keys still queued and Run running while the call runs", r.queue.Stats().Depth, r.d.Healthy())
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("Run = %v, want nil on cancel", err)
	}
	if cancelled.Load() {
		t.Error("the call in flight was cancelled by the stop")
	}
	if n := r.pat.calls.Load(); n != 1 {
		t.Errorf("%d calls, want 1: none after the stop", n)
	}
	if v := r.outcome(t, outcome.OK); v != 1 {
		t.Errorf("outcome{ok} = %d, want 1", v)
	}
	if v := r.dropped(t, dropShutdown); v != 3 {
		t.Errorf("dropped{shutdown} = %d, want 3", v)
	}
	if r.queue.Stats().Depth != 0 {
		t.Errorf("queue holds %d keys after stop", r.queue.Stats().Depth)
	}
	if err := r.d.Healthy(); !errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), "context cancelled") {
		t.Errorf("Healthy after stop = %v, want ErrNotRunning saying why", err)
	}
}

// A Patcher that ignores its context is waited for at most twice
// PatchTimeout when the dispatcher stops.
func TestDispatchStopDoesNotWaitForeverForAPatcherIgnoringItsContext(t *testing.T) {
	r := newDrig(t, withWorkers(1), func(o *Options) { o.PatchTimeout = 20 * time.Millisecond })
	r.lead(1)
	release := make(chan struct{})
	defer close(release) // after the test: let the stuck call end
	r.pat.fn = func(context.Context, tPayload) error { <-release; return nil }
	r.add(t, "stuck")
	stop := r.start(t)
	waitFor(t, "the call", func() bool { return r.pat.calls.Load() == 1 })
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if recs := r.logs.records(slog.LevelError); len(recs) != 1 || !strings.Contains(recs[0].Message, "ignores its context") {
		t.Errorf("error records %+v, want one about the Patcher ignoring its context", recs)
	}
}

func TestDispatcherHealthy(t *testing.T) {
	r := newDrig(t, withWorkers(1), func(o *Options) { o.PatchTimeout = time.Second })
	r.lead(1)
	if err := r.d.Healthy(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Healthy before Run = %v, want ErrNotRunning", err)
	}
	release := make(chan struct{})
	r.pat.fn = func(context.Context, tPayload) error {
		<-release // ignores its context
		return nil
	}
	r.add(t, "stuck")
	stop := r.start(t)
	waitFor(t, "the call to start", func() bool { return r.pat.calls.Load() == 1 })
	if err := r.d.Healthy(); err != nil {
		t.Errorf("Healthy during a call = %v", err)
	}
	r.clock.Step(2 * time.Second)
	if err := r.d.Healthy(); err != nil {
		t.Errorf("Healthy with a call running 2×PatchTimeout = %v, want nil (more is stuck)", err)
	}
	r.clock.Step(time.Second)
	if err := r.d.Healthy(); err == nil || !strings.Contains(err.Error(), "stuck") {
		t.Errorf("Healthy with a call running 3×PatchTimeout = %v, want a stuck error", err)
	}
	close(release)
	waitFor(t, "the call to end", func() bool { return r.d.Healthy() == nil })
	_ = stop()
	if err := r.d.Healthy(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Healthy after Run = %v, want ErrNotRunning", err)
	}
}

func TestDispatchDrainsClosedQueue(t *testing.T) {
	r := newDrig(t)
	r.lead(1)
	r.add(t, names(3)...)
	r.queue.Close()
	if err := r.d.Run(context.Background()); err != nil {
		t.Fatalf("Run = %v, want nil once the closed queue is drained", err)
	}
	if n := len(r.pat.appliedKeys()); n != 3 {
		t.Errorf("applied %d patches, want 3", n)
	}
	if err := r.d.Healthy(); !errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), "drained") {
		t.Errorf("Healthy = %v, want ErrNotRunning saying the queue was drained", err)
	}
	if err := r.d.Run(context.Background()); !errors.Is(err, base.ErrAlreadyStarted) {
		t.Errorf("second Run = %v, want ErrAlreadyStarted", err)
	}
}

// Outcomes are classified; a failed patch is not retried (the next pass
// finds the object still changed); failures that need attention are
// warnings, the others debug records.
func TestDispatchClassifiesAndDoesNotRetry(t *testing.T) {
	gr := schema.GroupResource{Group: "gateway.networking.k8s.io", Resource: "httproutes"}
	for _, c := range []struct {
		err      error
		want     outcome.Outcome
		wantWarn bool
	}{
		{apierrors.NewConflict(gr, "a", errors.New("the object has been modified")), outcome.Conflict, false},
		{apierrors.NewNotFound(gr, "a"), outcome.NotFound, false},
		{apierrors.NewForbidden(gr, "a", errors.New("rbac")), outcome.Forbidden, true},
		{apierrors.NewUnauthorized("token expired"), outcome.Unauthorized, true},
		{apierrors.NewInvalid(schema.GroupKind{Kind: "HTTPRoute"}, "a", nil), outcome.Invalid, true},
		{apierrors.NewTooManyRequests("slow down", 1), outcome.Throttled, false},
		{apierrors.NewForbidden(gr, "a", errors.New(outcome.FenceMessage+" the Lease ns/l is held by b, not a")), outcome.Fenced, false},
		{apierrors.NewTimeoutError("server gave up", 1), outcome.Abandoned, true},
		{apierrors.NewServerTimeout(gr, "patch", 1), outcome.Timeout, true},
		{errors.New("connection refused"), outcome.Failed, true},
	} {
		t.Run(string(c.want), func(t *testing.T) {
			r := newDrig(t)
			r.lead(1)
			r.pat.fn = func(context.Context, tPayload) error { return c.err }
			r.add(t, "a")
			r.start(t)
			waitFor(t, "the outcome", func() bool { return r.outcome(t, c.want) == 1 })
			r.clock.Step(2 * time.Second) // past a Retry-After
			waitFor(t, "the key done", r.idle)
			if n := r.pat.calls.Load(); n != 1 {
				t.Errorf("patcher called %d times, want 1: failed patches are not retried", n)
			}
			if r.queue.Stats().Depth != 0 {
				t.Error("the failed key went back to the queue")
			}
			fails := r.logs.withMessage(slog.LevelDebug, "statuspatch: patch failed; not retried, the next pass recomputes it")
			if len(fails) != 1 || (fails[0].Level == slog.LevelWarn) != c.wantWarn || fails[0].Attrs["outcome"] != string(c.want) {
				t.Errorf("records of the failure: %+v, want one (warning: %v) with outcome %s", fails, c.wantWarn, c.want)
			}
		})
	}
}

// A failure that warns warns at most once a minute per outcome.
func TestDispatchFailureWarningsAtMostOncePerMinute(t *testing.T) {
	r := newDrig(t)
	r.lead(1)
	r.pat.fn = func(context.Context, tPayload) error {
		return apierrors.NewForbidden(schema.GroupResource{Resource: "widgets"}, "a", errors.New("rbac"))
	}
	r.start(t)
	for i, step := range []struct {
		advance   time.Duration
		wantWarns int
	}{{0, 1}, {30 * time.Second, 1}, {31 * time.Second, 2}} {
		r.clock.Step(step.advance)
		r.add(t, "a")
		waitFor(t, "the failure logged", func() bool {
			return len(r.logs.withMessage(slog.LevelDebug, "statuspatch: patch failed; not retried, the next pass recomputes it")) == i+1
		})
		if n := len(r.logs.records(slog.LevelWarn)); n != step.wantWarns {
			t.Errorf("failure %d: %d warnings, want %d", i+1, n, step.wantWarns)
		}
		waitFor(t, "the key done", r.idle)
	}
}

func TestDispatchHungPatchEndsAtDeadline(t *testing.T) {
	const timeout = 50 * time.Millisecond
	r := newDrig(t, func(o *Options) { o.PatchTimeout = timeout })
	r.lead(1)
	// The call's deadline is set before the patcher runs, and a busy
	// machine may delay the patcher's start: so check the deadline itself
	// (no later than PatchTimeout after the call began) and that the call
	// ended at it, not before.
	var (
		hasDeadline          atomic.Bool
		left, overshootEnded atomic.Int64
	)
	r.pat.fn = func(ctx context.Context, _ tPayload) error {
		dl, ok := ctx.Deadline()
		hasDeadline.Store(ok)
		left.Store(int64(time.Until(dl)))
		<-ctx.Done() // hangs until the deadline
		overshootEnded.Store(int64(time.Since(dl)))
		return ctx.Err()
	}
	r.add(t, "hung")
	r.start(t)
	waitFor(t, "the timeout outcome", func() bool { return r.outcome(t, outcome.Timeout) == 1 })
	if !hasDeadline.Load() {
		t.Fatal("the patch call had no deadline")
	}
	if l := time.Duration(left.Load()); l > timeout {
		t.Errorf("the call had %s left on its deadline, want at most PatchTimeout %s", l, timeout)
	}
	if o := time.Duration(overshootEnded.Load()); o < 0 {
		t.Errorf("the call ended %s before its deadline", -o)
	}
	if u := r.d.Stats().Unanswered; u != 1 {
		t.Errorf("Unanswered = %d, want 1", u)
	}
}

func TestDispatchDeadlineIsMinOfTimeoutAndClaim(t *testing.T) {
	for _, c := range []struct {
		name         string
		patchTimeout time.Duration
		claimLeft    time.Duration
		want         time.Duration
	}{
		{"the claim about to expire shortens the deadline", time.Hour, 300 * time.Millisecond, 300 * time.Millisecond},
		{"PatchTimeout when the claim lasts longer", 2 * time.Second, time.Hour, 2 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newDrig(t, func(o *Options) {
				o.PatchTimeout = c.patchTimeout
				o.ClaimMargin = time.Millisecond // this test is about the deadline
			})
			r.obs.Set(leader.Claim{Holder: "me", Expiry: r.clock.Now().Add(c.claimLeft), Epoch: 1})
			got := make(chan time.Duration, 1)
			r.pat.fn = func(ctx context.Context, _ tPayload) error {
				before := time.Now()
				dl, ok := ctx.Deadline()
				if !ok {
					got <- -1
					return nil
				}
				got <- dl.Sub(before)
				return nil
			}
			r.add(t, "a")
			r.start(t)
			left := <-got
			// The deadline was set just before the call: a little of it
			// is already spent.
			if left > c.want || left < c.want-c.want/4 {
				t.Errorf("deadline in %s at call time, want about %s", left, c.want)
			}
		})
	}
}

// silentObserver's subscriptions never receive nor close: an Observer
// that implements Subscribe minimally.
type silentObserver struct{ *fakeObserver }

func (silentObserver) Subscribe() (<-chan leader.Claim, func()) { return nil, func() {} }

// Run returns on cancel whatever the Observer does with the channel of a
// cancelled subscription.
func TestDispatchRunReturnsWithAnObserverThatNeverClosesItsChannel(t *testing.T) {
	obs := silentObserver{newFakeObserver("me")}
	q, err := newQueue(Options{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDispatcher(q, &fakeSource{}, &tComputer{}, &recordingPatcher{}, obs, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	waitFor(t, "Run", func() bool { return d.Healthy() == nil })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
}

// writerObserver is an Observer with the claimer's AddWriter.
type writerObserver struct {
	*fakeObserver
	writers []leader.Writer
}

func (w *writerObserver) AddWriter(wr leader.Writer) func() {
	w.writers = append(w.writers, wr)
	return func() {}
}

// A dispatcher registers with a claimer, which quiesces it before it
// gives the Lease up.
func TestNewDispatcherRegistersAsWriter(t *testing.T) {
	obs := &writerObserver{fakeObserver: newFakeObserver("me")}
	q, err := newQueue(Options{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDispatcher(q, &fakeSource{}, &tComputer{}, &recordingPatcher{}, obs, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(obs.writers) != 1 || obs.writers[0] != leader.Writer(d) {
		t.Errorf("writers %v, want the dispatcher", obs.writers)
	}
}

func TestNewDispatcherValidation(t *testing.T) {
	q, err := newQueue(Options{Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	type args struct {
		q    *queue.Queue[types.NamespacedName]
		src  statuspatch.Source[*tObj]
		comp statuspatch.StatusComputer[*tObj, []metav1.Condition, tPayload]
		pat  statuspatch.Patcher[tPayload]
		l    Leader
		opts Options
	}
	valid := func() args {
		return args{q: q, src: &fakeSource{}, comp: &tComputer{}, pat: &recordingPatcher{}, l: newFakeObserver("me")}
	}
	cases := []struct {
		name      string
		mutate    func(*args)
		wantField string
	}{
		{"valid with defaults", func(*args) {}, ""},
		{"no queue", func(a *args) { a.q = nil }, "Queue"},
		{"no source", func(a *args) { a.src = nil }, "Source"},
		{"no computer", func(a *args) { a.comp = nil }, "Computer"},
		{"no patcher", func(a *args) { a.pat = nil }, "Patcher"},
		{"no leader", func(a *args) { a.l = nil }, "Leader"},
		{"empty identity", func(a *args) { a.l = newFakeObserver("") }, "Leader"},
		{"negative timeout", func(a *args) { a.opts.PatchTimeout = -1 }, "PatchTimeout"},
		{"negative margin", func(a *args) { a.opts.ClaimMargin = -1 }, "ClaimMargin"},
		{"negative workers", func(a *args) { a.opts.Workers = -2 }, "Workers"},
		{"too many workers", func(a *args) { a.opts.Workers = 1 << 30 }, "Workers"},
		{"negative max in flight", func(a *args) { a.opts.MaxInFlight = -1 }, "MaxInFlight"},
		{"too large max in flight", func(a *args) { a.opts.MaxInFlight = 1025 }, "MaxInFlight"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := valid()
			c.mutate(&a)
			d, err := NewDispatcher(a.q, a.src, a.comp, a.pat, a.l, a.opts, nil)
			if c.wantField == "" {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				if ctl := d.flight.ctl; d.opts.PatchTimeout != DefaultPatchTimeout || !ctl.adaptive || ctl.max != DefaultMaxInFlight {
					t.Errorf("defaults: timeout %s adaptive %v max %v, want %s, adaptive, %d",
						d.opts.PatchTimeout, ctl.adaptive, ctl.max, DefaultPatchTimeout, DefaultMaxInFlight)
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
