package statuspatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// drig wires a dispatcher to fakes.
type drig struct {
	obs   *fakeObserver
	queue *PatchQueue[Patch[tPayload]]
	pat   *recordingPatcher
	d     *Dispatcher[tPayload]
	meter *testMeter
	logs  *captureHandler
	clock *clocktesting.FakeClock
}

func newDrig(t *testing.T, mutate ...func(*DispatcherConfig[tPayload])) *drig {
	t.Helper()
	r := &drig{
		obs:   newFakeObserver("me"),
		pat:   &recordingPatcher{},
		meter: newTestMeter(t),
		logs:  newCapture(slog.LevelDebug),
		clock: clocktesting.NewFakeClock(testStart()),
	}
	q, err := NewPatchQueue(QueueConfig[Patch[tPayload]]{Capacity: 100, Key: PatchKey[tPayload], Clock: r.clock})
	if err != nil {
		t.Fatal(err)
	}
	r.queue = q
	cfg := DispatcherConfig[tPayload]{
		Queue:        q,
		Patcher:      r.pat,
		Leader:       r.obs,
		PatchTimeout: 10 * time.Second,
		Clock:        r.clock,
		Logger:       slog.New(r.logs),
		Meter:        r.meter.provider.Meter("test"),
		Name:         "test",
	}
	for _, m := range mutate {
		m(&cfg)
	}
	r.d, err = NewDispatcher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *drig) lead(epoch int64) {
	r.obs.Set(leader.Claim{Holder: "me", Expiry: r.clock.Now().Add(time.Hour), Epoch: epoch})
}

// send queues a patch for key under epoch.
func (r *drig) send(t *testing.T, key string, epoch int64) {
	t.Helper()
	if err := r.queue.TrySend(Patch[tPayload]{Key: key, Epoch: epoch, Payload: tPayload{Key: key, Gen: epoch}}); err != nil {
		t.Fatalf("send %s: %v", key, err)
	}
}

// start runs the dispatcher; stop cancels it and returns Run's result. Stop
// is also called at the end of the test.
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
	return stop
}

// outcome reads the patches counter through the meter: the instrument and
// Stats must agree.
func (r *drig) outcome(t *testing.T, o outcome.Outcome) int64 {
	t.Helper()
	s := r.d.Stats().Patches[o] // read first: the counter only grows
	v := r.meter.value(t, dispatchPatchesMetric, outcomeAttr, string(o))
	if v < s {
		t.Fatalf("Stats().Patches[%s] = %d, then the instrument reported %d", o, s, v)
	}
	return v
}

func (r *drig) dropped(t *testing.T, reason DropReason) int64 {
	t.Helper()
	s := r.d.Stats().Dropped[reason] // read first: the counter only grows
	v := r.meter.value(t, dispatchDroppedMetric, reasonAttr, string(reason))
	if v < s {
		t.Fatalf("Stats().Dropped[%s] = %d, then the instrument reported %d", reason, s, v)
	}
	return v
}

func TestDispatchAppliesWhileLeader(t *testing.T) {
	r := newDrig(t)
	r.lead(1)
	for _, k := range []string{"ns/a", "ns/b", "ns/c"} {
		r.send(t, k, 1)
	}
	r.start(t)
	waitFor(t, "three patches applied", func() bool { return r.outcome(t, outcome.OK) == 3 })
	if got := r.pat.appliedKeys(); !slices.Equal(got, []string{"ns/a", "ns/b", "ns/c"}) {
		t.Errorf("applied %v, want [ns/a ns/b ns/c]", got)
	}
	if v := r.meter.value(t, dispatchDurationMetric, outcomeAttr, string(outcome.OK)); v != 3 {
		t.Errorf("duration count{ok} = %d, want 3", v)
	}
	if v := r.meter.value(t, dispatchInFlightMetric, "", ""); v != 0 {
		t.Errorf("in flight = %d after all calls returned, want 0", v)
	}
	if err := r.d.Healthy(); err != nil {
		t.Errorf("Healthy = %v while running", err)
	}
}

