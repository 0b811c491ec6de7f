package perf

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/e2e/examplee2e"
	"github.com/quietpatch/quietpatch/examples/httproute-status/fixtures"
	"github.com/quietpatch/quietpatch/examples/httproute-status/routestatus"
	"github.com/quietpatch/quietpatch/internal/shard"
)

// The sharded benchmark's control plane serves the sharded list and watch
// (KEP-5866): each shard's informer gets only its range from the server.
const shardGate = "--feature-gates=ShardedListAndWatch=true"

// Prometheus names of the sharded pipeline's gauges, as the example
// exports them.
const (
	metricShardHeld       = "quietpatch_shard_held"
	metricShardRunning    = "quietpatch_shard_running"
	metricShardObjects    = "quietpatch_shard_objects"
	metricShardUnfiltered = "quietpatch_shard_unfiltered"
)

// shardConfig holds the sizes of BenchmarkSharded, from the environment.
type shardConfig struct {
	Routes   int           // QP_PERF_SHARD_ROUTES: HTTPRoutes of the storm (5,000)
	Shards   int           // QP_PERF_SHARD_K: K of the sharded cases (8)
	Replicas int           // QP_PERF_SHARD_R: R of the multi-replica case (4)
	Plain    []int         // QP_PERF_SHARD_PLAIN: the plain client's concurrencies (16,64)
	Lease    time.Duration // QP_PERF_LEASE: LeaseDuration of the replicas (15 s)
	Plot     string        // QP_PERF_SHARD_PLOT: directory for shards-held.csv/.svg; "" → QP_PLOTS_DIR or $TMPDIR/quietpatch-perf
	Changes  int           // QP_PERF_K: routes changed in the killed replica's shards (50)
}

func loadShardConfig() (shardConfig, error) {
	base, err := loadConfig()
	if err != nil {
		return shardConfig{}, err
	}
	c := shardConfig{Routes: 5_000, Shards: 8, Replicas: 4, Plain: []int{16, 64}, Lease: base.Lease, Changes: base.K,
		Plot: os.Getenv("QP_PERF_SHARD_PLOT")}
	if c.Plot == "" {
		c.Plot = cmpOr(base.PlotsDir, filepath.Join(os.TempDir(), "quietpatch-perf"))
	}
	var errs []error
	for _, f := range []struct {
		env      string
		v        *int
		min, max int
	}{
		{"QP_PERF_SHARD_ROUTES", &c.Routes, 10, 1_000_000}, {"QP_PERF_SHARD_K", &c.Shards, 2, shard.MaxShards},
		{"QP_PERF_SHARD_R", &c.Replicas, 2, 16},
	} {
		s := os.Getenv(f.env)
		if s == "" {
			continue
		}
		v, err := strconv.Atoi(s)
		if err != nil || v < f.min || v > f.max {
			errs = append(errs, fmt.Errorf("%s must be an integer in [%d, %d], got %q", f.env, f.min, f.max, s))
			continue
		}
		*f.v = v
	}
	if s, ok := os.LookupEnv("QP_PERF_SHARD_PLAIN"); ok {
		c.Plain = nil
		for _, f := range strings.Split(s, ",") {
			if f = strings.TrimSpace(f); f == "" {
				continue
			}
			v, err := strconv.Atoi(f)
			if err != nil || v < 1 {
				errs = append(errs, fmt.Errorf("QP_PERF_SHARD_PLAIN must be a comma-separated list of concurrencies >= 1, got %q", s))
				break
			}
			c.Plain = append(c.Plain, v)
		}
	}
	return c, errors.Join(errs...)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// shardCase is one deployment of the example: R replicas, K shards.
type shardCase struct{ replicas, shards int }

func (c shardCase) name() string { return fmt.Sprintf("r%d-k%d", c.replicas, c.shards) }

// shardBench is BenchmarkSharded's world: a control plane of its own with
// the gate on, the fixtures (400 routes of a world, their Gateway, Services,
// ReferenceGrants), the example's controller binary and its RBAC (plus the
// Lease rights a sharded replica needs), and the storm routes with an
// informer and a tracker of their convergence.
type shardBench struct {
	cfg  shardConfig
	cp   *cluster.ControlPlane
	w    *world
	s    *storm
	tr   *tracker
	bin  string
	rbac *examplee2e.RBAC
	dir  string
}

// newShardBench sets up everything but the storm routes (createRoutes).
// The caller stops cp and w's informers.
func newShardBench(ctx context.Context, tb testing.TB, cp *cluster.ControlPlane, cfg shardConfig, dir string) (*shardBench, error) {
	sb := &shardBench{cfg: cfg, cp: cp, dir: dir}
	examples, err := examplee2e.ExamplesDir()
	if err != nil {
		return nil, err
	}
	var (
		wg       sync.WaitGroup
		buildErr error
		took     time.Duration
	)
	wg.Go(func() { sb.bin, took, buildErr = examplee2e.BuildController(ctx, examples, dir) })
	sb.w, err = newWorldOn(ctx, tb, cp, config{Routes: 400, Workers: 16, StormRoutes: cfg.Routes, FreshRoutes: cfg.Routes, Lease: cfg.Lease, K: cfg.Changes})
	wg.Wait()
	if err != nil || buildErr != nil {
		if sb.w != nil {
			sb.w.stopInformers()
		}
		return nil, errors.Join(err, buildErr)
	}
	tb.Logf("controller built in %v", took.Round(time.Millisecond))
	if sb.rbac, err = examplee2e.LoadRBAC(examplee2e.DeployDir(examples)); err != nil {
		sb.w.stopInformers()
		return nil, err
	}
	// A sharded replica lists the Leases of its namespace, creates and
	// renews its shard and membership Leases, and deletes its membership
	// Lease when it stops: more than the unsharded deploy Role grants.
	const leases = "qp-perf-shard-leases"
	sb.rbac.Roles = append(sb.rbac.Roles, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: leases}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
		Verbs: []string{"get", "list", "watch", "create", "update", "delete"},
	}}})
	sb.rbac.RoleBindings = append(sb.rbac.RoleBindings, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: leases},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: leases}})
	return sb, nil
}

