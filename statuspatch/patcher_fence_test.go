package statuspatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// fenceDenial is what the API server answers when the fence's
// ValidatingAdmissionPolicy denies a write.
const fenceDenial = `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,` +
	`"message":"httproutes.gateway.networking.k8s.io \"r1\" is forbidden: ValidatingAdmissionPolicy 'quietpatch-fence' with binding 'quietpatch-fence' denied request: ` +
	outcome.FenceMessage + ` the Lease ns/l is held by b, not a"}`

func TestServerTimeoutAt(t *testing.T) {
	now := time.Now() // the contexts' deadlines are ahead: none is done
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		left     time.Duration // to the deadline; 0: no deadline
		want     time.Duration
		wantSend bool
	}{
		{left: 0, want: 0, wantSend: true},                                                          // no deadline: no parameter
		{left: 5 * time.Second, want: 4900 * time.Millisecond, wantSend: true},                      // less the margin
		{left: 500 * time.Millisecond, want: 450 * time.Millisecond, wantSend: true},                // less a tenth
		{left: 4*time.Second + 999*time.Microsecond, want: 3900 * time.Millisecond, wantSend: true}, // floored
		{left: 1200 * time.Microsecond, want: time.Millisecond, wantSend: true},
		{left: time.Millisecond, wantSend: false}, // 0.9 ms after the tenth
		{left: -time.Second, wantSend: false},
	} {
		ctx := context.Background()
		if tc.left != 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, now.Add(tc.left))
			defer cancel()
		}
		if d, ok := serverTimeoutAt(ctx, now); d != tc.want || ok != tc.wantSend {
			t.Errorf("%v left: serverTimeoutAt = %v, %v; want %v, %v", tc.left, d, ok, tc.want, tc.wantSend)
		}
	}
	if d, ok := serverTimeoutAt(done, now); ok || d != 0 {
		t.Errorf("a done context: %v, %v; want nothing sent", d, ok)
	}
}

// A call whose context leaves no time is not sent at all: a timeout of 0
// would be the server's default of 60 s.
func TestMergePatcherSendsNothingWithoutTime(t *testing.T) {
	api := newFakeAPIServer(t)
	p := newMergePatcher(api.client, routesGVR(), "test")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Microsecond)
	defer cancel()
	err := p.Patch(ctx, MergePatch{Namespace: "ns", Name: "r1", ResourceVersion: "1", Status: json.RawMessage(`{}`)})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want one wrapping context.DeadlineExceeded", err)
	}
	if n := len(api.requests()); n != 0 {
		t.Errorf("%d requests sent with no time left", n)
	}
}

func TestFencedFieldManager(t *testing.T) {
	w := WriteClaim{Identity: "pod-a_0123abcd", LeaseNamespace: "ns", LeaseName: "status-shard-3-of-8", Epoch: 4}
	fm, err := FencedFieldManager(w)
	if err != nil || fm != "ns/status-shard-3-of-8@pod-a_0123abcd" {
		t.Errorf("FencedFieldManager = %q, %v", fm, err)
	}
	long := w
	long.Identity = strings.Repeat("i", maxFieldManager)
	noLease, noNamespace := w, w
	noLease.LeaseName, noNamespace.LeaseNamespace = "", ""
	for _, c := range []struct {
		name  string
		w     WriteClaim
		field string
	}{
		{"too long", long, "Lease"},
		{"no Lease", noLease, "Observer"},
		{"no namespace", noNamespace, "Observer"},
	} {
		_, err := FencedFieldManager(c.w)
		var ce *base.ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("%s: err = %v, want a ConfigError naming %s", c.name, err, c.field)
		}
	}
	// At exactly maxFieldManager characters it fits.
	fit := w
	fit.Identity = strings.Repeat("i", maxFieldManager-len("ns/status-shard-3-of-8@"))
	if fm, err := FencedFieldManager(fit); err != nil || len(fm) != maxFieldManager {
		t.Errorf("%d characters: %v", len(fm), err)
	}
}

// TestMergePatcherFenced: WithFence returns a fenced copy, which names the
// writer in each write's field manager; a claim whose fenced field manager
// is too long is refused with the ConfigError of FencedFieldManager,
// nothing sent. The patcher d itself stays unfenced and writes under its
// own field manager whatever the claim. (The pipeline checks the claim's
// FencedFieldManager up front for a patcher whose Fenced is true.)
func TestMergePatcherFenced(t *testing.T) {
	api := newFakeAPIServer(t)
	api.respond(http.StatusOK, okRoute)
	p := newMergePatcher(api.client, routesGVR(), "base")
	fenced := p.WithFence(slog.New(slog.DiscardHandler))
	if p.Fenced() || !fenced.Fenced() {
		t.Fatalf("Fenced: %v for the patcher, %v for its WithFence copy; want false, true", p.Fenced(), fenced.Fenced())
	}
	long := WriteClaim{Identity: strings.Repeat("i", maxFieldManager), LeaseNamespace: "ns", LeaseName: "l"}
	ctx := context.WithValue(context.Background(), base.WriteClaimKey{}, long)
	patch := MergePatch{Namespace: "ns", Name: "r1", ResourceVersion: "1", Status: json.RawMessage(`{}`)}
	if err := p.Patch(ctx, patch); err != nil {
		t.Errorf("unfenced, a claim too long to fence: %v", err)
	}
	var ce *base.ConfigError
	if err := fenced.Patch(ctx, patch); !errors.Is(err, ErrInvalidPatch) || !errors.As(err, &ce) || ce.Field != "Lease" {
		t.Errorf("fenced, too long: %v, want ErrInvalidPatch and a ConfigError naming Lease", err)
	}
	reqs := api.requests()
	if len(reqs) != 1 || reqs[0].FieldManager != "base" {
		t.Errorf("requests %+v, want one, the unfenced write under its own field manager", reqs)
	}
}

