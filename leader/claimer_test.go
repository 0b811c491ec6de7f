package leader

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/internal/leases"
	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	k8stesting "k8s.io/client-go/testing"
)

func leaseSpec(holder string, renew time.Time, transitions int32) coordv1.LeaseSpec {
	s := coordv1.LeaseSpec{
		LeaseDurationSeconds: new(int32(15)),
		RenewTime:            &metav1.MicroTime{Time: renew},
		AcquireTime:          &metav1.MicroTime{Time: renew},
		LeaseTransitions:     new(transitions),
	}
	if holder != "" {
		s.HolderIdentity = new(holder)
	}
	return s
}

func at(d time.Duration) time.Time { return t0.Add(d) }

func checkClaim(t *testing.T, who string, got, want Claim) {
	t.Helper()
	if !got.Equal(want) {
		t.Fatalf("%s: claim = {%q, t0%+v, %d}, want {%q, t0%+v, %d}", who,
			got.Holder, got.Expiry.Sub(t0), got.Epoch, want.Holder, want.Expiry.Sub(t0), want.Epoch)
	}
}

func checkStored(t *testing.T, h *harness, holder string, transitions int64) {
	t.Helper()
	gotH, gotT := h.stored()
	if gotH != holder || gotT != transitions {
		t.Fatalf("stored lease: holder %q transitions %d, want %q %d", gotH, gotT, holder, transitions)
	}
}

// failUpdates makes lease updates fail with err while *on is true.
func failUpdates(h *harness, on *atomic.Bool, err error) {
	h.api.prepend("update", func(k8stesting.Action) (bool, runtime.Object, error) {
		if on.Load() {
			return true, nil, err
		}
		return false, nil, nil
	})
}

func TestCreateWhenMissing(t *testing.T) {
	h := newHarness(t)
	a := h.start(h.config("a"))
	h.settle()

	l := h.api.get(t)
	if l == nil {
		t.Fatal("lease not created")
	}
	checkStored(t, h, "a", 1)
	if got := *l.Spec.LeaseDurationSeconds; got != 15 {
		t.Errorf("leaseDurationSeconds = %d, want 15", got)
	}
	if !l.Spec.RenewTime.Time.Equal(t0) || !l.Spec.AcquireTime.Time.Equal(t0) {
		t.Errorf("renewTime %v acquireTime %v, want both %v", l.Spec.RenewTime, l.Spec.AcquireTime, t0)
	}
	checkClaim(t, "a", a.c.Current(), Claim{"a", at(15 * time.Second), 1})
	if !a.c.Current().IsCurrentFor("a", h.clk.Now()) {
		t.Error("a does not see itself as holder")
	}
	if err := a.c.Ready(); err != nil {
		t.Errorf("Ready = %v, want nil", err)
	}
	if got := a.wake(); got != 5*time.Second {
		t.Errorf("next wake t0+%v, want t0+5s (renew when 10s of 15s remain)", got)
	}
}

func TestAcquire(t *testing.T) {
	for _, tc := range []struct {
		label      string
		spec       coordv1.LeaseSpec
		wantBefore Claim         // what a sees before it may acquire
		acquireAt  time.Duration // when a acquires
		seenAgo    time.Duration // leases.Checked.Seen: the process saw this state so long before t0
		seenOther  bool          // … but at another resourceVersion
	}{
		{
			label:     "free: no holder",
			spec:      leaseSpec("", t0.Add(-time.Hour), 4),
			acquireAt: 0,
		},
		{
			label:     "free: empty holder",
			spec:      func() coordv1.LeaseSpec { s := leaseSpec("", t0, 4); s.HolderIdentity = new(""); return s }(),
			acquireAt: 0,
		},
		{
			// A restarted process (same identity, e.g. a container
			// restarted in its pod) must not inherit the claim its
			// predecessor made: that one's last writes may still land.
			label:      "names us, written by an earlier process: wait a full duration like any holder's",
			spec:       leaseSpec("a", t0, 4),
			wantBefore: Claim{Holder: "a", Epoch: 4},
			acquireAt:  15 * time.Second,
		},
		{
			label:      "held by b, renewTime now",
			spec:       leaseSpec("b", t0, 4),
			wantBefore: Claim{"b", at(15 * time.Second), 4},
			acquireAt:  15 * time.Second,
		},
		{
			label:      "held by b, renewTime an hour old (b's clock behind, or b dead): still wait a full duration",
			spec:       leaseSpec("b", t0.Add(-time.Hour), 4),
			wantBefore: Claim{"b", at(15 * time.Second), 4},
			acquireAt:  15 * time.Second,
		},
		{
			label:      "held by b, renewTime an hour ahead (b's clock ahead): expires by our observation",
			spec:       leaseSpec("b", t0.Add(time.Hour), 4),
			wantBefore: Claim{"b", at(15 * time.Second), 4},
			acquireAt:  15 * time.Second,
		},
		{
			label:      "held by b, seen by the process (a Group) 10s before: wait the 5s left",
			spec:       leaseSpec("b", t0, 4),
			seenAgo:    10 * time.Second,
			wantBefore: Claim{"b", at(5 * time.Second), 4},
			acquireAt:  5 * time.Second,
		},
		{
			label:      "held by b, seen 10s before at another resourceVersion: a full duration",
			spec:       leaseSpec("b", t0, 4),
			seenAgo:    10 * time.Second,
			seenOther:  true,
			wantBefore: Claim{"b", at(15 * time.Second), 4},
			acquireAt:  15 * time.Second,
		},
		{
			label:      "held by b, no leaseDurationSeconds: expired when observed",
			spec:       func() coordv1.LeaseSpec { s := leaseSpec("b", t0, 4); s.LeaseDurationSeconds = nil; return s }(),
			wantBefore: Claim{},
			acquireAt:  0,
		},
	} {
		t.Run(tc.label, func(t *testing.T) {
			h := newHarness(t)
			h.api.put(t, tc.spec)
			cfg := h.config("a")
			var client coordinationv1client.LeasesGetter = h.api.cs.CoordinationV1()
			if tc.seenAgo > 0 {
				// The shard group tells a claimer when it first saw a
				// Lease through the client it hands it.
				rv := h.api.get(t).ResourceVersion
				if tc.seenOther {
					rv += "0"
				}
				client = leases.Checked{LeasesGetter: client, Seen: func(name, v string) (time.Time, bool) {
					return t0.Add(-tc.seenAgo), name == cfg.Name && v == rv
				}}
			}
			c, err := NewClaimer(client, cfg)
			if err != nil {
				t.Fatal(err)
			}
			a := h.run(c)
			h.settle()
			if tc.acquireAt > 0 {
				holder := *tc.spec.HolderIdentity
				checkClaim(t, "a before expiry", a.c.Current(), tc.wantBefore)
				checkStored(t, h, holder, 4)
				h.stepTo(tc.acquireAt - time.Second)
				checkStored(t, h, holder, 4)
				if a.c.Current().IsCurrentFor("a", h.clk.Now()) {
					t.Fatalf("a claims a lease %s still holds", holder)
				}
				h.stepTo(tc.acquireAt)
			}
			checkStored(t, h, "a", 5)
			checkClaim(t, "a", a.c.Current(), Claim{"a", at(tc.acquireAt + 15*time.Second), 5})
			l := h.api.get(t)
			if !l.Spec.AcquireTime.Time.Equal(at(tc.acquireAt)) || !l.Spec.RenewTime.Time.Equal(at(tc.acquireAt)) {
				t.Errorf("acquireTime %v renewTime %v, want both t0+%v", l.Spec.AcquireTime, l.Spec.RenewTime, tc.acquireAt)
			}
			if n := h.api.unconditionalUpdates(); n != 0 {
				t.Errorf("%d unconditional updates", n)
			}
		})
	}
}

