package controllerruntime_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	examplev1 "github.com/quietpatch/quietpatch/integrations/controllerruntime/examples/widget/api/v1"
	"github.com/quietpatch/quietpatch/integrations/controllerruntime/examples/widget/readiness"
)

// The example's defaults (examples/widget/main.go and config/rbac).
const (
	exampleLeaseNS   = "widget-system"
	exampleLeaseName = "widget-status"
	exampleUser      = "widget-controller"
)

// replica is one process of the example binary.
type replica struct {
	name        string // POD_NAME: the prefix of its identity
	cmd         *exec.Cmd
	metricsAddr string
	probeAddr   string
	log         string // its output file
	done        chan error
}

// TestFailover runs the example binary twice, as separate processes under
// the example's least-privilege RBAC, on the envtest API server; checks
// that the Widgets follow the policy ConfigMap, the example's Dependency;
// checks each manager's /metrics; kills -9 the one whose claim leads; and checks
// that the other writes a changed Widget's status within LeaseDuration +
// 1 s, and not before the dead leader's claim ran out.
func TestFailover(t *testing.T) {
	env, cfg := testEnv(t)
	admin := adminClient(t, cfg)
	ctx := context.Background()
	const (
		ns            = "failover"
		n             = 50
		leaseDuration = 2 * time.Second
		renewGrace    = leaseDuration * 2 / 3 // the claimer's default
	)

	bin := buildExample(t)
	kubeconfig := leastPrivilegeKubeconfig(t, env, admin)
	createNamespace(t, admin, ns)
	createWidgets(t, admin, ns, n, func(i int) int32 { return int32(i) })

	dir := t.TempDir()
	var replicas []*replica
	for _, name := range []string{"replica-a", "replica-b"} {
		r := &replica{name: name, metricsAddr: freePort(t), probeAddr: freePort(t), log: filepath.Join(dir, name+".log"), done: make(chan error, 1)}
		out, err := os.Create(r.log)
		if err != nil {
			t.Fatal(err)
		}
		r.cmd = exec.Command(bin,
			"-kubeconfig", kubeconfig,
			"-lease-namespace", exampleLeaseNS, "-lease-name", exampleLeaseName,
			"-lease-duration", leaseDuration.String(), "-interval", "1s",
			"-metrics-bind-address", r.metricsAddr, "-health-probe-bind-address", r.probeAddr,
			"-graceful-shutdown-timeout", "20s")
		r.cmd.Env = append(os.Environ(), "POD_NAME="+name)
		r.cmd.Stdout, r.cmd.Stderr = out, out
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { r.done <- r.cmd.Wait(); out.Close() }()
		replicas = append(replicas, r)
	}
	defer func() {
		for _, r := range replicas {
			if r.cmd.ProcessState == nil {
				_ = r.cmd.Process.Kill()
				<-r.done
			}
			if t.Failed() {
				b, _ := os.ReadFile(r.log)
				t.Logf("output of %s:\n%s", r.name, tail(b, 40))
			}
		}
	}()

	// Both replicas ready, all Widgets converged, one of them leads.
	poll(t, 60*time.Second, 100*time.Millisecond, "both replicas ready", func() (bool, string, error) {
		for _, r := range replicas {
			select {
			case err := <-r.done:
				r.done <- err
				return false, "", fmt.Errorf("%s exited: %v", r.name, err)
			default:
			}
			if code := httpStatus("http://" + r.probeAddr + "/readyz"); code != 200 {
				return false, fmt.Sprintf("%s: /readyz %d", r.name, code), nil
			}
		}
		return true, "", nil
	})
	poll(t, 60*time.Second, 100*time.Millisecond, "the Widgets converge", func() (bool, string, error) {
		total, ok, example, err := countConverged(ctx, admin, ns)
		return err == nil && total == n && ok == n, fmt.Sprintf("%d of %d; e.g. %s", ok, total, example), err
	})
	leaderOf := func(lease *coordinationv1.Lease) *replica {
		if lease.Spec.HolderIdentity == nil {
			return nil
		}
		for _, r := range replicas {
			if strings.HasPrefix(*lease.Spec.HolderIdentity, r.name+"_") {
				return r
			}
		}
		return nil
	}
	var lease coordinationv1.Lease
	getLease := func() error {
		return admin.Get(ctx, types.NamespacedName{Namespace: exampleLeaseNS, Name: exampleLeaseName}, &lease)
	}
	if err := getLease(); err != nil {
		t.Fatal(err)
	}
	old := leaderOf(&lease)
	if old == nil {
		t.Fatalf("the Lease is held by %v, neither replica", lease.Spec.HolderIdentity)
	}
	survivor := replicas[0]
	if survivor == old {
		survivor = replicas[1]
	}
	t.Logf("leader %s (%s), follower %s", old.name, *lease.Spec.HolderIdentity, survivor.name)

	// The policy ConfigMap, the example's Dependency: created, it lowers the
	// largest Ready size to 25, and the Widgets above turn TooLarge.
	policy := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: exampleLeaseNS, Name: "widget-policy"},
		Data: map[string]string{readiness.PolicyMaxSize: "25"}}
	if err := admin.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	took := poll(t, 30*time.Second, 50*time.Millisecond, "the Widgets follow the policy", func() (bool, string, error) {
		total, ok, example, err := countConvergedUnder(ctx, admin, ns, 25)
		return err == nil && total == n && ok == n, fmt.Sprintf("%d of %d under maxSize 25; e.g. %s", ok, total, example), err
	})
	t.Logf("the Widgets followed the policy ConfigMap in %s", took.Round(time.Millisecond))

	// (e) Each manager's /metrics: quietpatch's families next to
	// controller-runtime's; the leader gauge says who leads.
	t.Run("metrics", func(t *testing.T) {
		for _, r := range []*replica{old, survivor} {
			fams, err := scrapeURL(ctx, "http://"+r.metricsAddr+"/metrics")
			if err != nil {
				t.Fatal(err)
			}
			leading := 0.0
			if r == old {
				leading = 1
			}
			t.Logf("%s:", r.name)
			checkFamilies(t, fams, leading)
		}
	})

	// Kill -9 the leader: no vacate, its claim must run out.
	if err := old.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-old.done
	if err := getLease(); err != nil {
		t.Fatal(err)
	}
	if leaderOf(&lease) != old || lease.Spec.RenewTime == nil {
		t.Fatalf("right after the kill the Lease names %v, want %s", lease.Spec.HolderIdentity, old.name)
	}
	lastRenew := lease.Spec.RenewTime.Time
	// A change only the new leader can write.
	var w examplev1.Widget
	key := types.NamespacedName{Namespace: ns, Name: "w-0007"}
	if err := admin.Patch(ctx, &examplev1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}},
		client.RawPatch(types.MergePatchType, []byte(`{"spec":{"size":500}}`))); err != nil {
		t.Fatal(err)
	}

	// Poll the Lease and the Widget; the order is checked on the times
	// the Lease records (microseconds, this machine's clock).
	var acquired, written time.Time
	bound := leaseDuration + time.Second
	poll(t, bound+10*time.Second, 10*time.Millisecond, "the survivor takes over and writes the changed Widget", func() (bool, string, error) {
		if acquired.IsZero() {
			if err := getLease(); err != nil {
				return false, "", err
			}
			if leaderOf(&lease) == survivor && lease.Spec.AcquireTime != nil {
				acquired = lease.Spec.AcquireTime.Time
			}
		}
		if written.IsZero() {
			if err := admin.Get(ctx, key, &w); err != nil {
				return false, "", err
			}
			if ok, _ := convergedUnder(&w, 25); ok {
				written = time.Now()
			}
		}
		_, why := convergedUnder(&w, 25)
		return !acquired.IsZero() && !written.IsZero(), fmt.Sprintf("holder %v; %s", lease.Spec.HolderIdentity, why), nil
	})
	t.Logf("killed %s %s after its last renewal; %s acquired %s after that renewal (LeaseDuration %s), %s after the kill; the changed Widget's status seen written %s after the kill (bound %s)",
		old.name, killed.Sub(lastRenew).Round(time.Millisecond), survivor.name, acquired.Sub(lastRenew).Round(time.Millisecond), leaseDuration,
		acquired.Sub(killed).Round(time.Millisecond), written.Sub(killed).Round(time.Millisecond), bound)
	// Order: the dead leader's claim ran out before the survivor acquired
	// (no hand-over without a vacate), and the survivor acquired before
	// the write was seen.
	if acquired.Before(lastRenew.Add(leaseDuration).Add(-time.Millisecond)) {
		t.Errorf("the survivor acquired %s after the dead leader's last renewal, before its claim (%s) ran out", acquired.Sub(lastRenew), leaseDuration)
	}
	if !acquired.Before(written) {
		t.Errorf("the changed Widget was seen written %s before the survivor acquired the Lease", acquired.Sub(written))
	}
	if got := written.Sub(killed); got > bound {
		t.Errorf("the survivor wrote the changed Widget %s after the kill, want within LeaseDuration + 1s = %s", got, bound)
	}
	if got, ok := fieldManager(&w); !ok {
		t.Errorf("no managedFields entry of example.com/widget-status on the status (%s)", got)
	}

	// SIGTERM the survivor: the manager waits for the pipeline, which
	// vacates the Lease before the process exits 0.
	if err := survivor.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	termed := time.Now()
	select {
	case err := <-survivor.done:
		if err != nil {
			t.Errorf("%s after SIGTERM: %v, want exit status 0", survivor.name, err)
		}
		t.Logf("%s exited %s after SIGTERM", survivor.name, time.Since(termed).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not exit within 30s of SIGTERM", survivor.name)
	}
	if err := getLease(); err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h != nil && *h != "" {
		t.Errorf("the Lease names %q after %s exited on SIGTERM: not vacated", *h, survivor.name)
	}
}

