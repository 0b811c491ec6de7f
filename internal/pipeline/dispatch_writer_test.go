package pipeline

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
)

// configObserver is a fakeObserver that tells its Lease, as
// *leader.Claimer does.
type configObserver struct {
	*fakeObserver
	cfg leader.Config
}

func (o configObserver) Config() leader.Config { return o.cfg }

// namingPatcher names its writer like a fenced DynamicStatusPatcher, and
// records the WriteClaim of each call.
type namingPatcher struct {
	mu     sync.Mutex
	claims []WriteClaim
}

func (p *namingPatcher) Patch(ctx context.Context, _ tPayload) error {
	w, ok := WriteClaimFrom(ctx)
	if !ok {
		return errors.New("no WriteClaim")
	}
	p.mu.Lock()
	p.claims = append(p.claims, w)
	p.mu.Unlock()
	return nil
}

func (p *namingPatcher) FieldManagerFor(w WriteClaim) (string, error) {
	return FencedFieldManager(w)
}

// Every call's context says who writes: the identity, the Lease the
// Observer tells, and the epoch of the claim the call is made under.
func TestDispatcherTellsThePatcherWhoWrites(t *testing.T) {
	r := newDrig(t)
	obs := configObserver{fakeObserver: r.obs, cfg: leader.Config{Namespace: "leases", Name: "widgets-shard-1-of-4", Identity: "me"}}
	pat := &namingPatcher{}
	d, err := NewDispatcher(r.queue, r.src, r.comp, pat, obs, Options{Name: "test", Capacity: 100, PatchTimeout: 10 * time.Second, Clock: r.clock})
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
		t.Errorf("WriteClaim %+v, want %+v", got, want)
	}
}

// A patcher that must name the writer and cannot is rejected when the
// dispatcher is built, naming what to shorten — not at its first write.
func TestNewDispatcherRejectsAWriterThePatcherCannotName(t *testing.T) {
	r := newDrig(t)
	long := newFakeObserver(strings.Repeat("i", MaxFieldManager))
	q, err := NewPatchQueue[types.NamespacedName](Options{Capacity: 10})
	if err != nil {
		t.Fatal(err)
	}
	for name, obs := range map[string]leader.Observer{
		"too long":         configObserver{fakeObserver: long, cfg: leader.Config{Namespace: "ns", Name: "l"}},
		"no Lease to name": r.obs,
	} {
		_, err := NewDispatcher(q, r.src, r.comp, &namingPatcher{}, obs, Options{})
		var ce *base.ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("%s: NewDispatcher = %v, want a ConfigError", name, err)
		}
	}
}
