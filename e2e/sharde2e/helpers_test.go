package sharde2e_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/e2e/examplee2e"
	"github.com/quietpatch/quietpatch/examples/httproute-status/fixtures"
	"github.com/quietpatch/quietpatch/internal/shard"
)

// Prometheus names of the shard instruments (quietpatch.shard.*).
const (
	metricHeld       = "quietpatch_shard_held"
	metricObjects    = "quietpatch_shard_objects"
	metricUnfiltered = "quietpatch_shard_unfiltered"
	metricMembers    = "quietpatch_shard_members"
	metricMoves      = "quietpatch_shard_moves_total"
)

const (
	leaseName = examplee2e.DefaultLeaseName
	poll      = 100 * time.Millisecond
)

var (
	leasesGVR = coordv1.SchemeGroupVersion.WithResource("leases")
	routesGVR = schema.GroupVersionResource{Group: gatewayv1.GroupName, Version: "v1", Resource: "httproutes"}
)

// shardLease is the name of shard i's Lease (shard.LeaseName).
func shardLease(i, k int) string { return fmt.Sprintf("%s-shard-%d-of-%d", leaseName, i, k) }

// member is one replica: a Deployment of one process under a
// ServiceAccount of its own, so that the audit log tells its requests
// from the others'.
type member struct {
	name string // short name, also the ServiceAccount's suffix
	dep  *examplee2e.Deployment
}

func (m *member) replica() *examplee2e.Replica { return m.dep.Replicas()[0] }
func (m *member) id() string                   { return m.replica().Identity }
func (m *member) user() string                 { return m.dep.Username() }
func (m *member) live() bool                   { return !m.replica().Exited() }

// cluster of members sharing one namespace, Lease name and K.
type group struct {
	t    *testing.T
	cp   *cluster.ControlPlane
	base examplee2e.Config
	k    int
	ms   []*member
}

// add deploys a member (one replica, ServiceAccount shard-NAME), stopped
// when the test ends; if the test failed, its log's tail is logged.
func (g *group) add(ctx context.Context, name string) *member {
	g.t.Helper()
	cfg := g.base
	cfg.Dir = g.t.TempDir()
	cfg.ServiceAccount = "shard-" + name
	cfg.Replicas = 1
	d, err := examplee2e.Deploy(ctx, g.cp, cfg)
	if err != nil {
		g.t.Fatal(err)
	}
	m := &member{name: name, dep: d}
	g.t.Cleanup(func() {
		if g.t.Failed() {
			for _, r := range d.Replicas() {
				g.t.Logf("replica %s (pid %d), log %s:\n%s", r.Identity, r.PID(), r.LogPath, r.LogTail(40))
			}
		}
		_ = d.Stop()
	})
	g.ms = append(g.ms, m)
	return m
}

func (g *group) live() []*member {
	var out []*member
	for _, m := range g.ms {
		if m.live() {
			out = append(out, m)
		}
	}
	return out
}

func (g *group) byID(id string) *member {
	for _, m := range g.ms {
		if m.id() == id {
			return m
		}
	}
	return nil
}

// leaders reads which shards a replica leads, from its
// quietpatch_leader_is_leader series of the shard Leases, and its
// quietpatch_shard_held.
func leaders(ctx context.Context, r *examplee2e.Replica, k int) ([]int, float64, examplee2e.Metrics, error) {
	m, err := r.Scrape(ctx)
	if err != nil {
		return nil, 0, nil, err
	}
	var held []int
	for i := range k {
		if m.Sum(examplee2e.MetricLeaderIsLeader, "k8s_lease_name", shardLease(i, k)) == 1 {
			held = append(held, i)
		}
	}
	return held, m.Sum(metricHeld), m, nil
}