func TestRenew(t *testing.T) {
	h := newHarness(t)
	a := h.start(h.config("a"))
	ch, cancel := a.c.Subscribe()
	defer cancel()
	h.settle()
	checkClaim(t, "first", <-ch, Claim{"a", at(15 * time.Second), 1})

	for _, s := range []struct {
		label   string
		stepTo  time.Duration
		renewed time.Duration // renewTime expected in the Lease
		wake    time.Duration
	}{
		{"on time: 10s of 15s left", 5 * time.Second, 5 * time.Second, 10 * time.Second},
		{"on time again", 10 * time.Second, 10 * time.Second, 15 * time.Second},
		{"late wake-up: renew at once", 18 * time.Second, 18 * time.Second, 23 * time.Second},
	} {
		h.stepTo(s.stepTo)
		l := h.api.get(t)
		if !l.Spec.RenewTime.Time.Equal(at(s.renewed)) {
			t.Fatalf("%s: renewTime t0+%v, want t0+%v", s.label, l.Spec.RenewTime.Sub(t0), s.renewed)
		}
		checkStored(t, h, "a", 1)
		want := Claim{"a", at(s.renewed + 15*time.Second), 1}
		checkClaim(t, s.label, a.c.Current(), want)
		checkClaim(t, s.label+" (subscriber)", <-ch, want)
		if got := a.wake(); got != s.wake {
			t.Fatalf("%s: next wake t0+%v, want t0+%v", s.label, got, s.wake)
		}
	}
}