// createRoutes creates the storm's cfg.Routes routes with an empty status
// (32 creates at a time), and their informer and tracker.
func (sb *shardBench) createRoutes(ctx context.Context, tb testing.TB) error {
	w, n := sb.w, sb.cfg.Routes
	s := &storm{w: w, name: "shard-storm", open: true, stopInformer: func() {}}
	gw := w.set.Gateway.DeepCopy()
	gw.Name = s.name
	gw.Spec.Listeners = gw.Spec.Listeners[:1]
	var apps []string
	for _, ns := range w.set.Namespaces {
		if ns.Labels[fixtures.AccessLabel] == "true" {
			apps = append(apps, ns.Name)
		}
	}
	if len(apps) == 0 {
		return errors.New("no application namespace admitted by the Gateway")
	}
	objs := []runtime.Object{gw}
	for i := range n {
		r := stormRoute(w.set.InfraNamespace, apps[i%len(apps)], s.name, fmt.Sprintf("%s-%06d", s.name, i))
		objs = append(objs, r)
		s.keys = append(s.keys, types.NamespacedName{Namespace: r.Namespace, Name: r.Name})
	}
	begin := time.Now()
	if err := install(ctx, w.cp, objs, 32); err != nil {
		return err
	}
	took := time.Since(begin)
	tb.Logf("created the Gateway %q and %d routes in %d namespaces in %v (%.0f creates/s)", s.name, n, len(apps),
		took.Round(time.Millisecond), float64(n)/took.Seconds())

	ictx, icancel := context.WithCancel(context.Background())
	f := gatewayinformers.NewSharedInformerFactoryWithOptions(w.gw, 0,
		gatewayinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = stormLabel + "=" + s.name }))
	s.inf = f.Gateway().V1().HTTPRoutes().Informer()
	s.lister = f.Gateway().V1().HTTPRoutes().Lister()
	tr, err := newTracker(s)
	if err != nil {
		icancel()
		return err
	}
	f.Start(ictx.Done())
	s.stopInformer = func() {
		icancel()
		f.Shutdown()
	}
	sb.s, sb.tr = s, tr
	if !cache.WaitForCacheSync(ctx.Done(), s.inf.HasSynced) {
		return errors.New("the storm routes' informer did not sync")
	}
	if err := poll(ctx, 100*time.Millisecond, "the storm Gateway in the informer cache", func() error {
		_, err := w.lookup.Gateways.Gateways(w.set.InfraNamespace).Get(s.name)
		return err
	}); err != nil {
		return err
	}
	if s.writer, err = w.statusWriter(ctx, s.name+"-writer"); err != nil {
		return err
	}
	s.dyn, err = dynamic.NewForConfig(s.writer)
	return err
}

// ---- convergence tracking ----

// tracker follows which storm routes are not at their desired status, from
// the informer's events: arm recomputes the set (after a flip), and the
// channel it returns is closed when the set is empty. Each check reads the
// route from the lister (the newest state) and computes under the lock, so
// that a check never applies a verdict older than arm's.
type tracker struct {
	s     *storm
	mu    sync.Mutex
	wrong map[types.NamespacedName]bool
	armed bool
	done  chan struct{}
}

func newTracker(s *storm) (*tracker, error) {
	t := &tracker{s: s, wrong: map[types.NamespacedName]bool{}}
	_, err := s.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    t.check,
		UpdateFunc: func(_, obj any) { t.check(obj) },
	})
	return t, err
}

