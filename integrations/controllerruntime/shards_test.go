package controllerruntime_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/quietpatch/quietpatch"
	qpcr "github.com/quietpatch/quietpatch/integrations/controllerruntime"
	examplev1 "github.com/quietpatch/quietpatch/integrations/controllerruntime/examples/widget/api/v1"
	"github.com/quietpatch/quietpatch/leader"
)

// untouchable is a manager.Manager whose every method panics: the nil
// interface it embeds has none.
type untouchable struct{ manager.Manager }

// Add rejects Shards > 1 with a ConfigError naming Shards and saying what
// to use instead, before it uses the manager at all: GetInformer would
// start a cache of the whole resource, which is what sharding avoids.
func TestAddRejectsShards(t *testing.T) {
	comp := newComputer(t)
	for _, shards := range []int{2, 8} {
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("Shards %d: Add used the manager before rejecting the configuration: %v", shards, r)
				}
			}()
			_, err = qpcr.Add(context.Background(), untouchable{}, &examplev1.Widget{}, comp, qpcr.Options{
				Config: quietpatch.Config{
					Lease:  leader.Config{Namespace: "quietpatch-system", Name: "sharded"},
					Shards: shards,
				},
			})
		}()
		var ce *quietpatch.ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, quietpatch.ErrInvalidConfig) {
			t.Fatalf("Shards %d: error %v, want a *quietpatch.ConfigError", shards, err)
		}
		if ce.Field != "Shards" {
			t.Errorf("Shards %d: the error names %q, want Shards", shards, ce.Field)
		}
		for _, want := range []string{"quietpatch.NewSharded", "mgr.GetConfig()", "shard selector"} {
			if !strings.Contains(ce.Reason, want) {
				t.Errorf("Shards %d: the reason %q does not say %q", shards, ce.Reason, want)
			}
		}
	}
}
