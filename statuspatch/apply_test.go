package statuspatch

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// applyRequest is what the test server saw of one request.
type applyRequest struct {
	method, path, contentType string
	query                     map[string][]string
	body                      []byte
}

// applyServer answers every request with status, recording the requests.
func applyServer(t *testing.T, status int, body string) (*rest.Config, func() []applyRequest) {
	t.Helper()
	var (
		mu   sync.Mutex
		reqs []applyRequest
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		reqs = append(reqs, applyRequest{r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.URL.Query(), b})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL, QPS: -1}, func() []applyRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]applyRequest(nil), reqs...)
	}
}

var widgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

// TestApplyStatusPatcherRequest: one PATCH of the status subresource, an
// apply patch with the field manager, force, and the time left to the
// context's deadline as the timeout parameter, floored to a millisecond.
func TestApplyStatusPatcherRequest(t *testing.T) {
	cfg, requests := applyServer(t, http.StatusOK, `{}`)
	p, err := NewApplyStatusPatcherForConfig(cfg, widgets, "Widget", "example.com/ready")
	if err != nil {
		t.Fatal(err)
	}
	patch, err := NewApplyPatch(&metav1.ObjectMeta{Namespace: "demo", Name: "w1"}, map[string]any{"conditions": []any{map[string]any{"type": "Ready"}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := p.Patch(ctx, patch); err != nil {
		t.Fatal(err)
	}
	if err := p.Patch(context.Background(), patch); err != nil { // no deadline
		t.Fatal(err)
	}
	reqs := requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	r := reqs[0]
	if r.method != http.MethodPatch || r.path != "/apis/example.com/v1/namespaces/demo/widgets/w1/status" || r.contentType != "application/apply-patch+yaml" {
		t.Errorf("request %s %s (%s), want PATCH /apis/example.com/v1/namespaces/demo/widgets/w1/status (application/apply-patch+yaml)", r.method, r.path, r.contentType)
	}
	if got := r.query["fieldManager"]; len(got) != 1 || got[0] != "example.com/ready" {
		t.Errorf("fieldManager %q, want example.com/ready", got)
	}
	if got := r.query["force"]; len(got) != 1 || got[0] != "true" {
		t.Errorf("force %q, want true", got)
	}
	tm, err := time.ParseDuration(strings.Join(r.query["timeout"], ""))
	if err != nil || tm <= 0 || tm > 3*time.Second || tm%time.Millisecond != 0 {
		t.Errorf("timeout %q (%v): want the time left to the deadline, at most 3s, in whole milliseconds", r.query["timeout"], err)
	}
	if got, ok := reqs[1].query["timeout"]; ok {
		t.Errorf("timeout %q without a deadline, want none", got)
	}
	var body map[string]any
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatal(err)
	}
	want := `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w1","namespace":"demo"},"status":{"conditions":[{"type":"Ready"}]}}`
	if string(r.body) != want {
		t.Errorf("body %s, want %s", r.body, want)
	}
}

// TestApplyStatusPatcherCoreAndClusterScoped: the path of a core resource
// and of a cluster-scoped object.
func TestApplyStatusPatcherCoreAndClusterScoped(t *testing.T) {
	cfg, requests := applyServer(t, http.StatusOK, `{}`)
	p, err := NewApplyStatusPatcherForConfig(cfg, schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "Node", "example.com/x")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Patch(context.Background(), ApplyPatch{Name: "n1", Status: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if r := requests()[0]; r.path != "/api/v1/nodes/n1/status" || !strings.Contains(string(r.body), `"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"}`) {
		t.Errorf("request %s %s, want /api/v1/nodes/n1/status with apiVersion v1, kind Node, no namespace", r.path, r.body)
	}
}

// TestApplyStatusPatcherErrors: the server's refusal comes back as the
// client's error (outcome classifies it); a malformed patch or a deadline
// less than a millisecond away sends nothing.
func TestApplyStatusPatcherErrors(t *testing.T) {
	cfg, requests := applyServer(t, http.StatusConflict, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409}`)
	p, err := NewApplyStatusPatcherForConfig(cfg, widgets, "Widget", "example.com/ready")
	if err != nil {
		t.Fatal(err)
	}
	ok := ApplyPatch{Namespace: "demo", Name: "w1", Status: json.RawMessage(`{}`)}
	if err := p.Patch(context.Background(), ok); outcome.Of(err) != outcome.Conflict {
		t.Errorf("Patch against a 409: %v (%s), want a conflict", err, outcome.Of(err))
	}
	for _, bad := range []ApplyPatch{{Namespace: "demo", Status: json.RawMessage(`{}`)}, {Name: "w1", Status: json.RawMessage(`[1]`)}, {Name: "w1"}} {
		if err := p.Patch(context.Background(), bad); !errors.Is(err, ErrInvalidPatch) {
			t.Errorf("Patch(%+v): %v, want ErrInvalidPatch", bad, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Microsecond)
	defer cancel()
	if err := p.Patch(ctx, ok); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Patch with less than 1ms left: %v, want context.DeadlineExceeded", err)
	}
	if n := len(requests()); n != 1 {
		t.Errorf("%d requests, want 1: nothing sent for a malformed patch or an expiring context", n)
	}
}

func TestApplyTimeout(t *testing.T) {
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		left    time.Duration // to the deadline; 0: no deadline
		want    time.Duration
		ok, err bool
	}{
		{left: 0, ok: false},
		{left: 5 * time.Second, want: 5 * time.Second, ok: true},
		{left: 4*time.Second + 999*time.Microsecond, want: 4 * time.Second, ok: true},
		{left: time.Millisecond, want: time.Millisecond, ok: true},
		{left: 999 * time.Microsecond, err: true},
		{left: -time.Second, err: true},
	} {
		ctx := context.Background()
		if tc.left != 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, now.Add(tc.left))
			defer cancel()
		}
		got, ok, err := applyTimeout(ctx, now)
		if got != tc.want || ok != tc.ok || (err != nil) != tc.err || (err != nil && !errors.Is(err, context.DeadlineExceeded)) {
			t.Errorf("applyTimeout with %s left = %s, %v, %v; want %s, %v, error %v", tc.left, got, ok, err, tc.want, tc.ok, tc.err)
		}
	}
}

func TestNewApplyStatusPatcherForConfigValidation(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	for _, tc := range []struct {
		label    string
		cfg      *rest.Config
		gvr      schema.GroupVersionResource
		kind, fm string
	}{
		{"nil config", nil, widgets, "Widget", "fm"},
		{"no resource", cfg, schema.GroupVersionResource{Group: "example.com", Version: "v1"}, "Widget", "fm"},
		{"no kind", cfg, widgets, "", "fm"},
		{"no field manager", cfg, widgets, "Widget", ""},
		{"long field manager", cfg, widgets, "Widget", strings.Repeat("x", 129)},
	} {
		if _, err := NewApplyStatusPatcherForConfig(tc.cfg, tc.gvr, tc.kind, tc.fm); err == nil {
			t.Errorf("%s: no error", tc.label)
		}
	}
}
