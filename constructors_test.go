package quietpatch_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/ewma"
	"github.com/quietpatch/quietpatch/internal/pipeline"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/conditions"
)

// Every exported constructor of the library rejects bad input with a
// *quietpatch.ConfigError naming the field or argument, which wraps
// ErrInvalidConfig: one table over all of them.
func TestConstructorsRejectBadInputWithAConfigError(t *testing.T) {
	kube := fake.NewClientset()
	gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	restCfg := &rest.Config{Host: "https://127.0.0.1:1"}
	readyConds := func(*unstructured.Unstructured) ([]metav1.Condition, error) { return nil, nil }
	src := newItems(1)
	patcher := pipeline.PatcherFunc[string](nil)
	valid := func() quietpatch.Config { return baseConfig(kube) }
	sharded := func() quietpatch.Config { c := baseConfig(kube); c.Shards = 2; return c }
	lw := &cache.ListWatch{}
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", ResourceVersion: "1"}}
	type widget struct{ metav1.ObjectMeta }
	for _, tc := range []struct {
		constructor, field string
		call               func() error
	}{
		{"quietpatch.New", "Source", func() error {
			_, err := quietpatch.New[*item, int64, string](nil, itemComputer, patcher, valid())
			return err
		}},
		{"quietpatch.New", "Computer", func() error { _, err := quietpatch.New[*item, int64, string](src, nil, patcher, valid()); return err }},
		{"quietpatch.New", "Patcher", func() error {
			_, err := quietpatch.New[*item, int64, string](src, itemComputer, nil, valid())
			return err
		}},
		{"quietpatch.New", "Leases", func() error {
			c := valid()
			c.Leases = nil
			_, err := quietpatch.New(src, itemComputer, patcher, c)
			return err
		}},
		{"quietpatch.New", "Lease.Name", func() error {
			c := valid()
			c.Lease.Name = ""
			_, err := quietpatch.New(src, itemComputer, patcher, c)
			return err
		}},
		{"quietpatch.New", "Lease.Logger", func() error {
			c := valid()
			c.Lease.Logger = slog.New(slog.DiscardHandler)
			_, err := quietpatch.New(src, itemComputer, patcher, c)
			return err
		}},
		{"quietpatch.New", "Shards", func() error { _, err := quietpatch.New(src, itemComputer, patcher, sharded()); return err }},
		{"quietpatch.NewSharded", "ListerWatcher", func() error {
			_, err := quietpatch.NewSharded[*corev1.ConfigMap, string, string](nil, nil, patcher, sharded())
			return err
		}},
		{"quietpatch.NewSharded", "Computer", func() error {
			_, err := quietpatch.NewSharded[*corev1.ConfigMap, string, string](lw, nil, patcher, sharded())
			return err
		}},
		{"quietpatch.NewSharded", "Patcher", func() error {
			_, err := quietpatch.NewSharded[*corev1.ConfigMap, string, string](lw, configMapComputer, nil, sharded())
			return err
		}},
		{"quietpatch.NewSharded", "Shards", func() error {
			_, err := quietpatch.NewSharded(lw, configMapComputer, patcher, valid())
			return err
		}},
		{"quietpatch.NewSharded", "Interval", func() error {
			c := sharded()
			c.Interval = -time.Second
			_, err := quietpatch.NewSharded(lw, configMapComputer, patcher, c)
			return err
		}},
		{"leader.NewClaimer", "client", func() error { _, err := leader.NewClaimer(nil, leader.Config{}); return err }},
		{"leader.NewClaimer", "Namespace", func() error {
			_, err := leader.NewClaimer(kube.CoordinationV1(), leader.Config{Name: "l", Identity: "me"})
			return err
		}},
		{"leader.NewLeaseClient", "cfg", func() error { _, err := leader.NewLeaseClient(nil); return err }},
		{"leader.NewLeaseClient", "cfg", func() error {
			_, err := leader.NewLeaseClient(&rest.Config{Host: "https://127.0.0.1:1", TLSClientConfig: rest.TLSClientConfig{CAFile: "/nonexistent"}})
			return err
		}},
		{"statuspatch.NewMergePatcher", "cfg", func() error { _, err := statuspatch.NewMergePatcher(nil, gvr, "m"); return err }},
		{"statuspatch.NewMergePatcher", "gvr", func() error {
			_, err := statuspatch.NewMergePatcher(restCfg, schema.GroupVersionResource{}, "m")
			return err
		}},
		{"statuspatch.NewMergePatcher", "fieldManager", func() error { _, err := statuspatch.NewMergePatcher(restCfg, gvr, ""); return err }},
		{"statuspatch.NewMergePatcher", "fieldManager", func() error {
			_, err := statuspatch.NewMergePatcher(restCfg, gvr, strings.Repeat("m", 129))
			return err
		}},
		{"statuspatch.NewApplyPatcher", "kind", func() error { _, err := statuspatch.NewApplyPatcher(restCfg, gvr, "", "m"); return err }},
		{"statuspatch.NewApplyPatcher", "cfg", func() error { _, err := statuspatch.NewApplyPatcher(nil, gvr, "Widget", "m"); return err }},
		{"statuspatch.NewApplyPatcher", "fieldManager", func() error {
			_, err := statuspatch.NewApplyPatcher(restCfg, gvr, "Widget", strings.Repeat("m", 129))
			return err
		}},
		{"statuspatch.NewPatchQueue", "capacity", func() error { _, err := statuspatch.NewPatchQueue[string](0); return err }},
		{"statuspatch.NewMergePatch", "obj", func() error { _, err := statuspatch.NewMergePatch(nil, map[string]any{}); return err }},
		{"statuspatch.NewMergePatch", "status", func() error { _, err := statuspatch.NewMergePatch(obj, make(chan int)); return err }},
		{"statuspatch.NewMergePatch", "status", func() error { _, err := statuspatch.NewMergePatch(obj, []int{1}); return err }},
		{"statuspatch.NewApplyPatch", "status", func() error { _, err := statuspatch.NewApplyPatch(obj, "x"); return err }},
		{"conditions.New", "Conditions", func() error {
			_, err := conditions.New(conditions.Config[*unstructured.Unstructured]{})
			return err
		}},
		{"conditions.New", "OwnedTypes", func() error {
			_, err := conditions.New(conditions.Config[*unstructured.Unstructured]{Conditions: readyConds, OwnedTypes: []string{"not a type"}})
			return err
		}},
		{"conditions.New", "O", func() error {
			_, err := conditions.New(conditions.Config[*widget]{Conditions: func(*widget) ([]metav1.Condition, error) { return nil, nil }})
			return err
		}},
		{"conditions.NewApplier", "Conditions", func() error {
			_, err := conditions.NewApplier(conditions.Config[*unstructured.Unstructured]{}, conditions.ApplyOptions{})
			return err
		}},
		{"ewma.New", "tau", func() error { _, err := ewma.New(0, nil); return err }},
	} {
		t.Run(tc.constructor+"/"+tc.field, func(t *testing.T) {
			err := tc.call()
			var ce *quietpatch.ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, quietpatch.ErrInvalidConfig) {
				t.Fatalf("%s: %v, want a *quietpatch.ConfigError", tc.constructor, err)
			}
			if ce.Field != tc.field {
				t.Errorf("%s: the error names %q (%v), want %q", tc.constructor, ce.Field, err, tc.field)
			}
		})
	}
}