func (t *tracker) check(obj any) {
	r, ok := obj.(*gatewayv1.HTTPRoute)
	if !ok {
		return
	}
	key := types.NamespacedName{Namespace: r.Namespace, Name: r.Name}
	t.mu.Lock()
	defer t.mu.Unlock()
	cur, err := t.s.lister.HTTPRoutes(key.Namespace).Get(key.Name)
	if err != nil {
		return
	}
	if routestatus.Equal(cur.Status, t.s.w.desired(cur)) {
		delete(t.wrong, key)
	} else {
		t.wrong[key] = true
	}
	if t.armed && len(t.wrong) == 0 {
		t.armed = false
		close(t.done)
	}
}

// arm recomputes the routes not converged and returns their number and a
// channel closed once none is left.
func (t *tracker) arm() (int, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.wrong = map[types.NamespacedName]bool{}
	for _, r := range t.s.changed() {
		t.wrong[types.NamespacedName{Namespace: r.Namespace, Name: r.Name}] = true
	}
	t.done, t.armed = make(chan struct{}), true
	if len(t.wrong) == 0 {
		t.armed = false
		close(t.done)
	}
	return len(t.wrong), t.done
}

func (t *tracker) left() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.wrong)
}

// wait waits for done, reporting progress every minute on standard error
// (a benchmark's log keeps only its first lines).
func (t *tracker) wait(ctx context.Context, _ testing.TB, what string, done <-chan struct{}) error {
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return nil
		case <-tick.C:
			fmt.Fprintf(os.Stderr, "%s %s: %d routes not converged yet\n", time.Now().Format(time.TimeOnly), what, t.left())
		case <-ctx.Done():
			return fmt.Errorf("%s: %w with %d routes not converged", what, ctx.Err(), t.left())
		}
	}
}

// ---- the audit log ----

// auditLine is what BenchmarkSharded reads of an audit event.
type auditLine struct {
	Verb string
	User struct {
		Username string
	}
	ObjectRef *struct {
		Resource, Namespace, Name, Subresource string
	}
	ResponseStatus *struct {
		Code int32
	}
	StageTimestamp metav1.MicroTime
}

func (e auditLine) is(verb, resource, subresource string, code int32) bool {
	return e.Verb == verb && e.ObjectRef != nil && e.ObjectRef.Resource == resource && e.ObjectRef.Subresource == subresource &&
		e.ResponseStatus != nil && e.ResponseStatus.Code == code
}

// auditSize is the audit log's size now: an offset for readAudit.
func (sb *shardBench) auditSize() (int64, error) {
	fi, err := os.Stat(sb.cp.AuditLogPath())
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// readAudit parses the audit log from offset on (a partial last line is
// left out).
func (sb *shardBench) readAudit(off int64) ([]auditLine, error) {
	f, err := os.Open(sb.cp.AuditLogPath())
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(f, 1<<20)
	var out []auditLine
	for {
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if line = bytes.TrimSpace(line); len(line) == 0 {
			continue
		}
		var e auditLine
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("audit log: %w", err)
		}
		out = append(out, e)
	}
}

// patchTally is the storm routes' status PATCHes of one user in a slice of
// the audit log: how many by code, and the last successful one.
type patchTally struct {
	ok, conflict, other int
	last                time.Time
}

func (p patchTally) String() string {
	return fmt.Sprintf("%d status PATCHes (%d ok, %d conflict, %d other)", p.ok+p.conflict+p.other, p.ok, p.conflict, p.other)
}

func (sb *shardBench) tally(evs []auditLine, user string) patchTally {
	var p patchTally
	prefix := sb.s.name + "-"
	for _, e := range evs {
		if e.Verb != "patch" || e.User.Username != user || e.ObjectRef == nil || e.ObjectRef.Resource != "httproutes" ||
			e.ObjectRef.Subresource != "status" || !strings.HasPrefix(e.ObjectRef.Name, prefix) || e.ResponseStatus == nil {
			continue
		}
		switch e.ResponseStatus.Code {
		case 200:
			p.ok++
			if t := e.StageTimestamp.Time; t.After(p.last) {
				p.last = t
			}
		case 409:
			p.conflict++
		default:
			p.other++
		}
	}
	return p
}

// ---- replicas ----

// vmHWM reads a process's peak resident set size (VmHWM), in MiB.
func vmHWM(pid int) (float64, error) { return procStatus(pid, "VmHWM:") }

// procStatus reads a size field of /proc/<pid>/status (VmHWM:, VmRSS:),
// in MiB.
func procStatus(pid int, field string) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, err := strconv.ParseFloat(f[0], 64)
				return kb / 1024, err
			}
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// deploy runs the example's controller: c.replicas processes with
// --shards=c.shards in a namespace of their own.
func (sb *shardBench) deploy(ctx context.Context, name string, c shardCase) (*examplee2e.Deployment, error) {
	return examplee2e.Deploy(ctx, sb.cp, examplee2e.Config{
		Binary: sb.bin, Dir: filepath.Join(sb.dir, name), RBAC: sb.rbac, Namespace: "qp-shard-" + name,
		Replicas: c.replicas, ControllerName: controllerName, LeaseDuration: sb.cfg.Lease,
		ExtraArgs:    []string{"--shards=" + strconv.Itoa(c.shards)},
		ReadyTimeout: 20 * time.Minute, StopGrace: 30 * time.Second,
	})
}

