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

// serverTimeoutMargin is how much earlier than the call's own deadline
// the API server is told to give a call up, at most
// (statuspatch.ServerTimeout: a tenth, at most 100 ms).
const serverTimeoutMargin = 100 * time.Millisecond

// timeoutLog holds the timeout parameter of every PATCH a queryRecorder
// carried.
type timeoutLog struct {
	mu       sync.Mutex
	timeouts []string
}

// queryRecorder records the timeout parameter of every PATCH it carries.
type queryRecorder struct {
	next http.RoundTripper
	log  *timeoutLog
}

func (r *queryRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPatch {
		r.log.mu.Lock()
		r.log.timeouts = append(r.log.timeouts, req.URL.Query().Get("timeout"))
		r.log.mu.Unlock()
	}
	return r.next.RoundTrip(req)
}

// The patcher sends each call's deadline to the API server (the timeout
// parameter, a little before the call's own), over a client of its own
// made from the cluster's configuration — which controller-runtime's
// client.Client could not.
func TestStatusPatcherSendsTheDeadline(t *testing.T) {
	_, cfg := testEnv(t)
	admin := adminClient(t, cfg)
	ctx := context.Background()
	createNamespace(t, admin, "deadline")
	w := &examplev1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "deadline", Name: "w"}, Spec: examplev1.WidgetSpec{Size: 1}}
	if err := admin.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	// Every transport made from the cluster's configuration records.
	rec, recorded := &timeoutLog{}, rest.CopyConfig(cfg)
	recorded.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &queryRecorder{next: rt, log: rec} })
	cl, err := cluster.New(recorded, func(o *cluster.Options) { o.Scheme = testScheme() })
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
	if err != nil || d <= 0 || d > timeout-serverTimeoutMargin {
		t.Errorf("timeout parameter %q (%v), want in (0, %v]", rec.timeouts[0], err, timeout-serverTimeoutMargin)
	}
}
