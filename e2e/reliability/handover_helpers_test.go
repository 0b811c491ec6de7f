package reliability_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/e2e/examplee2e"
)

// The tests of a replica giving its Lease up order writes by
// resourceVersion: etcd's revision, one counter for every object of the
// control plane. They record, from before anything happens, every version
// of the Lease and of the routes (cluster.History: a list, then a watch
// from the list's resourceVersion, so nothing is missed), and read the
// audit log for who made which status request and with what answer.

var (
	leasesGVR = coordv1.SchemeGroupVersion.WithResource("leases")
	routesGVR = schema.GroupVersionResource{Group: gatewayv1.GroupName, Version: "v1", Resource: "httproutes"}
)

// observationAllowance is how much earlier than the replicas our own watch
// may see a Lease write: both are watches of one API server, normally
// milliseconds apart, but two busy cores can delay one of them. A fifth
// of the lease duration leaves room for that and stays far below the
// lease duration the checks are about.
func observationAllowance(leaseDuration time.Duration) time.Duration { return leaseDuration / 5 }

// record starts a cluster.History of resource gvr in namespace ("" for
// all) as selected by opts, stopped when the test ends.
func record(t *testing.T, ctx context.Context, cp *cluster.ControlPlane, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) *cluster.History {
	t.Helper()
	h, err := cp.Record(context.WithoutCancel(ctx), gvr, namespace, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	return h
}

// recordLease records every version of the Lease ns/name.
func recordLease(t *testing.T, ctx context.Context, cp *cluster.ControlPlane, ns, name string) *cluster.History {
	t.Helper()
	return record(t, ctx, cp, leasesGVR, ns, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
}

// leaseVersion is one recorded version of a Lease, decoded.
type leaseVersion struct {
	cluster.Version
	holder string
	epoch  int64 // spec.leaseTransitions
}

func (v leaseVersion) String() string {
	return fmt.Sprintf("{rv %d holder %q epoch %d seen %s}", v.ResourceVersion, v.holder, v.epoch, v.Received.Format("15:04:05.000"))
}

func leaseVersions(vs []cluster.Version) ([]leaseVersion, error) {
	out := make([]leaseVersion, 0, len(vs))
	for _, v := range vs {
		var l coordv1.Lease
		if err := v.Into(&l); err != nil {
			return nil, err
		}
		lv := leaseVersion{Version: v}
		if l.Spec.HolderIdentity != nil {
			lv.holder = *l.Spec.HolderIdentity
		}
		if l.Spec.LeaseTransitions != nil {
			lv.epoch = int64(*l.Spec.LeaseTransitions)
		}
		out = append(out, lv)
	}
	return out, nil
}

// handover is how the Lease passed from one replica to its successor, as
// the Lease's versions show it.
type handover struct {
	from, to string
	// last is from's last version of the Lease: its last acquisition or
	// renewal.
	last leaseVersion
	// vacate is the version right after last if from cleared the holder
	// there (a vacate keeps the epoch); nil if from let its claim run out.
	vacate *leaseVersion
	// acquired is to's first acquisition after last, under a higher epoch.
	acquired leaseVersion
	// toHeldBefore: to held the Lease at some point before last.
	toHeldBefore bool
}

// barrier is the resourceVersion no write of from may reach: its vacate if
// it vacated, else the successor's acquisition.
func (h handover) barrier() uint64 {
	if h.vacate != nil {
		return h.vacate.ResourceVersion
	}
	return h.acquired.ResourceVersion
}

func (h handover) String() string {
	v := "none (the claim ran out)"
	if h.vacate != nil {
		v = h.vacate.String()
	}
	return fmt.Sprintf("%s's last write %s, its vacate %s, %s's acquisition %s", h.from, h.last, v, h.to, h.acquired)
}

// findHandover finds the hand-over from → to in the Lease's versions.
func findHandover(vs []leaseVersion, from, to string) (handover, error) {
	h := handover{from: from, to: to}
	firstTo := slices.IndexFunc(vs, func(v leaseVersion) bool { return v.holder == to })
	last := -1
	for i, v := range vs {
		if v.holder == from {
			last = i
		}
	}
	if last < 0 {
		return h, fmt.Errorf("%s never held the Lease; versions %v", from, vs)
	}
	h.last, h.toHeldBefore = vs[last], firstTo >= 0 && firstTo < last
	for i := last + 1; i < len(vs); i++ {
		v := vs[i]
		if i == last+1 && v.holder == "" && v.epoch == h.last.epoch {
			h.vacate = &vs[i]
		}
		if v.holder == to && v.epoch > h.last.epoch {
			h.acquired = v
			return h, nil
		}
	}
	return h, fmt.Errorf("%s has not acquired the Lease since %s's last write %s", to, from, h.last)
}

// waitHandover polls the Lease's History until the hand-over from → to is
// recorded.
func waitHandover(ctx context.Context, lease *cluster.History, from, to string) (handover, error) {
	var h handover
	err := examplee2e.Poll(ctx, 20*time.Millisecond, func(context.Context) error {
		if err := lease.Err(); err != nil {
			return examplee2e.Permanent(err)
		}
		vs, err := leaseVersions(lease.Versions())
		if err != nil {
			return examplee2e.Permanent(err)
		}
		h, err = findHandover(vs, from, to)
		return err
	})
	return h, err
}

// syncRoutes makes sure routes has recorded every write to the routes made
// so far: it changes an annotation of the route nn (no status change, so
// no status write) and waits until the History has that version. Watch
// events arrive in resourceVersion order, so everything before it has
// arrived too. It returns the versions recorded.
func syncRoutes(t *testing.T, ctx context.Context, cp *cluster.ControlPlane, routes *cluster.History, nn types.NamespacedName) []cluster.Version {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"e2e.quietpatch.io/sync":%q}}}`, time.Now().Format(time.RFC3339Nano))
	r, err := cp.AdminGatewayClient().GatewayV1().HTTPRoutes(nn.Namespace).Patch(ctx, nn.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var rv uint64
	if _, err := fmt.Sscan(r.ResourceVersion, &rv); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	vs, err := routes.WaitFor(wctx, rv)
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

// statusRequests returns the audit events of user's status requests to
// HTTPRoutes (any verb, any answer) received at or after since.
func statusRequests(events []auditv1.Event, user string, since time.Time) []auditv1.Event {
	var out []auditv1.Event
	for _, e := range events {
		ref := e.ObjectRef
		if e.User.Username == user && ref != nil && ref.Resource == "httproutes" && ref.Subresource == "status" &&
			!e.RequestReceivedTimestamp.Time.Before(since) {
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

// lateWrites checks the promise "no status write of a replica that gives
// its Lease up lands after its vacate, or after its successor's
// acquisition":
//
// Every status write that landed (a recorded version whose .status
// changed) with a resourceVersion above the hand-over's barrier must be
// one of the successor's: the successor writes only once it holds the
// Lease, nobody else writes then (the test's own writes are done before
// the hand-over), and every status write of this controller carries a
// resourceVersion precondition, so each successful request of the
// successor is exactly one landed write. Per route, the writes above the
// barrier are therefore counted against the successor's successful status
// requests in the audit log; any write more is the stopping replica's —
// whatever its request got for an answer: a 200, a 504, or nothing because
// its client had given up, for a write already on its way still lands.
// Such a write is reported with the stopping replica's status requests for
// that route received since stoppedAt.
//
// Writes by the stopping replica are not otherwise told apart: the audit
// log records no resourceVersion for a PATCH, and both replicas write the
// same content with the same field manager.
func lateWrites(h handover, statusWrites []cluster.Version, events []auditv1.Event, stoppingUser, successorUser string, stoppedAt time.Time) []string {
	type key = types.NamespacedName
	late := map[key][]uint64{}
	for _, v := range statusWrites {
		if v.ResourceVersion > h.barrier() {
			k := key{Namespace: v.Namespace, Name: v.Name}
			late[k] = append(late[k], v.ResourceVersion)
		}
	}
	ok := map[key]int{}
	for _, e := range statusRequests(events, successorUser, time.Time{}) {
		if c := code(e); c >= 200 && c < 300 {
			ok[key{Namespace: e.ObjectRef.Namespace, Name: e.ObjectRef.Name}]++
		}
	}
	var out []string
	for k, rvs := range late {
		if extra := len(rvs) - ok[k]; extra > 0 {
			var reqs []string
			for _, e := range statusRequests(events, stoppingUser, stoppedAt) {
				if e.ObjectRef.Namespace == k.Namespace && e.ObjectRef.Name == k.Name {
					reqs = append(reqs, fmt.Sprintf("%s received %s, answered %d at %s", e.Verb,
						e.RequestReceivedTimestamp.Format("15:04:05.000"), code(e), e.StageTimestamp.Format("15:04:05.000")))
				}
			}
			out = append(out, fmt.Sprintf("route %s: %d status write(s) landed at resourceVersion %v, after the barrier %d, and the successor made %d; "+
				"the stopping replica's status requests for it since it was stopped: [%s]", k, extra, rvs, h.barrier(), ok[k], strings.Join(reqs, "; ")))
		}
	}
	slices.Sort(out)
	return out
}

// checkHandover asserts the promise of a replica that gives its Lease up
// on purpose (SIGTERM, Relinquish) while status patches are in flight:
//
//   - calls were in flight: the API server received status requests of
//     the stopping replica after stoppedAt (else the test saw nothing);
//   - every status write of the stopping replica landed below the
//     barrier: below its vacate and its successor's acquisition (lateWrites);
//   - if it did not vacate, its successor acquired no earlier than a full
//     lease duration (less observationAllowance) after the stopping
//     replica's last Lease write was seen: the claim ran out.
func checkHandover(t *testing.T, h handover, statusWrites []cluster.Version, events []auditv1.Event, stoppingUser, successorUser string, stoppedAt time.Time, leaseDuration time.Duration) {
	t.Helper()
	inFlight := statusRequests(events, stoppingUser, stoppedAt)
	codes := map[int32]int{}
	for _, e := range inFlight {
		codes[code(e)]++
	}
	t.Logf("hand-over: %s; barrier resourceVersion %d; %d status requests of the stopping replica reached the API server after it was stopped (answers %v)",
		h, h.barrier(), len(inFlight), codes)
	if len(inFlight) == 0 {
		t.Errorf("no status request of the stopping replica reached the API server after it was stopped: no call was in flight, the test saw nothing")
	}
	if h.toHeldBefore {
		t.Errorf("the successor %s held the Lease before the hand-over: its status writes cannot be told apart by time", h.to)
	}
	if h.vacate == nil {
		gap := h.acquired.Received.Sub(h.last.Received)
		if min := leaseDuration - observationAllowance(leaseDuration); gap < min {
			t.Errorf("%s did not vacate, yet %s acquired %v after %s's last Lease write was seen, want >= %v (lease duration %v less %v for observation): its claim was cut short",
				h.from, h.to, gap, h.from, min, leaseDuration, observationAllowance(leaseDuration))
		}
	}
	for _, v := range lateWrites(h, statusWrites, events, stoppingUser, successorUser, stoppedAt) {
		t.Error(v)
	}
}