func TestRenewFailsUntilExpiry(t *testing.T) {
	for _, tc := range []struct {
		label string
		err   error
	}{
		{"500", apierrors.NewInternalError(errors.New("etcd unhappy"))},
		{"429", apierrors.NewTooManyRequests("slow down", 1)},
		{"server timeout", apierrors.NewServerTimeout(leaseGVR.GroupResource(), "update", 1)},
		{"client deadline", fmt.Errorf("put: %w", context.DeadlineExceeded)},
		{"connection refused", errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")},
	} {
		t.Run(tc.label, func(t *testing.T) {
			h := newHarness(t)
			var failing atomic.Bool
			failUpdates(h, &failing, tc.err)
			a := h.start(h.config("a"))
			h.settle()
			checkClaim(t, "start", a.c.Current(), Claim{"a", at(15 * time.Second), 1})

			failing.Store(true)
			// Renewal starts at 5s and is retried every RetryPeriod.
			for _, s := range []time.Duration{5, 7, 9, 11, 13} {
				h.stepTo(s * time.Second)
				if !a.c.Current().IsCurrentFor("a", h.clk.Now()) {
					t.Fatalf("t0+%v: a lost the claim before it ran out", h.since())
				}
				if err := a.c.Ready(); err != nil {
					t.Fatalf("t0+%v: Ready = %v during transient errors", h.since(), err)
				}
			}
			if got := a.wake(); got != 15*time.Second {
				t.Fatalf("wake t0+%v, want t0+15s (the claim's expiry)", got)
			}
			h.stepTo(15 * time.Second)
			if a.c.Current().IsCurrentFor("a", h.clk.Now()) {
				t.Fatal("a still holds after its claim ran out")
			}
			if err := a.c.Ready(); err != nil {
				t.Fatalf("Ready = %v: transient errors must not stop Run", err)
			}

			failing.Store(false)
			h.stepTo(17 * time.Second)
			// Same holder re-acquires, under a new epoch.
			checkStored(t, h, "a", 2)
			checkClaim(t, "re-acquired", a.c.Current(), Claim{"a", at(32 * time.Second), 2})
		})
	}
}

func TestAnotherHolderTakesIt(t *testing.T) {
	h := newHarness(t)
	a := h.start(h.config("a"))
	h.settle()
	h.stepTo(time.Second)

	// b takes the lease (say, an operator's tool, or a replica that
	// thought a's claim had run out).
	h.api.update(t, func(l *coordv1.Lease) {
		l.Spec.HolderIdentity = new("b")
		l.Spec.LeaseTransitions = new(int32(2))
		l.Spec.RenewTime = &metav1.MicroTime{Time: t0.Add(-time.Hour)}
	})
	h.settle() // a learns through its watch, without the clock moving
	checkClaim(t, "a after takeover", a.c.Current(), Claim{"b", at(16 * time.Second), 2})

	// b renews at 10s: a's view of b's expiry moves with its observation.
	h.stepTo(10 * time.Second)
	h.api.update(t, func(l *coordv1.Lease) { l.Spec.RenewTime = &metav1.MicroTime{Time: t0} })
	h.settle()
	checkClaim(t, "a after b renewed", a.c.Current(), Claim{"b", at(25 * time.Second), 2})

	h.stepTo(24 * time.Second)
	checkStored(t, h, "b", 2)
	h.stepTo(25 * time.Second)
	checkStored(t, h, "a", 3)
	checkClaim(t, "a", a.c.Current(), Claim{"a", at(40 * time.Second), 3})
	if n := h.api.unconditionalUpdates(); n != 0 {
		t.Errorf("%d unconditional updates", n)
	}
}

func TestConflictRereadsNeverOverwrites(t *testing.T) {
	for _, tc := range []struct {
		label      string
		initial    *coordv1.LeaseSpec // nil: a creates the lease at t0
		stepTo     time.Duration      // when a writes and meets the race
		race       func(*coordv1.Lease)
		wantHolder string
		wantTrans  int64
		wantClaim  Claim
	}{
		{
			label:  "renew loses to a takeover",
			stepTo: 5 * time.Second,
			race: func(l *coordv1.Lease) {
				l.Spec.HolderIdentity = new("b")
				l.Spec.LeaseTransitions = new(int32(2))
			},
			wantHolder: "b", wantTrans: 2,
			wantClaim: Claim{"b", at(20 * time.Second), 2},
		},
		{
			label:  "renew meets an unrelated change: re-read, still ours, renew",
			stepTo: 5 * time.Second,
			race: func(l *coordv1.Lease) {
				l.Labels = map[string]string{"touched": "yes"}
			},
			wantHolder: "a", wantTrans: 1,
			wantClaim: Claim{"a", at(20 * time.Second), 1},
		},
		{
			label:   "acquire loses to the holder renewing",
			initial: new(leaseSpec("b", t0, 4)),
			stepTo:  15 * time.Second,
			race: func(l *coordv1.Lease) {
				l.Spec.RenewTime = &metav1.MicroTime{Time: at(15 * time.Second)}
			},
			wantHolder: "b", wantTrans: 4,
			wantClaim: Claim{"b", at(30 * time.Second), 4},
		},
	} {
		t.Run(tc.label, func(t *testing.T) {
			h := newHarness(t)
			if tc.initial != nil {
				h.api.put(t, *tc.initial)
			}
			a := h.start(h.config("a"))
			h.settle()

			var raced atomic.Bool
			var conflicts atomic.Int32
			h.api.prepend("update", func(k8stesting.Action) (bool, runtime.Object, error) {
				if raced.CompareAndSwap(false, true) {
					if err := h.api.rawWrite(tc.race); err != nil {
						t.Errorf("raw write: %v", err)
					}
					conflicts.Add(1)
				}
				return false, nil, nil // on to the resourceVersion check
			})
			h.stepTo(tc.stepTo)
			if !raced.Load() {
				t.Fatal("a did not write")
			}
			checkStored(t, h, tc.wantHolder, tc.wantTrans)
			checkClaim(t, "a", a.c.Current(), tc.wantClaim)
			if n := h.api.unconditionalUpdates(); n != 0 {
				t.Errorf("%d unconditional updates", n)
			}
		})
	}
}

func TestVacateOnCancel(t *testing.T) {
	h := newHarness(t)
	a := h.start(h.config("a"))
	h.settle()
	b := h.start(h.config("b"))
	h.settle()
	h.stepTo(3 * time.Second)
	checkClaim(t, "b sees a", b.c.Current(), Claim{"a", at(15 * time.Second), 1})

	err := a.stop()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	checkClaim(t, "a after vacating", a.c.Current(), Claim{"", time.Time{}, 1})
	if n := h.logs.count("ERROR"); n != 0 {
		t.Errorf("%d error records for a clean shutdown", n)
	}
	if err := a.c.Ready(); !errors.Is(err, ErrNotRunning) || !errors.Is(err, context.Canceled) {
		t.Errorf("Ready = %v, want ErrNotRunning and context.Canceled", err)
	}
	// b learns of the vacated lease through its watch and takes it at once,
	// without waiting for a's claim to run out and without the clock moving.
	h.settle()
	checkStored(t, h, "b", 2)
	checkClaim(t, "b", b.c.Current(), Claim{"b", at(18 * time.Second), 2})
}

func TestStopWithoutHoldingWritesNothing(t *testing.T) {
	h := newHarness(t)
	h.api.put(t, leaseSpec("b", t0, 4))
	a := h.start(h.config("a"))
	h.settle()
	before := h.api.lastWrite()
	if err := a.stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	if after := h.api.lastWrite(); after != before {
		t.Fatalf("a non-holder wrote the lease on shutdown: %v -> %v", before, after)
	}
}

func TestRelinquish(t *testing.T) {
	t.Run("alone: stays out for the back-off, then re-acquires under a new epoch", func(t *testing.T) {
		h := newHarness(t)
		a := h.start(h.config("a"))
		h.settle()
		h.stepTo(time.Second)
		if err := a.relinquish(30 * time.Second); err != nil {
			t.Fatalf("Relinquish: %v", err)
		}
		h.settle()
		checkStored(t, h, "", 1)
		if a.c.Current().IsCurrent(h.clk.Now()) {
			t.Fatalf("claim still current after relinquish: %+v", a.c.Current())
		}
		for a.wake() < 31*time.Second { // re-checks every RetryPeriod
			h.stepTo(a.wake())
			checkStored(t, h, "", 1)
		}
		h.stepTo(31 * time.Second)
		checkStored(t, h, "a", 2)
		checkClaim(t, "a", a.c.Current(), Claim{"a", at(46 * time.Second), 2})
	})
	t.Run("with a rival: the rival takes over at once; the back-off outlives the rival", func(t *testing.T) {
		h := newHarness(t)
		a := h.start(h.config("a"))
		h.settle()
		b := h.start(h.config("b"))
		h.settle()
		if err := a.relinquish(30 * time.Second); err != nil {
			t.Fatalf("Relinquish: %v", err)
		}
		h.settle()
		checkStored(t, h, "b", 2)
		h.stepTo(10 * time.Second)
		if err := b.stop(); !errors.Is(err, context.Canceled) {
			t.Fatalf("b.Run = %v", err)
		}
		h.settle()
		checkStored(t, h, "", 2)
		for a.wake() < 30*time.Second {
			h.stepTo(a.wake())
			checkStored(t, h, "", 2)
		}
		h.stepTo(30 * time.Second)
		checkStored(t, h, "a", 3)
	})
	t.Run("not holding: back-off only", func(t *testing.T) {
		h := newHarness(t)
		h.api.put(t, leaseSpec("b", t0, 4))
		a := h.start(h.config("a"))
		h.settle()
		if err := a.relinquish(time.Minute); err != nil {
			t.Fatalf("Relinquish: %v", err)
		}
		h.settle()
		checkStored(t, h, "b", 4) // b's claim untouched
		h.stepTo(16 * time.Second)
		checkStored(t, h, "b", 4) // expired, but a is backing off
		h.stepTo(60 * time.Second)
		checkStored(t, h, "a", 5)
	})
	t.Run("errors", func(t *testing.T) {
		h := newHarness(t)
		c, err := NewClaimer(h.api.cs.CoordinationV1(), h.config("a"))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := c.Relinquish(ctx, time.Second); !errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), "Run not called") {
			t.Errorf("before Run: %v, want ErrNotRunning, Run not called", err)
		}
		var ce *base.ConfigError
		if err := c.Relinquish(ctx, -time.Second); !errors.As(err, &ce) || ce.Field != "backoff" || !errors.Is(err, base.ErrInvalidConfig) {
			t.Errorf("negative: %v, want a ConfigError naming backoff", err)
		}
		r := h.run(c)
		h.settle()
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := c.Relinquish(cctx, time.Second); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled ctx: %v", err)
		}
		if err := r.stop(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v", err)
		}
		if err := c.Relinquish(ctx, time.Second); !errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), "Run returned") {
			t.Errorf("after Run: %v, want ErrNotRunning, Run returned", err)
		}
	})
}

