package controller

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"

	"github.com/quietpatch/quietpatch/examples/httproute-status/fixtures"
)

// This file holds the test harness: fake clientsets loaded with a fixtures
// Set, a reactor that makes status patches behave as on an API server
// (resourceVersion precondition, new resourceVersion on success), and
// helpers to poll routes and scrape metrics.

const (
	testControllerName = "quietpatch.io/test-controller"
	testLeaseNamespace = "qp-system"
	testIdentity       = "replica-a"
)

var routesGVR = gatewayv1.SchemeGroupVersion.WithResource("httproutes")

// statusPatchRecord is one status patch the fake API server received.
type statusPatchRecord struct {
	Namespace, Name string
	FieldManager    string
	PatchType       string
	Body            string
	Err             error
}

// fakeCluster is a pair of fake clientsets holding a fixtures Set.
type fakeCluster struct {
	set  *fixtures.Set
	kube *kubefake.Clientset
	gw   *gwfake.Clientset

	mu      sync.Mutex
	rv      int64
	patches []statusPatchRecord
}

func newFakeCluster(t *testing.T, routes int) *fakeCluster {
	t.Helper()
	set, err := fixtures.Generate(fixtures.Config{Routes: routes, Namespaces: 2, ControllerName: testControllerName})
	if err != nil {
		t.Fatal(err)
	}
	fc := &fakeCluster{set: set, rv: 1000}
	var (
		kubeObjs, gwObjs []runtime.Object
		gateways         []*gatewayv1.Gateway
	)
	for _, o := range set.Objects() {
		o = o.DeepCopyObject()
		switch o := o.(type) {
		case *gatewayv1.HTTPRoute:
			fc.rv++
			o.ResourceVersion = strconv.FormatInt(fc.rv, 10)
			gwObjs = append(gwObjs, o)
		case *gatewayv1.Gateway:
			gateways = append(gateways, o)
		case *gatewayv1.GatewayClass, *gatewayv1.ReferenceGrant:
			gwObjs = append(gwObjs, o)
		default:
			kubeObjs = append(kubeObjs, o)
		}
	}
	fc.kube = kubefake.NewClientset(kubeObjs...)
	fc.gw = gwfake.NewSimpleClientset(gwObjs...) // NewClientset's field-managed tracker maps resources by guessed names and cannot hold Gateways
	tracker := fc.gw.Tracker()
	// The tracker guesses the resource "gatewaies" from kind Gateway: add
	// Gateways under their real resource name.
	for _, g := range gateways {
		if _, err := fc.gw.GatewayV1().Gateways(g.Namespace).Create(context.Background(), g, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	fc.gw.PrependReactor("patch", "httproutes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa := a.(k8stesting.PatchActionImpl)
		if pa.GetSubresource() != "status" {
			return false, nil, nil
		}
		rec := statusPatchRecord{Namespace: pa.GetNamespace(), Name: pa.GetName(),
			FieldManager: pa.PatchOptions.FieldManager, PatchType: string(pa.GetPatchType()), Body: string(pa.GetPatch())}
		obj, err := fc.applyStatusPatch(tracker, pa)
		rec.Err = err
		fc.mu.Lock()
		fc.patches = append(fc.patches, rec)
		fc.mu.Unlock()
		return true, obj, err
	})
	// Only what the controller does is recorded from here on (see
	// checkRBAC); the test reads and writes through the trackers.
	fc.kube.ClearActions()
	fc.gw.ClearActions()
	return fc
}

// applyStatusPatch applies a status merge patch as the API server would:
// 409 when metadata.resourceVersion is not the current one, 400 when it is
// missing; otherwise status.parents is replaced and the route gets a new
// resourceVersion.
func (fc *fakeCluster) applyStatusPatch(tracker k8stesting.ObjectTracker, pa k8stesting.PatchActionImpl) (runtime.Object, error) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	obj, err := tracker.Get(routesGVR, pa.GetNamespace(), pa.GetName())
	if err != nil {
		return nil, err
	}
	route := obj.(*gatewayv1.HTTPRoute).DeepCopy()
	var body struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Status *gatewayv1.HTTPRouteStatus `json:"status"`
	}
	if err := json.Unmarshal(pa.GetPatch(), &body); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	switch {
	case body.Metadata.ResourceVersion == "":
		return nil, apierrors.NewBadRequest("status patch without resourceVersion precondition")
	case body.Metadata.ResourceVersion != route.ResourceVersion:
		return nil, apierrors.NewConflict(routesGVR.GroupResource(), route.Name,
			fmt.Errorf("resourceVersion %s, patch expects %s", route.ResourceVersion, body.Metadata.ResourceVersion))
	case body.Status == nil || body.Status.Parents == nil:
		return nil, apierrors.NewBadRequest("status.parents is required")
	}
	route.Status.Parents = body.Status.Parents
	fc.rv++
	route.ResourceVersion = strconv.FormatInt(fc.rv, 10)
	if err := tracker.Update(routesGVR, route, route.Namespace); err != nil {
		return nil, err
	}
	return route.DeepCopy(), nil
}

