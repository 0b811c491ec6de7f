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

	"github.com/quietpatch/quietpatch/internal/base"
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

// TestApplyPatcherRequest: one PATCH of the status subresource, an
// apply patch with the field manager, force, and the time left to the
// context's deadline as the timeout parameter (ServerTimeout).
func TestApplyPatcherRequest(t *testing.T) {
	cfg, requests := applyServer(t, http.StatusOK, `{}`)
	p, err := NewApplyPatcher(cfg, widgets, "Widget", "example.com/ready")
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
	if err != nil || tm <= 0 || tm > 3*time.Second-serverTimeoutMargin || tm%time.Millisecond != 0 {
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

// TestApplyPatcherCoreAndClusterScoped: the path of a core resource
// and of a cluster-scoped object.
func TestApplyPatcherCoreAndClusterScoped(t *testing.T) {
	cfg, requests := applyServer(t, http.StatusOK, `{}`)
	p, err := NewApplyPatcher(cfg, schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "Node", "example.com/x")
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

// TestApplyPatcherErrors: the server's refusal comes back as the
// client's error (outcome classifies it); a malformed patch or a deadline
// less than a millisecond away sends nothing.
func TestApplyPatcherErrors(t *testing.T) {
	cfg, requests := applyServer(t, http.StatusConflict, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409}`)
	p, err := NewApplyPatcher(cfg, widgets, "Widget", "example.com/ready")
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

// TestNewApplyPatcherValidation: invalid arguments are rejected with a
// ConfigError naming the argument.
func TestNewApplyPatcherValidation(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	for _, tc := range []struct {
		label     string
		cfg       *rest.Config
		gvr       schema.GroupVersionResource
		kind, fm  string
		wantField string
	}{
		{"nil config", nil, widgets, "Widget", "fm", "cfg"},
		{"a config no client can be built from", &rest.Config{Host: "https://127.0.0.1:1", TLSClientConfig: rest.TLSClientConfig{CAFile: "/nonexistent/ca.crt"}}, widgets, "Widget", "fm", "cfg"},
		{"no resource", cfg, schema.GroupVersionResource{Group: "example.com", Version: "v1"}, "Widget", "fm", "gvr"},
		{"no version", cfg, schema.GroupVersionResource{Group: "example.com", Resource: "widgets"}, "Widget", "fm", "gvr"},
		{"no kind", cfg, widgets, "", "fm", "kind"},
		{"no field manager", cfg, widgets, "Widget", "", "fieldManager"},
		{"long field manager", cfg, widgets, "Widget", strings.Repeat("x", 129), "fieldManager"},
	} {
		p, err := NewApplyPatcher(tc.cfg, tc.gvr, tc.kind, tc.fm)
		var ce *base.ConfigError
		if p != nil || !errors.As(err, &ce) || ce.Field != tc.wantField || !errors.Is(err, base.ErrInvalidConfig) {
			t.Errorf("%s: NewApplyPatcher = %v, %v; want a ConfigError naming %s", tc.label, p, err, tc.wantField)
		}
	}
	if _, err := NewApplyPatcher(cfg, widgets, "Widget", strings.Repeat("x", 128)); err != nil {
		t.Errorf("a field manager of 128 characters: %v", err)
	}
}