func TestPermanentErrorsEndRun(t *testing.T) {
	forbidden := apierrors.NewForbidden(leaseGVR.GroupResource(), testName, errors.New("RBAC says no"))
	unauthorized := apierrors.NewUnauthorized("token expired")
	invalid := apierrors.NewInvalid(coordv1.SchemeGroupVersion.WithKind("Lease").GroupKind(), testName, nil)
	for _, tc := range []struct {
		label       string
		existing    bool   // a Lease held by nobody exists
		holdFirst   bool   // a acquires before the failure is switched on
		verb        string // failing verb
		err         error
		requireOnly bool // Config.RequireExisting
		deleteLease bool // instead of a failing verb, delete the Lease
		wantIs      func(error) bool
	}{
		{label: "get forbidden", verb: "get", err: forbidden, wantIs: apierrors.IsForbidden},
		{label: "get unauthorized", verb: "get", err: unauthorized, wantIs: apierrors.IsUnauthorized},
		{label: "create forbidden", verb: "create", err: forbidden, wantIs: apierrors.IsForbidden},
		// The Lease's namespace does not exist: not a silent retry loop
		// behind a healthy replica.
		{label: "create: namespace missing", verb: "create", err: apierrors.NewNotFound(corev1Namespaces, testNS), wantIs: func(err error) bool {
			return apierrors.IsNotFound(err) && strings.Contains(err.Error(), "namespace has not existed")
		}},
		{label: "acquire forbidden", existing: true, verb: "update", err: forbidden, wantIs: apierrors.IsForbidden},
		{label: "acquire invalid", existing: true, verb: "update", err: invalid, wantIs: apierrors.IsInvalid},
		{label: "renew forbidden while holding", holdFirst: true, verb: "update", err: forbidden, wantIs: apierrors.IsForbidden},
		{
			label: "lease missing, RequireExisting", requireOnly: true,
			wantIs: func(err error) bool { return errors.Is(err, ErrLeaseNotFound) },
		},
		{
			label: "lease deleted while holding, RequireExisting", existing: true, holdFirst: true,
			requireOnly: true, deleteLease: true,
			wantIs: func(err error) bool { return errors.Is(err, ErrLeaseNotFound) },
		},
	} {
		t.Run(tc.label, func(t *testing.T) {
			h := newHarness(t)
			if tc.existing {
				h.api.put(t, leaseSpec("", t0, 0))
			}
			var on atomic.Bool
			on.Store(!tc.holdFirst)
			if tc.verb != "" {
				h.api.prepend(tc.verb, func(k8stesting.Action) (bool, runtime.Object, error) {
					if on.Load() {
						return true, nil, tc.err
					}
					return false, nil, nil
				})
			}
			cfg := h.config("a")
			cfg.RequireExisting = tc.requireOnly
			a := h.start(cfg)
			if tc.holdFirst {
				h.settle()
				if !a.c.Current().IsCurrentFor("a", h.clk.Now()) {
					t.Fatal("a did not acquire")
				}
				on.Store(true)
				if tc.deleteLease {
					h.api.delete(t)
				} else {
					h.clk.SetTime(at(5 * time.Second)) // renewal time
				}
			}
			if apierrors.IsForbidden(tc.err) || apierrors.IsUnauthorized(tc.err) || apierrors.IsNotFound(tc.err) {
				// Refusals may be an API server whose authorizer has
				// not synced yet: Run goes on for a LeaseDuration of
				// refusals, then gives up.
				h.settle()
				first := h.clk.Now()
				for !a.stopped() && h.clk.Now().Sub(first) < cfg.LeaseDuration+2*cfg.RetryPeriod {
					h.step(cfg.RetryPeriod)
				}
				if d := h.clk.Now().Sub(first); d < cfg.LeaseDuration-cfg.RetryPeriod {
					t.Errorf("Run ended after %s of refusals, want about LeaseDuration %s", d, cfg.LeaseDuration)
				}
			}
			err := a.wait()
			if !tc.wantIs(err) {
				t.Fatalf("Run = %v, want a matching error", err)
			}
			if rerr := a.c.Ready(); !errors.Is(rerr, ErrNotRunning) || !tc.wantIs(rerr) {
				t.Errorf("Ready = %v, want ErrNotRunning wrapping Run's error", rerr)
			}
			if a.c.Current().IsCurrentFor("a", h.clk.Now()) {
				t.Errorf("a still reports itself as holder after Run failed: %+v", a.c.Current())
			}
			if n := h.logs.count("ERROR", "claimer stopped"); n != 1 {
				t.Errorf("%d error records, want 1", n)
			}
		})
	}
}

