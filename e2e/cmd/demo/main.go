// Command demo is quietpatch's first command (`make demo`): the example
// HTTPRoute status controller on a real local control plane, end to end, in
// a few minutes, cleaning up after itself.
//
//  1. start etcd and kube-apiserver on loopback (package cluster);
//  2. install 1,000 HTTPRoutes across several namespaces, valid and invalid
//     (package fixtures);
//  3. run 3 controller replicas as separate processes under a
//     ServiceAccount holding exactly the RBAC of examples/httproute-status/deploy,
//     competing for one short Lease;
//  4. wait until every route has the status the fixtures expect;
//  5. change a few routes and count, from the API server's own metrics,
//     the status PATCHes over the next two intervals: exactly one per
//     changed route;
//  6. kill -9 the leader and measure the failover: until another replica
//     holds the Lease, and until its first status write (audit log); then
//     wait for the new leader's first full pass;
//  7. print a summary, with each replica's queue depth, its Peak-EWMA,
//     drops and patch outcomes scraped from its /metrics;
//  8. write a report: from step 3 on, every replica's /metrics is scraped
//     every 400 ms, and demo-metrics.svg plots the leader's queue depth,
//     its Peak-EWMA, its patch calls per second, its in-flight limit and
//     its latency Peak-EWMA over the demo, with the convergence, the
//     change and the failover marked; demo-metrics.csv holds the samples.
//     They go to .cache/demo/ in the repository (git-ignored; -report
//     sets another directory), which the clean-up leaves alone, and the
//     path is printed after the summary.
//
// It exits 0 when every check held, 1 with a message naming the step that
// failed otherwise. A failed demo writes its report too.
//
//	make demo                 # or: cd e2e && go run ./cmd/demo
//	go run ./cmd/demo -routes 2000 -keep
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/e2e/examplee2e"
	"github.com/quietpatch/quietpatch/examples/httproute-status/fixtures"
)

// flags are the demo's knobs; the defaults finish in a few minutes on two
// cores.
type flags struct {
	routes, namespaces, replicas, change, concurrency int
	interval, leaseDuration, renewGrace, retryPeriod  time.Duration
	workers                                           int
	qps                                               float64
	burst                                             int
	deadline                                          time.Duration
	keep                                              bool
	report                                            string
}

const (
	controllerName = "quietpatch.io/httproute-status"
	systemNS       = "quietpatch-system"
	serviceAccount = "httproute-status"
)

func main() {
	var f flags
	flag.IntVar(&f.routes, "routes", 1000, "HTTPRoutes to create")
	flag.IntVar(&f.namespaces, "namespaces", 5, "application namespaces the routes are spread across")
	flag.IntVar(&f.replicas, "replicas", 3, "controller replicas (separate processes)")
	flag.IntVar(&f.change, "change", 5, "routes to change in step 5")
	flag.IntVar(&f.concurrency, "concurrency", 8, "concurrent creates while installing the fixtures")
	flag.DurationVar(&f.interval, "interval", 5*time.Second, "controller --reconcile-interval")
	flag.DurationVar(&f.leaseDuration, "lease-duration", 4*time.Second, "controller --lease-duration")
	flag.DurationVar(&f.renewGrace, "renew-grace", time.Second, "controller --renew-grace")
	flag.DurationVar(&f.retryPeriod, "retry-period", 500*time.Millisecond, "controller --retry-period")
	flag.IntVar(&f.workers, "workers", 0, "controller --workers (patches in flight); 0: the controller's default, automatic")
	flag.Float64Var(&f.qps, "kube-qps", 0, "controller --kube-qps; 0: the controller's default, no client-side limit")
	flag.IntVar(&f.burst, "kube-burst", 0, "controller --kube-burst; 0: the controller's default")
	flag.DurationVar(&f.deadline, "step-deadline", 3*time.Minute, "deadline of each waiting step")
	flag.BoolVar(&f.keep, "keep", false, "keep the state directory (control plane, audit log, replica logs)")
	flag.StringVar(&f.report, "report", "", "directory for the report (demo-metrics.svg, demo-metrics.csv); default .cache/demo in the repository")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, f, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo FAILED: %v\n", err)
		os.Exit(1)
	}
}

