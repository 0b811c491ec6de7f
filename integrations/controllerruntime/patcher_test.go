package controllerruntime_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	qpcr "github.com/quietpatch/quietpatch/integrations/controllerruntime"
	examplev1 "github.com/quietpatch/quietpatch/integrations/controllerruntime/examples/widget/api/v1"
	"github.com/quietpatch/quietpatch/statuspatch"
)

// queryRecorder records the timeout parameter of every PATCH it carries.
type queryRecorder struct {
	next     http.RoundTripper
	mu       sync.Mutex
	timeouts []string
}

func (r *queryRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPatch {
		r.mu.Lock()
		r.timeouts = append(r.timeouts, req.URL.Query().Get("timeout"))
		r.mu.Unlock()
	}
	return r.next.RoundTrip(req)
}

// The patcher sends each call's deadline to the API server (the timeout
// parameter, a little before the call's own), over the cluster's HTTP
// client — which controller-runtime's client.Client could not.
func TestStatusPatcherSendsTheDeadline(t *testing.T) {
	_, cfg := testEnv(t)
	admin := adminClient(t, cfg)
	ctx := context.Background()
	createNamespace(t, admin, "deadline")
	w := &examplev1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "deadline", Name: "w"}, Spec: examplev1.WidgetSpec{Size: 1}}
	if err := admin.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := &queryRecorder{next: hc.Transport}
	hc.Transport = rec
	cl, err := cluster.New(cfg, func(o *cluster.Options) { o.Scheme, o.HTTPClient = testScheme(), hc })
	if err != nil {
		t.Fatal(err)
	}
	p, err := qpcr.NewStatusPatcher(cl, &examplev1.Widget{}, "deadline-test")
	if err != nil {
		t.Fatal(err)
	}
	mp, err := statuspatch.NewMergePatch(w, examplev1.WidgetStatus{ObservedGeneration: 1})
	if err != nil {
		t.Fatal(err)
	}
	const timeout = 3 * time.Second
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := p.Patch(cctx, mp); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.timeouts) != 1 {
		t.Fatalf("%d PATCH requests, want 1", len(rec.timeouts))
	}
	d, err := time.ParseDuration(rec.timeouts[0])
	if err != nil || d <= 0 || d > timeout-statuspatch.ServerTimeoutMargin {
		t.Errorf("timeout parameter %q (%v), want in (0, %v]", rec.timeouts[0], err, timeout-statuspatch.ServerTimeoutMargin)
	}
}