func TestLeaseDeletedIsRecreatedWithHigherEpoch(t *testing.T) {
	h := newHarness(t)
	h.api.put(t, leaseSpec("", t0, 6))
	a := h.start(h.config("a"))
	h.settle()
	checkClaim(t, "a", a.c.Current(), Claim{"a", at(15 * time.Second), 7})
	h.stepTo(time.Second)
	h.api.delete(t)
	h.settle()
	// Re-created with an epoch above any seen, not from 1: work fenced
	// under epoch 7 can never match a later claim.
	checkStored(t, h, "a", 8)
	checkClaim(t, "a", a.c.Current(), Claim{"a", at(16 * time.Second), 8})
}

func TestEpochsStrictlyIncrease(t *testing.T) {
	h := newHarness(t)
	a := h.start(h.config("a"))
	var failing atomic.Bool
	failUpdates(h, &failing, apierrors.NewInternalError(errors.New("boom")))
	h.settle()

	var epochs []int64
	record := func(label string) {
		t.Helper()
		c := a.c.Current()
		if !c.IsCurrentFor("a", h.clk.Now()) {
			t.Fatalf("%s: a does not hold: %+v", label, c)
		}
		_, stored := h.stored()
		if c.Epoch != stored {
			t.Fatalf("%s: claim epoch %d, lease transitions %d", label, c.Epoch, stored)
		}
		epochs = append(epochs, c.Epoch)
	}
	record("created")

	// Relinquish with no back-off: vacate, then the same holder re-acquires.
	if err := a.relinquish(0); err != nil {
		t.Fatal(err)
	}
	h.settle()
	record("re-acquired after relinquish")

	// Renewals fail until the claim runs out; then the same holder re-acquires.
	failing.Store(true)
	h.stepTo(5 * time.Second)
	h.stepTo(15 * time.Second)
	failing.Store(false)
	h.stepTo(17 * time.Second)
	record("re-acquired after expiry")

	// b takes over, then vacates; a acquires.
	h.api.update(t, func(l *coordv1.Lease) {
		l.Spec.HolderIdentity = new("b")
		l.Spec.LeaseTransitions = new(int32(*l.Spec.LeaseTransitions + 1))
	})
	h.settle()
	h.api.update(t, func(l *coordv1.Lease) { l.Spec.HolderIdentity = nil })
	h.settle()
	record("acquired after b vacated")

	for i := 1; i < len(epochs); i++ {
		if epochs[i] <= epochs[i-1] {
			t.Fatalf("epochs not strictly increasing: %v", epochs)
		}
	}
	if want := []int64{1, 2, 3, 5}; fmt.Sprint(epochs) != fmt.Sprint(want) {
		t.Fatalf("epochs %v, want %v", epochs, want)
	}
}