// demo carries the state the steps share.
type demo struct {
	f   flags
	out io.Writer
	dir string

	cp     *cluster.ControlPlane
	binary string
	rbac   *examplee2e.RBAC
	set    *fixtures.Set
	want   examplee2e.Expectations
	deploy *examplee2e.Deployment
	sum    summary
	// patchesBefore is the API server's status PATCH count before the
	// replicas started.
	patchesBefore examplee2e.PatchCount
	started       time.Time
	// rec samples the replicas' /metrics from step 3 on, for the report;
	// stopSampling stops it and waits for it.
	rec          *recorder
	stopSampling func()
}

// samplePeriod is how often the recorder scrapes every replica.
const samplePeriod = 400 * time.Millisecond

// summary collects the figures of the final table.
type summary struct {
	controlPlane              cluster.Timings
	install                   time.Duration
	objects                   int
	converge                  time.Duration
	initialPatches            examplee2e.PatchCount
	changed                   int
	changePatches             examplee2e.PatchCount
	changeWindow              time.Duration
	killed                    string
	leaseTakeover, firstWrite time.Duration
	failoverConverge          time.Duration
	newLeader                 string
	killedScrape              examplee2e.Metrics
}

func run(ctx context.Context, f flags, out io.Writer) (err error) {
	switch {
	case f.routes < 1 || f.namespaces < 1 || f.replicas < 2:
		return errors.New("need -routes >= 1, -namespaces >= 1 and -replicas >= 2 (failover needs a second replica)")
	case f.change < 1 || f.change > f.routes/fixtures.NumCases:
		return fmt.Errorf("-change must be between 1 and %d for %d routes", f.routes/fixtures.NumCases, f.routes)
	}
	d := &demo{f: f, out: out, started: time.Now()}
	if d.dir, err = os.MkdirTemp("", "quietpatch-demo-"); err != nil {
		return err
	}
	defer func() {
		if err != nil || f.keep {
			fmt.Fprintf(out, "\nstate kept in %s (control plane logs, audit.log, replica logs)\n", d.dir)
			return
		}
		_ = os.RemoveAll(d.dir)
	}()
	fmt.Fprintf(out, "quietpatch demo: the HTTPRoute status controller on a real kube-apiserver (state in %s)\n", d.dir)

	steps := []struct {
		title string
		run   func(context.Context) error
	}{
		{"Local control plane: etcd + kube-apiserver on 127.0.0.1, Gateway API CRDs", d.startControlPlane},
		{fmt.Sprintf("Fixtures: %d HTTPRoutes in %d namespaces, valid and invalid", f.routes, f.namespaces), d.installFixtures},
		{fmt.Sprintf("Controller: %d replicas as separate processes, least privilege, one Lease", f.replicas), d.startController},
		{"Convergence: every route gets the status the fixtures expect", d.converge},
		{fmt.Sprintf("Change %d routes: only those are patched", f.change), d.changeRoutes},
		{"Failover: kill -9 the leader", d.failover},
	}
	defer d.cleanup()
	defer func() {
		if rerr := d.report(); rerr != nil && err == nil {
			err = rerr
		}
	}()
	for i, s := range steps {
		fmt.Fprintf(out, "\n== %d. %s\n", i+1, s.title)
		sctx, cancel := context.WithTimeout(ctx, f.deadline)
		err := s.run(sctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("%w (interrupted)", err)
			} else if errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("%w (step deadline %v; raise it with -step-deadline on a slow machine)", err, f.deadline)
			}
			return fmt.Errorf("step %d (%s): %w", i+1, s.title, err)
		}
	}
	fmt.Fprintf(out, "\n== %d. Summary\n", len(steps)+1)
	return d.summarize(ctx)
}

func (d *demo) cleanup() {
	if d.deploy != nil {
		fmt.Fprintf(d.out, "\nstopping the controller replicas ...\n")
		_ = d.deploy.Stop()
	}
	if d.cp != nil {
		fmt.Fprintf(d.out, "stopping the control plane ...\n")
		if err := d.cp.Stop(); err != nil {
			fmt.Fprintf(d.out, "stopping the control plane: %v\n", err)
		}
	}
	fmt.Fprintf(d.out, "done in %v\n", time.Since(d.started).Round(time.Second))
}

