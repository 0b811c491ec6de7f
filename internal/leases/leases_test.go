package leases_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/internal/leases"
	"github.com/quietpatch/quietpatch/leader"
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

// TestCheckAndWarn: Check rejects client-go's token bucket with QPS > 0,
// naming Leases and what to do; Warn names a limiter of a kind Check
// cannot size, and nothing else.
func TestCheckAndWarn(t *testing.T) {
	host := "https://127.0.0.1:1" // never contacted
	own, err := leader.NewLeaseClient(&rest.Config{Host: host, QPS: 5, Burst: 10, UserAgent: "ctl"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		client  coordinationv1client.LeasesGetter
		reject  bool
		warning bool
	}{
		{"NewLeaseClient", own, false, false},
		{"QPS 5", leasesFor(t, &rest.Config{Host: host, QPS: 5, Burst: 10}), true, false},
		{"QPS 0: client-go's default of 5", leasesFor(t, &rest.Config{Host: host}), true, false},
		{"QPS -1", leasesFor(t, &rest.Config{Host: host, QPS: -1}), false, false},
		{"an always-accepting limiter", leasesFor(t, &rest.Config{Host: host, RateLimiter: flowcontrol.NewFakeAlwaysRateLimiter()}), false, false},
		{"a limiter of another kind", leasesFor(t, &rest.Config{Host: host, RateLimiter: slowLimiter{flowcontrol.NewTokenBucketRateLimiter(1, 1)}}), false, true},
		{"fake clientset", fake.NewClientset().CoordinationV1(), false, false},
		{"a nil REST client", (*coordinationv1client.CoordinationV1Client)(nil), false, false},
		{"Checked", leases.Checked{LeasesGetter: fake.NewClientset().CoordinationV1()}, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := leases.Check(c.client)
			var ce *base.ConfigError
			switch {
			case c.reject && (!errors.As(err, &ce) || ce.Field != "Leases" || !strings.Contains(ce.Reason, "leader.NewLeaseClient(restConfig)")):
				t.Errorf("Check = %v, want a ConfigError naming Leases and NewLeaseClient", err)
			case !c.reject && err != nil:
				t.Errorf("Check = %v", err)
			}
			var logs bytes.Buffer
			leases.Warn(slog.New(slog.NewTextHandler(&logs, nil)), c.client)
			warned := strings.Count(logs.String(), "level=WARN")
			switch {
			case !c.warning && warned != 0:
				t.Errorf("Warn logged %q, want nothing", logs.String())
			case c.warning && (warned != 1 || !strings.Contains(logs.String(), "slowLimiter") || !strings.Contains(logs.String(), "leader.NewLeaseClient(restConfig)")):
				t.Errorf("Warn logged %q, want one warning naming the limiter's type and NewLeaseClient", logs.String())
			}
		})
	}
}

// TestSeenAt: a Checked client with Seen answers for the Lease; any other
// client, or a Checked without Seen, has seen nothing.
func TestSeenAt(t *testing.T) {
	t0 := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	plain := fake.NewClientset().CoordinationV1()
	seen := func(name, rv string) (time.Time, bool) { return t0, name == "l" && rv == "7" }
	for _, tc := range []struct {
		label    string
		client   coordinationv1client.LeasesGetter
		name, rv string
		want     time.Time
		wantOK   bool
	}{
		{label: "seen", client: leases.Checked{LeasesGetter: plain, Seen: seen}, name: "l", rv: "7", want: t0, wantOK: true},
		{label: "another resourceVersion", client: leases.Checked{LeasesGetter: plain, Seen: seen}, name: "l", rv: "8"},
		{label: "another Lease", client: leases.Checked{LeasesGetter: plain, Seen: seen}, name: "m", rv: "7"},
		{label: "no Seen", client: leases.Checked{LeasesGetter: plain}, name: "l", rv: "7"},
		{label: "a client of another type", client: plain, name: "l", rv: "7"},
	} {
		t.Run(tc.label, func(t *testing.T) {
			got, ok := leases.SeenAt(tc.client, tc.name, tc.rv)
			if ok != tc.wantOK || ok && !got.Equal(tc.want) {
				t.Errorf("SeenAt = %v, %v; want %v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// TestHolderAndDuration: a Lease's holder and duration as claimers read
// them; what is missing, or a nil Lease, reads as none.
func TestHolderAndDuration(t *testing.T) {
	for _, tc := range []struct {
		label  string
		lease  *coordv1.Lease
		holder string
		dur    time.Duration
	}{
		{"held", &coordv1.Lease{Spec: coordv1.LeaseSpec{HolderIdentity: new("a"), LeaseDurationSeconds: new(int32(15))}}, "a", 15 * time.Second},
		{"empty spec", &coordv1.Lease{}, "", 0},
		{"non-positive duration", &coordv1.Lease{Spec: coordv1.LeaseSpec{LeaseDurationSeconds: new(int32(-1))}}, "", 0},
		{"nil", nil, "", 0},
	} {
		if h, d := leases.Holder(tc.lease), leases.Duration(tc.lease); h != tc.holder || d != tc.dur {
			t.Errorf("%s: Holder, Duration = %q, %v; want %q, %v", tc.label, h, d, tc.holder, tc.dur)
		}
	}
}
