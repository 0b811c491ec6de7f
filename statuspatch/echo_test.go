package statuspatch

import (
	"context"
	"errors"
	"log/slog"
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
	d, err := NewDispatcher(r.queue, r.src, r.comp, versionPatcher{r.pat}, r.obs, Options{
		Name: "test", Capacity: 100, PatchTimeout: 10 * time.Second, Workers: 1,
		Clock: r.clock, Logger: slog.New(r.logs), Meter: r.meter.provider.Meter("test"),
	})
	if err != nil {
		t.Fatal(err)
	}
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
	waitFor(t, "the calls", func() bool { return r.d.Stats().Patches[outcome.OK]+r.d.Stats().Patches[outcome.Error] == 4 })
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
