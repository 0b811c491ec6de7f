package otelprom_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/integrations/otelprom"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/source"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestQueueInstrumentsReachTheRegistry: a pipeline's queue instruments,
// created on the provider's meter, are gathered under the Prometheus names
// of the package quietpatch table, without scope labels. The pipeline has
// two objects to patch and one patch in flight at most, which its patcher
// holds: one key is served, the other waits in the queue.
func TestQueueInstrumentsReachTheRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	provider, err := otelprom.NewMeterProvider(reg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = provider.Shutdown(context.Background()) }()
	called, release := make(chan struct{}, 2), make(chan struct{})
	hold := patcherFunc(func(ctx context.Context, _ types.NamespacedName) error {
		called <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	ctrl, err := quietpatch.New(configMaps("a", "b"), readyComputer{}, hold, quietpatch.Config{
		Name:     "widgets",
		Capacity: 7,
		Workers:  1,
		Leases:   fake.NewClientset().CoordinationV1(),
		Lease:    leader.Config{Namespace: "demo", Name: "widgets"},
		Meter:    provider.Meter(otelprom.MeterName),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(ctx) }()
	defer func() {
		close(release)
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case <-called:
	case <-time.After(10 * time.Second):
		t.Fatalf("no patch within 10s (Ready: %v)", ctrl.Ready())
	}
	for deadline := time.Now().Add(10 * time.Second); ctrl.Stats().Queue.Depth != 1; {
		if time.Now().After(deadline) {
			t.Fatalf("queue %+v, want one key waiting", ctrl.Stats().Queue)
		}
		time.Sleep(10 * time.Millisecond)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.HasPrefix(l.GetName(), "otel_scope") {
					t.Errorf("%s has the label %s", f.GetName(), l.GetName())
				}
			}
			switch {
			case m.GetGauge() != nil:
				got[f.GetName()] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				got[f.GetName()] += m.GetCounter().GetValue()
			}
		}
	}
	for name, want := range map[string]float64{"quietpatch_queue_capacity": 7, "quietpatch_queue_depth": 1, "quietpatch_queue_enqueued_total": 2} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v (gathered %v)", name, got[name], want, got)
		}
	}
	if _, ok := got["target_info"]; ok {
		t.Error("target_info is exported")
	}
}

func TestNewMeterProviderRejectsNil(t *testing.T) {
	if _, err := otelprom.NewMeterProvider(nil); err == nil {
		t.Fatal("a nil registry was accepted")
	}
}

// configMaps is a Source of ConfigMaps of namespace demo with names.
func configMaps(names ...string) statuspatch.Source[*corev1.ConfigMap] {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range names {
		_ = idx.Add(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: n}})
	}
	return source.FromIndexer[*corev1.ConfigMap](idx, func() bool { return true })
}

// readyComputer is a StatusComputer whose status of a ConfigMap is its
// annotation status, which should be "ready"; a patch is the key.
type readyComputer struct{}

func (readyComputer) Key(cm *corev1.ConfigMap) types.NamespacedName {
	return types.NamespacedName{Namespace: cm.Namespace, Name: cm.Name}
}
func (readyComputer) Current(cm *corev1.ConfigMap) string       { return cm.Annotations["status"] }
func (readyComputer) Desired(*corev1.ConfigMap) (string, error) { return "ready", nil }
func (readyComputer) Equal(current, desired string) bool        { return current == desired }
func (c readyComputer) Patch(cm *corev1.ConfigMap, _ string) (types.NamespacedName, error) {
	return c.Key(cm), nil
}

// patcherFunc is a Patcher of keys made of a func; nil writes nothing.
type patcherFunc func(context.Context, types.NamespacedName) error

func (f patcherFunc) Patch(ctx context.Context, key types.NamespacedName) error {
	if f == nil {
		return nil
	}
	return f(ctx, key)
}
