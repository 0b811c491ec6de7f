package controller

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/quietpatch/quietpatch/examples/httproute-status/fixtures"
)

// runAsync runs c until the returned stop function is called; stop returns
// Run's error.
func runAsync(t *testing.T, c *Controller) (stop func() error, done <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	var result error
	stopped := false
	stop = func() error {
		if !stopped {
			cancel()
			select {
			case result = <-errc:
			case <-time.After(20 * time.Second):
				t.Fatal("Run did not return within 20s of cancellation")
			}
			stopped = true
		}
		return result
	}
	t.Cleanup(func() { _ = stop() })
	return stop, errc
}

// TestRun: the controller syncs its caches, takes the lease, patches the
// status of every route once (event-driven and on gaining leadership; the
// periodic pass is an hour away), reacts to a Service deletion through the
// index, exposes the library's metrics and readiness, and on cancellation
// vacates the lease and returns nil.
func TestRun(t *testing.T) {
	fc := newFakeCluster(t, 2*fixtures.NumCases)
	opts, metricsURL, healthURL := fc.options(t, testIdentity)
	c, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	stop, done := runAsync(t, c)

	eventually(t, 10*time.Second, "every route gets its expected status", fc.checkAllRoutes)
	eventually(t, 5*time.Second, "ready", func() error {
		code, body, err := httpGet(healthURL + "/readyz")
		if err == nil && code != http.StatusOK {
			err = errors.New(body)
		}
		return err
	})
	if code, body, err := httpGet(healthURL + "/healthz"); err != nil || code != http.StatusOK {
		t.Errorf("/healthz: %d %q %v", code, body, err)
	}
	lease, err := fc.lease(DefaultLeaseName)
	if err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h == nil || *h != testIdentity {
		t.Errorf("lease holder = %v, want %q", h, testIdentity)
	}

	// Every patch: a merge patch of the status subresource, with a
	// resourceVersion precondition and our field manager.
	patches := fc.statusPatches()
	if len(patches) < len(fc.set.Routes) {
		t.Fatalf("%d status patches, want at least %d", len(patches), len(fc.set.Routes))
	}
	ok := 0
	for _, p := range patches {
		if p.FieldManager != DefaultFieldManager || p.PatchType != "application/merge-patch+json" ||
			!strings.Contains(p.Body, `"metadata":{"resourceVersion":"`) {
			t.Errorf("patch %s/%s: fieldManager %q, type %q, body %s", p.Namespace, p.Name, p.FieldManager, p.PatchType, p.Body)
		}
		if p.Err == nil {
			ok++
		} else if !apierrors.IsConflict(p.Err) {
			t.Errorf("patch %s/%s failed: %v", p.Namespace, p.Name, p.Err)
		}
	}
	// A route is patched successfully once: afterwards its cached status
	// equals the desired one (routestatus.Equal), so nothing is queued.
	if ok != len(fc.set.Routes) {
		t.Errorf("%d successful status patches, want one per route (%d)", ok, len(fc.set.Routes))
	}

	// An event on a Service enqueues the routes that refer to it: deleting
	// Service "backend" of one namespace turns ResolvedRefs of the routes
	// there that use it to BackendNotFound.
	ns := fc.set.Routes[0].Namespace
	if err := fc.kube.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("services"), ns, "backend"); err != nil {
		t.Fatal(err)
	}
	affected := 0
	for i, r := range fc.set.Routes {
		b := r.Spec.Rules[0].BackendRefs[0]
		if r.Namespace != ns || b.Name != "backend" || b.Namespace != nil || b.Kind != nil {
			continue
		}
		affected++
		want := fc.set.Expected[i]
		want.ResolvedRefs = "BackendNotFound"
		eventually(t, 10*time.Second, "route sees its backend deleted", func() error {
			return fc.checkRoute(r.Namespace, r.Name, want)
		})
	}
	if affected == 0 {
		t.Fatal("no route uses Service backend; fixtures changed?")
	}

	// Metrics: the library's instruments, translated to Prometheus names.
	samples, err := scrape(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	fams := families(samples)
	for _, name := range []string{
		"quietpatch_queue_depth", "quietpatch_queue_depth_peak_ewma", "quietpatch_queue_capacity",
		"quietpatch_queue_enqueued_total", "quietpatch_queue_dequeued_total",
		"quietpatch_queue_wait_seconds_bucket",
		"quietpatch_reconcile_objects_total", "quietpatch_reconcile_duration_seconds_bucket",
		"quietpatch_dispatch_patches_total", "quietpatch_dispatch_duration_seconds_bucket",
		"quietpatch_dispatch_in_flight", "quietpatch_reconcile_passes_total", "quietpatch_dispatch_latency_peak_ewma_seconds",
		"quietpatch_leader_is_leader", "quietpatch_leader_epoch", "quietpatch_leader_transitions_total", "quietpatch_leader_requests_total",
		"go_memstats_heap_alloc_bytes",
	} {
		if !fams[name] {
			t.Errorf("metric %s missing from /metrics", name)
		}
	}
	if t.Failed() {
		t.Logf("metric families: %v", fams)
	}
	for series, want := range map[string]float64{
		`quietpatch_leader_is_leader{identity="replica-a",k8s_lease_name="quietpatch-httproute-status",k8s_namespace_name="qp-system"}`: 1,
		`quietpatch_queue_capacity{pipeline="httproute-status"}`:                                                                        float64(c.Stats().Capacity),
		`quietpatch_dispatch_patches_total{outcome="ok",pipeline="httproute-status"}`:                                                   float64(len(fc.set.Routes) + affected),
	} {
		if got, found := samples[series]; !found || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, found, want)
		}
	}

	if err := stop(); err != nil {
		t.Fatalf("Run returned %v after cancellation, want nil", err)
	}
	select {
	case <-done:
		t.Fatal("Run's result delivered twice")
	default:
	}
	// Vacated: the next replica need not wait for the claim to run out.
	lease, err = fc.lease(DefaultLeaseName)
	if err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h != nil && *h != "" {
		t.Errorf("lease holder after shutdown = %q, want vacated", *h)
	}
	if err := c.Ready(); err == nil {
		t.Error("Ready() = nil after Run returned")
	}
	// Everything the controller called is allowed by deploy/rbac.yaml.
	checkRBAC(t, DefaultLeaseName, fc.kube.Actions(), fc.gw.Actions())
	if err := c.Run(context.Background()); !errors.Is(err, ErrAlreadyRunning) {
		t.Errorf("second Run: %v, want ErrAlreadyRunning", err)
	}
}