func (d *demo) printf(format string, args ...any) {
	fmt.Fprintf(d.out, "   "+format+"\n", args...)
}

// ---- step 1 ----

func (d *demo) startControlPlane(ctx context.Context) error {
	examples, err := examplee2e.ExamplesDir()
	if err != nil {
		return err
	}
	type built struct {
		path string
		took time.Duration
		err  error
	}
	ch := make(chan built, 1)
	go func() {
		p, took, err := examplee2e.BuildController(ctx, examples, d.dir)
		ch <- built{p, took, err}
	}()
	d.cp, err = cluster.Start(ctx, cluster.Options{Dir: filepath.Join(d.dir, "cluster")})
	b := <-ch
	if err != nil {
		return err
	}
	if b.err != nil {
		return b.err
	}
	d.binary = b.path
	t := d.cp.Timings()
	d.sum.controlPlane = t
	d.printf("etcd ready in %v, kube-apiserver ready in %v, Gateway API CRDs established in %v: %v in all",
		t.Etcd.Round(time.Millisecond), t.APIServer.Round(time.Millisecond), t.GatewayAPI.Round(time.Millisecond), t.Total.Round(time.Millisecond))
	d.printf("API server %s; admin kubeconfig %s", d.cp.Host(), d.cp.KubeconfigPath())
	d.printf("controller built meanwhile (go build %s in %s) in %v", examplee2e.ControllerPackage, examples, b.took.Round(time.Millisecond))
	d.rbac, err = examplee2e.LoadRBAC(examplee2e.DeployDir(examples))
	return err
}

// ---- step 2 ----

func (d *demo) installFixtures(ctx context.Context) error {
	set, err := fixtures.Generate(fixtures.Config{Routes: d.f.routes, Namespaces: d.f.namespaces, Prefix: "demo", ControllerName: controllerName})
	if err != nil {
		return err
	}
	d.set, d.want = set, examplee2e.ExpectFixtures(set)
	byCase := map[fixtures.Case]int{}
	for _, e := range set.Expected {
		byCase[e.Case]++
	}
	var cases []string
	for c := range fixtures.NumCases {
		cases = append(cases, fmt.Sprintf("%s %d", fixtures.Case(c), byCase[fixtures.Case(c)]))
	}
	d.printf("cases: %s", strings.Join(cases, ", "))
	objs := set.Objects()
	b := newBar(d.out, "objects created")
	begin := time.Now()
	err = examplee2e.Install(ctx, d.cp, objs, d.f.concurrency, b.set)
	b.finish()
	if err != nil {
		return err
	}
	d.sum.install, d.sum.objects = time.Since(begin), len(objs)
	d.printf("%d objects (%d namespaces, a GatewayClass, a Gateway, %d Services, %d ReferenceGrants, %d HTTPRoutes) in %v, as the admin with no client rate limit, %d at a time",
		len(objs), len(set.Namespaces), len(set.Services), len(set.ReferenceGrants), len(set.Routes), d.sum.install.Round(time.Millisecond), d.f.concurrency)
	return nil
}

// ---- step 3 ----

func (d *demo) startController(ctx context.Context) error {
	var err error
	// Every status write from here on is the controller's.
	if d.patchesBefore, err = examplee2e.CountPatches(ctx, d.cp); err != nil {
		return err
	}
	d.printf("identity %s, granted exactly the RBAC of deploy/ (%s):", cluster.ServiceAccountUsername(systemNS, serviceAccount), strings.Join(d.rbac.Files, ", "))
	for _, r := range d.rbac.Rules() {
		d.printf("  %s", r)
	}
	d.rec = &recorder{start: time.Now()} // the report's time 0
	d.deploy, err = examplee2e.Deploy(ctx, d.cp, examplee2e.Config{
		Binary:            d.binary,
		Dir:               filepath.Join(d.dir, "replicas"),
		RBAC:              d.rbac,
		Namespace:         systemNS,
		ServiceAccount:    serviceAccount,
		Replicas:          d.f.replicas,
		ControllerName:    controllerName,
		LeaseDuration:     d.f.leaseDuration,
		RenewGrace:        d.f.renewGrace,
		RetryPeriod:       d.f.retryPeriod,
		ReconcileInterval: d.f.interval,
		PatchTimeout:      5 * time.Second,
		Workers:           d.f.workers,
		KubeQPS:           d.f.qps,
		KubeBurst:         d.f.burst,
	})
	if err != nil {
		return err
	}
	d.rec.mark(time.Now(), "replicas ready", false)
	d.startSampling()
	reps := d.deploy.Replicas()
	d.printf("flags: %s", strings.Join(flagsOnly(reps[0].Args), " "))
	for _, r := range reps {
		d.printf("%s  pid %-7d metrics %s  health %s/readyz  log %s", r.Identity, r.PID(), r.MetricsURL, r.HealthURL, r.LogPath)
	}
	d.printf("all %d replicas ready (caches synced, lease loop running)", len(reps))
	return nil
}

