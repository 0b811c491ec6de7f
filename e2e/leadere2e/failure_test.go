package leadere2e

import (
	"errors"
	"fmt"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/leader"
)

// TestRunFailsVisibly: a claimer whose identity lacks the rights it needs
// on leases (or that may not create a missing Lease) must not retry behind
// a ready process: Run returns the error promptly, Ready reports it, and
// the claimer never believes it holds the lease.
func TestRunFailsVisibly(t *testing.T) {
	e := newEnv(t)
	for i, tc := range []struct {
		name            string
		verbs           []string // granted on leases
		existing        bool     // the administrator creates a free Lease first
		requireExisting bool
		wantForbidden   bool   // else ErrLeaseNotFound
		deniedVerb      string // a write the audit log must show refused (403)
	}{
		{name: "no rights on leases", wantForbidden: true},
		{name: "get and watch only, Lease missing: create refused",
			verbs: []string{"get", "watch"}, wantForbidden: true, deniedVerb: "create"},
		{name: "no update, Lease free: acquisition refused",
			verbs: []string{"get", "watch", "create"}, existing: true, wantForbidden: true, deniedVerb: "update"},
		{name: "all rights, Lease missing with RequireExisting",
			verbs: claimerVerbs(), requireExisting: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sa := fmt.Sprintf("denied-%d", i)
			lease := fmt.Sprintf("%s-%d", e.lease, i)
			rc := e.identity(t, sa, tc.verbs...)
			if tc.existing {
				_, err := e.cp.AdminClient().CoordinationV1().Leases(e.ns).Create(e.ctx, &coordv1.Lease{
					ObjectMeta: metav1.ObjectMeta{Name: lease},
					Spec:       coordv1.LeaseSpec{LeaseTransitions: ptr(int32(3))},
				}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
			}
			begin := time.Now()
			r := e.start(t, sa, rc, func(c *leader.Config) {
				c.Name = lease
				c.RequireExisting = tc.requireExisting
			})
			runErr, err := r.wait(5 * time.Second)
			if err != nil {
				t.Fatalf("%v: the failure was not surfaced (%s; Ready: %v)", err, describe([]*replica{r}), r.c.Ready())
			}
			t.Logf("Run returned after %s: %v", seconds(r.ended.Sub(begin)), runErr)

			check := func(what string, err error) {
				t.Helper()
				if tc.wantForbidden && !apierrors.IsForbidden(err) {
					t.Errorf("%s: %v, want a Forbidden error", what, err)
				}
				if !tc.wantForbidden && !errors.Is(err, leader.ErrLeaseNotFound) {
					t.Errorf("%s: %v, want ErrLeaseNotFound", what, err)
				}
			}
			check("Run", runErr)
			ready := r.c.Ready()
			if !errors.Is(ready, leader.ErrNotRunning) {
				t.Errorf("Ready: %v, want ErrNotRunning", ready)
			}
			check("Ready", ready)
			if r.holds() {
				t.Errorf("the failed claimer believes it holds the lease: %s", describe([]*replica{r}))
			}
			if err := r.c.Relinquish(e.ctx, 0); !errors.Is(err, leader.ErrNotRunning) {
				t.Errorf("Relinquish after Run failed: %v, want ErrNotRunning", err)
			}

			// By user, not by name: a create's audit event names no object.
			evs, err := e.cp.FindAuditEvents(cluster.AuditFilter{Resource: "leases", Namespace: e.ns, Username: e.user(sa)})
			if err != nil {
				t.Fatal(err)
			}
			denied := false
			for _, ev := range evs {
				code := int32(0)
				if ev.ResponseStatus != nil {
					code = ev.ResponseStatus.Code
				}
				if code < 300 {
					t.Errorf("audit: %s by the failed claimer succeeded (code %d)", ev.Verb, code)
				}
				denied = denied || (ev.Verb == tc.deniedVerb && code == 403)
			}
			if tc.deniedVerb != "" && !denied {
				t.Errorf("audit: no refused %s by the claimer; events: %d", tc.deniedVerb, len(evs))
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
