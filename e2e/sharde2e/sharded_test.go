package sharde2e_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/e2e/examplee2e"
	"github.com/quietpatch/quietpatch/examples/httproute-status/fixtures"
	"github.com/quietpatch/quietpatch/internal/shard"
)

// Timings: short leases, so that a move takes seconds; the bounds below
// are derived from them with room for two loaded cores.
const (
	leaseDuration = 3 * time.Second
	retryPeriod   = 500 * time.Millisecond
	interval      = time.Second // --reconcile-interval
	// slack is what two busy cores may add to a bound: starting an
	// informer, a list of the shard's routes, a few Lease round trips.
	slack = 4 * time.Second
)

func baseConfig(binary string, rbac *examplee2e.RBAC, ns string, controller gatewayv1.GatewayController, k int) examplee2e.Config {
	return examplee2e.Config{
		Binary:            binary,
		RBAC:              rbac,
		Namespace:         ns,
		ControllerName:    string(controller),
		Shards:            k,
		ReconcileInterval: interval,
		LeaseDuration:     leaseDuration,
		RetryPeriod:       retryPeriod,
		PatchTimeout:      2 * time.Second,
		Workers:           4,
		KubeQPS:           200,
		KubeBurst:         400,
		ReadyTimeout:      time.Minute,
		StopGrace:         5 * time.Second,
	}
}