// fencedCall makes a fenced write of r1 under lease by identity "pod-a".
func fencedCall(t *testing.T, p *MergePatcher, lease string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx = context.WithValue(ctx, base.WriteClaimKey{}, WriteClaim{Identity: "pod-a", LeaseNamespace: "ns", LeaseName: lease, Epoch: 7})
	return p.Patch(ctx, MergePatch{Namespace: "ns", Name: "r1", ResourceVersion: "1", Status: json.RawMessage(`{"a":1}`)})
}

func TestFencedMergePatcher(t *testing.T) {
	newFenced := func(t *testing.T, api *fakeAPIServer) (*MergePatcher, *bytes.Buffer) {
		t.Helper()
		p := newMergePatcher(api.client, routesGVR(), "example.com/status")
		var logs bytes.Buffer
		return p.WithFence(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))), &logs
	}
	t.Run("the field manager names the writer; one dry-run check per Lease, denied: no warning", func(t *testing.T) {
		api := newFakeAPIServer(t)
		api.respond(http.StatusOK, okRoute)
		api.respondToDryRun(http.StatusForbidden, fenceDenial)
		p, logs := newFenced(t, api)
		for range 3 {
			if err := fencedCall(t, p, "l-shard-0-of-2"); err != nil {
				t.Fatal(err)
			}
		}
		if err := fencedCall(t, p, "l-shard-1-of-2"); err != nil {
			t.Fatal(err)
		}
		var writes, checks []capturedRequest
		for _, r := range api.requests() {
			if r.DryRun != "" {
				checks = append(checks, r)
			} else {
				writes = append(writes, r)
			}
		}
		if len(writes) != 4 || writes[0].FieldManager != "ns/l-shard-0-of-2@pod-a" || writes[3].FieldManager != "ns/l-shard-1-of-2@pod-a" {
			t.Errorf("writes %+v", writes)
		}
		if len(checks) != 2 {
			t.Fatalf("%d dry-run checks, want one per Lease: %+v", len(checks), checks)
		}
		for i, lease := range []string{"l-shard-0-of-2", "l-shard-1-of-2"} {
			c := checks[i]
			if c.DryRun != "All" || string(c.Body) != "{}" || c.Timeout == "" ||
				!strings.HasPrefix(c.FieldManager, "ns/"+lease+"@") || strings.HasSuffix(c.FieldManager, "@pod-a") || len(c.FieldManager) != len("ns/"+lease+"@pod-a") {
				t.Errorf("check %d: %+v, body %s: want a dry-run {} naming another writer under %s", i, c, c.Body, lease)
			}
		}
		if logs.Len() > 0 {
			t.Errorf("warnings although the fence denied the check:\n%s", logs)
		}
	})
	t.Run("not denied: one warning naming the Lease", func(t *testing.T) {
		api := newFakeAPIServer(t)
		api.respond(http.StatusOK, okRoute)
		p, logs := newFenced(t, api)
		for _, lease := range []string{"l-shard-0-of-2", "l-shard-0-of-2", "l-shard-1-of-2"} {
			if err := fencedCall(t, p, lease); err != nil {
				t.Fatal(err)
			}
		}
		if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "lease=ns/l-shard-0-of-2") ||
			!strings.Contains(logs.String(), "ValidatingAdmissionPolicy") {
			t.Errorf("%d warnings, want one naming the Lease and the policy:\n%s", n, logs)
		}
	})
	t.Run("a check without an answer is made again", func(t *testing.T) {
		api := newFakeAPIServer(t)
		api.respond(http.StatusOK, okRoute)
		api.respondToDryRun(http.StatusServiceUnavailable, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"ServiceUnavailable","code":503}`)
		p, _ := newFenced(t, api)
		for range 2 {
			if err := fencedCall(t, p, "l"); err != nil {
				t.Fatal(err)
			}
		}
		api.respondToDryRun(http.StatusForbidden, fenceDenial)
		for range 2 {
			if err := fencedCall(t, p, "l"); err != nil {
				t.Fatal(err)
			}
		}
		checks := 0
		for _, r := range api.requests() {
			if r.DryRun != "" {
				checks++
			}
		}
		if checks != 3 {
			t.Errorf("%d checks, want 3: after each of the two unanswered, one answered, then none", checks)
		}
	})
	t.Run("a write the fence denies is fenced, and needs no check", func(t *testing.T) {
		api := newFakeAPIServer(t)
		api.respond(http.StatusForbidden, fenceDenial)
		p, logs := newFenced(t, api)
		err := fencedCall(t, p, "l")
		if outcome.Of(err) != outcome.Fenced || !outcome.Answered(err) {
			t.Errorf("err %v: outcome %s, answered %v; want fenced, answered", err, outcome.Of(err), outcome.Answered(err))
		}
		if n := len(api.requests()); n != 1 || logs.Len() > 0 {
			t.Errorf("%d requests (want 1), logs %s", n, logs)
		}
	})
	t.Run("no WriteClaim: nothing sent", func(t *testing.T) {
		api := newFakeAPIServer(t)
		p, _ := newFenced(t, api)
		err := p.Patch(context.Background(), MergePatch{Namespace: "ns", Name: "r1", ResourceVersion: "1", Status: json.RawMessage(`{}`)})
		if !errors.Is(err, ErrInvalidPatch) {
			t.Errorf("err = %v, want ErrInvalidPatch", err)
		}
		if n := len(api.requests()); n != 0 {
			t.Errorf("%d requests", n)
		}
	})
}
