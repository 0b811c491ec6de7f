package leader

import (
	"context"
	"fmt"
	"log/slog"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quietpatch/quietpatch/internal/leases"
)

// This file holds the test harness: a fake clientset that behaves like an
// API server where it matters (resourceVersion assignment and optimistic
// concurrency), claimers driven by a fake clock, and settle(), which waits
// until every claimer has done all it will do at the current fake time.

const (
	testNS   = "ns"
	testName = "lease"
)

var (
	leaseGVR = coordv1.SchemeGroupVersion.WithResource("leases")
	t0       = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
)

// fakeAPI wraps fake.Clientset with reactors that assign resourceVersions
// and reject an update whose resourceVersion is stale (409 Conflict) or
// missing (an unconditional write, which the claimer must never send).
// Reactors run under the clientset's lock, so check-and-write is atomic.
type fakeAPI struct {
	cs      *fake.Clientset
	tracker k8stesting.ObjectTracker

	mu            sync.Mutex
	rv            int64
	mark          writeMark // the last write to the Lease
	unconditional int       // updates without resourceVersion (must stay 0)
}

// writeMark identifies a write as a watcher sees it.
type writeMark struct {
	rv      string
	deleted bool
}

func newFakeAPI(t *testing.T) *fakeAPI {
	t.Helper()
	cs := fake.NewSimpleClientset()
	a := &fakeAPI{cs: cs, tracker: cs.Tracker()}
	cs.PrependReactor("create", "leases", func(act k8stesting.Action) (bool, runtime.Object, error) {
		obj := act.(k8stesting.CreateAction).GetObject().(*coordv1.Lease).DeepCopy()
		if obj.ResourceVersion != "" {
			return true, nil, apierrors.NewBadRequest("resourceVersion must not be set on create")
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		obj.ResourceVersion = strconv.FormatInt(a.rv+1, 10)
		obj.Namespace = act.GetNamespace()
		if err := a.tracker.Create(leaseGVR, obj, act.GetNamespace()); err != nil {
			return true, nil, err
		}
		a.rv++
		a.mark = writeMark{rv: obj.ResourceVersion}
		return true, obj.DeepCopy(), nil
	})
	cs.PrependReactor("update", "leases", func(act k8stesting.Action) (bool, runtime.Object, error) {
		obj := act.(k8stesting.UpdateAction).GetObject().(*coordv1.Lease).DeepCopy()
		a.mu.Lock()
		defer a.mu.Unlock()
		cur, err := a.tracker.Get(leaseGVR, act.GetNamespace(), obj.Name)
		if err != nil {
			return true, nil, err
		}
		if obj.ResourceVersion == "" {
			a.unconditional++
			return true, nil, apierrors.NewBadRequest("test API: unconditional update")
		}
		if obj.ResourceVersion != cur.(*coordv1.Lease).ResourceVersion {
			return true, nil, apierrors.NewConflict(leaseGVR.GroupResource(), obj.Name, fmt.Errorf("resourceVersion %s is stale", obj.ResourceVersion))
		}
		obj.ResourceVersion = strconv.FormatInt(a.rv+1, 10)
		if err := a.tracker.Update(leaseGVR, obj, act.GetNamespace()); err != nil {
			return true, nil, err
		}
		a.rv++
		a.mark = writeMark{rv: obj.ResourceVersion}
		return true, obj.DeepCopy(), nil
	})
	cs.PrependReactor("delete", "leases", func(act k8stesting.Action) (bool, runtime.Object, error) {
		name := act.(k8stesting.DeleteAction).GetName()
		a.mu.Lock()
		defer a.mu.Unlock()
		cur, err := a.tracker.Get(leaseGVR, act.GetNamespace(), name)
		if err != nil {
			return true, nil, err
		}
		if err := a.tracker.Delete(leaseGVR, act.GetNamespace(), name); err != nil {
			return true, nil, err
		}
		a.mark = writeMark{rv: cur.(*coordv1.Lease).ResourceVersion, deleted: true}
		return true, nil, nil
	})
	return a
}

// prepend adds a reactor in front of the chain. fake.Clientset's own
// PrependReactor does not lock, so this one does: claimers may be running.
func (a *fakeAPI) prepend(verb string, fn k8stesting.ReactionFunc) {
	a.cs.Lock()
	defer a.cs.Unlock()
	a.cs.PrependReactor(verb, "leases", fn)
}

func (a *fakeAPI) lastWrite() writeMark {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mark
}

func (a *fakeAPI) unconditionalUpdates() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.unconditional
}

// rawWrite changes the stored Lease behind the client's back, as a write by
// another party racing ours: it applies mutate and a new resourceVersion
// directly to the tracker. For use inside a reactor, where the clientset's
// lock is held and the client cannot be called.
func (a *fakeAPI) rawWrite(mutate func(*coordv1.Lease)) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	cur, err := a.tracker.Get(leaseGVR, testNS, testName)
	if err != nil {
		return err
	}
	l := cur.(*coordv1.Lease).DeepCopy()
	mutate(l)
	l.ResourceVersion = strconv.FormatInt(a.rv+1, 10)
	if err := a.tracker.Update(leaseGVR, l, testNS); err != nil {
		return err
	}
	a.rv++
	a.mark = writeMark{rv: l.ResourceVersion}
	return nil
}

