package examplee2e_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch/e2e/examplee2e"
)

// These tests need no control plane.

const ctrl gatewayv1.GatewayController = "example.com/ctrl"

func gatewayRef(name string) gatewayv1.ParentReference {
	g, k := gatewayv1.Group(gatewayv1.GroupName), gatewayv1.Kind("Gateway")
	return gatewayv1.ParentReference{Group: &g, Kind: &k, Name: gatewayv1.ObjectName(name)}
}

func cond(typ string, status metav1.ConditionStatus, reason string, gen int64) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, ObservedGeneration: gen}
}

// route returns a route of generation 2 with parentRefs gw-a and gw-b and
// the given status entries.
func route(entries ...gatewayv1.RouteParentStatus) *gatewayv1.HTTPRoute {
	r := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r", Generation: 2}}
	r.Spec.ParentRefs = []gatewayv1.ParentReference{gatewayRef("gw-a"), gatewayRef("gw-b")}
	r.Status.Parents = entries
	return r
}

func entry(c gatewayv1.GatewayController, parent string, conds ...metav1.Condition) gatewayv1.RouteParentStatus {
	return gatewayv1.RouteParentStatus{ControllerName: c, ParentRef: gatewayRef(parent), Conditions: conds}
}

func TestCheckRoute(t *testing.T) {
	okConds := []metav1.Condition{cond("Accepted", "True", "Accepted", 2), cond("ResolvedRefs", "True", "ResolvedRefs", 2)}
	want := examplee2e.Want{Controller: ctrl, Accepted: "Accepted", ResolvedRefs: "ResolvedRefs"}
	wantB := want
	refB := gatewayRef("gw-b")
	wantB.Parent = &refB
	rejected := examplee2e.Want{Controller: ctrl, Accepted: "NoMatchingParent", ResolvedRefs: "BackendNotFound"}
	for _, tc := range []struct {
		label   string
		route   *gatewayv1.HTTPRoute
		want    examplee2e.Want
		wantErr string // substring; "" means nil
	}{
		{"converged", route(entry(ctrl, "gw-a", okConds...)), want, ""},
		{"converged, other controllers' entries around", route(entry("x.io/y", "gw-a"), entry(ctrl, "gw-a", okConds...), entry("x.io/z", "gw-b")), want, ""},
		{"no entry", route(entry("x.io/y", "gw-a", okConds...)), want, "0 status entries"},
		{"two entries", route(entry(ctrl, "gw-a", okConds...), entry(ctrl, "gw-b", okConds...)), want, "2 status entries"},
		{"wrong parent", route(entry(ctrl, "gw-a", okConds...)), wantB, "want Gateway gw-b"},
		{"right parent", route(entry(ctrl, "gw-b", okConds...)), wantB, ""},
		{"parent not in spec", route(entry(ctrl, "gw-c", okConds...)), want, "not (exactly) in spec.parentRefs"},
		{"missing condition", route(entry(ctrl, "gw-a", okConds[0])), want, "no ResolvedRefs condition"},
		{"wrong reason", route(entry(ctrl, "gw-a", okConds...)), rejected, "Accepted is True/Accepted, want False/NoMatchingParent"},
		{"right reason, wrong status", route(entry(ctrl, "gw-a", cond("Accepted", "True", "NoMatchingParent", 2), cond("ResolvedRefs", "False", "BackendNotFound", 2))), rejected, "want False/NoMatchingParent"},
		{"rejected, converged", route(entry(ctrl, "gw-a", cond("Accepted", "False", "NoMatchingParent", 2), cond("ResolvedRefs", "False", "BackendNotFound", 2))), rejected, ""},
		{"stale generation", route(entry(ctrl, "gw-a", cond("Accepted", "True", "Accepted", 1), okConds[1])), want, "observedGeneration 1, want 2"},
	} {
		t.Run(tc.label, func(t *testing.T) {
			err := examplee2e.CheckRoute(tc.route, tc.want)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("CheckRoute = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("CheckRoute = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestCensus(t *testing.T) {
	okConds := []metav1.Condition{cond("Accepted", "True", "Accepted", 2), cond("ResolvedRefs", "True", "ResolvedRefs", 2)}
	want := examplee2e.Want{Controller: ctrl, Accepted: "Accepted", ResolvedRefs: "ResolvedRefs"}
	good := route(entry(ctrl, "gw-a", okConds...))
	bad := route()
	bad.Name = "bad"
	stranger := route()
	stranger.Name = "stranger" // not expected: ignored
	exp := examplee2e.Expectations{
		{Namespace: "ns", Name: "r"}:       {want},
		{Namespace: "ns", Name: "bad"}:     {want},
		{Namespace: "ns", Name: "missing"}: {want},
	}
	c := exp.Census([]gatewayv1.HTTPRoute{*good, *bad, *stranger})
	if c.Expected != 3 || c.Found != 2 || c.Converged != 1 || c.Done() {
		t.Errorf("Census = %+v, want 3 expected, 2 found, 1 converged, not done", c)
	}
	if err := c.Err(); err == nil || !strings.Contains(err.Error(), "1 of 3 routes converged") || !strings.Contains(err.Error(), "1 routes not found") {
		t.Errorf("Census.Err() = %v", err)
	}
	delete(exp, types.NamespacedName{Namespace: "ns", Name: "bad"})
	delete(exp, types.NamespacedName{Namespace: "ns", Name: "missing"})
	if c := exp.Census([]gatewayv1.HTTPRoute{*good, *bad}); !c.Done() || c.Err() != nil {
		t.Errorf("Census = %+v, want done", c)
	}
}

func TestMetrics(t *testing.T) {
	const text = `# TYPE quietpatch_queue_depth gauge
quietpatch_queue_depth{pipeline="q"} 3
# TYPE quietpatch_queue_dropped_total counter
quietpatch_queue_dropped_total{pipeline="q",reason="full"} 2
quietpatch_queue_dropped_total{pipeline="q",reason="closed"} 5
quietpatch_queue_dropped_total{pipeline="r",reason="full"} 1
# TYPE quietpatch_reconcile_duration_seconds histogram
quietpatch_reconcile_duration_seconds_bucket{result="ok",le="+Inf"} 7
quietpatch_reconcile_duration_seconds_sum{result="ok"} 1.5
quietpatch_reconcile_duration_seconds_count{result="ok"} 7
quietpatch_reconcile_duration_seconds_bucket{result="halted",le="+Inf"} 1
quietpatch_reconcile_duration_seconds_sum{result="halted"} 0.5
quietpatch_reconcile_duration_seconds_count{result="halted"} 1
# TYPE go_goroutines gauge
go_goroutines 42
`
	m, err := examplee2e.ParseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		label string
		got   float64
		want  float64
	}{
		{"gauge", m.Sum(examplee2e.MetricQueueDepth), 3},
		{"counter, all series", m.Sum(examplee2e.MetricQueueDropped), 8},
		{"counter, one label", m.Sum(examplee2e.MetricQueueDropped, "reason", "full"), 3},
		{"counter, two labels", m.Sum(examplee2e.MetricQueueDropped, "pipeline", "q", "reason", "full"), 2},
		{"counter, no match", m.Sum(examplee2e.MetricQueueDropped, "reason", "nope"), 0},
		{"absent family", m.Sum(examplee2e.MetricDispatchInFlight), 0},
		{"histogram count = passes", m.Passes(), 8},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.label, tc.got, tc.want)
		}
	}
	if got := m.ByLabel(examplee2e.MetricQueueDropped, "reason"); got["full"] != 3 || got["closed"] != 5 || len(got) != 2 {
		t.Errorf("ByLabel = %v", got)
	}
	if got := m.Names("quietpatch_"); !slices.Equal(got, []string{examplee2e.MetricQueueDepth, examplee2e.MetricQueueDropped, examplee2e.MetricReconcileDuration}) {
		t.Errorf("Names = %v", got)
	}
	if m.Idle() {
		t.Error("Idle with depth 3")
	}
	c := examplee2e.PatchCount{Total: 10, OK: 7, Conflict: 2}.Sub(examplee2e.PatchCount{Total: 4, OK: 3, Conflict: 1})
	if c.String() != "6 (ok 4, conflict 1, other 1)" {
		t.Errorf("PatchCount = %s", c)
	}
}

func TestLoadRBAC(t *testing.T) {
	const roles = `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: cr}
rules:
- apiGroups: [""]
  resources: [services]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: lease, namespace: somewhere}
rules:
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  resourceNames: [l]
  verbs: [get]
`
	const bindings = `apiVersion: v1
kind: ServiceAccount
metadata: {name: sa}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: lease, namespace: somewhere}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: lease}
subjects: [{kind: ServiceAccount, name: sa, namespace: somewhere}]
`
	write := func(t *testing.T, files map[string]string) string {
		dir := t.TempDir()
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	for _, tc := range []struct {
		label   string
		dir     func(t *testing.T) string
		wantErr error
		check   func(t *testing.T, r *examplee2e.RBAC)
	}{
		{"missing directory", func(t *testing.T) string { return filepath.Join(t.TempDir(), "nope") }, examplee2e.ErrNoRBAC, nil},
		{"no RBAC", func(t *testing.T) string {
			return write(t, map[string]string{"a.yaml": "apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n"})
		}, examplee2e.ErrNoRBAC, nil},
		{"roles without bindings", func(t *testing.T) string { return write(t, map[string]string{"roles.yaml": roles}) }, examplee2e.ErrNoRBAC, nil},
		{"roles and bindings, other kinds and files skipped", func(t *testing.T) string {
			return write(t, map[string]string{"roles.yaml": roles, "b.yml": bindings, "README.md": "# not yaml"})
		}, nil, func(t *testing.T, r *examplee2e.RBAC) {
			if len(r.ClusterRoles) != 1 || len(r.Roles) != 1 || len(r.RoleBindings) != 1 || len(r.ClusterRoleBindings) != 0 {
				t.Errorf("got %d ClusterRoles, %d Roles, %d RoleBindings, %d ClusterRoleBindings", len(r.ClusterRoles), len(r.Roles), len(r.RoleBindings), len(r.ClusterRoleBindings))
			}
			if !slices.Equal(r.Files, []string{"b.yml", "roles.yaml"}) {
				t.Errorf("Files = %v", r.Files)
			}
			want := []string{"ClusterRole cr: list,watch on core/services", "Role lease: get on coordination.k8s.io/leases named l"}
			if got := r.Rules(); !slices.Equal(got, want) {
				t.Errorf("Rules = %q, want %q", got, want)
			}
		}},
		{"unknown field", func(t *testing.T) string {
			return write(t, map[string]string{"roles.yaml": strings.Replace(roles, "rules:", "rulez:", 1), "b.yaml": bindings})
		}, errAny, nil},
		{"the example's deploy directory", func(t *testing.T) string {
			dir, err := examplee2e.ExamplesDir()
			if err != nil {
				t.Skip(err)
			}
			return examplee2e.DeployDir(dir)
		}, nil, func(t *testing.T, r *examplee2e.RBAC) {
			// Least privilege: the controller never gets or updates routes.
			for _, rule := range r.Rules() {
				if strings.Contains(rule, "httproutes ") && (strings.Contains(rule, "get") || strings.Contains(rule, "update")) {
					t.Errorf("rule %q grants more than list/watch on routes", rule)
				}
			}
		}},
		{"the example's sharded deploy component", func(t *testing.T) string {
			dir, err := examplee2e.ExamplesDir()
			if err != nil {
				t.Skip(err)
			}
			return examplee2e.ShardsDeployDir(dir)
		}, nil, func(t *testing.T, r *examplee2e.RBAC) {
			// Only Leases, in the controller's namespace.
			want := []string{"Role quietpatch-httproute-status-shards: list,watch,get,update,delete on coordination.k8s.io/leases"}
			if got := r.Rules(); !slices.Equal(got, want) || len(r.ClusterRoles) != 0 || len(r.RoleBindings) != 1 {
				t.Errorf("Rules = %q (%d ClusterRoles, %d RoleBindings), want %q and one RoleBinding", got, len(r.ClusterRoles), len(r.RoleBindings), want)
			}
			dir, _ := examplee2e.ExamplesDir()
			base, err := examplee2e.LoadRBAC(examplee2e.DeployDir(dir))
			if err != nil {
				t.Fatal(err)
			}
			m := base.Merge(r)
			if len(m.Roles) != len(base.Roles)+1 || len(m.RoleBindings) != len(base.RoleBindings)+1 || len(base.Roles) != 1 {
				t.Errorf("Merge: %d Roles, %d RoleBindings from %d+1, %d+1", len(m.Roles), len(m.RoleBindings), len(base.Roles), len(base.RoleBindings))
			}
		}},
	} {
		t.Run(tc.label, func(t *testing.T) {
			r, err := examplee2e.LoadRBAC(tc.dir(t))
			switch {
			case tc.wantErr == errAny && err == nil:
				t.Fatal("LoadRBAC succeeded, want an error")
			case tc.wantErr == errAny:
			case !errors.Is(err, tc.wantErr):
				t.Fatalf("LoadRBAC error = %v, want %v", err, tc.wantErr)
			}
			if tc.check != nil && err == nil {
				tc.check(t, r)
			}
		})
	}
}

var errAny = errors.New("any error")

func TestPoll(t *testing.T) {
	stop := errors.New("stop")
	calls := 0
	err := examplee2e.Poll(context.Background(), time.Millisecond, func(context.Context) error {
		calls++
		if calls == 3 {
			return examplee2e.Permanent(stop)
		}
		return errors.New("not yet")
	})
	if !errors.Is(err, stop) || calls != 3 {
		t.Errorf("Poll = %v after %d calls, want stop after 3", err, calls)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err = examplee2e.Poll(ctx, time.Millisecond, func(context.Context) error { return errors.New("still 3 of 5") })
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "still 3 of 5") {
		t.Errorf("Poll = %v, want the deadline and the last error", err)
	}

	if err := examplee2e.Poll(context.Background(), time.Hour, func(context.Context) error { return nil }); err != nil {
		t.Errorf("Poll = %v, want nil at once", err)
	}
}

func TestDeployRejectsInvalidConfig(t *testing.T) {
	rbac := &examplee2e.RBAC{}
	for _, tc := range []struct {
		label string
		cfg   examplee2e.Config
		field string
	}{
		{"no binary", examplee2e.Config{Dir: "d", RBAC: rbac, Namespace: "n"}, "Config.Binary"},
		{"no dir", examplee2e.Config{Binary: "b", RBAC: rbac, Namespace: "n"}, "Config.Dir"},
		{"no RBAC", examplee2e.Config{Binary: "b", Dir: "d", Namespace: "n"}, "Config.RBAC"},
		{"no namespace", examplee2e.Config{Binary: "b", Dir: "d", RBAC: rbac}, "Config.Namespace"},
		{"negative replicas", examplee2e.Config{Binary: "b", Dir: "d", RBAC: rbac, Namespace: "n", Replicas: -1}, "Config.Replicas"},
	} {
		t.Run(tc.label, func(t *testing.T) {
			_, err := examplee2e.Deploy(context.Background(), nil, tc.cfg)
			if !errors.Is(err, examplee2e.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Deploy = %v, want ErrInvalidConfig naming %s", err, tc.field)
			}
		})
	}
}
