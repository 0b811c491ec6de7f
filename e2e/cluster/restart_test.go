package cluster

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestRestart restarts the API server and then etcd on a control plane of
// its own and checks that objects, clients and ServiceAccount tokens
// obtained before the restarts still work after them.
func TestRestart(t *testing.T) {
	cp := StartT(t, Options{SkipGatewayAPI: true})
	ctx := testContext(t, 3*time.Minute)
	admin := cp.AdminClient()

	ns, err := cp.NewNamespace(ctx, "restart-")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := cp.ConfigFor(ctx, ns, "reader")
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Grant(ctx, ns, "reader", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}); err != nil {
		t.Fatal(err)
	}
	reader, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "before"}, Data: map[string]string{"k": "v"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	check := func(step string, names ...string) {
		t.Helper()
		for _, name := range names {
			cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("%s: admin get %s: %v", step, name, err)
			}
			if cm.Data["k"] != "v" {
				t.Fatalf("%s: %s data = %v", step, name, cm.Data)
			}
		}
		// The token from before the restarts still authenticates (RBAC
		// caches may lag a moment right after a start).
		eventually(t, 15*time.Second, step+": get as reader", func() error {
			_, err := reader.CoreV1().ConfigMaps(ns).Get(ctx, names[0], metav1.GetOptions{})
			return err
		})
	}
	check("before restarts", "before")

	oldProcs := cp.Processes()
	for _, step := range []struct {
		name    string
		restart func() error
	}{
		{"kube-apiserver", func() error { return cp.RestartAPIServer(ctx) }},
		{"etcd", func() error { return cp.RestartEtcd(ctx) }},
	} {
		begin := time.Now()
		if err := step.restart(); err != nil {
			t.Fatalf("restarting %s: %v", step.name, err)
		}
		t.Logf("restarted %s in %v", step.name, time.Since(begin).Round(time.Millisecond))
		check("after restarting "+step.name, "before")
		name := "after-" + step.name
		if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": "v"},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create after restarting %s: %v", step.name, err)
		}
	}
	check("after both restarts", "before", "after-kube-apiserver", "after-etcd")

	newProcs := cp.Processes()
	if len(newProcs) != 2 {
		t.Fatalf("Processes() = %+v, want 2", newProcs)
	}
	for i := range oldProcs {
		for j := range newProcs {
			if oldProcs[i].Name == newProcs[j].Name && oldProcs[i].PID == newProcs[j].PID {
				t.Errorf("%s still has pid %d: not restarted", newProcs[j].Name, newProcs[j].PID)
			}
		}
	}

	// A component that is down makes requests fail, and comes back.
	if err := cp.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Get(testContext(t, 2*time.Second), "before", metav1.GetOptions{}); err == nil {
		t.Error("get with the API server stopped succeeded")
	}
	if err := cp.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cp.StartAPIServer(ctx); err == nil {
		t.Error("StartAPIServer on a running API server: want an error")
	}
	check("after stop and start", "before")

	procs, ports := cp.Processes(), cp.Ports()
	if err := cp.Stop(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, append(procs, oldProcs...), ports)
}
