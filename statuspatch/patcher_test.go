package statuspatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// newMergePatcher is NewMergePatcher on a REST client of the API server
// (its base URL and content configuration are used; the paths are
// absolute).
func newMergePatcher(client rest.Interface, gvr schema.GroupVersionResource, fieldManager string) *MergePatcher {
	return &MergePatcher{statusClient: statusClient{client, gvr, fieldManager}}
}

// capturedRequest is what the fake API server saw.
type capturedRequest struct {
	Method, Path, ContentType, FieldManager string
	Timeout, DryRun                         string // query parameters
	Body                                    []byte
}

// fakeAPIServer answers every request with status and body (a dry-run
// request with dryStatus and dryBody when dryStatus is set), recording the
// requests.
type fakeAPIServer struct {
	hdrName, hdrValue string
	srv               *httptest.Server
	client            rest.Interface

	mu                sync.Mutex
	reqs              []capturedRequest
	status, dryStatus int
	body, dryBody     string
}

func newFakeAPIServer(t *testing.T) *fakeAPIServer {
	t.Helper()
	f := &fakeAPIServer{status: http.StatusOK}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		q := r.URL.Query()
		f.reqs = append(f.reqs, capturedRequest{
			Method: r.Method, Path: r.URL.Path, ContentType: r.Header.Get("Content-Type"),
			FieldManager: q.Get("fieldManager"), Timeout: q.Get("timeout"), DryRun: q.Get("dryRun"), Body: body,
		})
		status, respBody, hn, hv := f.status, f.body, f.hdrName, f.hdrValue
		if q.Get("dryRun") != "" && f.dryStatus != 0 {
			status, respBody = f.dryStatus, f.dryBody
		}
		f.mu.Unlock()
		if hn != "" {
			w.Header().Set(hn, hv)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, respBody)
	}))
	tr := &http.Transport{}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		f.srv.Close()
	})
	client, err := rest.UnversionedRESTClientFor(dynamic.ConfigFor(&rest.Config{Host: f.srv.URL, Transport: tr}))
	if err != nil {
		t.Fatal(err)
	}
	f.client = client
	return f
}

// respondToDryRun sets the answer to dry-run requests.
func (f *fakeAPIServer) respondToDryRun(status int, body string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dryStatus, f.dryBody = status, body
}

// header, when set, is a response header (name, value) the server adds.
func (f *fakeAPIServer) respondWithHeader(status int, body, name, value string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status, f.body, f.hdrName, f.hdrValue = status, body, name, value
}

func (f *fakeAPIServer) respond(status int, body string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status, f.body = status, body
}

func (f *fakeAPIServer) requests() []capturedRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]capturedRequest(nil), f.reqs...)
}

func routesGVR() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "httproutes"}
}

const okRoute = `{"apiVersion":"gateway.networking.k8s.io/v1","kind":"HTTPRoute","metadata":{"name":"r1","namespace":"ns"}}`

func TestMergePatcherRequest(t *testing.T) {
	cases := []struct {
		name      string
		namespace string
		wantPath  string
	}{
		{"namespaced", "ns", "/apis/gateway.networking.k8s.io/v1/namespaces/ns/httproutes/r1/status"},
		{"cluster-scoped", "", "/apis/gateway.networking.k8s.io/v1/httproutes/r1/status"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			api := newFakeAPIServer(t)
			api.respond(http.StatusOK, okRoute)
			p := newMergePatcher(api.client, routesGVR(), "example.com/route-status")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := p.Patch(ctx, MergePatch{
				Namespace: c.namespace, Name: "r1", ResourceVersion: "4711",
				Status: json.RawMessage(`{"parents":[{"controllerName":"example.com/gw"}]}`),
			})
			if err != nil {
				t.Fatalf("Patch: %v", err)
			}
			reqs := api.requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			r := reqs[0]
			if r.Method != http.MethodPatch || r.Path != c.wantPath {
				t.Errorf("request %s %s, want PATCH %s", r.Method, r.Path, c.wantPath)
			}
			if r.ContentType != "application/merge-patch+json" {
				t.Errorf("content type %q, want application/merge-patch+json", r.ContentType)
			}
			if r.FieldManager != "example.com/route-status" {
				t.Errorf("fieldManager %q", r.FieldManager)
			}
			// The deadline, less the margin: 5 s less 100 ms, less what
			// passed before the request was built.
			if d, err := time.ParseDuration(r.Timeout); err != nil || d > 5*time.Second-serverTimeoutMargin || d < 4*time.Second || d%time.Millisecond != 0 {
				t.Errorf("timeout parameter %q (%v), want whole milliseconds in [4s, %v]", r.Timeout, err, 5*time.Second-serverTimeoutMargin)
			}
			if r.DryRun != "" {
				t.Errorf("dryRun %q on a write", r.DryRun)
			}
			var body struct {
				Metadata struct {
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
				Status map[string]any `json:"status"`
			}
			if err := json.Unmarshal(r.Body, &body); err != nil {
				t.Fatalf("body %s: %v", r.Body, err)
			}
			if body.Metadata.ResourceVersion != "4711" {
				t.Errorf("body %s lacks the resourceVersion precondition", r.Body)
			}
			if _, ok := body.Status["parents"]; !ok {
				t.Errorf("body %s lacks the status", r.Body)
			}
		})
	}
}