// held is the number of shards a scrape says the replica leads: the
// sharded gauge, or for an unsharded replica whether it leads.
func held(m examplee2e.Metrics) int {
	if m.Has(metricShardHeld) {
		return int(m.Sum(metricShardHeld))
	}
	return int(m.Sum(examplee2e.MetricLeaderIsLeader))
}

// waitSpread waits until the live replicas of d hold all shards, each
// between ⌊K/R⌋ and ⌈K/R⌉, and are idle.
func waitSpread(ctx context.Context, d *examplee2e.Deployment, shards int) error {
	return poll(ctx, 250*time.Millisecond, "the shards spread over the replicas, idle", func() error {
		live := d.Live()
		lo, hi := shards/len(live), (shards+len(live)-1)/len(live)
		total := 0
		var counts []string
		for _, r := range live {
			m, err := r.Scrape(ctx)
			if err != nil {
				return err
			}
			h := held(m)
			total += h
			counts = append(counts, fmt.Sprintf("%s=%d", r.Identity, h))
			if h < lo || h > hi {
				return fmt.Errorf("held %v, want each in [%d, %d]", counts, lo, hi)
			}
			if !m.Idle() {
				return fmt.Errorf("%s not idle", r.Identity)
			}
		}
		if total != shards {
			return fmt.Errorf("held %v, %d of %d shards", counts, total, shards)
		}
		return nil
	})
}

