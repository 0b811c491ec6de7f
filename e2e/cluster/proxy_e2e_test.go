package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// TestFaultProxyWithAPIServer drives client-go through the fault proxy in
// front of the shared API server: identity, latency, stall with a client
// timeout, 503, 429 with Retry-After, reset, a watch, and recovery.
func TestFaultProxyWithAPIServer(t *testing.T) {
	cp := shared.Get(t)
	ctx := testContext(t, 3*time.Minute)
	admin := cp.AdminClient()

	ns, err := cp.NewNamespace(ctx, "proxy-")
	if err != nil {
		t.Fatal(err)
	}
	const sa = "proxied"
	p, err := cp.NewFaultProxy()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	cfg, err := p.ConfigFor(ctx, ns, sa)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS = -1
	if err := cp.Grant(ctx, ns, sa, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create"}}); err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	get := func(ctx context.Context) error {
		_, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, "probe", metav1.GetOptions{})
		return err
	}
	created := 0
	create := func(ctx context.Context) error {
		created++
		_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d", created)}}, metav1.CreateOptions{})
		return err
	}
	eventually(t, 15*time.Second, "get through the proxy (RBAC settling)", func() error { return get(ctx) })

	t.Run("identity is preserved", func(t *testing.T) {
		r, err := kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := r.Status.UserInfo.Username, ServiceAccountUsername(ns, sa); got != want {
			t.Errorf("through the proxy the API server sees %q, want %q", got, want)
		}
		// The admin's client certificate is not forwarded: anonymous.
		anon, err := kubernetes.NewForConfig(p.Config(cp.AdminConfig()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := anon.CoreV1().ConfigMaps(ns).Get(ctx, "probe", metav1.GetOptions{}); !apierrors.IsForbidden(err) && !apierrors.IsUnauthorized(err) {
			t.Errorf("admin config through the proxy: got %v, want Forbidden (anonymous)", err)
		}
	})

	t.Run("latency", func(t *testing.T) {
		defer p.ClearFault()
		if err := p.SetFault(Fault{Latency: 300 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		if err := get(ctx); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(begin); d < 300*time.Millisecond {
			t.Errorf("get took %v, want >= 300ms", d)
		}
	})

	t.Run("stall with client timeout", func(t *testing.T) {
		defer p.ClearFault()
		if err := p.SetFault(Fault{Stall: true}); err != nil {
			t.Fatal(err)
		}
		stalled := p.Stats().Stalled
		rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		begin := time.Now()
		err := get(rctx)
		if err == nil || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want the client's deadline", err)
		}
		if d := time.Since(begin); d < 500*time.Millisecond || d > 5*time.Second {
			t.Errorf("gave up after %v, want ~500ms", d)
		}
		if got := p.Stats().Stalled; got <= stalled {
			t.Errorf("Stats.Stalled = %d, want > %d", got, stalled)
		}
		waitStats(t, p, "stalled handler ends with its client", func(s ProxyStats) bool { return s.InFlight == 0 })
	})

	t.Run("503", func(t *testing.T) {
		defer p.ClearFault()
		if err := p.SetFault(Fault{ErrorProbability: 1}); err != nil {
			t.Fatal(err)
		}
		if err := get(ctx); !apierrors.IsServiceUnavailable(err) {
			t.Fatalf("got %v, want ServiceUnavailable", err)
		}
	})

	t.Run("429 with Retry-After is retried by client-go", func(t *testing.T) {
		defer p.ClearFault()
		if err := p.SetFault(Fault{ErrorProbability: 1, ErrorCode: http.StatusTooManyRequests, RetryAfter: time.Second}); err != nil {
			t.Fatal(err)
		}
		injected := p.Stats().Errors
		res := make(chan error, 1)
		begin := time.Now()
		go func() { res <- get(ctx) }()
		waitStats(t, p, "a 429 answered", func(s ProxyStats) bool { return s.Errors > injected })
		p.ClearFault()
		if err := <-res; err != nil {
			t.Fatalf("client-go should have retried after Retry-After: %v", err)
		}
		if d := time.Since(begin); d < time.Second {
			t.Errorf("succeeded after %v, want >= the 1s Retry-After", d)
		}
	})

	t.Run("reset", func(t *testing.T) {
		defer p.ClearFault()
		if err := p.SetFault(Fault{ResetProbability: 1}); err != nil {
			t.Fatal(err)
		}
		// A create is not retried by client-go (a GET would be, after 1 s).
		err := create(ctx)
		if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("got %v, want a connection reset", err)
		}
	})

	t.Run("recovery", func(t *testing.T) {
		p.ClearFault()
		if err := get(ctx); err != nil {
			t.Fatal(err)
		}
		if err := create(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("watch streams and is cut by a reset", func(t *testing.T) {
		list, err := kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w, err := kube.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "watched"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		timeout := time.After(15 * time.Second)
	events:
		for {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					t.Fatal("watch closed before the event arrived")
				}
				if cm, isCM := ev.Object.(*corev1.ConfigMap); ev.Type == watch.Added && isCM && cm.Name == "watched" {
					break events
				}
			case <-timeout:
				t.Fatal("no ADDED event for the new ConfigMap through the proxy")
			}
		}
		if n := p.ResetConnections(); n < 1 {
			t.Fatalf("ResetConnections() = %d, want >= 1", n)
		}
		timeout = time.After(15 * time.Second)
		for {
			select {
			case _, ok := <-w.ResultChan():
				if !ok {
					return // the watch ended with its connection
				}
			case <-timeout:
				t.Fatal("watch still open 15s after its connection was reset")
			}
		}
	})

	// Everything ends once the clients are done with it.
	waitStats(t, p, "no request in flight", func(s ProxyStats) bool { return s.InFlight == 0 })
	t.Logf("proxy stats: %+v", p.Stats())
}