func TestMergePatcherErrorsClassify(t *testing.T) {
	status := func(code int, reason string) string {
		b, _ := json.Marshal(metav1.Status{
			TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status:   metav1.StatusFailure, Code: int32(code), Reason: metav1.StatusReason(reason),
			Message: "from the fake server",
		})
		return string(b)
	}
	cases := []struct {
		code int
		body string
		want outcome.Outcome
	}{
		{http.StatusConflict, status(409, "Conflict"), outcome.Conflict},
		{http.StatusNotFound, status(404, "NotFound"), outcome.NotFound},
		{http.StatusForbidden, status(403, "Forbidden"), outcome.Forbidden},
		{http.StatusForbidden, fenceDenial, outcome.Fenced},
		{http.StatusGatewayTimeout, status(504, "Timeout"), outcome.Abandoned},
		{http.StatusTooManyRequests, status(429, "TooManyRequests"), outcome.Throttled},
		{http.StatusUnprocessableEntity, status(422, "Invalid"), outcome.Invalid},
		{http.StatusInternalServerError, status(500, "InternalError"), outcome.Failed},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%d %s", c.code, c.want), func(t *testing.T) {
			api := newFakeAPIServer(t)
			api.respond(c.code, c.body)
			p := newMergePatcher(api.client, routesGVR(), "test")
			err := p.Patch(context.Background(), MergePatch{Namespace: "ns", Name: "r1", ResourceVersion: "1", Status: json.RawMessage(`{}`)})
			if got := outcome.Of(err); got != c.want {
				t.Errorf("outcome.Of(%v) = %s, want %s", err, got, c.want)
			}
			if n := len(api.requests()); n != 1 {
				t.Errorf("%d requests, want 1 (no retry)", n)
			}
		})
	}
}

func TestMergePatcherRejectsInvalidPatch(t *testing.T) {
	cases := []struct {
		name  string
		patch MergePatch
		want  string
	}{
		{"no name", MergePatch{Namespace: "ns", ResourceVersion: "1", Status: json.RawMessage(`{}`)}, "Name"},
		{"no resourceVersion", MergePatch{Namespace: "ns", Name: "r", Status: json.RawMessage(`{}`)}, "ResourceVersion"},
		{"no status", MergePatch{Namespace: "ns", Name: "r", ResourceVersion: "1"}, "Status"},
		{"status null", MergePatch{Namespace: "ns", Name: "r", ResourceVersion: "1", Status: json.RawMessage(`null`)}, "Status"},
		{"status not JSON", MergePatch{Namespace: "ns", Name: "r", ResourceVersion: "1", Status: json.RawMessage(`{"a":`)}, "Status"},
	}
	api := newFakeAPIServer(t)
	p := newMergePatcher(api.client, routesGVR(), "test")
	for _, c := range cases {
		err := p.Patch(context.Background(), c.patch)
		if !errors.Is(err, ErrInvalidPatch) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want ErrInvalidPatch naming %s", c.name, err, c.want)
		}
	}
	if n := len(api.requests()); n != 0 {
		t.Errorf("%d requests sent for invalid patches", n)
	}
}

