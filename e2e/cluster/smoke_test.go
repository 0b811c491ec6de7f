package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
)

const testController = "quietpatch.example.com/e2e"

// newRoute is a valid HTTPRoute whose one parent is the Service svc (GAMMA).
func newRoute(name, svc string) *gatewayv1.HTTPRoute {
	return &gatewayv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{
				Group: ptr.To(gatewayv1.Group("")),
				Kind:  ptr.To(gatewayv1.Kind("Service")),
				Name:  gatewayv1.ObjectName(svc),
				Port:  ptr.To(gatewayv1.PortNumber(8080)),
			}}},
			Rules: []gatewayv1.HTTPRouteRule{{
				BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
					BackendObjectReference: gatewayv1.BackendObjectReference{
						Name: gatewayv1.ObjectName(svc),
						Port: ptr.To(gatewayv1.PortNumber(8080)),
					},
				}}},
			}},
		},
	}
}

func newService(name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
			Name: "http", Port: 8080, TargetPort: intstr.FromInt32(8080),
		}}},
	}
}

// statusPatch is a JSON merge patch setting one Accepted parent status.
func statusPatch(t *testing.T, route *gatewayv1.HTTPRoute) []byte {
	t.Helper()
	patch := map[string]any{
		"metadata": map[string]any{"resourceVersion": route.ResourceVersion},
		"status": gatewayv1.HTTPRouteStatus{RouteStatus: gatewayv1.RouteStatus{Parents: []gatewayv1.RouteParentStatus{{
			ParentRef:      route.Spec.ParentRefs[0],
			ControllerName: testController,
			Conditions: []metav1.Condition{{
				Type:               string(gatewayv1.RouteConditionAccepted),
				Status:             metav1.ConditionTrue,
				Reason:             string(gatewayv1.RouteReasonAccepted),
				Message:            "accepted by the e2e smoke test",
				ObservedGeneration: route.Generation,
				LastTransitionTime: metav1.NewTime(time.Now().Truncate(time.Second)),
			}},
		}}}},
	}
	b, err := json.Marshal(patch)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSmoke starts its own control plane, patches an HTTPRoute's status as a
// least-privilege ServiceAccount, finds that PATCH in /metrics and in the
// audit log under the right identity, checks a write outside the grant is
// Forbidden, then stops and checks that no process or port is left.
func TestSmoke(t *testing.T) {
	begin := time.Now()
	cp := StartT(t, Options{})
	t.Logf("cold start: %v (%+v)", time.Since(begin).Round(time.Millisecond), cp.Timings())
	ctx := testContext(t, 2*time.Minute)
	admin := cp.AdminClient()

	ns, err := cp.NewNamespace(ctx, "smoke-")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Services(ns).Create(ctx, newService("backend"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	route, err := cp.AdminGatewayClient().GatewayV1().HTTPRoutes(ns).Create(ctx, newRoute("web", "backend"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating HTTPRoute: %v", err)
	}

	const sa = "status-writer"
	cfg, err := cp.ConfigFor(ctx, ns, sa)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CertData != nil || cfg.BearerToken == "" {
		t.Fatalf("ConfigFor: want a bearer token and no client certificate, got token %t cert %t", cfg.BearerToken != "", cfg.CertData != nil)
	}
	if err := cp.Grant(ctx, ns, sa, rbacv1.PolicyRule{
		APIGroups: []string{gatewayv1.GroupName},
		Resources: []string{"httproutes/status"},
		Verbs:     []string{"get", "patch"},
	}); err != nil {
		t.Fatal(err)
	}
	gw, err := gatewayclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	patchFilter := RequestFilter{Verb: "PATCH", Group: gatewayv1.GroupName, Resource: "httproutes", Subresource: "status", Code: "200"}
	before, err := cp.RequestCount(ctx, patchFilter)
	if err != nil {
		t.Fatal(err)
	}

	// RBAC is served from an informer cache: the new binding may need a moment.
	var patched *gatewayv1.HTTPRoute
	eventually(t, 15*time.Second, "status patch as "+sa, func() error {
		patched, err = gw.GatewayV1().HTTPRoutes(ns).Patch(ctx, route.Name, types.MergePatchType,
			statusPatch(t, route), metav1.PatchOptions{FieldManager: "quietpatch-e2e"}, "status")
		return err
	})
	if got := len(patched.Status.Parents); got != 1 || string(patched.Status.Parents[0].ControllerName) != testController {
		t.Fatalf("patched status parents = %+v, want one entry for %s", patched.Status.Parents, testController)
	}

	eventually(t, 10*time.Second, "PATCH httproutes/status counted in "+RequestTotalMetric, func() error {
		after, err := cp.RequestCount(ctx, patchFilter)
		if err != nil {
			return err
		}
		if after < before+1 {
			return fmt.Errorf("count went from %v to %v", before, after)
		}
		return nil
	})

	ev, err := cp.WaitForAuditEvent(testContext(t, 10*time.Second), AuditFilter{
		Verb: "patch", Username: ServiceAccountUsername(ns, sa),
		APIGroup: gatewayv1.GroupName, Resource: "httproutes", Subresource: "status",
		Namespace: ns, Name: route.Name, Code: 200,
	})
	if err != nil {
		t.Fatal(err)
	}
	if ev.StageTimestamp.IsZero() || ev.Stage != "ResponseComplete" {
		t.Errorf("audit event stage %q at %v, want ResponseComplete with a time", ev.Stage, ev.StageTimestamp)
	}

	// Outside the grant: the route's spec, and any other resource.
	_, err = gw.GatewayV1().HTTPRoutes(ns).Patch(ctx, route.Name, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("patching the route's main resource as %s: got %v, want Forbidden", sa, err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("creating a ConfigMap as %s: got %v, want Forbidden", sa, err)
	}
	// Only status writes are audited: the successful patch once (earlier
	// attempts may have been denied while RBAC caught up), and nothing else.
	evs, err := cp.FindAuditEvents(AuditFilter{Username: ServiceAccountUsername(ns, sa)})
	if err != nil {
		t.Fatal(err)
	}
	ok := 0
	for _, e := range evs {
		if e.ObjectRef == nil || e.ObjectRef.Subresource != "status" {
			t.Errorf("audited a write that is not to a status subresource: %s %s", e.Verb, e.RequestURI)
		}
		if e.ResponseStatus != nil && e.ResponseStatus.Code == 200 {
			ok++
		}
	}
	if ok != 1 {
		t.Errorf("successful audited writes by %s: got %d, want 1", sa, ok)
	}

	// Stop, then nothing may be left.
	procs, ports, dir := cp.Processes(), cp.Ports(), cp.Dir()
	if len(procs) != 2 {
		t.Fatalf("Processes() = %+v, want etcd and kube-apiserver", procs)
	}
	stopBegin := time.Now()
	if err := cp.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("stop took %v", time.Since(stopBegin).Round(time.Millisecond))
	assertGone(t, procs, ports)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("state dir %s still there after Stop (err %v)", dir, err)
	}
	if got := cp.Processes(); len(got) != 0 {
		t.Errorf("Processes() after Stop = %+v, want none", got)
	}
	if err := cp.RestartAPIServer(ctx); !errors.Is(err, ErrStopped) {
		t.Errorf("RestartAPIServer after Stop: got %v, want ErrStopped", err)
	}
}

// assertGone checks that the processes (and their groups) no longer exist
// and the ports can be listened on again.
func assertGone(t *testing.T, procs []Process, ports Ports) {
	t.Helper()
	for _, p := range procs {
		if err := syscall.Kill(p.PID, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) still exists after Stop: kill(0) = %v", p.Name, p.PID, err)
		}
		if err := syscall.Kill(-p.PID, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process group of %s (%d) not empty after Stop: kill(0) = %v", p.Name, p.PID, err)
		}
	}
	for _, port := range ports.List() {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Errorf("port %d not free after Stop: %v", port, err)
			continue
		}
		l.Close()
	}
}