// get returns the stored Lease, or nil if there is none.
func (a *fakeAPI) get(t *testing.T) *coordv1.Lease {
	t.Helper()
	l, err := a.cs.CoordinationV1().Leases(testNS).Get(context.Background(), testName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("get lease: %v", err)
	}
	return l
}

// put creates the Lease with spec.
func (a *fakeAPI) put(t *testing.T, spec coordv1.LeaseSpec) {
	t.Helper()
	_, err := a.cs.CoordinationV1().Leases(testNS).Create(context.Background(),
		&coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: testName, Namespace: testNS}, Spec: spec},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create lease: %v", err)
	}
}

// update applies mutate to the stored Lease through the client, as another
// replica would.
func (a *fakeAPI) update(t *testing.T, mutate func(*coordv1.Lease)) {
	t.Helper()
	l := a.get(t)
	if l == nil {
		t.Fatal("update: no lease")
	}
	mutate(l)
	if _, err := a.cs.CoordinationV1().Leases(testNS).Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update lease: %v", err)
	}
}

func (a *fakeAPI) delete(t *testing.T) {
	t.Helper()
	if err := a.cs.CoordinationV1().Leases(testNS).Delete(context.Background(), testName, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete lease: %v", err)
	}
}

// harness runs claimers against one fakeAPI and one fake clock.
type harness struct {
	t       *testing.T
	api     *fakeAPI
	clk     *clocktesting.FakeClock
	logs    *logRecorder
	mu      sync.Mutex
	runners []*runner
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t, api: newFakeAPI(t), clk: clocktesting.NewFakeClock(t0), logs: &logRecorder{}}
	t.Cleanup(func() {
		if t.Failed() {
			for _, r := range h.logs.all() {
				t.Log(r)
			}
		}
	})
	return h
}

// testConfig is the configuration tests start from: the defaults, spelled
// out so the arithmetic in the tests is visible.
func (h *harness) config(id string) Config {
	return Config{
		Namespace:     testNS,
		Name:          testName,
		Identity:      id,
		LeaseDuration: 15 * time.Second, // renew at 5s, retry every 2s
		RenewGrace:    10 * time.Second,
		RetryPeriod:   2 * time.Second,
		CallTimeout:   5 * time.Second,
		Clock:         h.clk,
		Logger:        slog.New(h.logs.handler(id)),
	}
}

// runner is one claimer whose Run is in progress.
type runner struct {
	t       *testing.T
	c       *Claimer
	cancel  context.CancelFunc
	done    chan struct{}
	err     error // valid after done is closed
	noWatch bool  // the watch is expected to be down

	mu     sync.Mutex
	idle   idleReport
	minSeq int // settle waits for an idle report after this one
}

type idleReport struct {
	seq       int
	now, wake time.Time
	armed     bool // the loop's timer is not stopped yet
}

// loopClock is a runner's clock: the harness's fake clock, which notes
// every timer the claimer's loop arms to wait — when it goes idle, and
// until when.
type loopClock struct {
	*clocktesting.FakeClock
	r *runner
}

func (c loopClock) NewTimer(d time.Duration) clock.Timer {
	now := c.Now()
	t := c.FakeClock.NewTimer(d)
	pc, _, _, ok := goruntime.Caller(1)
	if !ok || !strings.HasSuffix(goruntime.FuncForPC(pc).Name(), ".(*loop).run") {
		return t
	}
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	c.r.idle = idleReport{seq: c.r.idle.seq + 1, now: now, wake: now.Add(d), armed: true}
	return loopTimer{Timer: t, r: c.r, seq: c.r.idle.seq}
}

// loopTimer is a timer of the loop: stopped, the loop is no longer idle.
type loopTimer struct {
	clock.Timer
	r   *runner
	seq int
}

func (t loopTimer) Stop() bool {
	t.r.mu.Lock()
	if t.r.idle.seq == t.seq {
		t.r.idle.armed = false
	}
	t.r.mu.Unlock()
	return t.Timer.Stop()
}

func (h *harness) start(cfg Config) *runner {
	h.t.Helper()
	c, err := NewClaimer(h.api.cs.CoordinationV1(), cfg)
	if err != nil {
		h.t.Fatalf("NewClaimer: %v", err)
	}
	return h.run(c)
}

func (h *harness) run(c *Claimer) *runner {
	r := &runner{t: h.t, c: c, done: make(chan struct{})}
	if fc, ok := c.clk.(*clocktesting.FakeClock); ok {
		c.clk = loopClock{FakeClock: fc, r: r}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		r.err = c.Run(ctx)
	}()
	h.mu.Lock()
	h.runners = append(h.runners, r)
	h.mu.Unlock()
	h.t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			h.t.Errorf("%s: Run did not return after cancel", c.Identity())
		}
	})
	return r
}

