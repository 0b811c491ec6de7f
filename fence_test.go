package quietpatch_test

import (
	"context"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/internal/pipeline"
)

// fencedStrings is a Patcher of the sharded tests' payloads that names its
// writer in its field manager, as a fenced statuspatch.MergePatcher.
type fencedStrings struct{}

func (fencedStrings) Patch(context.Context, string) error { return nil }

func (fencedStrings) Fenced() bool { return true }

// A Lease client with client-go's rate limiter is refused, naming Leases
// and what to use instead: its renewals would wait in it.
func TestNewRejectsAThrottledLeaseClient(t *testing.T) {
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1", QPS: 5, Burst: 10})
	if err != nil {
		t.Fatal(err)
	}
	kube := leaseAPI()
	nop := pipeline.PatcherFunc[string](func(context.Context, string) error { return nil })
	cfg := baseConfig(kube)
	cfg.Leases = cs.CoordinationV1()
	_, err = quietpatch.New(newItems(1), itemComputer, nop, cfg)
	checkField(t, err, "Leases")
	lw, _ := configMapLW(t, 1)
	scfg := shardedConfig(kube, "a")
	scfg.Leases = cs.CoordinationV1()
	_, err = quietpatch.NewSharded(lw, configMapComputer, nop, scfg)
	checkField(t, err, "Leases")
	if err == nil || !strings.Contains(err.Error(), "leader.NewLeaseClient") {
		t.Errorf("the error does not say what to use: %v", err)
	}
}

// A fenced patcher that cannot name the writer of the longest shard Lease
// in 128 characters is refused by NewSharded, before any shard runs.
func TestNewShardedRejectsAFieldManagerTooLongForTheLongestShardLease(t *testing.T) {
	kube := leaseAPI()
	lw, _ := configMapLW(t, 1)
	cfg := shardedConfig(kube, "a")
	cfg.Shards = 12
	// ns/lease-shard-11-of-12@<identity>: fits with shard 1's name, one
	// character too many with shard 11's.
	cfg.Lease.Identity = strings.Repeat("i", 128-len("ns/lease-shard-11-of-12@")+1)
	_, err := quietpatch.NewSharded(lw, configMapComputer, fencedStrings{}, cfg)
	checkField(t, err, "Lease")
	cfg.Lease.Identity = cfg.Lease.Identity[1:]
	if _, err := quietpatch.NewSharded(lw, configMapComputer, fencedStrings{}, cfg); err != nil {
		t.Errorf("a field manager that fits: %v", err)
	}
}