func TestNewMergePatch(t *testing.T) {
	obj := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r1", ResourceVersion: "99"}}
	status := struct {
		Conditions []metav1.Condition `json:"conditions"`
	}{Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Ok"}}}
	p, err := NewMergePatch(obj, status)
	if err != nil {
		t.Fatal(err)
	}
	if p.Namespace != "ns" || p.Name != "r1" || p.ResourceVersion != "99" {
		t.Errorf("patch = %+v", p)
	}
	body, err := p.Body()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"metadata":{"resourceVersion":"99"},"status":{"conditions":[{"type":"Ready","status":"True","lastTransitionTime":null,"reason":"Ok","message":""}]}}`
	if string(body) != want {
		t.Errorf("body\n got %s\nwant %s", body, want)
	}
	if _, err := NewMergePatch(obj, func() {}); err == nil {
		t.Errorf("NewMergePatch of a func: want an error")
	}
}

// TestNewMergePatcherValidation: invalid arguments are rejected with a
// ConfigError naming the argument.
func TestNewMergePatcherValidation(t *testing.T) {
	api := newFakeAPIServer(t)
	cfg := &rest.Config{Host: api.srv.URL}
	cases := []struct {
		name string
		cfg  *rest.Config
		gvr  schema.GroupVersionResource
		fm   string
		want string // the ConfigError's field
	}{
		{"valid", cfg, routesGVR(), "fm", ""},
		{"nil config", nil, routesGVR(), "fm", "cfg"},
		{"a config no client can be built from", &rest.Config{Host: api.srv.URL, TLSClientConfig: rest.TLSClientConfig{CAFile: "/nonexistent/ca.crt"}}, routesGVR(), "fm", "cfg"},
		{"no resource", cfg, schema.GroupVersionResource{Version: "v1"}, "fm", "gvr"},
		{"no version", cfg, schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Resource: "httproutes"}, "fm", "gvr"},
		{"no field manager", cfg, routesGVR(), "", "fieldManager"},
		{"long field manager", cfg, routesGVR(), strings.Repeat("x", 129), "fieldManager"},
		{"field manager of the longest length", cfg, routesGVR(), strings.Repeat("x", 128), ""},
	}
	for _, c := range cases {
		p, err := NewMergePatcher(c.cfg, c.gvr, c.fm)
		var ce *base.ConfigError
		switch {
		case c.want == "" && (err != nil || p == nil):
			t.Errorf("%s: %v, %v", c.name, p, err)
		case c.want != "" && (p != nil || !errors.As(err, &ce) || ce.Field != c.want || !errors.Is(err, base.ErrInvalidConfig)):
			t.Errorf("%s: NewMergePatcher = %v, %v; want a ConfigError naming %s", c.name, p, err, c.want)
		}
	}
}

// The patcher NewMergePatcher builds on a rest.Config sends the same
// request as the one on a REST client, and returns a 429 to its caller at
// once instead of sleeping its Retry-After and trying again: the
// dispatcher holds every call back for the window.
func TestNewMergePatcher(t *testing.T) {
	for _, c := range []struct {
		name, namespace, wantPath string
		gvr                       schema.GroupVersionResource
	}{
		{"namespaced", "ns", "/apis/gateway.networking.k8s.io/v1/namespaces/ns/httproutes/r1/status", routesGVR()},
		{"cluster-scoped", "", "/apis/gateway.networking.k8s.io/v1/httproutes/r1/status", routesGVR()},
		{"core group", "ns", "/api/v1/namespaces/ns/pods/r1/status", schema.GroupVersionResource{Version: "v1", Resource: "pods"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			api := newFakeAPIServer(t)
			api.respond(http.StatusOK, okRoute)
			p, err := NewMergePatcher(&rest.Config{Host: api.srv.URL}, c.gvr, "example.com/route-status")
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Patch(context.Background(), MergePatch{Namespace: c.namespace, Name: "r1", ResourceVersion: "5", Status: json.RawMessage(`{"a":1}`)}); err != nil {
				t.Fatal(err)
			}
			reqs := api.requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests", len(reqs))
			}
			r := reqs[0]
			if r.Method != http.MethodPatch || r.Path != c.wantPath || r.ContentType != "application/merge-patch+json" ||
				r.FieldManager != "example.com/route-status" || string(r.Body) != `{"metadata":{"resourceVersion":"5"},"status":{"a":1}}` {
				t.Errorf("request %+v, body %s", r, r.Body)
			}
		})
	}
	for _, body := range []string{
		// kube-apiserver's answer: a Status with details, and the header.
		`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","code":429,"details":{"retryAfterSeconds":1}}`,
		// A proxy's: the header and a text body.
		`Too many requests, please try again later.`,
	} {
		t.Run("429 is returned, not retried: "+body[:10], func(t *testing.T) {
			api := newFakeAPIServer(t)
			api.respondWithHeader(http.StatusTooManyRequests, body, "Retry-After", "1")
			p, err := NewMergePatcher(&rest.Config{Host: api.srv.URL}, routesGVR(), "test")
			if err != nil {
				t.Fatal(err)
			}
			err = p.Patch(context.Background(), MergePatch{Namespace: "ns", Name: "r1", ResourceVersion: "5", Status: json.RawMessage(`{}`)})
			if outcome.Of(err) != outcome.Throttled {
				t.Fatalf("err %v, want throttled", err)
			}
			// What the dispatcher reads to hold the calls back.
			if secs, ok := apierrors.SuggestsClientDelay(err); !ok || secs != 1 {
				t.Errorf("Retry-After %vs %v, want 1s", secs, ok)
			}
			if n := len(api.requests()); n != 1 {
				t.Errorf("%d requests, want 1: no retry behind the dispatcher's back", n)
			}
		})
	}
	t.Run("bad input", func(t *testing.T) {
		var ce *base.ConfigError
		if _, err := NewMergePatcher(nil, routesGVR(), "x"); !errors.Is(err, base.ErrInvalidConfig) || !errors.As(err, &ce) || ce.Field != "cfg" {
			t.Errorf("nil config: %v, want a ConfigError naming cfg", err)
		}
		if _, err := NewMergePatcher(&rest.Config{}, routesGVR(), ""); !errors.As(err, &ce) || ce.Field != "fieldManager" {
			t.Errorf("empty field manager: %v, want a ConfigError naming fieldManager", err)
		}
	})
}