func TestSubscribe(t *testing.T) {
	t.Run("in order, ending on the latest", func(t *testing.T) {
		h := newHarness(t)
		a := h.start(h.config("a"))
		ch, cancel := a.c.Subscribe()
		defer cancel()
		got := make(chan []Claim)
		go func() {
			var cs []Claim
			for c := range ch {
				cs = append(cs, c)
			}
			got <- cs
		}()
		h.settle()
		for _, s := range []time.Duration{5, 10, 15} {
			h.stepTo(s * time.Second)
		}
		h.api.update(t, func(l *coordv1.Lease) {
			l.Spec.HolderIdentity = new("b")
			l.Spec.LeaseTransitions = new(int32(2))
		})
		h.settle()
		last := a.c.Current()
		waitFor(t, "subscriber to catch up", func() bool { return len(ch) == 0 })
		cancel()
		claims := <-got
		if len(claims) == 0 || !claims[len(claims)-1].Equal(last) {
			t.Fatalf("last claim received %+v, want %+v", claims, last)
		}
		for i := 1; i < len(claims); i++ {
			p, c := claims[i-1], claims[i]
			if c.Equal(p) {
				t.Errorf("claim %d repeated: %+v", i, c)
			}
			if c.Epoch < p.Epoch || (c.Epoch == p.Epoch && c.Holder == p.Holder && c.Expiry.Before(p.Expiry)) {
				t.Errorf("claims out of order: %+v then %+v", p, c)
			}
		}
	})
	t.Run("a subscriber that never reads does not block the claimer", func(t *testing.T) {
		h := newHarness(t)
		a := h.start(h.config("a"))
		ch, cancel := a.c.Subscribe()
		defer cancel()
		h.settle()
		for i := 1; i <= 20; i++ {
			h.stepTo(time.Duration(5*i) * time.Second) // one renewal each
		}
		want := Claim{"a", at(115 * time.Second), 1}
		checkClaim(t, "current", a.c.Current(), want)
		checkClaim(t, "the one buffered claim", <-ch, want)
		select {
		case c := <-ch:
			t.Fatalf("more than one claim buffered: %+v", c)
		default:
		}
	})
}

func TestHub(t *testing.T) {
	var h hub
	slow, cancelSlow := h.subscribe()
	checkClaim(t, "initial", <-slow, Claim{})

	fast, cancelFast := h.subscribe()
	<-fast
	received := make(chan []int64)
	go func() {
		var es []int64
		for c := range fast {
			es = append(es, c.Epoch)
		}
		received <- es
	}()
	const n = 10000
	for i := int64(1); i <= n; i++ {
		if !h.publish(Claim{Holder: "x", Expiry: t0, Epoch: i}) {
			t.Fatalf("publish %d reported no change", i)
		}
	}
	if h.publish(Claim{Holder: "x", Expiry: t0.In(time.FixedZone("elsewhere", 3600)), Epoch: n}) {
		t.Error("re-publishing an equal claim (same instant, other zone) counted as a change")
	}
	checkClaim(t, "slow subscriber gets the latest", <-slow, Claim{"x", t0, n})
	waitFor(t, "fast subscriber to drain", func() bool { return len(fast) == 0 })
	cancelFast()
	cancelFast() // idempotent
	es := <-received
	for i := 1; i < len(es); i++ {
		if es[i] <= es[i-1] {
			t.Fatalf("fast subscriber saw epochs out of order at %d: %d then %d", i, es[i-1], es[i])
		}
	}
	if es[len(es)-1] != n {
		t.Fatalf("fast subscriber ended on epoch %d, want %d", es[len(es)-1], n)
	}
	cancelSlow()
	if _, ok := <-slow; ok {
		t.Error("channel open after cancel")
	}
	h.publish(Claim{Holder: "y"}) // no subscriber left; must not panic
}

// TestWatch checks that a non-holder learns of a vacated lease through its
// watch at once, and with a broken watch by re-reading every RetryPeriod.
func TestWatch(t *testing.T) {
	for _, tc := range []struct {
		label     string
		watchErr  error // every watch fails with this
		acquireAt time.Duration
		warned    int
	}{
		{label: "watch works: acquire without waiting", acquireAt: 0},
		{label: "watch unavailable: re-read every RetryPeriod", watchErr: apierrors.NewServiceUnavailable("no"), acquireAt: 2 * time.Second},
		{label: "watch forbidden: warn once, poll", watchErr: apierrors.NewForbidden(leaseGVR.GroupResource(), "", errors.New("no watch verb")), acquireAt: 2 * time.Second, warned: 1},
	} {
		t.Run(tc.label, func(t *testing.T) {
			h := newHarness(t)
			if tc.watchErr != nil {
				h.api.cs.PrependWatchReactor("leases", func(k8stesting.Action) (bool, watch.Interface, error) {
					return true, nil, tc.watchErr
				})
			}
			h.api.put(t, leaseSpec("b", t0, 4))
			a := h.start(h.config("a"))
			a.noWatch = tc.watchErr != nil
			h.settle()
			h.step(time.Second / 2)
			h.api.update(t, func(l *coordv1.Lease) { l.Spec.HolderIdentity = nil })
			h.settle()
			if tc.acquireAt > 0 {
				checkStored(t, h, "", 4)
				h.stepTo(tc.acquireAt)
			}
			checkStored(t, h, "a", 5)
			if err := a.c.Ready(); err != nil {
				t.Errorf("Ready = %v", err)
			}
			// The watch goroutine is not synchronised with the loop: wait for
			// its first warning, then let it retry a few times.
			waitFor(t, "watch warning", func() bool { return h.logs.count("WARN", "cannot watch") >= tc.warned })
			for _, s := range []time.Duration{4, 6, 8, 10} {
				h.stepTo(s * time.Second)
			}
			if n := h.logs.count("WARN", "cannot watch"); n != tc.warned {
				t.Errorf("%d watch warnings, want %d", n, tc.warned)
			}
		})
	}
}

