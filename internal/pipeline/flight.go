package pipeline

import (
	"context"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// flight is the dispatcher's in-flight state under one lock: the serves in
// progress and the limit the control sets on them; the calls among them
// and the epoch each was made under (the claim fence); the Retry-After
// window; and our own writes whose events are still to come (the echoes).
// Whoever waits on it — the Run loop for a slot, Quiesce for the calls to
// end — waits for changed, which every change that can unblock a waiter
// closes. Build it with newFlight.
type flight struct {
	mu         sync.Mutex
	changed    chan struct{} // made by a waiter; closed (and cleared) at the next change
	waiting    int           // goroutines waiting for a change
	ctl        control
	serving    int                             // serves in progress, each holding a slot of the limit
	calls      map[*call]struct{}              // calls in progress
	epoch      *epochCalls                     // the newest epoch seen; nil before any
	until      time.Time                       // end of the Retry-After window
	opened     int64                           // windows honoured
	writes     map[types.NamespacedName]*write // our writes in flight, or answered with their event to come
	echoed     int64                           // events found to be our writes' echoes
	unanswered int64                           // calls that ended without an answer
}

// epochCalls are the calls of one epoch: their contexts' parent, cancelled
// when the claim ends involuntarily.
type epochCalls struct {
	epoch      int64
	ctx        context.Context
	cancel     context.CancelFunc
	ended      bool // the claim ended involuntarily: ctx is cancelled
	quiesced   bool // given up on purpose: no new call
	unanswered bool // a call under this epoch ended without an answer
}

// call is one patch call begun under the fence.
type call struct {
	ec    *epochCalls
	key   types.NamespacedName
	began time.Time
}

// write is our last write of one object: while its call is in flight, the
// versions of the object's events held; once answered, the version it
// produced, until the object's next event.
type write struct {
	flying bool
	held   []string
	rv     string
	wanted bool        // a serve found the cache older than the write: enqueue at its event
	timer  clock.Timer // ends a hold that its event did not end within holdBound
}

// holdBound is how long a key whose cache is older than our last write of
// it is held for the write's event before it is served anyway.
const holdBound = time.Second

func newFlight(ctl control) *flight {
	return &flight{ctl: ctl, calls: map[*call]struct{}{}, writes: map[types.NamespacedName]*write{}}
}

// changedLocked wakes every waiter.
func (f *flight) changedLocked() {
	if f.changed != nil {
		close(f.changed)
		f.changed = nil
	}
}

// waitLocked waits, with f.mu released, for the next change or ctx's end.
func (f *flight) waitLocked(ctx context.Context) error {
	if f.changed == nil {
		f.changed = make(chan struct{})
	}
	ch := f.changed
	f.waiting++
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.waiting--
	}()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// acquire takes a slot of the in-flight limit for one serve, waiting until
// the serves in progress are fewer than the limit, or returns ctx's error.
func (f *flight) acquire(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.serving >= f.ctl.size() {
		if err := f.waitLocked(ctx); err != nil {
			return err
		}
	}
	f.serving++
	return nil
}

// release gives back the slot of a serve that made no call.
func (f *flight) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.serving--
	f.changedLocked()
}

// windowAt returns what is left of the Retry-After window at now.
func (f *flight) windowAt(now time.Time) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return max(f.until.Sub(now), 0)
}

// begin starts the call of key under epoch at now — noting it as our write
// in flight when versioned —, or says why it may not be made.
func (f *flight) begin(key types.NamespacedName, epoch int64, now time.Time, versioned bool) (*call, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.epoch == nil || epoch > f.epoch.epoch:
		f.advanceLocked(epoch)
	case epoch < f.epoch.epoch:
		return nil, dropStaleEpoch
	}
	switch {
	case f.epoch.quiesced:
		return nil, dropReleased
	case f.epoch.ended:
		return nil, dropNotLeader
	}
	c := &call{ec: f.epoch, key: key, began: now}
	f.calls[c] = struct{}{}
	if versioned {
		f.forgetLocked(key)
		f.writes[key] = &write{flying: true}
	}
	return c, ""
}