// flagsOnly drops the per-replica and path flags from a replica's arguments.
func flagsOnly(args []string) []string {
	var out []string
	for _, a := range args {
		if strings.HasPrefix(a, "--identity=") || strings.HasPrefix(a, "--metrics-addr=") ||
			strings.HasPrefix(a, "--health-addr=") || strings.HasPrefix(a, "--kubeconfig=") {
			continue
		}
		out = append(out, a)
	}
	return out
}

// startSampling runs the recorder until stopSampling is called.
func (d *demo) startSampling() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.rec.run(ctx, samplePeriod, d.deploy.Live)
	}()
	d.stopSampling = func() { cancel(); <-done }
}

// ---- step 4 ----

func (d *demo) converge(ctx context.Context) error {
	begin := time.Now()
	b := newBar(d.out, "routes with the expected status")
	_, err := examplee2e.WaitConverged(ctx, d.cp.AdminGatewayClient(), d.want, 200*time.Millisecond, func(c examplee2e.Census) {
		b.set(c.Converged, c.Expected)
	})
	b.finish()
	if err != nil {
		return err
	}
	d.sum.converge = time.Since(begin)
	d.rec.mark(time.Now(), "all routes converged", false)
	leader, err := d.deploy.WaitLeader(ctx)
	if err != nil {
		return err
	}
	// Let the leader finish a pass over the converged state, so that the
	// count includes the patches computed from a not-yet-updated cache.
	if err := examplee2e.Settle(ctx, []*examplee2e.Replica{leader}); err != nil {
		return err
	}
	after, err := examplee2e.CountPatches(ctx, d.cp)
	if err != nil {
		return err
	}
	d.sum.initialPatches = after.Sub(d.patchesBefore)
	d.printf("all %d routes converged %v after the replicas were ready; leader %s", len(d.want), d.sum.converge.Round(time.Millisecond), leader.Identity)
	d.printf("status PATCHes since the replicas started (API server's apiserver_request_total): %s for %d routes", d.sum.initialPatches, len(d.want))
	d.printf("(a conflict is a patch computed from a cache that had not yet seen the route's latest write; the next pass recomputes it)")
	if d.sum.initialPatches.OK < float64(len(d.want)) {
		return fmt.Errorf("%s successful status PATCHes for %d routes that each needed a first status", fmtF(d.sum.initialPatches.OK), len(d.want))
	}
	return nil
}

// ---- step 5 ----

// change is one route edit and the status it must lead to.
type change struct {
	nn       types.NamespacedName
	from, to fixtures.Case
	backend  gatewayv1.ObjectName
}

// pickChanges takes routes alternately from the Valid case (their backend
// becomes a Service that does not exist) and the MissingBackend case (their
// backend is fixed).
func (d *demo) pickChanges(n int) []change {
	var valid, missing []change
	for i, r := range d.set.Routes {
		nn := types.NamespacedName{Namespace: r.Namespace, Name: r.Name}
		switch d.set.Expected[i].Case {
		case fixtures.Valid:
			valid = append(valid, change{nn: nn, from: fixtures.Valid, to: fixtures.MissingBackend, backend: "missing"})
		case fixtures.MissingBackend:
			missing = append(missing, change{nn: nn, from: fixtures.MissingBackend, to: fixtures.Valid, backend: "backend"})
		}
	}
	var out []change
	for i := 0; len(out) < n; i++ {
		out = append(out, valid[i])
		if len(out) < n {
			out = append(out, missing[i])
		}
	}
	return out
}

