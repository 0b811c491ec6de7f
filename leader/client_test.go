package leader

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quietpatch/quietpatch/internal/base"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// slowLimiter is a rate limiter of a kind client-go does not make.
type slowLimiter struct{ flowcontrol.RateLimiter }

func leasesFor(t *testing.T, cfg *rest.Config) coordinationv1client.CoordinationV1Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs.CoordinationV1()
}

// NewClaimer rejects a Lease client whose rate limiter would hold Lease
// requests back, as internal/leases.Check sizes it (its test has the
// warnings); NewLeaseClient builds one without.
func TestNewClaimerChecksTheLeaseClient(t *testing.T) {
	host := "https://127.0.0.1:1" // never contacted
	own, err := NewLeaseClient(&rest.Config{Host: host, QPS: 5, Burst: 10, UserAgent: "ctl"})
	if err != nil {
		t.Fatal(err)
	}
	if lim := own.RESTClient().GetRateLimiter(); lim != nil {
		t.Errorf("NewLeaseClient: rate limiter %T, want none", lim)
	}
	cases := []struct {
		name   string
		client coordinationv1client.LeasesGetter
		reject bool
	}{
		{"NewLeaseClient", own, false},
		{"QPS 5", leasesFor(t, &rest.Config{Host: host, QPS: 5, Burst: 10}), true},
		{"QPS 0: client-go's default of 5", leasesFor(t, &rest.Config{Host: host}), true},
		{"QPS -1", leasesFor(t, &rest.Config{Host: host, QPS: -1}), false},
		{"an always-accepting limiter", leasesFor(t, &rest.Config{Host: host, RateLimiter: flowcontrol.NewFakeAlwaysRateLimiter()}), false},
		{"a limiter of another kind", leasesFor(t, &rest.Config{Host: host, RateLimiter: slowLimiter{flowcontrol.NewTokenBucketRateLimiter(1, 1)}}), false},
		{"fake clientset", fake.NewClientset().CoordinationV1(), false},
	}
	for _, c := range cases {
		cfg := Config{Namespace: "ns", Name: "l", Identity: "a"}
		_, err := NewClaimer(c.client, cfg)
		var ce *base.ConfigError
		switch {
		case c.reject && (!errors.As(err, &ce) || ce.Field != "Leases" || !strings.Contains(ce.Reason, "leader.NewLeaseClient(restConfig)")):
			t.Errorf("%s: NewClaimer = %v, want a ConfigError naming Leases and NewLeaseClient", c.name, err)
		case !c.reject && err != nil:
			t.Errorf("%s: NewClaimer = %v", c.name, err)
		}
	}
	for _, bad := range []struct {
		label string
		cfg   *rest.Config
	}{
		{"nil", nil},
		{"no client can be built from it", &rest.Config{Host: host, TLSClientConfig: rest.TLSClientConfig{CAFile: "/nonexistent/ca.crt"}}},
	} {
		var ce *base.ConfigError
		if c, err := NewLeaseClient(bad.cfg); c != nil || !errors.Is(err, base.ErrInvalidConfig) || !errors.As(err, &ce) || ce.Field != "cfg" {
			t.Errorf("NewLeaseClient(%s) = %v, %v; want a ConfigError naming cfg", bad.label, c, err)
		}
	}
}

// NewClaimer rejects a nil client, an interface holding a nil pointer too,
// with a ConfigError naming client.
func TestNewClaimerNilClient(t *testing.T) {
	cfg := Config{Namespace: "ns", Name: "l", Identity: "a"}
	for _, tc := range []struct {
		label  string
		client coordinationv1client.LeasesGetter
	}{
		{"nil", nil},
		{"nil pointer", (*coordinationv1client.CoordinationV1Client)(nil)},
	} {
		c, err := NewClaimer(tc.client, cfg)
		var ce *base.ConfigError
		if c != nil || !errors.As(err, &ce) || ce.Field != "client" || !errors.Is(err, base.ErrInvalidConfig) {
			t.Errorf("%s: NewClaimer = %v, %v; want a ConfigError naming client", tc.label, c, err)
		}
	}
}

func TestNewLeaseClientUserAgent(t *testing.T) {
	agents := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agents <- r.Header.Get("User-Agent")
		http.NotFound(w, r)
	}))
	defer srv.Close()
	for _, ua := range []string{"", "my-controller/1.0"} {
		c, err := NewLeaseClient(&rest.Config{Host: srv.URL, UserAgent: ua})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Leases("ns").Get(context.Background(), "l", metav1.GetOptions{})
		want := ua
		if want == "" {
			want = rest.DefaultKubernetesUserAgent()
		}
		if got := <-agents; got != want+" "+leaseUserAgent {
			t.Errorf("user agent %q, want %q", got, want+" "+leaseUserAgent)
		}
	}
}

// A limiter of a kind internal/leases.Check cannot size is named once, when
// Run starts, with what to change.
func TestClaimerWarnsOnceOfAnUnknownLimiter(t *testing.T) {
	var logs bytes.Buffer
	client := leasesFor(t, &rest.Config{Host: "https://127.0.0.1:1", RateLimiter: slowLimiter{flowcontrol.NewTokenBucketRateLimiter(1, 1)}})
	c, err := NewClaimer(client, Config{Namespace: "ns", Name: "l", Identity: "a", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Run logs, then stops at once
	_ = c.Run(ctx)
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "slowLimiter") || !strings.Contains(logs.String(), "leader.NewLeaseClient(restConfig)") {
		t.Errorf("%d warnings, want one naming the limiter's type:\n%s", n, logs.String())
	}
}

// The Leases a claimer creates, and those it acquires, carry LeaseLabel,
// so that a policy binding can select them.
func TestClaimerLabelsItsLeases(t *testing.T) {
	t.Run("created", func(t *testing.T) {
		h := newHarness(t)
		h.start(h.config("a"))
		h.settle()
		if l := h.api.get(t); l == nil || l.Labels[LeaseLabel] != "true" {
			t.Errorf("created Lease %+v, want the label %s=true", l, LeaseLabel)
		}
	})
	t.Run("acquired", func(t *testing.T) {
		h := newHarness(t)
		h.api.put(t, leaseSpec("", t0.Add(-time.Hour), 4))
		h.start(h.config("a"))
		h.settle()
		checkStored(t, h, "a", 5)
		if l := h.api.get(t); l.Labels[LeaseLabel] != "true" {
			t.Errorf("acquired Lease has labels %v, want %s=true", l.Labels, LeaseLabel)
		}
	})
}