// fieldManager reports whether the example's field manager owns w's
// status, and the managers found.
func fieldManager(w *examplev1.Widget) (string, bool) {
	var got []string
	for _, mf := range w.ManagedFields {
		got = append(got, mf.Manager+"/"+mf.Subresource)
		if mf.Manager == "example.com/widget-status" && mf.Subresource == "status" {
			return "", true
		}
	}
	return strings.Join(got, ", "), false
}

// buildExample builds examples/widget into a temporary folder.
func buildExample(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "widget")
	start := time.Now()
	cmd := exec.Command("go", "build", "-o", bin, "./examples/widget")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/widget: %v\n%s", err, out)
	}
	t.Logf("built the example in %s", time.Since(start).Round(time.Millisecond))
	return bin
}

// leastPrivilegeKubeconfig applies the example's generated RBAC
// (config/rbac/role.yaml) bound to a user of envtest's, and returns the
// path of a kubeconfig for that user: the replicas run with nothing more.
func leastPrivilegeKubeconfig(t *testing.T, env *envtest.Environment, admin client.Client) string {
	t.Helper()
	ctx := context.Background()
	createNamespace(t, admin, exampleLeaseNS)
	raw, err := os.ReadFile(filepath.Join("examples", "widget", "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: exampleUser}}
	for _, doc := range bytes.Split(raw, []byte("\n---")) {
		if len(bytes.TrimSpace(bytes.TrimPrefix(bytes.TrimSpace(doc), []byte("---")))) == 0 {
			continue
		}
		var u unstructured.Unstructured
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatalf("role.yaml: %v", err)
		}
		if err := admin.Create(ctx, &u); err != nil {
			t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
		}
		ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: u.GetKind(), Name: u.GetName()}
		var binding client.Object
		switch u.GetKind() {
		case "ClusterRole":
			binding = &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: u.GetName()}, RoleRef: ref, Subjects: subject}
		case "Role":
			binding = &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: u.GetNamespace(), Name: u.GetName()}, RoleRef: ref, Subjects: subject}
		default:
			t.Fatalf("role.yaml has a %s", u.GetKind())
		}
		if err := admin.Create(ctx, binding); err != nil {
			t.Fatal(err)
		}
	}
	user, err := env.AddUser(envtest.User{Name: exampleUser}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func tail(b []byte, lines int) string {
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