func TestDispatchDropsWhenNotLeader(t *testing.T) {
	cases := []struct {
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
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newDrig(t)
			for i := range 5 {
				r.send(t, fmt.Sprintf("ns/o%d", i), 1)
			}
			r.obs.Set(c.claim(r.clock.Now()))
			r.start(t)
			waitFor(t, "five drops", func() bool { return r.dropped(t, DropNotLeader) == 5 })
			if n := r.pat.calls.Load(); n != 0 {
				t.Errorf("patcher called %d times while not leader", n)
			}
			if r.queue.Len() != 0 {
				t.Errorf("queue still holds %d patches", r.queue.Len())
			}
		})
	}
}

func TestDispatchLeadershipLostWithQueuedPatches(t *testing.T) {
	r := newDrig(t)
	r.lead(1)
	release := make(chan struct{})
	r.pat.fn = func(ctx context.Context, p tPayload) error {
		if p.Key == "ns/first" {
			<-release
		}
		return nil
	}
	r.send(t, "ns/first", 1)
	for i := range 4 {
		r.send(t, fmt.Sprintf("ns/o%d", i), 1)
	}
	r.start(t)
	waitFor(t, "the first patch in flight", func() bool { return r.pat.calls.Load() == 1 })

	r.obs.Set(leader.Claim{Holder: "other", Expiry: r.clock.Now().Add(time.Hour), Epoch: 2})
	close(release)
	waitFor(t, "the queued patches dropped", func() bool { return r.dropped(t, DropNotLeader) == 4 })
	if got := r.pat.appliedKeys(); !slices.Equal(got, []string{"ns/first"}) {
		t.Errorf("applied %v, want only the patch in flight before the loss", got)
	}
	if n := r.pat.calls.Load(); n != 1 {
		t.Errorf("patcher called %d times, want 1", n)
	}
}

func TestDispatchDropsEarlierEpochAfterRegain(t *testing.T) {
	r := newDrig(t)
	for i := range 3 {
		r.send(t, fmt.Sprintf("ns/old%d", i), 1)
	}
	r.send(t, "ns/new0", 3)
	r.send(t, "ns/new1", 3)
	r.lead(3) // lost epoch 1, regained under epoch 3
	r.start(t)
	waitFor(t, "all five handled", func() bool {
		return r.dropped(t, DropStaleEpoch)+r.outcome(t, outcome.OK) == 5
	})
	if got := r.pat.appliedKeys(); !slices.Equal(got, []string{"ns/new0", "ns/new1"}) {
		t.Errorf("applied %v, want only the epoch-3 patches", got)
	}
	if v := r.dropped(t, DropStaleEpoch); v != 3 {
		t.Errorf("dropped{stale_epoch} = %d, want 3", v)
	}
	debugDrops := 0
	for _, rec := range r.logs.records(slog.LevelDebug) {
		if rec.Message == "statuspatch: patch dropped" && rec.Attrs["reason"] == "stale_epoch" {
			debugDrops++
		}
	}
	if debugDrops != 3 {
		t.Errorf("debug drop lines = %d, want 3", debugDrops)
	}
	if w := r.logs.records(slog.LevelWarn); len(w) != 0 {
		t.Errorf("warnings: %+v, want none for drops", w)
	}
}

func TestDispatchHungPatchEndsAtDeadline(t *testing.T) {
	const timeout = 50 * time.Millisecond
	r := newDrig(t, func(c *DispatcherConfig[tPayload]) { c.PatchTimeout = timeout })
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
	r.send(t, "ns/hung", 1)
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
	if n := r.pat.calls.Load(); n != 1 {
		t.Errorf("patcher called %d times, want 1 (no retry)", n)
	}
	warns := r.logs.records(slog.LevelWarn)
	if len(warns) != 1 || warns[0].Attrs["outcome"] != "timeout" {
		t.Errorf("warnings = %+v, want one timeout warning", warns)
	}
}

