package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// versionPatcher reports "v-<name>" as the version of each write.
type versionPatcher struct{ *recordingPatcher }

func (v versionPatcher) PatchVersion(ctx context.Context, p tPayload) (string, error) {
	if err := v.Patch(ctx, p); err != nil {
		return "", err
	}
	return "v-" + strings.TrimPrefix(p.Key, "ns/"), nil
}

// withVersions makes r's dispatcher use a VersionPatcher.
func (r *drig) withVersions(t *testing.T) {
	t.Helper()
	opts := Options{Name: "test", Capacity: 100, PatchTimeout: 10 * time.Second, Workers: 2, Clock: r.clock, Logger: slog.New(r.logs)}
	metrics := NewMetrics(r.meter.provider.Meter("test"), opts)
	d, err := NewDispatcher(r.queue, r.src, r.comp, versionPatcher{r.pat}, r.obs, opts, metrics)
	if err != nil {
		t.Fatal(err)
	}
	unregister, err := metrics.Register(nil, nil, d.Stats)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unregister)
	r.d = d
}

// An event is an echo only if the object has exactly the version our last
// write of it produced, and only once; any other event, a deletion, a
// failed write or a Patcher that does not report versions: no echo.
func TestDispatchEchoes(t *testing.T) {
	r := newDrig(t, withWorkers(1))
	r.withVersions(t)
	r.lead(1)
	r.pat.fn = func(_ context.Context, p tPayload) error {
		if p.Key == "ns/fails" {
			return errors.New("boom")
		}
		return nil
	}
	r.add(t, "a", "b", "c", "fails")
	r.start(t)
	waitFor(t, "the calls", func() bool { return r.d.Stats().Patches[outcome.OK]+r.d.Stats().Patches[outcome.Failed] == 4 })
	for _, c := range []struct {
		key, rv string
		echo    bool
	}{
		{"a", "v-a", true},
		{"a", "v-a", false}, // the write's event came already
		{"b", "v-other", false},
		{"b", "v-b", false}, // forgotten at the other event
		{"c", "", false},    // deleted
		{"c", "v-c", false},
		{"fails", "v-fails", false},
	} {
		if got := r.d.Echo(nsKey(c.key), c.rv); got != c.echo {
			t.Errorf("Echo(%s, %q) = %v, want %v", c.key, c.rv, got, c.echo)
		}
	}
	if s := r.d.Stats().Echoes; s != 1 {
		t.Errorf("Stats().Echoes = %d, want 1", s)
	}
	if v := r.meter.value(t, "quietpatch.dispatch.echoes", "", ""); v != 1 {
		t.Errorf("quietpatch.dispatch.echoes = %d, want 1", v)
	}
}

func TestDispatchNoEchoesWithoutVersions(t *testing.T) {
	r := newDrig(t, withWorkers(1))
	r.lead(1)
	r.add(t, "a")
	r.start(t)
	waitFor(t, "the patch", func() bool { return r.outcome(t, outcome.OK) == 1 })
	for _, rv := range []string{"", "1", "v-a"} {
		if r.d.Echo(nsKey("a"), rv) {
			t.Errorf("Echo(a, %q) with a Patcher that reports no version", rv)
		}
	}
}

// An event that comes while the key's call is in flight is held: the
// write's echo is counted when the call ends, any other event has the key
// served again.
func TestDispatchEchoesDuringTheCall(t *testing.T) {
	r := newDrig(t, withWorkers(2))
	r.withVersions(t)
	r.lead(1)
	gate := make(chan struct{})
	r.pat.fn = func(context.Context, tPayload) error { <-gate; return nil }
	r.add(t, "a", "b")
	r.start(t)
	waitFor(t, "both calls in flight", func() bool { return r.pat.calls.Load() == 2 })
	if !r.d.Echo(nsKey("a"), "v-a") || !r.d.Echo(nsKey("b"), "v-other") {
		t.Fatal("an event during the call was not held")
	}
	close(gate)
	// Both calls ended (a's held echo matched); b, enqueued again for the
	// other event, is held until the cache holds our write: its event
	// (what the informer's handler gets) has it enqueued, and served.
	waitFor(t, "b held", func() bool { return r.dropped(t, dropHeld) == 1 })
	if r.d.Echo(nsKey("b"), "v-b") {
		t.Fatal("the event of a held key's write was skipped as an echo")
	}
	r.add(t, "b")
	waitFor(t, "b served again", func() bool { return len(r.pat.appliedKeys()) == 3 && r.d.Stats().Echoes == 1 })
	got := r.pat.appliedKeys()
	if slices.Sort(got); !slices.Equal(got, []string{"ns/a", "ns/b", "ns/b"}) {
		t.Errorf("applied %v, want a once and b twice", got)
	}
	if s := r.d.Stats().Echoes; s != 1 {
		t.Errorf("Stats().Echoes = %d, want 1", s)
	}
	if r.d.Echo(nsKey("a"), "v-a") {
		t.Error("a's echo counted twice")
	}
}

// A key served again before the cache holds our last write of it — the
// object still at the version the write was built from — is held, not
// patched from that old object (the patch would carry its old version and
// fail with 409): its write's event has it enqueued, or, without one,
// holdBound does.
func TestDispatchHoldsAKeyUntilItsCacheHoldsOurWrite(t *testing.T) {
	r := newDrig(t, withWorkers(1))
	r.withVersions(t)
	r.lead(1)
	r.add(t, "a", "b")
	r.start(t)
	waitFor(t, "the writes", func() bool { return r.outcome(t, outcome.OK) == 2 })
	r.add(t, "a", "b") // served again at once: the cache has neither write
	waitFor(t, "both held", func() bool { return r.dropped(t, dropHeld) == 2 })
	if r.d.Echo(nsKey("a"), "v-a") { // a's write reaches the cache
		t.Fatal("the event of a held key's write was skipped")
	}
	r.src.set(&tObj{Key: nsKey("a"), RV: "v-a", Gen: 1})
	r.add(t, "a") // what the handler does for an event not skipped
	waitFor(t, "a served from the cache with our write", func() bool { return r.dropped(t, dropUnchanged)+int64(len(r.pat.appliedKeys())) >= 3 })
	// b's event never comes: holdBound later it is served anyway.
	waitFor(t, "the hold's timer", r.clock.HasWaiters)
	r.clock.Step(holdBound)
	waitFor(t, "b served after holdBound", func() bool { return r.queue.Stats().Dequeued >= 6 })
	if n := r.d.Stats().Dropped[dropHeld]; n != 2 {
		t.Errorf("%d held, want 2", n)
	}
}