func (fc *fakeCluster) statusPatches() []statusPatchRecord {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return append([]statusPatchRecord(nil), fc.patches...)
}

// options returns Options for a controller on the fake cluster with fast
// timings, metrics and health on loopback listeners.
func (fc *fakeCluster) options(t *testing.T, identity string) (Options, string, string) {
	t.Helper()
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = ml.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ml.Close(), hl.Close() })
	return Options{
		KubeClient:            fc.kube,
		GatewayClient:         fc.gw,
		ControllerName:        testControllerName,
		Mesh:                  true,
		LeaseNamespace:        testLeaseNamespace,
		Identity:              identity,
		LeaseDuration:         2 * time.Second,
		ReconcileInterval:     time.Hour, // only the pass on gaining leadership, then events
		ReferenceGrantVersion: ReferenceGrantV1,
		CacheSyncTimeout:      10 * time.Second,
		MetricsListener:       ml,
		HealthListener:        hl,
		Logger:                testLogger(t),
	}, "http://" + ml.Addr().String(), "http://" + hl.Addr().String()
}

// eventually polls cond every 10 ms until it returns nil or the deadline
// passes, then fails the test with cond's last error.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkRoute returns nil when the route's entry of testControllerName has
// the expected Accepted and ResolvedRefs reasons.
func (fc *fakeCluster) checkRoute(ns, name string, want fixtures.Expectation) error {
	obj, err := fc.gw.Tracker().Get(routesGVR, ns, name)
	if err != nil {
		return err
	}
	r := obj.(*gatewayv1.HTTPRoute)
	var mine []gatewayv1.RouteParentStatus
	for _, p := range r.Status.Parents {
		if p.ControllerName == testControllerName {
			mine = append(mine, p)
		}
	}
	if len(mine) != 1 {
		return fmt.Errorf("%s/%s: %d status entries of ours, want 1", ns, name, len(mine))
	}
	got := map[string]string{}
	for _, c := range mine[0].Conditions {
		got[c.Type] = c.Reason
	}
	if got["Accepted"] != string(want.Accepted) || got["ResolvedRefs"] != string(want.ResolvedRefs) {
		return fmt.Errorf("%s/%s (%v): Accepted=%q ResolvedRefs=%q, want %q and %q", ns, name, want.Case,
			got["Accepted"], got["ResolvedRefs"], want.Accepted, want.ResolvedRefs)
	}
	return nil
}

// checkAllRoutes checks every route of the Set against its expectation.
func (fc *fakeCluster) checkAllRoutes() error {
	for i, r := range fc.set.Routes {
		if err := fc.checkRoute(r.Namespace, r.Name, fc.set.Expected[i]); err != nil {
			return err
		}
	}
	return nil
}

func (fc *fakeCluster) lease(name string) (*coordv1.Lease, error) {
	obj, err := fc.kube.Tracker().Get(coordv1.SchemeGroupVersion.WithResource("leases"), testLeaseNamespace, name)
	if err != nil {
		return nil, err
	}
	return obj.(*coordv1.Lease), nil
}

// httpGet returns the status code and body of GET url.
func httpGet(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// scrape returns the Prometheus text exposition as samples: the series
// (name plus labels, as printed) to value.
func scrape(base string) (map[string]float64, error) {
	code, body, err := httpGet(base + "/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %d %s", code, body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// families returns the metric family names of samples (the part before
// '{'), without the _bucket/_sum/_count suffixes of histograms.
func families(samples map[string]float64) map[string]bool {
	out := map[string]bool{}
	for s := range samples {
		name := s
		if i := strings.IndexByte(s, '{'); i >= 0 {
			name = s[:i]
		}
		out[name] = true
	}
	return out
}

// leaseHeldBy returns the Lease held by holder, renewed at renew, for
// dur seconds.
func leaseHeldBy(holder string, renew metav1.MicroTime, dur int32) *coordv1.Lease {
	return &coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: testLeaseNamespace, Name: DefaultLeaseName},
		Spec: coordv1.LeaseSpec{
			HolderIdentity:       &holder,
			LeaseDurationSeconds: &dur,
			AcquireTime:          &renew,
			RenewTime:            &renew,
		},
	}
}

// testLogger logs to t at debug level, until the test ends.
func testLogger(t *testing.T) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(w.close)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct {
	mu     sync.Mutex
	t      *testing.T
	closed bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}