// idleRSS is the peak RSS of each replica of c run with no storm route:
// the caches of the dependencies and the fixtures' 400 routes, the
// pipelines, the runtime — what the route cache is measured above.
func (sb *shardBench) idleRSS(ctx context.Context, tb testing.TB, c shardCase) ([]float64, error) {
	d, err := sb.deploy(ctx, c.name()+"-idle", c)
	if err != nil {
		return nil, err
	}
	defer d.Stop()
	if err := waitSpread(ctx, d, c.shards); err != nil {
		return nil, err
	}
	time.Sleep(3 * time.Second)
	var out []float64
	for _, r := range d.Live() {
		v, err := vmHWM(r.PID())
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	tb.Logf("%s idle (no storm route): peak RSS %s MiB", c.name(), fmtList(out))
	return out, nil
}

func fmtList(vs []float64) string {
	var s []string
	for _, v := range vs {
		s = append(s, strconv.FormatFloat(v, 'f', 1, 64))
	}
	return strings.Join(s, ", ")
}

func maxOf(vs []float64) float64 {
	m := math.Inf(-1)
	for _, v := range vs {
		m = max(m, v)
	}
	return m
}

func meanOf(vs []float64) float64 {
	var s float64
	for _, v := range vs {
		s += v
	}
	return s / float64(len(vs))
}

// ---- one case ----

// caseResult is what runCase measured.
type caseResult struct {
	c                  shardCase
	converge, storm    time.Duration // start of the replicas (or the flip) → last successful status PATCH
	convTally, stTally patchTally
	rss                []float64 // peak RSS (VmHWM) of each replica after the convergence and the storm, MiB
	rssNow             []float64 // their RSS (VmRSS) then
	objects            []float64 // quietpatch_shard_objects of each replica
	unfiltered         bool      // a replica reported quietpatch_shard_unfiltered 1
	failover           *failoverResult
	samples            []ShardSample
}

// runCase deploys c on the storm routes, all of them wrong (the Gateway was
// flipped while no replica ran), and measures the first convergence, then
// a storm (the Gateway flipped while the replicas run, idle), the replicas'
// peak RSS, and with R > 1 a kill -9 of one replica and the join of a new
// one, sampling the shards each replica holds.
func (sb *shardBench) runCase(ctx context.Context, tb testing.TB, c shardCase) (caseResult, error) {
	res := caseResult{c: c}
	n := len(sb.s.keys)
	if err := sb.s.flip(ctx); err != nil {
		return res, err
	}
	wrong, done := sb.tr.arm()
	if wrong != n {
		return res, fmt.Errorf("%d of %d routes wrong after the flip, want all", wrong, n)
	}
	off, err := sb.auditSize()
	if err != nil {
		return res, err
	}
	start := time.Now()
	d, err := sb.deploy(ctx, c.name(), c)
	if err != nil {
		return res, err
	}
	defer d.Stop()
	tb.Logf("%s: %d replicas ready %v after their start", c.name(), c.replicas, time.Since(start).Round(time.Millisecond))
	if err := sb.tr.wait(ctx, tb, c.name()+" first convergence", done); err != nil {
		return res, err
	}
	evs, err := sb.readAudit(off)
	if err != nil {
		return res, err
	}
	res.convTally = sb.tally(evs, d.Username())
	res.converge = res.convTally.last.Sub(start)
	tb.Logf("%s: first convergence of %d routes in %v; %v", c.name(), n, res.converge.Round(time.Millisecond), res.convTally)
	if err := waitSpread(ctx, d, c.shards); err != nil {
		return res, err
	}
	time.Sleep(2 * time.Second)

	if off, err = sb.auditSize(); err != nil {
		return res, err
	}
	start = time.Now()
	if err := sb.s.flip(ctx); err != nil {
		return res, err
	}
	_, done = sb.tr.arm()
	if err := sb.tr.wait(ctx, tb, c.name()+" storm", done); err != nil {
		return res, err
	}
	if evs, err = sb.readAudit(off); err != nil {
		return res, err
	}
	res.stTally = sb.tally(evs, d.Username())
	res.storm = res.stTally.last.Sub(start)
	tb.Logf("%s: storm of %d routes in %v (%.1f routes/s); %v", c.name(), n, res.storm.Round(time.Millisecond),
		float64(n)/res.storm.Seconds(), res.stTally)
	if err := waitSpread(ctx, d, c.shards); err != nil {
		return res, err
	}
	for _, r := range d.Live() {
		v, err := vmHWM(r.PID())
		if err != nil {
			return res, err
		}
		res.rss = append(res.rss, v)
		m, err := r.Scrape(ctx)
		if err != nil {
			return res, err
		}
		objs := m.Sum(metricShardObjects)
		if !m.Has(metricShardObjects) {
			objs = math.NaN() // unsharded: one cache of every route
		}
		res.objects = append(res.objects, objs)
		res.unfiltered = res.unfiltered || m.Sum(metricShardUnfiltered) > 0
	}
	var now, competed []float64
	for _, r := range d.Live() {
		v, err := procStatus(r.PID(), "VmRSS:")
		if err != nil {
			return res, err
		}
		now = append(now, v)
		b, err := os.ReadFile(r.LogPath)
		if err != nil {
			return res, err
		}
		competed = append(competed, float64(bytes.Count(b, []byte("competing for shard"))))
	}
	res.rssNow = now
	tb.Logf("%s: peak RSS per replica %s MiB (RSS now %s MiB); objects cached %s; server-side filtering: %v; shards competed for since the start %s",
		c.name(), fmtList(res.rss), fmtList(now), fmtList(res.objects), !res.unfiltered, fmtList(competed))
	if c.replicas < 2 {
		return res, d.Stop()
	}

	smp := startSampler(ctx, d)
	time.Sleep(2 * time.Second)
	fo, err := sb.failover(ctx, tb, d, c, smp)
	if err != nil {
		smp.stop()
		return res, err
	}
	res.failover = &fo
	// The join: R-1 → R, once the survivors hold every shard.
	if err := waitSpread(ctx, d, c.shards); err != nil {
		smp.stop()
		return res, err
	}
	time.Sleep(2 * time.Second)
	joinAt := time.Now()
	smp.event(fmt.Sprintf("join %s-%d", d.Config().IdentityPrefix, len(d.Replicas())))
	r, err := d.AddReplica(ctx)
	if err != nil {
		smp.stop()
		return res, err
	}
	if err := waitSpread(ctx, d, c.shards); err != nil {
		smp.stop()
		return res, err
	}
	tb.Logf("%s: %s joined; shards spread again %v after its start", c.name(), r.Identity, time.Since(joinAt).Round(time.Millisecond))
	time.Sleep(3 * time.Second)
	res.samples = smp.stop()
	if err := sb.tr.wait(ctx, tb, c.name()+" after the join", func() <-chan struct{} { _, d := sb.tr.arm(); return d }()); err != nil {
		return res, err
	}
	return res, d.Stop()
}

// ---- failover ----

// failoverResult is the kill -9 of one replica: for each shard it held,
// how long after the kill a survivor acquired the shard's Lease (its first
// successful update of the Lease in the audit log) and answered its first
// successful status PATCH of a route of the shard.
type failoverResult struct {
	victim       string
	shards       []int
	lease, first map[int]time.Duration
	changed      int
}

func (f failoverResult) maxLease() time.Duration { return maxDur(f.lease) }
func (f failoverResult) maxFirst() time.Duration { return maxDur(f.first) }

func maxDur(m map[int]time.Duration) time.Duration {
	var out time.Duration
	for _, d := range m {
		out = max(out, d)
	}
	return out
}

func (f failoverResult) String() string {
	var parts []string
	for _, s := range f.shards {
		parts = append(parts, fmt.Sprintf("shard %d: Lease %.3f s, first write %.3f s", s, f.lease[s].Seconds(), f.first[s].Seconds()))
	}
	return fmt.Sprintf("kill -9 of %s (held shards %v), %d routes of its shards changed right after: %s",
		f.victim, f.shards, f.changed, strings.Join(parts, "; "))
}

// failover kills the live replica of d that holds the most shards, changes
// the spec of cfg.Changes routes of its shards right after (their desired
// status changes: observedGeneration), and waits until they converged.
func (sb *shardBench) failover(ctx context.Context, tb testing.TB, d *examplee2e.Deployment, c shardCase, smp *sampler) (failoverResult, error) {
	ctx, cancel := context.WithTimeout(ctx, 4*sb.cfg.Lease+10*time.Minute)
	defer cancel()
	ns := d.Config().Namespace
	leaseName := func(i int) string { return fmt.Sprintf("%s-shard-%d-of-%d", d.Config().LeaseName, i, c.shards) }
	holders := map[string][]int{}
	for i := range c.shards {
		l, err := sb.cp.AdminClient().CoordinationV1().Leases(ns).Get(ctx, leaseName(i), metav1.GetOptions{})
		if err != nil {
			return failoverResult{}, err
		}
		if l.Spec.HolderIdentity != nil {
			holders[*l.Spec.HolderIdentity] = append(holders[*l.Spec.HolderIdentity], i)
		}
	}
	var victim *examplee2e.Replica
	for _, r := range d.Live() {
		if victim == nil || len(holders[r.Identity]) > len(holders[victim.Identity]) {
			victim = r
		}
	}
	res := failoverResult{victim: victim.Identity, shards: holders[victim.Identity], lease: map[int]time.Duration{}, first: map[int]time.Duration{}}
	if len(res.shards) == 0 {
		return res, fmt.Errorf("no replica holds a shard Lease: %v", holders)
	}
	// Routes to change, spread over the victim's shards.
	per := max(1, sb.cfg.Changes/len(res.shards))
	count := map[int]int{}
	type pick struct {
		key   types.NamespacedName
		shard int
		gen   int64
	}
	var picks []pick
	for _, r := range sb.s.list() {
		i := shard.Of(r.UID, c.shards)
		if slices.Contains(res.shards, i) && count[i] < per {
			count[i]++
			picks = append(picks, pick{key: types.NamespacedName{Namespace: r.Namespace, Name: r.Name}, shard: i})
		}
	}
	res.changed = len(picks)
	off, err := sb.auditSize()
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	smp.event("kill -9 " + victim.Identity)
	victim.Kill()
	err = parallel(ctx, len(picks), 16, func(ctx context.Context, i int) error {
		p := &picks[i]
		cur, err := sb.s.lister.HTTPRoutes(p.key.Namespace).Get(p.key.Name)
		if err != nil {
			return err
		}
		next := int32(2)
		if wt := cur.Spec.Rules[0].BackendRefs[0].Weight; wt != nil && *wt == 2 {
			next = 1
		}
		body := fmt.Appendf(nil, `[{"op":"replace","path":"/spec/rules/0/backendRefs/0/weight","value":%d}]`, next)
		r, err := sb.w.gw.GatewayV1().HTTPRoutes(p.key.Namespace).Patch(ctx, p.key.Name, types.JSONPatchType, body,
			metav1.PatchOptions{FieldManager: fieldManager + "-failover"})
		if err == nil {
			p.gen = r.Generation
		}
		return err
	})
	if err != nil {
		return res, fmt.Errorf("changing the routes of the killed replica's shards: %w", err)
	}
	err = poll(ctx, 100*time.Millisecond, "the changed routes converged by the survivors", func() error {
		for _, p := range picks {
			r, err := sb.s.lister.HTTPRoutes(p.key.Namespace).Get(p.key.Name)
			if err != nil {
				return err
			}
			if r.Generation < p.gen || !routestatus.Equal(r.Status, sb.w.desired(r)) {
				return fmt.Errorf("%s (shard %d) not converged", p.key, p.shard)
			}
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	evs, err := sb.readAudit(off)
	if err != nil {
		return res, err
	}
	shardOf := map[types.NamespacedName]int{}
	for _, p := range picks {
		shardOf[p.key] = p.shard
	}
	for _, e := range evs {
		at := e.StageTimestamp.Sub(t0)
		switch {
		case e.is("patch", "httproutes", "status", 200):
			i, ok := shardOf[types.NamespacedName{Namespace: e.ObjectRef.Namespace, Name: e.ObjectRef.Name}]
			if prev, seen := res.first[i]; ok && (!seen || at < prev) {
				res.first[i] = at
			}
		case e.is("update", "leases", "", 200) && e.ObjectRef.Namespace == ns:
			for _, i := range res.shards {
				if prev, seen := res.lease[i]; e.ObjectRef.Name == leaseName(i) && (!seen || at < prev) {
					res.lease[i] = at
				}
			}
		}
	}
	for _, i := range res.shards {
		if _, ok := res.first[i]; !ok {
			return res, fmt.Errorf("no status write of shard %d's changed routes in the audit log after the kill", i)
		}
		if _, ok := res.lease[i]; !ok {
			return res, fmt.Errorf("no update of shard %d's Lease in the audit log after the kill", i)
		}
	}
	tb.Logf("%s: %v", c.name(), res)
	return res, nil
}

// ---- sampling the shards held ----

// sampler scrapes every live replica of a Deployment every 250 ms.
type sampler struct {
	begin   time.Time
	mu      sync.Mutex
	samples []ShardSample
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func startSampler(ctx context.Context, d *examplee2e.Deployment) *sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &sampler{begin: time.Now(), cancel: cancel}
	s.wg.Go(func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			for _, r := range d.Live() {
				m, err := r.Scrape(ctx)
				if err != nil {
					continue // killed, or exiting
				}
				s.add(ShardSample{T: time.Since(s.begin), Replica: r.Identity, Held: held(m), Running: int(m.Sum(metricShardRunning))})
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	return s
}

func (s *sampler) add(v ShardSample) {
	s.mu.Lock()
	s.samples = append(s.samples, v)
	s.mu.Unlock()
}

func (s *sampler) event(name string) { s.add(ShardSample{T: time.Since(s.begin), Event: name}) }

func (s *sampler) stop() []ShardSample {
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

// ---- the benchmark ----

// BenchmarkSharded measures quietpatch.NewSharded in the HTTPRoute
// example's binary, run as processes (package examplee2e's Deployment)
// against a control plane of its own whose API server has the feature gate
// ShardedListAndWatch on, over QP_PERF_SHARD_ROUTES HTTPRoutes (5,000; the
// large run sets 50,000 or more) on a Gateway of their own, created with
// an empty status 32 at a time. In order:
//
//   - idle: each case's replicas with no storm route (the fixtures' 400
//     routes and the dependencies only), for their peak RSS: the baseline
//     subtracted to isolate the route cache.
//   - plain-N for N in QP_PERF_SHARD_PLAIN (16, 64): the floor, the plain
//     client of BenchmarkStorm (flip the Gateway, N goroutines computing and
//     sending one merge patch per route as a status-only ServiceAccount);
//     routes/s to its last successful patch.
//   - r1-k1 (the unsharded example, the baseline), r1-kK and rR-kK (K =
//     QP_PERF_SHARD_K, 8; R = QP_PERF_SHARD_R, 4): the Gateway is flipped
//     with no replica running, then the replicas start: converge_s is
//     their start to the last successful status PATCH (the audit log), once
//     an informer shows every route at its desired status. Then, idle, the
//     Gateway flips again: storm_s, routes/s, storm/plain (routes/s over
//     the best plain-N's). Then peak RSS per replica (VmHWM, the largest of
//     the replicas: rss_MiB/replica; minus the idle baseline:
//     cache_MiB/replica; × R per route: cache_KiB/route) and their ratios to r1-k1 (rss_ratio,
//     cache_ratio; cache_ratio_xR = cache_ratio × R, goal ≤ 1.2).
//   - with R > 1: kill -9 of the replica holding the most shards, then
//     QP_PERF_K (50) routes of its shards change spec: failover_s, from the
//     kill to the first successful status PATCH of those routes in every
//     shard it held (the slowest shard), lease_s to the survivors'
//     acquisition of those shards' Leases (their first successful update);
//     then a new replica joins (R-1 → R). Every replica's
//     quietpatch_shard_held is scraped every 250 ms from before the kill
//     until the spread settles after the join: ShardsCSVFile and
//     ShardsPlotFile in QP_PERF_SHARD_PLOT (else QP_PLOTS_DIR, else
//     $TMPDIR/quietpatch-perf).
//   - plain-N-after (N the first of QP_PERF_SHARD_PLAIN): the floor again,
//     the machine's load having moved; the table's ratios take the best
//     plain-* of the run, the ratios reported here the best before the
//     cases.
//
// The replicas run with the example's defaults (adaptive workers, no
// client rate limit, Interval 10 s) and LeaseDuration QP_PERF_LEASE (15 s).
func BenchmarkSharded(b *testing.B) {
	cfg, err := loadShardConfig()
	if err != nil {
		b.Fatal(err)
	}
	ctx := benchContext(b, 4*time.Hour)
	cp, err := cluster.Start(ctx, cluster.Options{APIServerArgs: []string{shardGate}})
	if err != nil {
		b.Fatal(err)
	}
	defer cp.Stop()
	sb, err := newShardBench(ctx, b, cp, cfg, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer sb.w.stopInformers()
	cases := []shardCase{{1, 1}, {1, cfg.Shards}, {cfg.Replicas, cfg.Shards}}
	idle := map[string][]float64{}
	for _, c := range cases {
		v, err := sb.idleRSS(ctx, b, c)
		if err != nil {
			b.Fatalf("%s idle: %v", c.name(), err)
		}
		idle[c.name()] = v
	}
	if err := sb.createRoutes(ctx, b); err != nil {
		b.Fatal(err)
	}
	defer sb.s.stopInformer()
	n := cfg.Routes

	var bestPlain float64 // routes/s
	plain := func(name string, workers int) {
		b.Run(name, func(b *testing.B) {
			res, err := sb.s.runPlain(ctx, workers)
			if err != nil {
				b.Fatal(err)
			}
			rate := res.routesPerSecond(n)
			bestPlain = max(bestPlain, rate)
			b.Logf("%s: %d routes in %v (%.1f routes/s), %d patches answered (%d failed)", name, n,
				res.took.Round(time.Millisecond), rate, res.patches, res.failed)
			b.ReportMetric(rate, "routes/s")
		})
	}
	for _, workers := range cfg.Plain {
		plain(fmt.Sprintf("plain-%d", workers), workers)
	}
	var single *caseResult
	for _, c := range cases {
		b.Run(c.name(), func(b *testing.B) {
			res, err := sb.runCase(ctx, b, c)
			if err != nil {
				b.Fatal(err)
			}
			base := meanOf(idle[c.name()])
			rss := maxOf(res.rss)
			cacheMiB := rss - base
			b.ReportMetric(rss, "rss_MiB/replica")
			b.ReportMetric(meanOf(res.rss), "rss_mean_MiB/replica")
			b.ReportMetric(maxOf(res.rssNow), "rss_now_MiB/replica")
			b.ReportMetric(base, "idle_rss_MiB")
			b.ReportMetric(cacheMiB, "cache_MiB/replica")
			b.ReportMetric(cacheMiB*1024/float64(n)*float64(c.replicas), "cache_KiB/route")
			b.ReportMetric(res.converge.Seconds(), "converge_s")
			b.ReportMetric(res.storm.Seconds(), "storm_s")
			b.ReportMetric(float64(n)/res.storm.Seconds(), "routes/s")
			if bestPlain > 0 {
				b.ReportMetric(float64(n)/res.storm.Seconds()/bestPlain, "storm/plain")
				b.ReportMetric(float64(n)/res.converge.Seconds()/bestPlain, "converge/plain")
			}
			if c == cases[0] {
				single = &res
			} else if single != nil {
				srss := maxOf(single.rss)
				scache := srss - meanOf(idle[cases[0].name()])
				b.ReportMetric(rss/srss, "rss_ratio")
				b.ReportMetric(cacheMiB/scache, "cache_ratio")
				b.ReportMetric(cacheMiB/scache*float64(c.replicas), "cache_ratio_xR")
				b.Logf("%s: route cache per replica %.1f MiB against %.1f MiB for r1-k1: ratio %.3f, × R = %.3f (goal ≤ 1.2: %s)",
					c.name(), cacheMiB, scache, cacheMiB/scache, cacheMiB/scache*float64(c.replicas),
					map[bool]string{true: "met", false: "not met"}[cacheMiB/scache*float64(c.replicas) <= 1.2])
			}
			if res.failover != nil {
				b.ReportMetric(res.failover.maxFirst().Seconds(), "failover_s")
				b.ReportMetric(res.failover.maxLease().Seconds(), "lease_s")
			}
			if len(res.samples) > 0 {
				written, err := WriteShards(cfg.Plot, res.samples, c.shards)
				if err != nil {
					b.Error(err)
				}
				b.Logf("shards-held samples and plot: %v", written)
			}
		})
	}
	// The floor again, after the cases: the machine's load moves, and
	// the table's ratios take the best plain-* of the run.
	if len(cfg.Plain) > 0 {
		plain(fmt.Sprintf("plain-%d-after", cfg.Plain[0]), cfg.Plain[0])
	}
}

// TestShardedSmoke runs BenchmarkSharded's rR-kK case small, on a control
// plane of its own, so that make test catches its breakage: 300 routes, 2
// replicas, 4 shards, a 5 s Lease: the first convergence, the storm, the
// kill -9 and the join must complete; no figure is asserted.
func TestShardedSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	cp := cluster.StartT(t, cluster.Options{APIServerArgs: []string{shardGate}})
	cfg := shardConfig{Routes: 300, Shards: 4, Replicas: 2, Lease: 5 * time.Second, Changes: 8}
	sb, err := newShardBench(ctx, t, cp, cfg, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sb.w.stopInformers)
	if err := sb.createRoutes(ctx, t); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sb.s.stopInformer)
	res, err := sb.runCase(ctx, t, shardCase{cfg.Replicas, cfg.Shards})
	if err != nil {
		t.Fatal(err)
	}
	if res.failover == nil || len(res.samples) == 0 {
		t.Fatalf("no failover or samples: %+v", res)
	}
	if res.unfiltered {
		t.Error("the API server did not filter by ShardSelector with the gate on")
	}
}
