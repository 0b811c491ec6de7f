package quietpatch_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/internal/pipeline"
)

// keyedMaps is a Source of ConfigMaps under a key of the StatusComputer's
// own (not their namespace and name), with an informer's events: the test
// calls the handler New registers.
type keyedMaps struct {
	fakeInformer
	mu   sync.Mutex
	objs map[types.NamespacedName]*corev1.ConfigMap
	gets []string
}

// ownKey is the computer's key: not the object's namespace/name.
func ownKey(cm *corev1.ConfigMap) types.NamespacedName {
	return types.NamespacedName{Namespace: "by-name", Name: cm.Namespace + "." + cm.Name}
}

func (s *keyedMaps) List() ([]*corev1.ConfigMap, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(func(yield func(*corev1.ConfigMap) bool) {
		for _, o := range s.objs {
			if !yield(o) {
				return
			}
		}
	}), nil
}

func (s *keyedMaps) Get(key types.NamespacedName) (*corev1.ConfigMap, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gets = append(s.gets, key.Name)
	o, ok := s.objs[key]
	return o, ok, nil
}

// write is the API server's side of a status write: the object gets its
// status and a new version, which it returns.
func (s *keyedMaps) write(key types.NamespacedName) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.objs[key].DeepCopy()
	o.Data["status"] = o.Data["want"]
	o.ResourceVersion = fmt.Sprintf("%s-written", o.ResourceVersion)
	s.objs[key] = o
	return o.ResourceVersion
}

func (s *keyedMaps) object(key types.NamespacedName) *corev1.ConfigMap {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.objs[key]
}

// keyedPatcher writes through keyedMaps and reports the version.
type keyedPatcher struct{ s *keyedMaps }

func (p keyedPatcher) Patch(ctx context.Context, key types.NamespacedName) error {
	_, err := p.PatchVersion(ctx, key)
	return err
}

func (p keyedPatcher) PatchVersion(_ context.Context, key types.NamespacedName) (string, error) {
	return p.s.write(key), nil
}

// The echoes of our own writes are told by the one key the queue, the
// Source and the dispatcher use — the StatusComputer's —, even when it is
// not the object's namespace/name: the event of our write of a is not
// served, another event of b is.
func TestEchoesUseTheComputersKey(t *testing.T) {
	src := &keyedMaps{objs: map[types.NamespacedName]*corev1.ConfigMap{}}
	src.synced.Store(true)
	for _, name := range []string{"a", "b"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: "1"},
			Data: map[string]string{"want": "ready"}}
		src.objs[ownKey(cm)] = cm
	}
	comp := pipeline.ComputerFuncs[*corev1.ConfigMap, string, types.NamespacedName]{
		KeyFunc:     ownKey,
		CurrentFunc: func(cm *corev1.ConfigMap) string { return cm.Data["status"] },
		DesiredFunc: func(cm *corev1.ConfigMap) (string, error) { return cm.Data["want"], nil },
		EqualFunc:   func(a, b string) bool { return a == b },
		PatchFunc:   func(cm *corev1.ConfigMap, _ string) (types.NamespacedName, error) { return ownKey(cm), nil },
	}
	cfg := baseConfig(fake.NewClientset())
	cfg.Interval, cfg.Workers = time.Hour, 1
	c, err := quietpatch.New[*corev1.ConfigMap](src, comp, keyedPatcher{src}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var h cache.ResourceEventHandler
	runInBackground(t, c)
	waitUntil(t, "both written", func() bool { return c.Stats().Dispatcher.Patches["ok"] == 2 })
	h = src.handler(t)
	src.mu.Lock()
	src.gets = nil
	src.mu.Unlock()
	a := src.object(types.NamespacedName{Namespace: "by-name", Name: "ns.a"})
	b := src.object(types.NamespacedName{Namespace: "by-name", Name: "ns.b"}).DeepCopy()
	b.ResourceVersion = "someone-else"
	h.OnUpdate(a, a) // our write of a: the version it produced
	h.OnUpdate(b, b) // another write of b
	waitUntil(t, "b served", func() bool { src.mu.Lock(); defer src.mu.Unlock(); return slices.Contains(src.gets, "ns.b") })
	src.mu.Lock()
	gets := slices.Clone(src.gets)
	src.mu.Unlock()
	if !slices.Equal(gets, []string{"ns.b"}) {
		t.Errorf("served %v after the events, want [ns.b]: a's was the echo of our write", gets)
	}
	if n := c.Stats().Dispatcher.Echoes; n != 1 {
		t.Errorf("%d echoes, want 1", n)
	}
}