func TestDispatchDeadlineIsMinOfTimeoutAndClaim(t *testing.T) {
	cases := []struct {
		name         string
		patchTimeout time.Duration
		claimLeft    time.Duration
		want         time.Duration
	}{
		{"claim about to expire shortens the deadline", time.Hour, 30 * time.Millisecond, 30 * time.Millisecond},
		{"patch timeout when the claim lasts longer", 2 * time.Second, time.Hour, 2 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newDrig(t, func(cfg *DispatcherConfig[tPayload]) {
				cfg.PatchTimeout = c.patchTimeout
				cfg.ClaimMargin = time.Millisecond // this test is about the deadline
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
			r.send(t, "ns/a", 1)
			r.start(t)
			left := <-got
			// The deadline was set just before the call: a little of it
			// is already spent.
			if left > c.want || left < c.want-time.Second/4 {
				t.Errorf("deadline in %s at call time, want about %s", left, c.want)
			}
		})
	}
}

func TestDispatchClassifiesAndDoesNotRetry(t *testing.T) {
	gr := schema.GroupResource{Group: "gateway.networking.k8s.io", Resource: "httproutes"}
	cases := []struct {
		err  error
		want outcome.Outcome
	}{
		{apierrors.NewConflict(gr, "a", errors.New("the object has been modified")), outcome.Conflict},
		{apierrors.NewNotFound(gr, "a"), outcome.NotFound},
		{apierrors.NewForbidden(gr, "a", errors.New("rbac")), outcome.Forbidden},
		{apierrors.NewTooManyRequests("slow down", 1), outcome.Throttled},
		{apierrors.NewTimeoutError("server gave up", 1), outcome.Timeout},
		{errors.New("connection refused"), outcome.Error},
	}
	for _, c := range cases {
		t.Run(string(c.want), func(t *testing.T) {
			r := newDrig(t)
			r.lead(1)
			r.pat.fn = func(context.Context, tPayload) error { return c.err }
			r.send(t, "ns/a", 1)
			r.start(t)
			waitFor(t, "the outcome", func() bool { return r.outcome(t, c.want) == 1 })
			r.clock.Step(2 * time.Second) // past a Retry-After
			// The worker is back waiting on the queue and did not call again.
			waitFor(t, "the worker to wait for more", func() bool {
				_, receivers := QueueWaiters(r.queue)
				return receivers == 1
			})
			if n := r.pat.calls.Load(); n != 1 {
				t.Errorf("patcher called %d times, want 1: failed patches are not retried", n)
			}
			if r.queue.Len() != 0 {
				t.Errorf("the failed patch went back to the queue")
			}
		})
	}
}

func TestDispatchWorkersKeepKeysExclusive(t *testing.T) {
	const workers = 4
	r := newDrig(t, func(c *DispatcherConfig[tPayload]) { c.Workers = workers })
	r.lead(1)
	var (
		mu          sync.Mutex
		active      = map[string]int{}
		concurrent  int
		maxPerKey   int
		maxParallel int
	)
	release := make(chan struct{})
	r.pat.fn = func(ctx context.Context, p tPayload) error {
		mu.Lock()
		active[p.Key]++
		concurrent++
		maxPerKey = max(maxPerKey, active[p.Key])
		maxParallel = max(maxParallel, concurrent)
		mu.Unlock()
		<-release
		mu.Lock()
		active[p.Key]--
		concurrent--
		mu.Unlock()
		return nil
	}
	for i := range workers {
		r.send(t, fmt.Sprintf("ns/k%d", i), 1)
	}
	r.start(t)
	waitFor(t, "every worker busy", func() bool { return r.pat.calls.Load() == workers })
	// New patches for keys in flight wait for their key; ns/k0 twice
	// coalesces into one.
	r.send(t, "ns/k0", 1)
	r.send(t, "ns/k0", 1)
	r.send(t, "ns/k1", 1)
	close(release)
	waitFor(t, "all patches applied", func() bool { return r.outcome(t, outcome.OK) == workers+2 })
	mu.Lock()
	defer mu.Unlock()
	if maxPerKey != 1 {
		t.Errorf("up to %d concurrent calls for one key, want 1", maxPerKey)
	}
	if maxParallel != workers {
		t.Errorf("up to %d concurrent calls, want %d", maxParallel, workers)
	}
}

// Stopping the dispatcher does not cancel the call in flight: it runs to the
// API server's answer (a cancelled write may still be executed), then Run
// returns; what is still queued is dropped.
func TestDispatchStopLetsTheCallInFlightFinish(t *testing.T) {
	r := newDrig(t)
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
	for i := range 4 {
		r.send(t, fmt.Sprintf("ns/o%d", i), 1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- r.d.Run(ctx) }()
	waitFor(t, "a call in flight", func() bool { return r.pat.calls.Load() == 1 })
	cancel()
	select {
	case err := <-stopped:
		t.Fatalf("Run returned (%v) with a call in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("Run = %v, want nil on cancel", err)
	}
	if cancelled.Load() {
		t.Error("the call in flight was cancelled by the stop")
	}
	if v := r.outcome(t, outcome.OK); v != 1 {
		t.Errorf("outcome{ok} = %d, want 1", v)
	}
	if v := r.dropped(t, DropShutdown); v != 3 {
		t.Errorf("dropped{shutdown} = %d, want 3", v)
	}
	if r.queue.Len() != 0 {
		t.Errorf("queue holds %d patches after stop", r.queue.Len())
	}
	if err := r.d.Healthy(); !errors.Is(err, ErrStopped) {
		t.Errorf("Healthy after stop = %v, want ErrStopped", err)
	}
}

// A call in flight is cancelled as soon as the claim it runs under ends
// involuntarily, not left to its deadline (an hour here).
func TestDispatchCancelsCallsWhenTheClaimEnds(t *testing.T) {
	for _, tc := range []struct {
		label string
		next  func(r *drig) leader.Claim
	}{
		{"new epoch of ours", func(r *drig) leader.Claim {
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
			r := newDrig(t, func(c *DispatcherConfig[tPayload]) { c.PatchTimeout = time.Hour })
			r.lead(7)
			ended := make(chan error, 1)
			r.pat.fn = func(ctx context.Context, _ tPayload) error {
				<-ctx.Done()
				ended <- ctx.Err()
				return ctx.Err()
			}
			r.send(t, "ns/a", 7)
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
			if r.d.Stats().Unanswered != 1 {
				t.Errorf("Unanswered = %d, want 1", r.d.Stats().Unanswered)
			}
		})
	}
}

// A renewal of the same claim (same epoch, later expiry) cancels nothing.
func TestDispatchRenewalDoesNotCancel(t *testing.T) {
	r := newDrig(t)
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
	r.send(t, "ns/a", 3)
	r.start(t)
	waitFor(t, "the call in flight", func() bool { return r.pat.calls.Load() == 1 })
	r.clock.Step(time.Minute)
	r.lead(3) // renewed
	waitFor(t, "the renewal observed", func() bool { return r.obs.pendingClaims() == 0 })
	close(release)
	waitFor(t, "the ok outcome", func() bool { return r.outcome(t, outcome.OK) == 1 })
}

// Quiesce — the claimer giving its claim up on purpose — stops new calls
// (queued patches dropped as released), waits for the call in flight
// without cancelling it, and reports whether every call was answered.
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
		{"no answer: server timeout", apierrors.NewTimeoutError("gave up", 1), time.Hour, false},
		{"no answer: connection reset", errors.New("connection reset by peer"), time.Hour, false},
		{"still in flight when the claim runs out", nil, 50 * time.Millisecond, false},
	} {
		t.Run(tc.label, func(t *testing.T) {
			r := newDrig(t)
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
			r.send(t, "ns/first", 4)
			r.send(t, "ns/second", 4)
			r.start(t)
			waitFor(t, "the call in flight", func() bool { return r.pat.calls.Load() == 1 })
			ctx, cancel := context.WithTimeout(context.Background(), tc.ctxLimit)
			defer cancel()
			got := make(chan bool, 1)
			go func() { got <- r.d.Quiesce(ctx, 4) }()
			if tc.ctxLimit < time.Second {
				if <-got != tc.want {
					t.Fatalf("Quiesce = %v, want %v", !tc.want, tc.want)
				}
				close(release)
				return
			}
			select {
			case v := <-got:
				t.Fatalf("Quiesce returned %v with a call in flight", v)
			case <-time.After(20 * time.Millisecond):
			}
			close(release)
			if v := <-got; v != tc.want {
				t.Errorf("Quiesce = %v, want %v", v, tc.want)
			}
			if cancelled.Load() {
				t.Error("the call in flight was cancelled by Quiesce")
			}
			waitFor(t, "the queued patch dropped as released", func() bool { return r.dropped(t, DropReleased) == 1 })
			if n := r.pat.calls.Load(); n != 1 {
				t.Errorf("%d calls, want 1: none may start after Quiesce", n)
			}
			// A later epoch dispatches again.
			r.lead(5)
			r.send(t, "ns/third", 5)
			waitFor(t, "the next epoch's patch applied", func() bool { return r.pat.calls.Load() == 2 })
		})
	}
}

// No call starts with less than ClaimMargin of the claim left.
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
			r := newDrig(t, func(c *DispatcherConfig[tPayload]) { c.ClaimMargin = tc.margin })
			r.obs.Set(leader.Claim{Holder: "me", Expiry: r.clock.Now().Add(tc.left), Epoch: 1})
			r.send(t, "ns/a", 1)
			r.start(t)
			waitFor(t, "the patch handled", func() bool {
				return r.dropped(t, DropClaimEnding)+r.outcome(t, outcome.OK) == 1
			})
			if got := r.dropped(t, DropClaimEnding) == 1; got != tc.drop {
				t.Errorf("dropped for claim_ending: %v, want %v", got, tc.drop)
			}
		})
	}
}