// advanceLocked makes epoch the newest, ending the older one.
func (f *flight) advanceLocked(epoch int64) {
	if f.epoch != nil {
		f.epoch.ended = true
		f.epoch.cancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.epoch = &epochCalls{epoch: epoch, ctx: ctx, cancel: cancel}
}

// end ends c, a call that took latency and ended at now with err (outcome
// o): the fence learns whether it was answered, the window opens for a
// 429's Retry-After, the control takes the sample, and the serve's slot is
// given back. For a versioned call (begun as our write in flight), rv is
// the version the write produced ("" if it failed or is unknown): the
// events held meanwhile that have it are counted as its echoes, and end
// reports whether another was held (the key must be served again).
func (f *flight) end(c *call, now time.Time, latency time.Duration, err error, o outcome.Outcome, rv string) (other bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	inFlight := len(f.calls)
	delete(f.calls, c)
	if !outcome.Answered(err) {
		c.ec.unanswered = true
		f.unanswered++
	}
	f.openWindowLocked(now, err)
	f.ctl = f.ctl.next(sample{at: now, latency: latency, outcome: o, saturated: inFlight >= f.ctl.size()})
	f.serving--
	f.changedLocked()
	if w := f.writes[c.key]; w != nil && w.flying {
		var echoed int64
		for _, v := range w.held {
			if rv != "" && v == rv {
				echoed++
			} else {
				other = true
			}
		}
		if rv == "" || echoed > 0 {
			f.forgetLocked(c.key)
		} else {
			*w = write{rv: rv} // its event is still to come
		}
		f.echoed += echoed
	}
	return other
}

// openWindowLocked opens the window asked for by err, the answer to a
// call ended at now, unless one open already ends later.
func (f *flight) openWindowLocked(now time.Time, err error) {
	if d, ok := retryAfter(err); ok {
		if until := now.Add(d); until.After(f.until) {
			f.until = until
			f.opened++
		}
	}
}

// event notes an event of key's object at rv ("" for a deletion): whether
// it is our last write's echo, or held while a call is in flight — either
// way it needs no enqueue now.
func (f *flight) event(key types.NamespacedName, rv string) (echo, held bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.writes[key]
	switch {
	case w == nil:
		return false, false
	case w.flying && rv != "":
		w.held = append(w.held, rv)
		return false, true
	case w.flying:
		return false, false // a deletion while we write: the call ends with not found
	}
	f.forgetLocked(key)
	if echo = rv != "" && w.rv == rv && !w.wanted; echo {
		f.echoed++
	}
	return echo, false // a serve held for it: the key is enqueued now
}

// stale reports whether the cache, holding key's object at objRV, is older
// than our last write of it (answered, its event not seen yet): the serve
// is then held — dropped now, the key enqueued at the write's event, or at
// the latest holdBound later by requeue —, so that no patch is built from
// a cache that does not hold our own write (it would carry the old
// resourceVersion and fail with 409).
func (f *flight) stale(key types.NamespacedName, objRV string, clk clock.WithDelayedExecution, requeue func(types.NamespacedName)) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.writes[key]
	if w == nil || w.flying || w.rv == "" || objRV == w.rv {
		return false
	}
	if !w.wanted {
		w.wanted = true
		w.timer = clk.AfterFunc(holdBound, func() {
			f.mu.Lock()
			mine := f.writes[key] == w
			if mine {
				delete(f.writes, key)
			}
			f.mu.Unlock()
			if mine {
				go requeue(key) // not in the clock's callback: a fake clock runs it holding its lock
			}
		})
	}
	return true
}

// forgetLocked forgets our last write of key, and any hold of it.
func (f *flight) forgetLocked(key types.NamespacedName) {
	if w := f.writes[key]; w != nil && w.timer != nil {
		w.timer.Stop()
	}
	delete(f.writes, key)
}

// stopHolds ends every hold without its requeue: the dispatcher stops.
func (f *flight) stopHolds() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for key, w := range f.writes {
		if w.timer != nil {
			w.timer.Stop()
			delete(f.writes, key)
		}
	}
}

// observe ends the newest epoch's calls when its claim is over: the claim
// current returns now is not ours, or of another epoch. The claim is read
// under the lock, so that a call begun under a fresher claim than a
// lagging notification carried is not ended by it.
func (f *flight) observe(current func() (leader.Claim, bool)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ours := current()
	if f.epoch != nil && !f.epoch.ended && (!ours || c.Epoch != f.epoch.epoch) {
		f.epoch.ended = true
		f.epoch.cancel()
	}
}

// quiesce stops new calls under epoch and waits for every call in flight;
// it reports whether every call under epoch got an answer.
func (f *flight) quiesce(ctx context.Context, epoch int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.epoch == nil || epoch > f.epoch.epoch:
		f.advanceLocked(epoch) // no call was made under epoch; none may start
	case epoch < f.epoch.epoch:
		return false // calls were made under a newer epoch
	}
	ec := f.epoch
	ec.quiesced = true
	for len(f.calls) > 0 {
		if f.waitLocked(ctx) != nil && len(f.calls) > 0 {
			return false
		}
	}
	// A newer epoch seen meanwhile made calls under a newer epoch, as above.
	return f.epoch == ec && !ec.unanswered
}

// estimate is the control's latency estimate (s) at its last round.
func (f *flight) estimate() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ctl.estimate
}

// statsAt returns the flight's part of the dispatcher's stats at now
// (all but Patches and Dropped), and when the oldest call in flight began
// (zero without any).
func (f *flight) statsAt(now time.Time) (s DispatcherStats, oldest time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s = DispatcherStats{Echoes: f.echoed, InFlight: len(f.calls), Unanswered: f.unanswered, Limit: f.ctl.size(),
		Latency: time.Duration(f.ctl.latencyAt(now) * float64(time.Second)), DrainRate: f.ctl.drainRateAt(now),
		Backoff: max(f.until.Sub(now), 0), RetryAfters: f.opened}
	for c := range f.calls {
		if oldest.IsZero() || c.began.Before(oldest) {
			oldest = c.began
		}
	}
	return s, oldest
}

// retryAfter returns the delay a throttled call's answer asks for: a 429
// carrying Retry-After.
func retryAfter(err error) (time.Duration, bool) {
	if err == nil || outcome.Of(err) != outcome.Throttled {
		return 0, false
	}
	secs, ok := apierrors.SuggestsClientDelay(err)
	if !ok || secs <= 0 {
		return 0, false
	}
	return time.Duration(secs) * time.Second, true
}
