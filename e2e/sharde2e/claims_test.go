package sharde2e_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/internal/shard"
)

// The promise checked here: every status write of the controller that
// landed lands inside a claim of its writer on the Lease of that route's
// shard. Writes are ordered by resourceVersion (etcd's revision, one
// counter for every object), against the recorded versions of each shard
// Lease (cluster.History: a list, then a watch from its resourceVersion,
// so nothing is missed):
//
// A landed status write (a recorded route version whose .status changed,
// not one of the test's own) at resourceVersion rv is attributed to the
// holder of its shard's Lease in the last version of that Lease below rv;
// there must be one. Every replica runs under a ServiceAccount of its
// own and every status write of the controller is a PATCH with a
// resourceVersion precondition, so each successful request (2xx in the
// audit log) is exactly one landed write. Per route and writer, the
// writes attributed to a writer must then be at most its successful
// requests: a write that landed while another replica held the shard is
// attributed to that one and makes it one too many.

// leaseVersion is one recorded version of a shard Lease.
type leaseVersion struct {
	rv     uint64
	holder string
	epoch  int32
	seen   time.Time
}

// shardLeaseVersions splits recorded Lease versions by shard, in
// resourceVersion order; membership Leases are left out.
func shardLeaseVersions(vs []cluster.Version, k int) ([][]leaseVersion, error) {
	out := make([][]leaseVersion, k)
	for _, v := range vs {
		i := -1
		for j := range k {
			if v.Name == shardLease(j, k) {
				i = j
			}
		}
		if i < 0 {
			continue
		}
		var l coordv1.Lease
		if err := v.Into(&l); err != nil {
			return nil, err
		}
		lv := leaseVersion{rv: v.ResourceVersion, seen: v.Received}
		if v.Deleted {
			lv.holder = ""
		} else if l.Spec.HolderIdentity != nil {
			lv.holder = *l.Spec.HolderIdentity
		}
		if l.Spec.LeaseTransitions != nil {
			lv.epoch = *l.Spec.LeaseTransitions
		}
		out[i] = append(out[i], lv)
	}
	for i := range out {
		slices.SortStableFunc(out[i], func(a, b leaseVersion) int {
			switch {
			case a.rv < b.rv:
				return -1
			case a.rv > b.rv:
				return 1
			}
			return 0
		})
	}
	return out, nil
}

// holderAt is the holder in the last version below rv ("" if none).
func holderAt(vs []leaseVersion, rv uint64) (string, bool) {
	j := -1
	for i, v := range vs {
		if v.rv < rv {
			j = i
		}
	}
	if j < 0 {
		return "", false
	}
	return vs[j].holder, true
}

// firstHeldBy returns the first version at or after from where the Lease
// names holder (ok false if none).
func firstHeldBy(vs []leaseVersion, holder string, from time.Time) (leaseVersion, bool) {
	for _, v := range vs {
		if v.holder == holder && !v.seen.Before(from) {
			return v, true
		}
	}
	return leaseVersion{}, false
}

// statusPatches returns the audit events of status requests to HTTPRoutes
// of the users, by user.
func statusPatches(events []auditv1.Event, users []string) []auditv1.Event {
	var out []auditv1.Event
	for _, e := range events {
		ref := e.ObjectRef
		if ref != nil && ref.Resource == "httproutes" && ref.Subresource == "status" && slices.Contains(users, e.User.Username) {
			out = append(out, e)
		}
	}
	return out
}

func code(e auditv1.Event) int32 {
	if e.ResponseStatus == nil {
		return 0
	}
	return e.ResponseStatus.Code
}

// claimReport is what checkClaims found.
type claimReport struct {
	writes, ok, conflicts int
	violations            []string
}