// stop cancels Run, waits for it to return and returns its error.
func (r *runner) stop() error {
	r.t.Helper()
	r.cancel()
	return r.wait()
}

// wait waits for Run to return on its own and returns its error.
func (r *runner) wait() error {
	r.t.Helper()
	select {
	case <-r.done:
		return r.err
	case <-time.After(10 * time.Second):
		r.t.Fatalf("%s: Run did not return", r.c.Identity())
		return nil
	}
}

func (r *runner) stopped() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// relinquish calls Relinquish and makes the next settle wait for the loop
// to have gone round once more.
func (r *runner) relinquish(backoff time.Duration) error {
	r.mu.Lock()
	r.minSeq = r.idle.seq
	r.mu.Unlock()
	return r.c.Relinquish(context.Background(), backoff)
}

// settled reports whether r is blocked with nothing left to do at now:
// its last idle report is at now (or it is not due before its wake time),
// it has handled every watch event, and its watch has seen the last write.
func (r *runner) settled(now time.Time, last writeMark) (bool, string) {
	if r.stopped() {
		return true, ""
	}
	// The watch first: the loop stops its timer before it takes an event,
	// so an event taken after this read shows below as a loop not idle.
	healthy := r.c.watchUp.Load()
	r.c.mu.Lock()
	fresh, ev := r.c.watch.fresh, r.c.watch.last
	r.c.mu.Unlock()
	r.mu.Lock()
	idle, minSeq := r.idle, r.minSeq
	r.mu.Unlock()
	if idle.seq == 0 || idle.seq <= minSeq || !idle.armed {
		return false, "loop has not gone idle"
	}
	if !idle.now.Equal(now) && !idle.wake.After(now) {
		return false, fmt.Sprintf("loop idle at %v, due at %v", idle.now.Sub(t0), idle.wake.Sub(t0))
	}
	if fresh {
		return false, "watch event not handled yet"
	}
	if r.noWatch {
		return true, ""
	}
	if !healthy {
		return false, "watch not established"
	}
	if last.rv != "" && (ev.key.resourceVersion != last.rv || ev.deleted != last.deleted) {
		return false, fmt.Sprintf("watch saw %v, last write %v", ev, last)
	}
	return true, ""
}

// settle waits until every claimer is settled at the current fake time.
func (h *harness) settle() {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		before := h.api.lastWrite()
		now := h.clk.Now()
		h.mu.Lock()
		runners := append([]*runner(nil), h.runners...)
		h.mu.Unlock()
		ok, why := true, ""
		for _, r := range runners {
			if ok, why = r.settled(now, before); !ok {
				why = r.c.Identity() + ": " + why
				break
			}
		}
		if ok && h.api.lastWrite() == before {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("claimers did not settle at %v: %s", now.Sub(t0), why)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// step advances the fake clock by d and settles.
func (h *harness) step(d time.Duration) {
	h.t.Helper()
	h.clk.Step(d)
	h.settle()
}

// stepTo sets the fake clock to t0+d and settles.
func (h *harness) stepTo(d time.Duration) {
	h.t.Helper()
	h.clk.SetTime(t0.Add(d))
	h.settle()
}

// since returns the fake time elapsed since t0.
func (h *harness) since() time.Duration { return h.clk.Now().Sub(t0) }

// wake returns when r will next act on its own, relative to t0.
func (r *runner) wake() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.idle.wake.Sub(t0)
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// stored returns the stored Lease's holder and transitions.
func (h *harness) stored() (holder string, transitions int64) {
	h.t.Helper()
	l := h.api.get(h.t)
	if l == nil {
		return "<none>", 0
	}
	return leases.Holder(l), transitionsOf(l)
}

// logRecorder is a slog handler that keeps records for assertions.
type logRecorder struct {
	mu      sync.Mutex
	records []string
}

func (lr *logRecorder) handler(id string) slog.Handler {
	return &recHandler{lr: lr, attrs: "id=" + id}
}

func (lr *logRecorder) all() []string {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return append([]string(nil), lr.records...)
}

// count returns how many records contain all of substrs.
func (lr *logRecorder) count(substrs ...string) int {
	n := 0
	for _, r := range lr.all() {
		match := true
		for _, s := range substrs {
			match = match && strings.Contains(r, s)
		}
		if match {
			n++
		}
	}
	return n
}

type recHandler struct {
	lr    *logRecorder
	attrs string
}

func (h *recHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *recHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s", r.Level, r.Message, h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.lr.mu.Lock()
	h.lr.records = append(h.lr.records, b.String())
	h.lr.mu.Unlock()
	return nil
}

func (h *recHandler) WithAttrs(as []slog.Attr) slog.Handler {
	s := h.attrs
	for _, a := range as {
		s += fmt.Sprintf(" %s=%v", a.Key, a.Value)
	}
	return &recHandler{lr: h.lr, attrs: s}
}

func (h *recHandler) WithGroup(string) slog.Handler { return h }