func keylessQueue(t *testing.T) *PatchQueue[Patch[tPayload]] {
	q, err := NewPatchQueue(QueueConfig[Patch[tPayload]]{Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func TestDispatchDrainsClosedQueue(t *testing.T) {
	r := newDrig(t)
	r.lead(1)
	for i := range 3 {
		r.send(t, fmt.Sprintf("ns/o%d", i), 1)
	}
	r.queue.Close()
	if err := r.d.Run(context.Background()); err != nil {
		t.Fatalf("Run = %v, want nil once the closed queue is drained", err)
	}
	if n := len(r.pat.appliedKeys()); n != 3 {
		t.Errorf("applied %d patches, want 3", n)
	}
	if err := r.d.Run(context.Background()); !errors.Is(err, ErrAlreadyStarted) {
		t.Errorf("second Run = %v, want ErrAlreadyStarted", err)
	}
}

func TestDispatcherHealthy(t *testing.T) {
	r := newDrig(t, func(c *DispatcherConfig[tPayload]) { c.PatchTimeout = time.Second })
	r.lead(1)
	if err := r.d.Healthy(); !errors.Is(err, ErrNotStarted) {
		t.Errorf("Healthy before Run = %v, want ErrNotStarted", err)
	}
	release := make(chan struct{})
	r.pat.fn = func(context.Context, tPayload) error {
		<-release // ignores its context
		return nil
	}
	r.send(t, "ns/stuck", 1)
	stop := r.start(t)
	waitFor(t, "the call to start", func() bool { return r.pat.calls.Load() == 1 })
	if err := r.d.Healthy(); err != nil {
		t.Errorf("Healthy during a call = %v", err)
	}
	r.clock.Step(3 * time.Second)
	if err := r.d.Healthy(); err == nil || !strings.Contains(err.Error(), "stuck") {
		t.Errorf("Healthy with a call running 3×PatchTimeout = %v, want a stuck error", err)
	}
	close(release)
	waitFor(t, "the call to end", func() bool { return r.d.Healthy() == nil })
	_ = stop()
	if err := r.d.Healthy(); !errors.Is(err, ErrStopped) {
		t.Errorf("Healthy after Run = %v, want ErrStopped", err)
	}
}

func TestNewDispatcherValidation(t *testing.T) {
	q, err := NewPatchQueue(QueueConfig[Patch[tPayload]]{Capacity: 1, Key: PatchKey[tPayload]})
	if err != nil {
		t.Fatal(err)
	}
	valid := func() DispatcherConfig[tPayload] {
		return DispatcherConfig[tPayload]{Queue: q, Patcher: &recordingPatcher{}, Leader: newFakeObserver("me")}
	}
	cases := []struct {
		name    string
		mutate  func(*DispatcherConfig[tPayload])
		wantErr string
	}{
		{"valid with defaults", func(*DispatcherConfig[tPayload]) {}, ""},
		{"no queue", func(c *DispatcherConfig[tPayload]) { c.Queue = nil }, "DispatcherConfig.Queue"},
		{"no patcher", func(c *DispatcherConfig[tPayload]) { c.Patcher = nil }, "DispatcherConfig.Patcher"},
		{"no leader", func(c *DispatcherConfig[tPayload]) { c.Leader = nil }, "DispatcherConfig.Leader"},
		{"empty identity", func(c *DispatcherConfig[tPayload]) { c.Leader = newFakeObserver("") }, "DispatcherConfig.Leader must have a non-empty Identity()"},
		{"queue without key", func(c *DispatcherConfig[tPayload]) { c.Queue = keylessQueue(t) }, "DispatcherConfig.Queue must be built with QueueConfig.Key"},
		{"negative timeout", func(c *DispatcherConfig[tPayload]) { c.PatchTimeout = -1 }, "DispatcherConfig.PatchTimeout"},
		{"negative margin", func(c *DispatcherConfig[tPayload]) { c.ClaimMargin = -1 }, "DispatcherConfig.ClaimMargin"},
		{"negative workers", func(c *DispatcherConfig[tPayload]) { c.Workers = -2 }, "DispatcherConfig.Workers"},
		{"too many workers", func(c *DispatcherConfig[tPayload]) { c.Workers = 1 << 30 }, "DispatcherConfig.Workers"},
		{"negative max in flight", func(c *DispatcherConfig[tPayload]) { c.MaxInFlight = -1 }, "DispatcherConfig.MaxInFlight"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := valid()
			c.mutate(&cfg)
			d, err := NewDispatcher(cfg)
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("err = %v, want nil", err)
			case c.wantErr == "" && (d.timeout != 5*time.Second || d.workers != DefaultMaxInFlight || !d.lim.adaptive):
				t.Errorf("defaults: timeout %s workers %d adaptive %v, want 5s, %d, adaptive", d.timeout, d.workers, d.lim.adaptive, DefaultMaxInFlight)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Errorf("err = %v, want one naming %s", err, c.wantErr)
			case c.wantErr != "":
				var ce *ConfigError
				if !errors.As(err, &ce) || !strings.HasPrefix(c.wantErr, "DispatcherConfig."+ce.Field) {
					t.Errorf("err = %v: ConfigError %+v does not name the field of %q", err, ce, c.wantErr)
				}
			}
		})
	}
}

// The default margin follows the latency but never above PatchTimeout/2:
// after slow calls, a claim that a healthy holder keeps (more than half a
// PatchTimeout left) still gets calls — the estimate only moves when calls
// are made, so a margin above the claim would stop them for good.
func TestDispatchClaimMarginIsCapped(t *testing.T) {
	r := newDrig(t, func(c *DispatcherConfig[tPayload]) { c.PatchTimeout = 2 * time.Second })
	r.lead(1)
	r.pat.fn = func(context.Context, tPayload) error {
		r.clock.Step(3 * time.Second) // a slow call: latency 3s
		return nil
	}
	r.send(t, "ns/slow", 1)
	r.start(t)
	waitFor(t, "the slow call", func() bool { return r.outcome(t, outcome.OK) == 1 })
	if got := r.d.claimMargin(); got != time.Second {
		t.Errorf("margin %v after a 3s call, want PatchTimeout/2 = 1s", got)
	}
	r.pat.fn = nil
	r.obs.Set(leader.Claim{Holder: "me", Expiry: r.clock.Now().Add(1500 * time.Millisecond), Epoch: 1})
	r.send(t, "ns/next", 1)
	waitFor(t, "the next call", func() bool { return r.outcome(t, outcome.OK) == 2 })
}