// PatchVersion reports the resourceVersion of the object the server
// answered with, and nothing when the call failed.
func TestMergePatcherVersion(t *testing.T) {
	api := newFakeAPIServer(t)
	p := newMergePatcher(api.client, routesGVR(), "example.com/route-status")
	var _ VersionPatcher[MergePatch] = p
	patch := MergePatch{Namespace: "ns", Name: "r1", ResourceVersion: "4711", Status: json.RawMessage(`{}`)}
	api.respond(http.StatusOK, `{"kind":"HTTPRoute","apiVersion":"gateway.networking.k8s.io/v1","metadata":{"name":"r1","namespace":"ns","resourceVersion":"4712"}}`)
	if rv, err := p.PatchVersion(context.Background(), patch); err != nil || rv != "4712" {
		t.Errorf("PatchVersion = %q, %v; want 4712, nil", rv, err)
	}
	api.respond(http.StatusOK, `{"kind":"HTTPRoute","apiVersion":"gateway.networking.k8s.io/v1","metadata":{"name":"r1","namespace":"ns","resourceVersion":"4711"}}`)
	if rv, err := p.PatchVersion(context.Background(), patch); err != nil || rv != "" {
		t.Errorf("PatchVersion answered with the precondition's version = %q, %v; want \"\" (a fake that does not version writes)", rv, err)
	}
	api.respond(http.StatusConflict, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":409,"reason":"Conflict"}`)
	if rv, err := p.PatchVersion(context.Background(), patch); outcome.Of(err) != outcome.Conflict || rv != "" {
		t.Errorf("PatchVersion of a conflict = %q, %v; want \"\" and the conflict", rv, err)
	}
}