// apply edits the route's first backend and records the new expectation.
func (d *demo) apply(ctx context.Context, c change) error {
	routes := d.cp.AdminGatewayClient().GatewayV1().HTTPRoutes(c.nn.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		r, err := routes.Get(ctx, c.nn.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		r.Spec.Rules[0].BackendRefs[0].Name = c.backend
		_, err = routes.Update(ctx, r, metav1.UpdateOptions{FieldManager: "quietpatch-demo"})
		return err
	})
	if err != nil {
		return fmt.Errorf("changing %s: %w", c.nn, err)
	}
	d.want[c.nn] = []examplee2e.Want{examplee2e.WantFor(controllerName, c.to.Expect())}
	return nil
}

// waitRoutes polls the named routes (GET each) until they meet d.want.
func (d *demo) waitRoutes(ctx context.Context, names ...types.NamespacedName) error {
	sub := examplee2e.Expectations{}
	for _, nn := range names {
		sub[nn] = d.want[nn]
	}
	return examplee2e.Poll(ctx, 20*time.Millisecond, func(ctx context.Context) error {
		var routes []gatewayv1.HTTPRoute
		for _, nn := range names {
			r, err := d.cp.AdminGatewayClient().GatewayV1().HTTPRoutes(nn.Namespace).Get(ctx, nn.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			routes = append(routes, *r)
		}
		return sub.Census(routes).Err()
	})
}

func (d *demo) changeRoutes(ctx context.Context) error {
	leader, err := d.deploy.WaitLeader(ctx)
	if err != nil {
		return err
	}
	changes := d.pickChanges(d.f.change)
	before, err := examplee2e.CountPatches(ctx, d.cp)
	if err != nil {
		return err
	}
	begin := time.Now()
	d.rec.mark(begin, fmt.Sprintf("%d routes changed", len(changes)), false)
	var names []types.NamespacedName
	for _, c := range changes {
		if err := d.apply(ctx, c); err != nil {
			return err
		}
		e := c.to.Expect()
		d.printf("%-24s %-14s -> backend %-8q expect Accepted=%s ResolvedRefs=%s", c.nn, c.from, c.backend, e.Accepted, e.ResolvedRefs)
		names = append(names, c.nn)
	}
	if err := d.waitRoutes(ctx, names...); err != nil {
		return err
	}
	d.printf("the %d routes have their new status %v after the first edit", len(changes), time.Since(begin).Round(time.Millisecond))
	// The window: two full reconcile passes of the leader after the
	// changes, i.e. two intervals in which all 1,000+ routes were compared.
	if err := examplee2e.WaitPasses(ctx, []*examplee2e.Replica{leader}, 2); err != nil {
		return err
	}
	after, err := examplee2e.CountPatches(ctx, d.cp)
	if err != nil {
		return err
	}
	d.sum.changed, d.sum.changePatches, d.sum.changeWindow = len(changes), after.Sub(before), time.Since(begin)
	d.printf("status PATCHes from the edits until 2 more full passes of the leader (%v): %s; routes changed: %d",
		d.sum.changeWindow.Round(time.Millisecond), d.sum.changePatches, len(changes))
	if d.sum.changePatches.OK != float64(len(changes)) {
		return fmt.Errorf("%s status PATCHes succeeded for %d changed routes: want exactly one per changed route", fmtF(d.sum.changePatches.OK), len(changes))
	}
	return nil
}

// ---- step 6 ----

func (d *demo) failover(ctx context.Context) error {
	leader, err := d.deploy.WaitLeader(ctx)
	if err != nil {
		return err
	}
	if d.sum.killedScrape, err = leader.Scrape(ctx); err != nil {
		return err
	}
	// Revert the first change right after the kill: the new leader must
	// write it, and the audit log says when it first did.
	revert := d.pickChanges(1)[0]
	revert.from, revert.to, revert.backend = revert.to, revert.from, "backend"

	killedAt := time.Now()
	leader.Kill()
	d.rec.mark(killedAt, "kill -9 "+leader.Identity, true)
	d.sum.killed = leader.Identity
	d.printf("killed the leader %s (pid %d) with SIGKILL: no shutdown, the Lease is not vacated", leader.Identity, leader.PID())
	if err := d.apply(ctx, revert); err != nil {
		return err
	}
	d.printf("changed %s back (%s -> backend %q) right after", revert.nn, revert.from, revert.backend)

	next, err := d.deploy.WaitLeader(ctx, leader.Identity)
	if err != nil {
		return err
	}
	d.sum.leaseTakeover, d.sum.newLeader = time.Since(killedAt), next.Identity
	d.rec.mark(killedAt.Add(d.sum.leaseTakeover), next.Identity+" holds the Lease", true)
	d.printf("%s holds the Lease %v after the kill (lease duration %v, retry period %v)",
		next.Identity, d.sum.leaseTakeover.Round(time.Millisecond), d.f.leaseDuration, d.f.retryPeriod)

	var first time.Time
	err = examplee2e.Poll(ctx, 50*time.Millisecond, func(context.Context) error {
		evs, err := d.cp.FindAuditEvents(cluster.AuditFilter{Verb: "patch", Username: d.deploy.Username(), Resource: "httproutes", Subresource: "status"})
		if err != nil {
			return err
		}
		for _, e := range evs {
			if t := e.StageTimestamp.Time; t.After(killedAt) {
				first = t
				return nil
			}
		}
		return errors.New("no status write since the kill in the audit log")
	})
	if err != nil {
		return err
	}
	d.sum.firstWrite = first.Sub(killedAt)
	d.printf("first status write after the kill: %v after it (audit log, user %s, at %s)",
		d.sum.firstWrite.Round(time.Millisecond), d.deploy.Username(), first.Format("15:04:05.000"))
	if err := d.waitRoutes(ctx, revert.nn); err != nil {
		return err
	}
	d.sum.failoverConverge = time.Since(killedAt)
	d.printf("%s has its status back %v after the kill", revert.nn, d.sum.failoverConverge.Round(time.Millisecond))

	// Everything else is still right.
	census, err := examplee2e.WaitConverged(ctx, d.cp.AdminGatewayClient(), d.want, 200*time.Millisecond, nil)
	if err != nil {
		return err
	}
	d.printf("all %d routes still have their expected status", census.Converged)
	// The new leader's own passes, for the record and for the report.
	if err := examplee2e.Settle(ctx, []*examplee2e.Replica{next}); err != nil {
		return err
	}
	d.printf("%s finished a full pass since the failover, with nothing left queued or in flight", next.Identity)
	return nil
}

// ---- step 7 ----

func (d *demo) summarize(ctx context.Context) error {
	s := &d.sum
	f := d.f
	valid := 0
	for _, e := range d.set.Expected {
		if e.Accepted == gatewayv1.RouteReasonAccepted && e.ResolvedRefs == gatewayv1.RouteReasonResolvedRefs {
			valid++
		}
	}
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "   %s\t%s\n", k, v) }
	row("control plane start", fmt.Sprintf("%v (etcd %v, kube-apiserver %v, CRDs %v)", s.controlPlane.Total.Round(time.Millisecond),
		s.controlPlane.Etcd.Round(time.Millisecond), s.controlPlane.APIServer.Round(time.Millisecond), s.controlPlane.GatewayAPI.Round(time.Millisecond)))
	row("routes", fmt.Sprintf("%d in %d namespaces (%d valid, %d invalid); %d objects installed in %v",
		len(d.set.Routes), f.namespaces, valid, len(d.set.Routes)-valid, s.objects, s.install.Round(time.Millisecond)))
	flags := fmt.Sprintf("--reconcile-interval %v --lease-duration %v", f.interval, f.leaseDuration)
	for _, fl := range []struct {
		name string
		v    float64
	}{{"workers", float64(f.workers)}, {"kube-qps", f.qps}, {"kube-burst", float64(f.burst)}} {
		if fl.v != 0 {
			flags += fmt.Sprintf(" --%s %g", fl.name, fl.v)
		}
	}
	row("replicas", fmt.Sprintf("%d; %s (other flags: the controller's defaults)", f.replicas, flags))
	row("converge time", s.converge.Round(time.Millisecond).String())
	row("PATCH, initial convergence", fmt.Sprintf("%s for %d routes to write", s.initialPatches, len(d.set.Routes)))
	row("PATCH, change step", fmt.Sprintf("%s for %d routes changed (window %v: 2 full passes)", s.changePatches, s.changed, s.changeWindow.Round(time.Millisecond)))
	row("failover: Lease taken", fmt.Sprintf("%v after kill -9 of %s, by %s", s.leaseTakeover.Round(time.Millisecond), s.killed, s.newLeader))
	row("failover: first write", fmt.Sprintf("%v after the kill (audit log); changed route converged after %v", s.firstWrite.Round(time.Millisecond), s.failoverConverge.Round(time.Millisecond)))
	if err := tw.Flush(); err != nil {
		return err
	}

	// Per replica, from its /metrics (the killed one: its last scrape).
	fmt.Fprintln(d.out)
	holder, err := d.deploy.Holder(ctx)
	if err != nil {
		return err
	}
	tw = tabwriter.NewWriter(d.out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "   replica\trole\tqueue depth\tdepth Peak-EWMA\tcapacity\tpasses\tpatches by outcome\tdrops by reason\n")
	names := map[string]bool{}
	for _, r := range d.deploy.Replicas() {
		var m examplee2e.Metrics
		role := "follower"
		switch {
		case r.Exited() && r.Identity == s.killed:
			m, role = s.killedScrape, "killed (scraped before the kill)"
		case r.Exited():
			role = "exited"
		default:
			if m, err = r.Scrape(ctx); err != nil {
				return err
			}
			if r.Identity == holder {
				role = "leader"
			}
		}
		for _, n := range m.Names("quietpatch_", "httproute") {
			names[n] = true
		}
		drops := map[string]float64{}
		for k, v := range m.ByLabel(examplee2e.MetricQueueDropped, "reason") {
			drops["queue/"+k] += v
		}
		for k, v := range m.ByLabel(examplee2e.MetricDispatchDropped, "reason") {
			drops["dispatch/"+k] += v
		}
		fmt.Fprintf(tw, "   %s\t%s\t%s\t%.3f\t%s\t%s\t%s\t%s\n", r.Identity, role,
			fmtF(m.Sum(examplee2e.MetricQueueDepth)), m.Sum(examplee2e.MetricQueueDepthEWMA), fmtF(m.Sum(examplee2e.MetricQueueCapacity)),
			fmtF(m.Passes()), kv(m.ByLabel(examplee2e.MetricDispatchPatches, "outcome")), kv(drops))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "\n   metric families found: %s\n", strings.Join(slices.Sorted(maps.Keys(names)), " "))
	for _, want := range []string{examplee2e.MetricQueueDepth, examplee2e.MetricQueueDepthEWMA, examplee2e.MetricDispatchPatches, examplee2e.MetricReconcileDuration} {
		if !names[want] {
			return fmt.Errorf("summary: no replica exports %s", want)
		}
	}
	fmt.Fprintf(d.out, "\n   OK: every route converged, only changed routes were patched, a successor took over after kill -9.\n")
	return nil
}