func TestWatchReestablished(t *testing.T) {
	h := newHarness(t)
	h.api.put(t, leaseSpec("b", t0, 4))
	first := watch.NewRaceFreeFake()
	var watches atomic.Int32
	h.api.cs.PrependWatchReactor("leases", func(k8stesting.Action) (bool, watch.Interface, error) {
		if watches.Add(1) == 1 {
			return true, first, nil
		}
		return false, nil, nil // the tracker's watch
	})
	a := h.start(h.config("a"))
	a.noWatch = true
	h.settle()
	first.Stop() // the server ends the watch without an event
	// The loop waits on one timer; the watch goroutine, once it has noticed
	// the end of the watch, on a second one before it re-establishes it.
	waitFor(t, "watch goroutine to wait for its retry", func() bool {
		return !a.c.watchUp.Load() && h.clk.Waiters() == 2
	})
	h.step(2 * time.Second) // the claimer re-reads, the watch is re-established
	a.noWatch = false
	h.settle()
	if n := watches.Load(); n != 2 {
		t.Fatalf("%d watches, want 2", n)
	}
	h.api.update(t, func(l *coordv1.Lease) { l.Spec.HolderIdentity = nil })
	h.settle()
	checkStored(t, h, "a", 5)
}

func TestThreeClaimers(t *testing.T) {
	h := newHarness(t)
	rs := map[string]*runner{}
	for _, id := range []string{"a", "b", "c"} {
		rs[id] = h.start(h.config(id))
		h.settle()
	}
	holders := func() []string {
		var hs []string
		for id, r := range rs {
			if r.c.Current().IsCurrentFor(id, h.clk.Now()) {
				hs = append(hs, id)
			}
		}
		return hs
	}
	var lastEpoch int64
	stoppedAt := map[time.Duration]bool{20 * time.Second: false, 40 * time.Second: false}
	for h.since() < 60*time.Second {
		h.step(time.Second)
		hs := holders()
		if len(hs) != 1 {
			t.Fatalf("t0+%v: holders %v, want exactly one", h.since(), hs)
		}
		holder := hs[0]
		c := rs[holder].c.Current()
		if c.Epoch < lastEpoch {
			t.Fatalf("t0+%v: epoch went back from %d to %d", h.since(), lastEpoch, c.Epoch)
		}
		lastEpoch = c.Epoch
		for id, r := range rs {
			if got := r.c.Current(); got.Holder != holder || got.Epoch != c.Epoch {
				t.Fatalf("t0+%v: %s sees %+v, holder is %s epoch %d", h.since(), id, got, holder, c.Epoch)
			}
		}
		if done, ok := stoppedAt[h.since()]; ok && !done {
			stoppedAt[h.since()] = true
			if err := rs[holder].stop(); !errors.Is(err, context.Canceled) {
				t.Fatalf("stop %s: %v", holder, err)
			}
			delete(rs, holder)
			h.settle() // a successor takes over at once
		}
	}
	if lastEpoch != 3 {
		t.Errorf("final epoch %d, want 3 (two hand-overs)", lastEpoch)
	}
}