// TestShardedLifecycle runs K = 6 shards of ~300 routes through a
// replica's life and death, on an API server that filters by
// ShardSelector:
//
//  1. three replicas: the shards spread 2/2/2 (metrics and Leases agree),
//     every route converges, each replica's caches hold exactly its
//     shards' routes (the server filters: quietpatch_shard_unfiltered 0),
//     and over a few reconcile intervals nobody writes a status;
//  2. kill -9 one: the survivors take its two shards after its claims and
//     its membership ran out (3/3), and the routes of those shards, whose
//     entries were removed meanwhile, converge;
//  3. it restarts under its identity: 2/2/2 again;
//  4. a fourth replica joins: 2/2/1/1 within a few lease durations, and
//     then no shard moves for several lease durations;
//  5. SIGTERM a replica leading two shards: it vacates them and they are
//     taken well within a lease duration (2/2/2);
//  6. through all of it, every status write that landed lands inside a
//     claim of its writer on the Lease of the route's shard, and no request
//     of a replica was forbidden (the deploy RBAC plus deploy/shards is
//     enough).
func TestShardedLifecycle(t *testing.T) {
	cp, binary, rbac := shared.get(t)
	ctx := testContext(t, 3*time.Minute)
	begin := time.Now()
	const (
		k          = 6
		ns         = "shard-system"
		controller = gatewayv1.GatewayController("quietpatch.io/e2e-shards")
	)
	set := installSet(t, ctx, cp, fixtures.Config{Routes: 300, Namespaces: 3, Prefix: "shd", ControllerName: controller})
	want := examplee2e.ExpectFixtures(set)
	gw := cp.AdminGatewayClient()
	routes, err := examplee2e.ListRoutes(ctx, gw)
	if err != nil {
		t.Fatal(err)
	}
	uids := map[types.NamespacedName]types.UID{}
	for _, r := range routes {
		uids[types.NamespacedName{Namespace: r.Namespace, Name: r.Name}] = r.UID
	}
	if len(uids) != len(set.Routes) {
		t.Fatalf("%d routes listed, %d installed", len(uids), len(set.Routes))
	}
	if _, err := cp.AdminClient().CoreV1().Namespaces().Create(ctx, nsObject(ns), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	routeHist := record(t, ctx, cp, routesGVR, "")
	leaseHist := record(t, ctx, cp, leasesGVR, ns)
	auditFrom := time.Now()

	g := &group{t: t, cp: cp, base: baseConfig(binary, rbac, ns, controller, k), k: k}
	for _, name := range []string{"a", "b", "c"} {
		g.add(ctx, name)
	}

	// 1. Spread, convergence, filtered caches, quiet.
	s, at, err := g.waitSpread(ctx, 4*leaseDuration+2*slack, 2, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("1. spread %s, %s after the start", s, seconds(at.Sub(begin)))
	if _, err := examplee2e.WaitConverged(ctx, gw, want, 200*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("1. all %d routes converged, %s after the start", len(want), seconds(time.Since(begin)))
	if err := g.waitObjects(ctx, 2*slack, s, 0); err != nil {
		t.Fatalf("caches: %v", err)
	}
	for _, m := range g.live() {
		t.Logf("1. %s caches %d routes (shards %v)", m.id(), shareOf(routes, k, s[m.id()]), s[m.id()])
	}
	quiet(t, ctx, g, s, 3)
	for _, m := range g.live() {
		if n, err := countLines(m.replica().LogPath, unfilteredWarning); err != nil || n != 0 {
			t.Errorf("%s logged %q %d times (%v): the server should filter", m.id(), unfilteredWarning, n, err)
		}
	}

	// 2. kill -9 the replica c.
	victim := g.ms[2]
	lost := s[victim.id()]
	killedAt := time.Now()
	victim.replica().Kill()
	var dropped []types.NamespacedName
	own := map[uint64]bool{}
	for _, r := range routes {
		if slices.Contains(lost, shard.Of(r.UID, k)) && len(dropped) < 30 {
			nn := types.NamespacedName{Namespace: r.Namespace, Name: r.Name}
			rv, err := dropEntry(ctx, cp, nn, controller)
			if err != nil {
				t.Fatal(err)
			}
			own[rv] = true
			dropped = append(dropped, nn)
		}
	}
	t.Logf("2. killed %s (shards %v); removed the entries of %d of their routes in %s", victim.id(), lost, len(dropped), seconds(time.Since(killedAt)))
	// The survivors see the member gone and the claims run out a lease
	// duration after their last renewal; each new claimer then observes
	// the Lease for a lease duration of its own before it takes it.
	s, at, err = g.waitSpread(ctx, 2*leaseDuration+2*retryPeriod+3*slack, 3, 3)
	if err != nil {
		t.Fatal(err)
	}
	taken := at.Sub(killedAt)
	if _, err := examplee2e.WaitConverged(ctx, gw, want, 200*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	firstWrite := firstWriteAfter(t, cp, killedAt, dropped, g.live())
	t.Logf("2. spread %s %s after the kill; the survivors' first status write to a removed entry received %s after the kill; all converged %s after",
		s, seconds(taken), seconds(firstWrite), seconds(time.Since(killedAt)))
	if taken < leaseDuration-leaseDuration/5 {
		t.Errorf("the shards of the killed replica were taken %s after the kill, before its claims (%s) could have run out", seconds(taken), leaseDuration)
	}

	// 3. c restarts under its identity.
	mv := movesNow(t, ctx, g, s)
	restartAt := time.Now()
	if _, err := victim.dep.Restart(ctx, victim.replica()); err != nil {
		t.Fatal(err)
	}
	s, at, err = g.waitSpread(ctx, 3*leaseDuration+2*slack, 2, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("3. %s restarted: spread %s %s after the restart", victim.id(), s, seconds(at.Sub(restartAt)))
	movedExactly(t, ctx, g, s, mv, "3.", 2)

	// 4. A fourth replica joins.
	mv = movesNow(t, ctx, g, s)
	joinAt := time.Now()
	d := g.add(ctx, "d")
	readyAt := time.Now()
	s, at, err = g.waitSpread(ctx, 2*leaseDuration+2*slack, 2, 2, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("4. %s joined: spread %s %s after its start (%s after it was ready)", d.id(), s, seconds(at.Sub(joinAt)), seconds(at.Sub(readyAt)))
	movedExactly(t, ctx, g, s, mv, "4.", 1)
	stable(t, ctx, g, s, 3*leaseDuration)
	if err := g.waitObjects(ctx, 2*slack, s, 0); err != nil {
		t.Fatalf("caches after the join: %v", err)
	}

	// 5. SIGTERM a replica leading two shards.
	var leaving *member
	for _, m := range g.live() {
		if len(s[m.id()]) == 2 {
			leaving = m
			break
		}
	}
	given := s[leaving.id()]
	stopAt := time.Now()
	stopped := make(chan time.Duration, 1)
	go func() { leaving.replica().Stop(5 * time.Second); stopped <- time.Since(stopAt) }()
	s, at, err = g.waitSpread(ctx, leaseDuration+slack, 2, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	exit := <-stopped
	handover := at.Sub(stopAt)
	lv, err := shardLeaseVersions(leaseHist.Versions(), k)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range given {
		vacated, ok := firstHeldBy(lv[i], "", stopAt)
		if !ok {
			t.Errorf("5. shard %d: %s did not vacate its Lease", i, leaving.id())
			continue
		}
		var acq leaseVersion
		for _, v := range lv[i] {
			if v.rv > vacated.rv && v.holder != "" {
				acq = v
				break
			}
		}
		t.Logf("5. shard %d: vacated %s after the SIGTERM, taken by %s %s after it", i, seconds(vacated.seen.Sub(stopAt)), acq.holder, seconds(acq.seen.Sub(stopAt)))
		if acq.holder == "" {
			t.Errorf("5. shard %d: no acquisition recorded after the vacate", i)
		} else if d := acq.seen.Sub(stopAt); d > leaseDuration {
			t.Errorf("5. shard %d taken %s after the SIGTERM, want within a lease duration (%s): the vacated Lease was waited out", i, seconds(d), leaseDuration)
		}
	}
	t.Logf("5. %s stopped (exit %s after SIGTERM); spread %s %s after the SIGTERM", leaving.id(), seconds(exit), s, seconds(handover))
	if _, err := examplee2e.WaitConverged(ctx, gw, want, 200*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}

	// 6. Every landed status write inside a claim of its writer.
	vs, rv, err := syncRoutes(ctx, cp, routeHist, types.NamespacedName{Namespace: routes[0].Namespace, Name: routes[0].Name})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*slack)
	defer cancel()
	lvs, err := leaseHist.WaitFor(wctx, rv)
	if err != nil {
		t.Fatal(err)
	}
	if lv, err = shardLeaseVersions(lvs, k); err != nil {
		t.Fatal(err)
	}
	events, err := cp.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	userOf := map[string]string{}
	for _, m := range g.ms {
		userOf[m.id()] = m.user()
	}
	rep := checkClaims(vs, lv, events, k, uids, own, userOf)
	t.Logf("6. %d status writes landed (%d successful status requests, %d answered 409 Conflict); %d shard Lease versions",
		rep.writes, rep.ok, rep.conflicts, countVersions(lv))
	for _, v := range rep.violations {
		t.Error(v)
	}
	if rep.writes == 0 {
		t.Error("no status write recorded: the check saw nothing")
	}
	forbidden(t, events, userOf, auditFrom)
	for _, m := range g.ms {
		if n, err := countLines(m.replica().LogPath, "orbidden"); err != nil || n > 0 {
			t.Errorf("%s's log mentions forbidden requests %d times (%v)", m.id(), n, err)
		}
	}
}

// quiet waits until each shard pipeline finished a full pass, then
// counts the replicas' status requests over n more passes of every shard:
// there must be none.
func quiet(t *testing.T, ctx context.Context, g *group, s spread, n int) {
	t.Helper()
	if err := g.waitPasses(ctx, s, 1); err != nil {
		t.Fatal(err)
	}
	from := time.Now()
	if err := g.waitPasses(ctx, s, n); err != nil {
		t.Fatal(err)
	}
	events, err := g.cp.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	var users []string
	for _, m := range g.live() {
		users = append(users, m.user())
	}
	var during int
	for _, e := range statusPatches(events, users) {
		if !e.RequestReceivedTimestamp.Time.Before(from) {
			during++
		}
	}
	t.Logf("idle: %d status requests over %d passes of every shard (%s)", during, n, seconds(time.Since(from)))
	if during != 0 {
		t.Errorf("the idle replicas sent %d status requests over %d passes, want 0", during, n)
	}
}

// stable polls for d: the spread must stay s and no replica may count a
// move.
func stable(t *testing.T, ctx context.Context, g *group, s spread, d time.Duration) {
	t.Helper()
	before := movesNow(t, ctx, g, s)
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		now, err := g.readSpread(ctx)
		if err != nil {
			t.Fatalf("while stable: %v", err)
		}
		if now.String() != s.String() {
			t.Fatalf("the spread moved from %s to %s", s, now)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	after := movesNow(t, ctx, g, s)
	for id, m := range after {
		for dir, v := range m {
			if v != before[id][dir] {
				t.Errorf("%s counted %v more %s moves while the spread was stable", id, v-before[id][dir], dir)
			}
		}
	}
	t.Logf("stable for %s: spread %s, moves %v", d, s, after)
}

// firstWriteAfter is how long after from the first status request of the
// replicas to one of the routes was received.
func firstWriteAfter(t *testing.T, cp *cluster.ControlPlane, from time.Time, routes []types.NamespacedName, ms []*member) time.Duration {
	t.Helper()
	events, err := cp.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	var users []string
	for _, m := range ms {
		users = append(users, m.user())
	}
	first := time.Duration(-1)
	for _, e := range statusPatches(events, users) {
		at := e.RequestReceivedTimestamp.Time
		if at.Before(from) || !slices.Contains(routes, types.NamespacedName{Namespace: e.ObjectRef.Namespace, Name: e.ObjectRef.Name}) {
			continue
		}
		if d := at.Sub(from); first < 0 || d < first {
			first = d
		}
	}
	return first
}

// forbidden fails the test for any request of the replicas answered 403
// that the audit log recorded (writes to status and Leases).
func forbidden(t *testing.T, events []auditv1.Event, userOf map[string]string, from time.Time) {
	t.Helper()
	for _, e := range events {
		if e.RequestReceivedTimestamp.Time.Before(from) || code(e) != 403 {
			continue
		}
		for _, u := range userOf {
			if e.User.Username == u {
				t.Errorf("forbidden: %s %s %s/%s by %s", e.Verb, e.ObjectRef.Resource, e.ObjectRef.Namespace, e.ObjectRef.Name, u)
			}
		}
	}
}

func countVersions(lv [][]leaseVersion) int {
	n := 0
	for _, v := range lv {
		n += len(v)
	}
	return n
}

func nsObject(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// movesNow reads the replicas' move counters once they agree with the
// spread s: a replica counts a move at its next coordination step, up to a
// retry period after its leader metric changed, so it waits until each
// one's acquired - given_up - lost is the number of shards it leads.
func movesNow(t *testing.T, ctx context.Context, g *group, s spread) map[string]map[string]float64 {
	t.Helper()
	var m map[string]map[string]float64
	pctx, cancel := context.WithTimeout(ctx, 4*retryPeriod+slack)
	defer cancel()
	err := examplee2e.Poll(pctx, poll, func(ctx context.Context) (err error) {
		if m, err = g.moves(ctx); err != nil {
			return err
		}
		for id, mv := range m {
			if net := mv["acquired"] - mv["given_up"] - mv["lost"]; int(net) != len(s[id]) {
				return fmt.Errorf("%s: moves %v, %d shards led", id, mv, len(s[id]))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// movedExactly checks that, since before, the live replicas gave up n
// shards in all (a replica absent from before counts from 0) and lost
// none.
func movedExactly(t *testing.T, ctx context.Context, g *group, s spread, before map[string]map[string]float64, step string, n int) {
	t.Helper()
	after := movesNow(t, ctx, g, s)
	var gave, lost float64
	for id, m := range after {
		gave += m["given_up"] - before[id]["given_up"]
		lost += m["lost"] - before[id]["lost"]
	}
	t.Logf("%s %v shards given up, %v lost (moves %v)", step, gave, lost, after)
	if gave != float64(n) || lost != 0 {
		t.Errorf("%s %v shards given up and %v lost, want %d given up and none lost: the spread bounced", step, gave, lost, n)
	}
}
