package sharde2e_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/e2e/examplee2e"
)

// gate turns on the API server's sharded list and watch (KEP-5866).
const gate = "--feature-gates=ShardedListAndWatch=true"

// env is what the tests of this package share: the control plane with the
// gate on, the controller binary and the example's RBAC for sharded
// deployments. The first test that asks for it sets it up (control plane
// start and controller build in parallel); TestMain tears it down. The
// fallback test starts a control plane of its own, without the gate.
type env struct {
	once   sync.Once
	cp     *cluster.ControlPlane
	binary string
	rbac   *examplee2e.RBAC
	tmp    string
	err    error
}

func (e *env) get(t *testing.T) (*cluster.ControlPlane, string, *examplee2e.RBAC) {
	t.Helper()
	e.once.Do(func() {
		begin := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		examples, err := examplee2e.ExamplesDir()
		if err != nil {
			e.err = err
			return
		}
		if e.tmp, err = os.MkdirTemp("", "quietpatch-sharde2e-"); err != nil {
			e.err = err
			return
		}
		var (
			wg       sync.WaitGroup
			buildErr error
			took     time.Duration
		)
		wg.Go(func() { e.binary, took, buildErr = examplee2e.BuildController(ctx, examples, e.tmp) })
		cp, cpErr := cluster.Start(ctx, cluster.Options{APIServerArgs: []string{gate}})
		wg.Wait()
		e.cp = cp
		base, baseErr := examplee2e.LoadRBAC(examplee2e.DeployDir(examples))
		shards, shardsErr := examplee2e.LoadRBAC(examplee2e.ShardsDeployDir(examples))
		if e.err = errors.Join(cpErr, buildErr, baseErr, shardsErr); e.err != nil {
			return
		}
		e.rbac = base.Merge(shards)
		t.Logf("shared setup in %v: control plane %+v, controller built in %v, RBAC from %v",
			time.Since(begin).Round(time.Millisecond), cp.Timings(), took.Round(time.Millisecond), e.rbac.Files)
	})
	if e.err != nil {
		t.Fatalf("shared setup: %v", e.err)
	}
	return e.cp, e.binary, e.rbac
}

func (e *env) close() error {
	var errs []error
	if e.cp != nil {
		errs = append(errs, e.cp.Stop())
	}
	if e.tmp != "" {
		errs = append(errs, os.RemoveAll(e.tmp))
	}
	return errors.Join(errs...)
}

var shared env

func TestMain(m *testing.M) { cluster.RunShared(m, shared.close) }

// testContext is a context bounded by d and by the test's end.
func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
