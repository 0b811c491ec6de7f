package quietpatch

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// (Moved from package statuspatch/source with dependencyHandler.)
func TestDependencyHandlerSkipsTheInitialList(t *testing.T) {
	cm := func(ns, name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	var got []string
	resyncs := 0
	keys := func(o any) []types.NamespacedName {
		c := o.(*corev1.ConfigMap)
		return []types.NamespacedName{{Namespace: c.Namespace, Name: "of-" + c.Name}}
	}
	enqueue := func(ks ...types.NamespacedName) {
		for _, k := range ks {
			got = append(got, k.String())
		}
	}
	h := dependencyHandler(keys, enqueue, func() { resyncs++ })
	h.OnAdd(cm("a", "initial"), true)
	h.OnAdd(cm("a", "x"), false)
	if want := []string{"a/of-x"}; !slices.Equal(got, want) {
		t.Errorf("enqueued %v, want %v", got, want)
	}
	every := dependencyHandler(nil, enqueue, func() { resyncs++ })
	every.OnAdd(cm("a", "initial"), true)
	every.OnAdd(cm("a", "x"), false)
	if resyncs != 1 {
		t.Errorf("%d resyncs, want 1 (none for the initial list)", resyncs)
	}
}