// TestRunFailures: a part that fails makes Run return an error naming it,
// after shutting everything down (goleak checks that nothing is left).
func TestRunFailures(t *testing.T) {
	forbidden := func(resource string) k8stesting.ReactionFunc {
		return func(a k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "", errors.New("RBAC says no"))
		}
	}
	tests := []struct {
		name    string
		setup   func(fc *fakeCluster, o *Options)
		wantErr string
	}{
		{
			name: "lease forbidden",
			setup: func(fc *fakeCluster, o *Options) {
				fc.kube.PrependReactor("*", "leases", forbidden("leases"))
			},
			wantErr: "lease loop",
		},
		{
			name: "caches never sync",
			setup: func(fc *fakeCluster, o *Options) {
				fc.gw.PrependReactor("list", "gateways", forbidden("gateways"))
				o.CacheSyncTimeout = 300 * time.Millisecond
			},
			wantErr: "informer caches not synced within 300ms",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeCluster(t, 2)
			opts, _, healthURL := fc.options(t, testIdentity)
			tt.setup(fc, &opts)
			c, err := New(context.Background(), opts)
			if err != nil {
				t.Fatal(err)
			}
			errc := make(chan error, 1)
			go func() { errc <- c.Run(context.Background()) }()
			select {
			case err = <-errc:
			case <-time.After(20 * time.Second):
				t.Fatal("Run did not fail within 20s")
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Run: %v, want an error containing %q", err, tt.wantErr)
			}
			if _, _, err := httpGet(healthURL + "/readyz"); err == nil {
				t.Error("health endpoint still serving after Run returned")
			}
		})
	}
}

// TestRunNotLeader: a replica that does not hold the lease syncs, is ready,
// and patches nothing.
func TestRunNotLeader(t *testing.T) {
	fc := newFakeCluster(t, 2)
	holder := "someone-else"
	now := metav1.NewMicroTime(time.Now())
	dur := int32(3600)
	if err := fc.kube.Tracker().Add(leaseHeldBy(holder, now, dur)); err != nil {
		t.Fatal(err)
	}
	opts, _, healthURL := fc.options(t, testIdentity)
	c, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	stop, _ := runAsync(t, c)
	eventually(t, 10*time.Second, "ready while not leading", func() error {
		code, body, err := httpGet(healthURL + "/readyz?verbose")
		if err != nil {
			return err
		}
		var r struct {
			OK     bool     `json:"ok"`
			Errors []string `json:"errors"`
		}
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			return err
		}
		if code != http.StatusOK || !r.OK {
			return errors.New(strings.Join(r.Errors, "; "))
		}
		return nil
	})
	eventually(t, 5*time.Second, "the other holder observed", func() error {
		if h := c.Stats().Claim.Holder; h != holder {
			return errors.New("holder " + h)
		}
		return nil
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := len(fc.statusPatches()); n != 0 {
		t.Errorf("%d status patches sent while not leading, want 0", n)
	}
}