func TestRunTwiceAndReadiness(t *testing.T) {
	h := newHarness(t)
	c, err := NewClaimer(h.api.cs.CoordinationV1(), h.config("a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(); !errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), "Run not called") {
		t.Errorf("Ready before Run = %v, want ErrNotRunning, Run not called", err)
	}
	if c.Identity() != "a" {
		t.Errorf("Identity = %q", c.Identity())
	}
	r := h.run(c)
	h.settle()
	if err := c.Ready(); err != nil {
		t.Errorf("Ready while running = %v", err)
	}
	if err := c.Run(context.Background()); !errors.Is(err, base.ErrAlreadyStarted) {
		t.Errorf("second Run = %v, want base.ErrAlreadyStarted", err)
	}
	if err := r.stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	if err := c.Ready(); !errors.Is(err, ErrNotRunning) || !errors.Is(err, context.Canceled) {
		t.Errorf("Ready after Run = %v, want ErrNotRunning wrapping Run's error", err)
	}
	if err := c.Run(context.Background()); !errors.Is(err, base.ErrAlreadyStarted) {
		t.Errorf("Run after stop = %v, want base.ErrAlreadyStarted", err)
	}
}

func TestLogsOnlyLeadershipChanges(t *testing.T) {
	h := newHarness(t)
	a := h.start(h.config("a"))
	h.settle()
	for _, s := range []time.Duration{5, 10, 15, 20} {
		h.stepTo(s * time.Second) // four renewals
	}
	if err := a.relinquish(time.Hour); err != nil {
		t.Fatal(err)
	}
	h.settle()
	for _, tc := range []struct {
		substr string
		want   int
	}{
		{"acquired the lease", 1},
		{"no longer holding the lease", 1},
		{"vacated the lease", 1},
		{"renew", 0},
	} {
		if n := h.logs.count(tc.substr); n != tc.want {
			t.Errorf("%d records with %q, want %d; records:\n%s", n, tc.substr, tc.want, strings.Join(h.logs.all(), "\n"))
		}
	}
	if n := len(h.logs.all()); n != 3 {
		t.Errorf("%d records, want 3:\n%s", n, strings.Join(h.logs.all(), "\n"))
	}
}

// An API server that has just restarted refuses requests until its
// authorizer has synced: a short run of refusals must not end Run.
func TestRefusalsThatPassDoNotEndRun(t *testing.T) {
	for _, verb := range []string{"get", "create"} {
		t.Run(verb, func(t *testing.T) {
			h := newHarness(t)
			var refusals atomic.Int32
			refusals.Store(2)
			h.api.prepend(verb, func(k8stesting.Action) (bool, runtime.Object, error) {
				if refusals.Add(-1) >= 0 {
					return true, nil, apierrors.NewForbidden(leaseGVR.GroupResource(), testName, errors.New("authorizer not synced"))
				}
				return false, nil, nil
			})
			cfg := h.config("a")
			a := h.start(cfg)
			h.settle()
			for i := 0; i < 4 && !a.c.Current().IsCurrentFor("a", h.clk.Now()); i++ {
				h.step(cfg.RetryPeriod)
			}
			if a.stopped() {
				t.Fatalf("Run ended: %v", a.wait())
			}
			if !a.c.Current().IsCurrentFor("a", h.clk.Now()) {
				t.Fatalf("a did not acquire after the refusals passed: %+v", a.c.Current())
			}
			if err := a.c.Ready(); err != nil {
				t.Errorf("Ready = %v, want nil", err)
			}
		})
	}
}

// fakeWriter records Quiesce calls and answers as told.
type fakeWriter struct {
	mu       sync.Mutex
	calls    []int64 // epochs
	leading  []bool  // whether the claimer still reported us as holder during the call
	answered bool
	c        *Claimer
	now      func() time.Time
}

func (w *fakeWriter) Quiesce(_ context.Context, epoch int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, epoch)
	w.leading = append(w.leading, w.c.Current().IsCurrentFor(w.c.Identity(), w.now()))
	return w.answered
}

// Giving the lease up on purpose asks every Writer to quiesce first, while
// the claim is still reported as ours; the Lease is vacated only when every
// write was answered. Otherwise it keeps naming us and a successor waits a
// full lease duration.
func TestReleaseQuiescesWritersBeforeVacating(t *testing.T) {
	for _, tc := range []struct {
		label    string
		answered bool
		shutdown bool // Run's context cancelled instead of Relinquish
	}{
		{"relinquish, all answered: vacate", true, false},
		{"relinquish, a write unanswered: keep the lease until it runs out", false, false},
		{"shutdown, all answered: vacate", true, true},
		{"shutdown, a write unanswered: keep the lease until it runs out", false, true},
	} {
		t.Run(tc.label, func(t *testing.T) {
			h := newHarness(t)
			a := h.start(h.config("a"))
			h.settle()
			w := &fakeWriter{answered: tc.answered, c: a.c, now: h.clk.Now}
			remove := a.c.AddWriter(w)
			defer remove()
			b := h.start(h.config("b"))
			h.settle()
			checkStored(t, h, "a", 1)
			if tc.shutdown {
				if err := a.stop(); !errors.Is(err, context.Canceled) {
					t.Fatal(err)
				}
			} else if err := a.relinquish(time.Hour); err != nil {
				t.Fatal(err)
			}
			h.settle()
			w.mu.Lock()
			calls, leading := w.calls, w.leading
			w.mu.Unlock()
			if len(calls) != 1 || calls[0] != 1 || !leading[0] {
				t.Fatalf("Quiesce calls (epochs) %v, still leading during the call %v; want one call for epoch 1 while leading", calls, leading)
			}
			if tc.answered {
				// Vacated: b acquires at once.
				checkStored(t, h, "b", 2)
				return
			}
			checkStored(t, h, "a", 1)
			h.stepTo(14 * time.Second)
			checkStored(t, h, "a", 1)
			if b.c.Current().IsCurrentFor("b", h.clk.Now()) {
				t.Fatal("b holds the lease before a's claim ran out")
			}
			h.stepTo(15 * time.Second)
			checkStored(t, h, "b", 2)
		})
	}
}

// A writer removed from the claimer is not asked.
func TestRemovedWriterIsNotAsked(t *testing.T) {
	h := newHarness(t)
	a := h.start(h.config("a"))
	h.settle()
	w := &fakeWriter{answered: false, c: a.c, now: h.clk.Now}
	remove := a.c.AddWriter(w)
	remove()
	remove() // twice is harmless
	if err := a.relinquish(time.Hour); err != nil {
		t.Fatal(err)
	}
	h.settle()
	if len(w.calls) != 0 {
		t.Fatalf("removed writer asked: %v", w.calls)
	}
	if holder, _ := h.stored(); holder != "" {
		t.Fatalf("lease still names %q after relinquish with no writer", holder)
	}
}

var corev1Namespaces = schema.GroupResource{Resource: "namespaces"}