// ---- step 8 ----

// report stops the sampling and writes the report, if the replicas were
// sampled at all, into -report or .cache/demo of the repository, and says
// where.
func (d *demo) report() error {
	if d.stopSampling == nil {
		return nil
	}
	d.stopSampling()
	dir := d.f.report
	if dir == "" {
		examples, err := examplee2e.ExamplesDir()
		if err != nil {
			return fmt.Errorf("report: %w", err)
		}
		dir = filepath.Join(filepath.Dir(examples), ".cache", "demo")
	}
	path, n, err := d.rec.write(dir)
	if err != nil {
		fmt.Fprintf(d.out, "\n   report not written: %v\n", err)
		return fmt.Errorf("report: %w", err)
	}
	fmt.Fprintf(d.out, "\n   report: %s\n", path)
	d.printf("the leader's queue depth, its Peak-EWMA, patch calls/s, in-flight limit and latency Peak-EWMA over the demo, the failover in red;")
	d.printf("from %d scrapes of the replicas' /metrics, one every %v per replica (samples: %s)", n, samplePeriod, filepath.Join(dir, reportCSV))
	return nil
}

func fmtF(v float64) string { return fmt.Sprintf("%.0f", v) }

// kv formats a map as "a=1 b=2", sorted by key, or "-" when empty or all zero.
func kv(m map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s=%.0f", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}
