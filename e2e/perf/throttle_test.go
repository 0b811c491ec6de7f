package perf

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
	"github.com/quietpatch/quietpatch/statuspatch/source"
)

// Sizes of TestRetryAfterHonoured.
const (
	throttleRoutes     = 200
	throttleRetryAfter = time.Second
	// throttleSlack is how long after a 429 was answered a PATCH may still
	// arrive at the proxy without having been sent inside the window: one
	// that another worker had started before the dispatcher read the 429
	// (the answer still travelling back to the client, the other request
	// on its way to the proxy). On loopback both take microseconds idle and
	// milliseconds on a busy 2-core machine; 100 ms is a tenth of the
	// window, far from the 1 s a client that ignores Retry-After would show.
	throttleSlack = 100 * time.Millisecond
	// throttleMin429 is the number of 429 answers (and throttleMinPhase the
	// time) the throttled phase lasts at least, so that windows are checked
	// at every limit the dispatcher goes through.
	throttleMin429   = 6
	throttleMinPhase = 5 * time.Second
)

// isRouteStatusPatch selects the requests the throttling test throttles
// and records: PATCHes of an HTTPRoute's status.
func isRouteStatusPatch(r *http.Request) bool {
	return r.Method == http.MethodPatch && strings.Contains(r.URL.Path, "/httproutes/") && strings.HasSuffix(r.URL.Path, "/status")
}

// TestRetryAfterHonoured runs a controller built the way the package
// documentation composes one — quietpatch.New with the defaults (adaptive
// in-flight limit, automatic capacity), a status client from
// statuspatch.NewMergePatcher under a non-admin ServiceAccount —
// over 200 routes on a real API server, through a FaultProxy that answers
// half of the HTTPRoute status PATCHes itself with 429 Too Many Requests and
// Retry-After: 1. The proxy records when each status PATCH arrived and when
// each 429 was answered. Then the 429s stop. It checks:
//
//   - no PATCH is sent inside a Retry-After window: for every 429 answered
//     at t, no PATCH arrives at the proxy in (t + throttleSlack, t + 1 s);
//   - the dispatcher saw every 429 the proxy answered (client-go did not
//     retry one by itself) and counted the windows it honoured;
//   - once the 429s stop, every route reaches its desired status within
//     30 s.
func TestRetryAfterHonoured(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cp := cluster.StartT(t, cluster.Options{})
	cfg := config{Routes: throttleRoutes, Workers: 16}
	w, err := newWorldOn(ctx, t, cp, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.stopInformers)
	proxy, err := cp.NewFaultProxy()
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	writer, err := w.statusWriter(ctx, "throttled-writer")
	if err != nil {
		t.Fatal(err)
	}
	patcher, err := statuspatch.NewMergePatcher(proxy.Config(writer), routeGVR, fieldManager)
	if err != nil {
		t.Fatal(err)
	}

	stopRecording := proxy.RecordRequests(isRouteStatusPatch)
	if err := proxy.SetFault(cluster.Fault{
		Match: isRouteStatusPatch, ErrorProbability: 0.5, ErrorCode: http.StatusTooManyRequests, RetryAfter: throttleRetryAfter,
	}); err != nil {
		t.Fatal(err)
	}
	// The Lease through the admin's client, not the proxy: only the status
	// PATCHes are throttled.
	leases, err := leader.NewLeaseClient(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := quietpatch.New[*gatewayv1.HTTPRoute](source.FromInformer[*gatewayv1.HTTPRoute](w.routeInformer), w.computerFuncs(nil), patcher,
		quietpatch.Config{Name: "throttle", Interval: 2 * time.Second, Leases: leases,
			Lease: leader.Config{Namespace: benchNamespace, Name: "throttle", Identity: "throttle"}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- ctrl.Run(runCtx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopRun()
			if err := <-runErr; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	defer stop()

	// Throttled: until enough 429s were answered.
	begin := time.Now()
	err = poll(ctx, 50*time.Millisecond, fmt.Sprintf("%d answers 429 in at least %v", throttleMin429, throttleMinPhase), func() error {
		if n := proxy.Stats().Errors; n < throttleMin429 || time.Since(begin) < throttleMinPhase {
			return fmt.Errorf("%d answers 429 after %v", n, time.Since(begin).Round(time.Millisecond))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	left := len(w.changed(nil))
	proxy.ClearFault()
	cleared := time.Now()
	t.Logf("throttled for %v: %d answers 429, %d of %d routes still to converge; dispatcher %+v",
		cleared.Sub(begin).Round(time.Millisecond), proxy.Stats().Errors, left, throttleRoutes, ctrl.Stats().Dispatcher)

	// Then every route converges.
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()
	if err := w.waitConverged(cctx, nil); err != nil {
		t.Errorf("after the 429s stopped: %v", err)
	} else {
		t.Logf("converged %v after the 429s stopped", time.Since(cleared).Round(time.Millisecond))
	}
	stop()
	events := stopRecording()
	stats := ctrl.Stats().Dispatcher

	// Every PATCH against every 429's window.
	var throttled []cluster.ProxyEvent
	for _, ev := range events {
		if ev.Injected && ev.Code == http.StatusTooManyRequests {
			throttled = append(throttled, ev)
		}
	}
	if len(throttled) < throttleMin429 {
		t.Fatalf("the proxy recorded %d answers 429, want at least %d", len(throttled), throttleMin429)
	}
	var violations []string
	inSlack, latestInSlack := 0, time.Duration(0)
	for _, th := range throttled {
		t429 := th.Answered
		for _, ev := range events {
			d := ev.Received.Sub(t429)
			switch {
			case d <= 0 || d >= throttleRetryAfter:
			case d <= throttleSlack:
				inSlack++
				latestInSlack = max(latestInSlack, d)
			default:
				violations = append(violations, fmt.Sprintf("PATCH %s arrived %v after a 429 answered at %s",
					ev.Path, d.Round(time.Microsecond), t429.Format("15:04:05.000000")))
			}
		}
	}
	t.Logf("%d status PATCHes recorded, %d answered 429; %d arrived within %v after a 429 (already on their way; the latest %v after)",
		len(events), len(throttled), inSlack, throttleSlack, latestInSlack.Round(time.Microsecond))
	if len(violations) > 0 {
		t.Errorf("%d PATCHes sent inside a %v Retry-After window, e.g.:\n%s", len(violations), throttleRetryAfter,
			strings.Join(violations[:min(len(violations), 10)], "\n"))
	}

	// The dispatcher saw each 429 and honoured windows.
	if got := stats.Patches[outcome.Throttled]; got != int64(len(throttled)) {
		t.Errorf("the dispatcher counted %d throttled patches, the proxy answered %d with 429: client-go retried some by itself", got, len(throttled))
	}
	if stats.RetryAfters == 0 {
		t.Error("Stats().RetryAfters = 0, want the Retry-After windows honoured counted")
	}
}