// checkClaims checks the promise above. uids maps each route to its UID;
// ownWrites are the resourceVersions of the test's own status writes;
// userOf maps a holder identity to its ServiceAccount user.
func checkClaims(routeVersions []cluster.Version, leases [][]leaseVersion, events []auditv1.Event, k int,
	uids map[types.NamespacedName]types.UID, ownWrites map[uint64]bool, userOf map[string]string) claimReport {
	type key struct {
		route types.NamespacedName
		user  string
	}
	var rep claimReport
	users := make([]string, 0, len(userOf))
	for _, u := range userOf {
		users = append(users, u)
	}
	okCalls := map[key]int{}
	for _, e := range statusPatches(events, users) {
		c := code(e)
		if c >= 200 && c < 300 {
			okCalls[key{types.NamespacedName{Namespace: e.ObjectRef.Namespace, Name: e.ObjectRef.Name}, e.User.Username}]++
			rep.ok++
		}
		if c == 409 {
			rep.conflicts++
		}
	}
	attributed := map[key][]uint64{}
	for _, v := range cluster.StatusChanges(routeVersions) {
		if ownWrites[v.ResourceVersion] {
			continue
		}
		rep.writes++
		nn := types.NamespacedName{Namespace: v.Namespace, Name: v.Name}
		uid, ok := uids[nn]
		if !ok {
			rep.violations = append(rep.violations, fmt.Sprintf("route %s (written at %d) is not a fixture route", nn, v.ResourceVersion))
			continue
		}
		s := shard.Of(uid, k)
		h, ok := holderAt(leases[s], v.ResourceVersion)
		switch {
		case !ok:
			rep.violations = append(rep.violations, fmt.Sprintf("route %s (shard %d): status write at %d before any version of the shard's Lease", nn, s, v.ResourceVersion))
			continue
		case h == "":
			rep.violations = append(rep.violations, fmt.Sprintf("route %s (shard %d): status write at %d while the shard's Lease named no holder", nn, s, v.ResourceVersion))
			continue
		}
		u, ok := userOf[h]
		if !ok {
			rep.violations = append(rep.violations, fmt.Sprintf("route %s (shard %d): status write at %d while %q, not a replica, held the shard", nn, s, v.ResourceVersion, h))
			continue
		}
		attributed[key{nn, u}] = append(attributed[key{nn, u}], v.ResourceVersion)
	}
	for kk, rvs := range attributed {
		if extra := len(rvs) - okCalls[kk]; extra > 0 {
			rep.violations = append(rep.violations, fmt.Sprintf("route %s: %d status writes (at %v) landed while %s held its shard, which made %d successful status requests for it: %d written by another replica",
				kk.route, len(rvs), rvs, kk.user, okCalls[kk], extra))
		}
	}
	slices.Sort(rep.violations)
	return rep
}

// syncRoutes makes sure routes has recorded every write to the routes so
// far: it changes an annotation of route nn (no status change) and waits
// until the History has that version; watch events arrive in
// resourceVersion order. It returns the versions and that resourceVersion.
func syncRoutes(ctx context.Context, cp *cluster.ControlPlane, routes *cluster.History, nn types.NamespacedName) ([]cluster.Version, uint64, error) {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"e2e.quietpatch.io/sync":%q}}}`, time.Now().Format(time.RFC3339Nano))
	r, err := cp.AdminGatewayClient().GatewayV1().HTTPRoutes(nn.Namespace).Patch(ctx, nn.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return nil, 0, err
	}
	var rv uint64
	if _, err := fmt.Sscan(r.ResourceVersion, &rv); err != nil {
		return nil, 0, err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	vs, err := routes.WaitFor(wctx, rv)
	return vs, rv, err
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

func joinLines(s []string) string { return strings.Join(s, "\n") }

// record starts a History of gvr in namespace ("" for all), stopped when
// the test ends.
func record(t *testing.T, ctx context.Context, cp *cluster.ControlPlane, gvr schema.GroupVersionResource, namespace string) *cluster.History {
	t.Helper()
	h, err := cp.Record(context.WithoutCancel(ctx), gvr, namespace, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	return h
}
