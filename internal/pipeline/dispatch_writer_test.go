package pipeline

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/statuspatch"
	"k8s.io/apimachinery/pkg/types"
)

// namingPatcher names its writer like a fenced DynamicStatusPatcher, and
// records the statuspatch.WriteClaim of each call.
type namingPatcher struct {
	mu     sync.Mutex
	claims []statuspatch.WriteClaim
}

func (p *namingPatcher) Patch(ctx context.Context, _ tPayload) error {
	w, ok := statuspatch.WriteClaimFrom(ctx)
	if !ok {
		return errors.New("no statuspatch.WriteClaim")
	}
	p.mu.Lock()
	p.claims = append(p.claims, w)
	p.mu.Unlock()
	return nil
}

func (p *namingPatcher) Fenced() bool { return true }

// Every call's context says who writes: the identity, the Lease of
// Options.Lease, and the epoch of the claim the call is made under.
func TestDispatcherTellsThePatcherWhoWrites(t *testing.T) {
	r := newDrig(t)
	pat := &namingPatcher{}
	d, err := NewDispatcher(r.queue, r.src, r.comp, pat, r.obs, Options{Name: "test", Capacity: 100, PatchTimeout: 10 * time.Second, Clock: r.clock,
		Lease: types.NamespacedName{Namespace: "leases", Name: "widgets-shard-1-of-4"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.d = d
	r.lead(5)
	r.add(t, "a")
	r.start(t)
	waitFor(t, "the call", func() bool { pat.mu.Lock(); defer pat.mu.Unlock(); return len(pat.claims) == 1 })
	want := statuspatch.WriteClaim{Identity: "me", LeaseNamespace: "leases", LeaseName: "widgets-shard-1-of-4", Epoch: 5}
	if got := pat.claims[0]; got != want {
		t.Errorf("statuspatch.WriteClaim %+v, want %+v", got, want)
	}
}

// A patcher that must name the writer and cannot is rejected when the
// dispatcher is built, naming what to shorten — not at its first write.
func TestNewDispatcherRejectsAWriterThePatcherCannotName(t *testing.T) {
	r := newDrig(t)
	long := newFakeObserver(strings.Repeat("i", 128))
	q, err := newQueue(Options{Capacity: 10})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		obs   Leader
		lease types.NamespacedName
	}{
		"too long":         {long, types.NamespacedName{Namespace: "ns", Name: "l"}},
		"no Lease to name": {r.obs, types.NamespacedName{}},
	} {
		_, err := NewDispatcher(q, r.src, r.comp, &namingPatcher{}, tc.obs, Options{Lease: tc.lease}, nil)
		var ce *base.ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("%s: NewDispatcher = %v, want a ConfigError", name, err)
		}
	}
}