// holders reads the shard Leases' holders ("" for none or no Lease).
func (g *group) holders(ctx context.Context) ([]string, error) {
	list, err := g.cp.AdminClient().CoordinationV1().Leases(g.base.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]string, g.k)
	for _, l := range list.Items {
		for i := range g.k {
			if l.Name == shardLease(i, g.k) && l.Spec.HolderIdentity != nil {
				out[i] = *l.Spec.HolderIdentity
			}
		}
	}
	return out, nil
}

// spread is who leads which shards, agreed by the replicas' metrics and
// the Leases.
type spread map[string][]int // identity → shards

func (s spread) counts() []int {
	var out []int
	for _, v := range s {
		out = append(out, len(v))
	}
	slices.Sort(out)
	slices.Reverse(out)
	return out
}

func (s spread) String() string {
	var ids []string
	for id := range s {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, "%s:%v ", id, s[id])
	}
	return strings.TrimSpace(b.String())
}

// readSpread returns the spread if the live replicas' metrics and the
// shard Leases agree — every shard led by exactly one live replica, which
// the Lease names, and each replica's quietpatch_shard_held equal to the
// shards it leads — else an error saying where they differ.
func (g *group) readSpread(ctx context.Context) (spread, error) {
	hs, err := g.holders(ctx)
	if err != nil {
		return nil, err
	}
	s := spread{}
	owner := make([]string, g.k)
	for _, m := range g.live() {
		held, n, _, err := leaders(ctx, m.replica(), g.k)
		if err != nil {
			return nil, err
		}
		if int(n) != len(held) {
			return nil, fmt.Errorf("%s: %s %v, but it leads shards %v", m.id(), metricHeld, n, held)
		}
		s[m.id()] = held
		for _, i := range held {
			if owner[i] != "" {
				return nil, fmt.Errorf("shard %d led by %s and %s", i, owner[i], m.id())
			}
			owner[i] = m.id()
		}
	}
	for i := range g.k {
		if owner[i] == "" {
			return nil, fmt.Errorf("shard %d led by no live replica (Lease holder %q); spread %s", i, hs[i], s)
		}
		if hs[i] != owner[i] {
			return nil, fmt.Errorf("shard %d: led by %s, its Lease names %q", i, owner[i], hs[i])
		}
	}
	return s, nil
}

// waitSpread polls until the spread's counts are want (largest first) and
// returns it and when it was first seen.
func (g *group) waitSpread(ctx context.Context, d time.Duration, want ...int) (spread, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var s spread
	err := examplee2e.Poll(ctx, poll, func(ctx context.Context) error {
		var err error
		if s, err = g.readSpread(ctx); err != nil {
			return err
		}
		if !slices.Equal(s.counts(), want) {
			return fmt.Errorf("spread %s, want counts %v", s, want)
		}
		return nil
	})
	return s, time.Now(), err
}

// shareOf counts the routes whose UID hash lies in the shards.
func shareOf(routes []gatewayv1.HTTPRoute, k int, shards []int) int {
	n := 0
	for i := range routes {
		if slices.Contains(shards, shard.Of(routes[i].UID, k)) {
			n++
		}
	}
	return n
}

// waitObjects polls until each live replica's quietpatch_shard_objects is
// exactly the number of routes of its shards and its
// quietpatch_shard_unfiltered is unfiltered.
func (g *group) waitObjects(ctx context.Context, d time.Duration, s spread, unfiltered float64) error {
	routes, err := examplee2e.ListRoutes(ctx, g.cp.AdminGatewayClient())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return examplee2e.Poll(ctx, poll, func(ctx context.Context) error {
		for _, m := range g.live() {
			_, _, ms, err := leaders(ctx, m.replica(), g.k)
			if err != nil {
				return err
			}
			want := shareOf(routes, g.k, s[m.id()])
			if got := ms.Sum(metricObjects); int(got) != want {
				return fmt.Errorf("%s: %s %v, want %d (the routes of shards %v)", m.id(), metricObjects, got, want, s[m.id()])
			}
			if got := ms.Sum(metricUnfiltered); got != unfiltered {
				return fmt.Errorf("%s: %s %v, want %v", m.id(), metricUnfiltered, got, unfiltered)
			}
		}
		return nil
	})
}

