package reliability_test

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

// env is what the tests of this package share: one control plane, the
// controller binary and the example's RBAC. The first test that asks for it
// sets it up (control plane start and controller build run in parallel);
// TestMain tears it down.
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
		if e.tmp, err = os.MkdirTemp("", "quietpatch-reliability-"); err != nil {
			e.err = err
			return
		}
		var (
			wg       sync.WaitGroup
			buildErr error
		)
		wg.Go(func() { e.binary, _, buildErr = examplee2e.BuildController(ctx, examples, e.tmp) })
		cp, cpErr := cluster.Start(ctx, cluster.Options{})
		wg.Wait()
		e.cp = cp
		rbac, rbacErr := examplee2e.LoadRBAC(examplee2e.DeployDir(examples))
		e.rbac = rbac
		if e.err = errors.Join(cpErr, buildErr, rbacErr); e.err != nil {
			return
		}
		t.Logf("shared setup in %v", time.Since(begin).Round(time.Millisecond))
	})
	if e.err != nil {
		t.Fatalf("shared setup: %v", e.err)
	}
	return e.cp, e.binary, e.rbac
}

// controlPlane is get without the controller build, for tests that only
// talk to the API server.
func (e *env) controlPlane(t *testing.T) *cluster.ControlPlane {
	cp, _, _ := e.get(t)
	return cp
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

// shared is the package's environment; TestMain closes it.
var shared env

func TestMain(m *testing.M) { cluster.RunShared(m, shared.close) }

// testContext is a context bounded by d and by the test's end.
func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
