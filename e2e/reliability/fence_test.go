package reliability_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/e2e/examplee2e"
	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// The tests of this file hold a status PATCH's body in a fault proxy
// (Fault.HoldBody) after the API server received its headers, as a
// process paused between sending the two would, and check what the API
// server does with it when the writer's claim ends or a successor takes
// over meanwhile: the server's deadline (the timeout parameter every
// patch carries) and the fence (deploy/fence's ValidatingAdmissionPolicy)
// keep it from landing.

// identityFor returns the client configuration of the ServiceAccount
// ns/sa, granted the example's RBAC (status patches, the Lease by name).
func identityFor(t *testing.T, ctx context.Context, cp *cluster.ControlPlane, rbac *examplee2e.RBAC, ns, sa string) *rest.Config {
	t.Helper()
	rc, err := cp.ConfigFor(ctx, ns, sa)
	if err != nil {
		t.Fatal(err)
	}
	if err := rbac.Apply(ctx, cp.AdminClient(), ns, sa); err != nil {
		t.Fatal(err)
	}
	rc.QPS, rc.Burst = kubeQPS, burst
	return rc
}

// waitLeads waits until r holds its Lease.
func waitLeads(t *testing.T, ctx context.Context, r *libReplica) {
	t.Helper()
	if err := examplee2e.Poll(ctx, 20*time.Millisecond, func(context.Context) error {
		if !r.leads() {
			return fmt.Errorf("%s does not hold the Lease (holder %q)", r.id, r.holder())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// auditOf returns the audit events of user's status requests for route nn
// received at or after since.
func auditOf(events []auditv1.Event, user string, nn types.NamespacedName, since time.Time) []auditv1.Event {
	var out []auditv1.Event
	for _, e := range statusRequests(events, user, since) {
		if e.ObjectRef.Namespace == nn.Namespace && e.ObjectRef.Name == nn.Name {
			out = append(out, e)
		}
	}
	return out
}

// timeoutParam is the timeout query parameter of an audited request.
func timeoutParam(e auditv1.Event) string {
	u, err := url.Parse(e.RequestURI)
	if err != nil {
		return "?"
	}
	return u.Query().Get("timeout")
}

// TestHeldWriteDoesNotLandAfterTheSuccessorAcquired: replica a (a
// leader.Claimer and quietpatch's dispatcher) reaches the API server
// through two fault proxies, one for its Lease, one for its status
// patches; replica b, a claimer only, connects directly. Once a leads and
// its patches land, a's Lease requests stall (its claim runs out, b
// acquires), and a status PATCH of a's is sent with its body held in the
// proxy for longer than the claim has left plus a lease duration: the API
// server has the headers at once, the body only after b acquired. The
// write must not land after b's acquisition (the route's versions and
// the Lease's, ordered by resourceVersion): the API server gives the
// request up at the deadline the patch carried (504: outcome abandoned).
// Without the timeout parameter it waits for the body and commits it.
func TestHeldWriteDoesNotLandAfterTheSuccessorAcquired(t *testing.T) {
	cp, _, rbac := shared.get(t)
	ctx := testContext(t, 2*time.Minute)
	const (
		controller    gatewayv1.GatewayController = "quietpatch.io/e2e-held"
		leaseDuration                             = 4 * time.Second
		retryPeriod                               = 250 * time.Millisecond
		patchTimeout                              = 10 * time.Second // the claim left is the deadline
		// hold: past the claim's end (at most a lease duration after
		// the stall) and b's acquisition (a lease duration after it last
		// saw a renewal), with 3 s to spare on two busy cores.
		hold = 2*leaseDuration + 3*time.Second
	)
	ns, err := cp.NewNamespace(ctx, "hw-")
	if err != nil {
		t.Fatal(err)
	}
	leaseName := examplee2e.DefaultLeaseName
	route := createRoutes(t, ctx, cp, ns, 1)[0]
	nn := routeName(route)
	lease := recordLease(t, ctx, cp, ns, leaseName)
	routes := record(t, ctx, cp, routesGVR, ns, metav1.ListOptions{})
	leaseProxy, statusProxy := newProxy(t, cp), newProxy(t, cp)
	rcA, rcB := identityFor(t, ctx, cp, rbac, ns, "hw-a"), identityFor(t, ctx, cp, rbac, ns, "hw-b")
	a := startLibReplica(t, libConfig{
		Namespace: ns, Lease: leaseName, Identity: "hw-a", LeaseDuration: leaseDuration, RetryPeriod: retryPeriod,
		Leases: leaseProxy.Config(rcA), Status: statusProxy.Config(rcA), Workers: 1, PatchTimeout: patchTimeout,
	})
	waitLeads(t, ctx, a)
	b := startLibReplica(t, libConfig{Namespace: ns, Lease: leaseName, Identity: "hw-b", LeaseDuration: leaseDuration, RetryPeriod: retryPeriod, Leases: rcB})
	applyStatus(t, ctx, cp, a, ns, controller, "warm-up")
	if err := examplee2e.Poll(ctx, 20*time.Millisecond, func(context.Context) error {
		if h := b.holder(); h != a.id {
			return fmt.Errorf("%s sees %q hold the Lease", b.id, h)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// a's renewals stall from now on; its next status PATCH has its body
	// held.
	if err := leaseProxy.SetFault(cluster.Fault{Stall: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(leaseProxy.ClearFault)
	if err := statusProxy.SetFault(cluster.Fault{Match: isRouteStatusPatch, HoldBody: hold}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(statusProxy.ClearFault)
	stopRec := statusProxy.RecordRequests(isRouteStatusPatch)
	cur, err := cp.AdminGatewayClient().GatewayV1().HTTPRoutes(ns).Get(ctx, nn.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stalled := time.Now()
	if err := a.patchRoute(cur, entry(cur, controller, "held past the claim")); err != nil {
		t.Fatal(err)
	}
	h, err := waitHandover(ctx, lease, a.id, b.id)
	if err != nil {
		t.Fatal(err)
	}
	waitProxyIdle(t, ctx, statusProxy)
	// The body goes upstream hold after the headers, whatever the answer:
	// wait past that (and a second for the server to act on it) before
	// reading what landed.
	if err := examplee2e.Poll(ctx, 100*time.Millisecond, func(context.Context) error {
		if left := time.Until(stalled.Add(hold + time.Second)); left > 0 {
			return fmt.Errorf("the held body goes upstream in %v", left.Round(time.Millisecond))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	vs := syncRoutes(t, ctx, cp, routes, nn)
	proxied := stopRec()
	events, err := cp.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	userA := cluster.ServiceAccountUsername(ns, a.id)
	var held []cluster.ProxyEvent
	for _, e := range proxied {
		if e.BodyHeld > 0 {
			held = append(held, e)
		}
	}
	reqs := auditOf(events, userA, nn, stalled)
	if len(held) != 1 || len(reqs) != 1 {
		t.Fatalf("%d PATCHes held in the proxy, %d status requests of %s audited since the stall: want 1 and 1 (proxy %+v, audit %v)",
			len(held), len(reqs), a.id, proxied, reqs)
	}
	e, req := held[0], reqs[0]
	t.Logf("timeline: the PATCH's headers went to the API server at %s (received %s, timeout=%s); a's last Lease write %s; b acquired %s (rv %d); "+
		"the body went at %s; the API server answered %d at %s (proxy: %d at %s); a's outcomes %v",
		e.Forwarded.Format("15:04:05.000"), req.RequestReceivedTimestamp.Format("15:04:05.000"), timeoutParam(req),
		h.last.Received.Format("15:04:05.000"), h.acquired.Received.Format("15:04:05.000"), h.acquired.ResourceVersion,
		e.Forwarded.Add(e.BodyHeld).Format("15:04:05.000"), code(req), req.StageTimestamp.Format("15:04:05.000"),
		e.Code, e.Answered.Format("15:04:05.000"), a.outcomes())
	if !req.RequestReceivedTimestamp.Time.Before(h.acquired.Received) || !e.Forwarded.Add(e.BodyHeld).After(h.acquired.Received) {
		t.Errorf("the test saw nothing: the API server must have received the headers before b acquired and the body after")
	}
	checkHandover(t, h, cluster.StatusChanges(vs), events, userA, cluster.ServiceAccountUsername(ns, b.id), stalled, leaseDuration)
	if o := a.outcomes(); o[outcome.OK] != 1 || o[outcome.Abandoned]+o[outcome.Timeout] != 1 {
		t.Errorf("a's patch outcomes %v: want the warm-up ok and the held call abandoned by the server (or, if its answer came late, timed out)", o)
	}
}

// installFence installs deploy/fence's ValidatingAdmissionPolicy under
// name, and a binding of it by name to the Lease ns/leaseName, both
// deleted when the test ends. (The example binds it by label to every
// Lease of its namespace, fenceBinding; a test binds only its own.)
func installFence(t *testing.T, ctx context.Context, cp *cluster.ControlPlane, name, ns, leaseName string) {
	t.Helper()
	allow := admissionv1.AllowAction
	installFenceWith(t, ctx, cp, name, admissionv1.ParamRef{Name: leaseName, Namespace: ns, ParameterNotFoundAction: &allow})
}

// fenceFile decodes a file of the example's deploy/fence into obj.
func fenceFile(t *testing.T, file string, obj any) {
	t.Helper()
	examples, err := examplee2e.ExamplesDir()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(examplee2e.DeployDir(examples), "fence", file))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, obj); err != nil {
		t.Fatal(err)
	}
}

// installFenceWith installs deploy/fence's policy under name and a
// binding of it with ref, both deleted when the test ends.
func installFenceWith(t *testing.T, ctx context.Context, cp *cluster.ControlPlane, name string, ref admissionv1.ParamRef) {
	t.Helper()
	var policy admissionv1.ValidatingAdmissionPolicy
	fenceFile(t, "policy.yaml", &policy)
	policy.Name = name
	adm := cp.AdminClient().AdmissionregistrationV1()
	if _, err := adm.ValidatingAdmissionPolicies().Create(ctx, &policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			ParamRef:          &ref,
		},
	}
	if _, err := adm.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = adm.ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{})
		_ = adm.ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{})
	})
}

// probeFence makes a dry-run status write of the route nn that names
// identity as the writer under the Lease leaseName of nn's namespace (the
// tests keep their Lease there), as the admin, and returns its outcome:
// fenced when the fence denies it.
func probeFence(ctx context.Context, cp *cluster.ControlPlane, nn types.NamespacedName, leaseName, identity string) outcome.Outcome {
	_, err := cp.AdminGatewayClient().GatewayV1().HTTPRoutes(nn.Namespace).Patch(ctx, nn.Name, types.MergePatchType, []byte("{}"),
		metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: nn.Namespace + "/" + leaseName + "@" + identity}, "status")
	return outcome.Of(err)
}

// waitFenced waits until the fence denies a write naming identity under
// leaseName: the policy is compiled and its param cache has the Lease.
func waitFenced(t *testing.T, ctx context.Context, cp *cluster.ControlPlane, nn types.NamespacedName, leaseName, identity string) {
	t.Helper()
	if err := examplee2e.Poll(ctx, 50*time.Millisecond, func(ctx context.Context) error {
		if o := probeFence(ctx, cp, nn, leaseName, identity); o != outcome.Fenced {
			return fmt.Errorf("a write naming %s under %s: %s, not fenced yet", identity, leaseName, o)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// takeOver rewrites the Lease as another replica's acquisition would:
// holder, a new epoch, renewed now.
func takeOver(ctx context.Context, cp *cluster.ControlPlane, ns, name, holder string) (*coordv1.Lease, error) {
	leases := cp.AdminClient().CoordinationV1().Leases(ns)
	var out *coordv1.Lease
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		epoch := int32(1)
		if l.Spec.LeaseTransitions != nil {
			epoch = *l.Spec.LeaseTransitions + 1
		}
		l.Spec.HolderIdentity, l.Spec.LeaseTransitions, l.Spec.AcquireTime, l.Spec.RenewTime = &holder, &epoch, &now, &now
		out, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	return out, err
}

// TestFenceDeniesAWriteHeldAcrossATakeover: with deploy/fence's policy
// bound to the Lease, replica a's status PATCH has its body held in the
// proxy for less than its deadline, and while it is held the Lease is
// taken over (the test rewrites its holder, as a successor's acquisition
// would). a's claimer does not see it (its Lease requests stall and its
// watch is cut), so the call still waits for its answer: with the fence
// (the patcher names the writer) the API server denies the write at
// admission, a counts it as fenced, and nothing lands after the takeover;
// without the fence the same write lands.
func TestFenceDeniesAWriteHeldAcrossATakeover(t *testing.T) {
	cp, _, rbac := shared.get(t)
	const (
		controller    gatewayv1.GatewayController = "quietpatch.io/e2e-fence"
		leaseDuration                             = 6 * time.Second // >= 4 s of claim left at any call
		retryPeriod                               = 250 * time.Millisecond
		patchTimeout                              = 5 * time.Second
		hold                                      = 1500 * time.Millisecond // well within the deadline
		message                                   = "held across a takeover"
	)
	for _, fenced := range []bool{true, false} {
		t.Run(fmt.Sprintf("fence=%v", fenced), func(t *testing.T) {
			ctx := testContext(t, 2*time.Minute)
			ns, err := cp.NewNamespace(ctx, "fn-")
			if err != nil {
				t.Fatal(err)
			}
			leaseName := examplee2e.DefaultLeaseName
			route := createRoutes(t, ctx, cp, ns, 1)[0]
			nn := routeName(route)
			installFence(t, ctx, cp, "e2e-fence-"+ns, ns, leaseName)
			routes := record(t, ctx, cp, routesGVR, ns, metav1.ListOptions{})
			leaseProxy, statusProxy := newProxy(t, cp), newProxy(t, cp)
			rcA := identityFor(t, ctx, cp, rbac, ns, "fn-a")
			var logs syncBuffer
			a := startLibReplica(t, libConfig{
				Namespace: ns, Lease: leaseName, Identity: "fn-a", LeaseDuration: leaseDuration, RetryPeriod: retryPeriod,
				Leases: leaseProxy.Config(rcA), Status: statusProxy.Config(rcA), Workers: 1, PatchTimeout: patchTimeout,
				Fence: fenced, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
			})
			waitLeads(t, ctx, a)
			waitFenced(t, ctx, cp, nn, leaseName, "not-"+a.id)
			applyStatus(t, ctx, cp, a, ns, controller, "warm-up") // the holder's writes pass the fence

			// a goes blind to the Lease: its requests stall, its watch
			// is cut. Its claim stays current on its own clock.
			if err := leaseProxy.SetFault(cluster.Fault{Stall: true}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(leaseProxy.ClearFault)
			leaseProxy.ResetConnections()
			if err := statusProxy.SetFault(cluster.Fault{Match: isRouteStatusPatch, HoldBody: hold}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(statusProxy.ClearFault)
			cur, err := cp.AdminGatewayClient().GatewayV1().HTTPRoutes(ns).Get(ctx, nn.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			before := a.outcomes()
			if err := a.patchRoute(cur, entry(cur, controller, message)); err != nil {
				t.Fatal(err)
			}
			if err := examplee2e.Poll(ctx, 5*time.Millisecond, func(context.Context) error {
				if s := statusProxy.Stats(); s.BodiesHeld < 1 {
					return fmt.Errorf("no status PATCH held yet")
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			took, err := takeOver(ctx, cp, ns, leaseName, "fn-usurper")
			if err != nil {
				t.Fatal(err)
			}
			var takeoverRV uint64
			if _, err := fmt.Sscan(took.ResourceVersion, &takeoverRV); err != nil {
				t.Fatal(err)
			}
			if !a.leads() {
				t.Fatalf("a saw the takeover: the call would be cancelled, the test would see nothing")
			}
			var after map[outcome.Outcome]int64
			if err := examplee2e.Poll(ctx, 20*time.Millisecond, func(context.Context) error {
				after = a.outcomes()
				if n := sum(after) - sum(before); n < 1 {
					return fmt.Errorf("the held call has not ended: outcomes %v", after)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			vs := syncRoutes(t, ctx, cp, routes, nn)
			var late []uint64
			for _, v := range cluster.StatusChanges(vs) {
				var r gatewayv1.HTTPRoute
				if err := v.Into(&r); err != nil {
					t.Fatal(err)
				}
				if v.ResourceVersion > takeoverRV && hasEntry(&r, controller, message) {
					late = append(late, v.ResourceVersion)
				}
			}
			t.Logf("fence %v: takeover at resourceVersion %d; a's outcomes before %v, after %v; a's writes after the takeover at %v; logs: %s",
				fenced, takeoverRV, before, after, late, logs.String())
			if fenced {
				if after[outcome.Fenced]-before[outcome.Fenced] != 1 || len(late) != 0 {
					t.Errorf("with the fence: want the held write denied (outcome fenced, once) and nothing of a's after the takeover; got outcomes %v, late writes %v", after, late)
				}
				if strings.Contains(logs.String(), "does not fence") {
					t.Errorf("the fence's check warned although the fence works: %s", logs.String())
				}
				return
			}
			// The control: without the fence, the API server has no way to
			// tell, and the write lands after the takeover.
			if after[outcome.OK]-before[outcome.OK] != 1 || len(late) != 1 {
				t.Errorf("without the fence: want the held write to land after the takeover (outcome ok); got outcomes %v, late writes %v", after, late)
			}
		})
	}
}

func sum(m map[outcome.Outcome]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// syncBuffer is a bytes.Buffer safe for concurrent writes (a slog handler's).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestFenceCheckWarnsOfAFenceForAnotherLease: the policy is bound to
// another Lease than the one replica a writes under. a's writes go on
// (nothing fences them), and its patcher's check — one dry-run write
// naming another writer — finds the API server does not deny it: one
// warning, naming a's Lease and the policy to install.
func TestFenceCheckWarnsOfAFenceForAnotherLease(t *testing.T) {
	cp, _, rbac := shared.get(t)
	ctx := testContext(t, 2*time.Minute)
	const controller gatewayv1.GatewayController = "quietpatch.io/e2e-fence-check"
	ns, err := cp.NewNamespace(ctx, "fc-")
	if err != nil {
		t.Fatal(err)
	}
	leaseName := examplee2e.DefaultLeaseName
	createRoutes(t, ctx, cp, ns, 3)
	installFence(t, ctx, cp, "e2e-fence-"+ns, ns, "another-lease")
	var logs syncBuffer
	a := startLibReplica(t, libConfig{
		Namespace: ns, Lease: leaseName, Identity: "fc-a", LeaseDuration: 4 * time.Second, RetryPeriod: 250 * time.Millisecond,
		Leases: identityFor(t, ctx, cp, rbac, ns, "fc-a"), Status: identityFor(t, ctx, cp, rbac, ns, "fc-a"), Workers: 1, PatchTimeout: 2 * time.Second,
		Fence: true, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	waitLeads(t, ctx, a)
	applyStatus(t, ctx, cp, a, ns, controller, "one")
	applyStatus(t, ctx, cp, a, ns, controller, "two")
	warnings := strings.Count(logs.String(), "level=WARN")
	t.Logf("a's outcomes %v; warnings:\n%s", a.outcomes(), logs.String())
	if warnings != 1 || !strings.Contains(logs.String(), "lease="+ns+"/"+leaseName) || !strings.Contains(logs.String(), "ValidatingAdmissionPolicy") {
		t.Errorf("%d warnings, want one naming the Lease %s/%s and the policy", warnings, ns, leaseName)
	}
}

// TestFencedFieldManagersStayBounded: fenced writes name their writer, so
// every replica identity — one per process — is a field manager of its
// own on the objects it writes. The API server keeps managedFields
// bounded: an update manager whose fields another took loses its entry,
// and beyond 10 update managers the oldest merge into "ancient-changes"
// (k8s.io/apimachinery/pkg/util/managedfields). 15 identities, one after
// the other, leave at most 11 entries on a route.
func TestFencedFieldManagersStayBounded(t *testing.T) {
	cp := shared.controlPlane(t)
	ctx := testContext(t, time.Minute)
	const (
		controller gatewayv1.GatewayController = "quietpatch.io/e2e-managers"
		identities                             = 15
		maxEntries                             = 10 + 1 // the API server's cap on update managers, and ancient-changes
	)
	ns, err := cp.NewNamespace(ctx, "fm-")
	if err != nil {
		t.Fatal(err)
	}
	route := createRoutes(t, ctx, cp, ns, 1)[0]
	nn := routeName(route)
	rc, err := statuspatch.NewMergePatcher(cp.AdminConfig(), routesGVR, "quietpatch-e2e")
	if err != nil {
		t.Fatal(err)
	}
	p := rc.WithFence(slog.New(slog.DiscardHandler))
	routesClient := cp.AdminGatewayClient().GatewayV1().HTTPRoutes(ns)
	for i := range identities {
		cur, err := routesClient.Get(ctx, nn.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mp, err := statuspatch.NewMergePatch(cur, map[string]any{"parents": entry(cur, controller, fmt.Sprintf("by replica %d", i))})
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		// As the dispatcher carries each call's claim.
		err = p.Patch(context.WithValue(cctx, base.WriteClaimKey{}, statuspatch.WriteClaim{
			Identity: fmt.Sprintf("pod-%d_%08x", i, i), LeaseNamespace: ns, LeaseName: "quietpatch-httproute-status-shard-7-of-8", Epoch: int64(i + 1),
		}), mp)
		cancel()
		if err != nil && !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	cur, err := routesClient.Get(ctx, nn.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var managers []string
	for _, m := range cur.ManagedFields {
		managers = append(managers, fmt.Sprintf("%s (%s %s)", m.Manager, m.Operation, m.Subresource))
	}
	slices.Sort(managers)
	t.Logf("%d identities wrote the status; managedFields has %d entries: %v", identities, len(cur.ManagedFields), managers)
	if len(cur.ManagedFields) > maxEntries {
		t.Errorf("managedFields has %d entries after %d writers, want at most %d", len(cur.ManagedFields), identities, maxEntries)
	}
	if !slices.ContainsFunc(cur.ManagedFields, func(m metav1.ManagedFieldsEntry) bool {
		return strings.HasSuffix(m.Manager, fmt.Sprintf("@pod-%d_%08x", identities-1, identities-1))
	}) {
		t.Errorf("the last writer's fenced field manager is not among %v", managers)
	}
}

// TestFenceLag measures how soon after an acquisition the API server
// enforces the new holder (its cache of the fence's params): the Lease's
// holder is rewritten 50 times, and after each update a dry-run write
// naming the new holder is made until the fence admits it. The lag is
// logged (p50, max) for docs/performance.md; the test fails only if the
// fence never admits the new holder, or admits it before the update.
func TestFenceLag(t *testing.T) {
	cp := shared.controlPlane(t)
	ctx := testContext(t, 2*time.Minute)
	const trials = 50
	ns, err := cp.NewNamespace(ctx, "fl-")
	if err != nil {
		t.Fatal(err)
	}
	const leaseName = "fence-lag"
	nn := routeName(createRoutes(t, ctx, cp, ns, 1)[0])
	lease := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leaseName, Namespace: ns}, Spec: coordv1.LeaseSpec{HolderIdentity: ptrTo("holder-0")}}
	if _, err := cp.AdminClient().CoordinationV1().Leases(ns).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	installFence(t, ctx, cp, "e2e-fence-"+ns, ns, leaseName)
	waitFenced(t, ctx, cp, nn, leaseName, "holder-1")
	lags := make([]time.Duration, 0, trials)
	probes := 0
	for i := 1; i <= trials; i++ {
		holder := fmt.Sprintf("holder-%d", i)
		if _, err := takeOver(ctx, cp, ns, leaseName, holder); err != nil {
			t.Fatal(err)
		}
		updated := time.Now()
		for {
			probes++
			o := probeFence(ctx, cp, nn, leaseName, holder)
			if o == outcome.OK {
				break
			}
			if o != outcome.Fenced {
				t.Fatalf("trial %d: a dry-run write naming %s: %s", i, holder, o)
			}
			if time.Since(updated) > 30*time.Second {
				t.Fatalf("trial %d: the fence still denies %s 30 s after it acquired", i, holder)
			}
		}
		lags = append(lags, time.Since(updated))
		if o := probeFence(ctx, cp, nn, leaseName, fmt.Sprintf("holder-%d", i-1)); o != outcome.Fenced {
			t.Errorf("trial %d: the previous holder's write: %s, want fenced", i, o)
		}
	}
	slices.Sort(lags)
	t.Logf("fence lag over %d acquisitions (from the Lease update's answer to the first admitted write of the new holder, dry-run writes back to back, %d in all): p50 %v, p90 %v, max %v",
		trials, probes, lags[trials/2].Round(10*time.Microsecond), lags[trials*9/10].Round(10*time.Microsecond), lags[trials-1].Round(10*time.Microsecond))
}

func ptrTo[T any](v T) *T { return &v }

// TestFenceBindingSelectsTheClaimersLeases: deploy/fence's binding as
// shipped (its paramRef's label selector, in the test's namespace) fences
// the writes under every Lease a leader.Claimer created — here two shard
// Leases —, and not under a Lease without the claimer's label.
func TestFenceBindingSelectsTheClaimersLeases(t *testing.T) {
	cp := shared.controlPlane(t)
	ctx := testContext(t, 2*time.Minute)
	ns, err := cp.NewNamespace(ctx, "fs-")
	if err != nil {
		t.Fatal(err)
	}
	nn := routeName(createRoutes(t, ctx, cp, ns, 1)[0])
	var binding admissionv1.ValidatingAdmissionPolicyBinding
	fenceFile(t, "binding.yaml", &binding)
	ref := *binding.Spec.ParamRef
	if ref.Selector == nil || ref.Name != "" {
		t.Fatalf("deploy/fence/binding.yaml's paramRef %+v: want a label selector", ref)
	}
	ref.Namespace = ns
	installFenceWith(t, ctx, cp, "e2e-fence-"+ns, ref)
	for _, lease := range []string{"fs-shard-0-of-2", "fs-shard-1-of-2"} {
		a := startLibReplica(t, libConfig{Namespace: ns, Lease: lease, Identity: "fs-a-" + lease, LeaseDuration: 4 * time.Second,
			RetryPeriod: 250 * time.Millisecond, Leases: cp.AdminConfig()})
		waitLeads(t, ctx, a)
		waitFenced(t, ctx, cp, nn, lease, "not-"+a.id)
		if o := probeFence(ctx, cp, nn, lease, a.id); o != outcome.OK {
			t.Errorf("a write naming the holder %s under %s: %s, want admitted", a.id, lease, o)
		}
	}
	unlabelled := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "fs-unlabelled", Namespace: ns}, Spec: coordv1.LeaseSpec{HolderIdentity: ptrTo("someone")}}
	if _, err := cp.AdminClient().CoordinationV1().Leases(ns).Create(ctx, unlabelled, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if o := probeFence(ctx, cp, nn, unlabelled.Name, "someone-else"); o != outcome.OK {
		t.Errorf("a write naming another writer under a Lease without the label: %s, want admitted (the binding does not select it)", o)
	}
}