// moves sums each live replica's quietpatch_shard_moves_total by
// direction.
func (g *group) moves(ctx context.Context) (map[string]map[string]float64, error) {
	out := map[string]map[string]float64{}
	for _, m := range g.live() {
		ms, err := m.replica().Scrape(ctx)
		if err != nil {
			return nil, err
		}
		out[m.id()] = ms.ByLabel(metricMoves, "direction")
	}
	return out, nil
}

// passes reads the finished reconcile passes of the pipelines of the
// shards each live replica leads in s, by replica and shard. (A shard
// given up leaves its pipeline's last counts behind in the exporter.)
func (g *group) passes(ctx context.Context, s spread) (map[string]map[int]float64, error) {
	out := map[string]map[int]float64{}
	for _, m := range g.live() {
		ms, err := m.replica().Scrape(ctx)
		if err != nil {
			return nil, err
		}
		by := ms.ByLabel(examplee2e.MetricReconcileDuration, "shard") // pipeline httproute-status, shard i
		out[m.id()] = map[int]float64{}
		for _, i := range s[m.id()] {
			out[m.id()][i] = by[strconv.Itoa(i)]
		}
	}
	return out, nil
}

// waitPasses waits until the pipeline of every shard in s has finished
// n+1 more passes (n full ones begun after the call).
func (g *group) waitPasses(ctx context.Context, s spread, n int) error {
	var base map[string]map[int]float64
	if err := examplee2e.Poll(ctx, poll, func(ctx context.Context) (err error) {
		base, err = g.passes(ctx, s)
		return err
	}); err != nil {
		return err
	}
	return examplee2e.Poll(ctx, poll, func(ctx context.Context) error {
		now, err := g.passes(ctx, s)
		if err != nil {
			return err
		}
		for id, ps := range base {
			for i, v := range ps {
				if now[id][i] < v+float64(n+1) {
					return fmt.Errorf("%s shard %d: %.0f of %d more passes", id, i, now[id][i]-v, n+1)
				}
			}
		}
		return nil
	})
}

// installSet generates and creates a fixtures Set; its routes are deleted
// when the test ends.
func installSet(t *testing.T, ctx context.Context, cp *cluster.ControlPlane, cfg fixtures.Config) *fixtures.Set {
	t.Helper()
	set, err := fixtures.Generate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	if err := examplee2e.Install(ctx, cp, set.Objects(), 8, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("installed %d routes in %v", len(set.Routes), time.Since(begin).Round(time.Millisecond))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var apps []string
		for _, ns := range set.Namespaces {
			apps = append(apps, ns.Name)
		}
		if err := examplee2e.DeleteRoutes(ctx, cp, apps...); err != nil {
			t.Errorf("deleting routes: %v", err)
		}
	})
	return set
}

// dropEntry removes controller's entries from the route's status as the
// admin and returns the resourceVersion of that write.
func dropEntry(ctx context.Context, cp *cluster.ControlPlane, nn types.NamespacedName, controller gatewayv1.GatewayController) (uint64, error) {
	routes := cp.AdminGatewayClient().GatewayV1().HTTPRoutes(nn.Namespace)
	var rv uint64
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		r, err := routes.Get(ctx, nn.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		r.Status.Parents = slices.DeleteFunc(r.Status.Parents, func(p gatewayv1.RouteParentStatus) bool { return p.ControllerName == controller })
		r, err = routes.UpdateStatus(ctx, r, metav1.UpdateOptions{FieldManager: "quietpatch-e2e-saboteur"})
		if err == nil {
			_, err = fmt.Sscan(r.ResourceVersion, &rv)
		}
		return err
	})
	return rv, err
}

// countLines counts the lines of the file that contain s.
func countLines(path, s string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strings.Count(string(b), s), nil
}
