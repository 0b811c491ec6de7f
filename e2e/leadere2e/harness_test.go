package leadere2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/leader"
)

// Timings of the claimers under test: short, so that hand-overs take
// seconds, yet with room for a busy two-core machine (a renewal may take up
// to RenewGrace, four retries, before the claim is lost).
const (
	leaseDuration = 2 * time.Second
	renewGrace    = time.Second
	retryPeriod   = 250 * time.Millisecond
	callTimeout   = time.Second

	// slack is added to every bound a test asserts on a measured time:
	// what two cores shared with other jobs (a kube-apiserver, etcd, this
	// test binary and whatever else the machine runs) can add to a timer
	// firing late, a watch event arriving late and an API request taking
	// long, together. On an idle machine each of these takes milliseconds;
	// under a parallel build on the same two cores single requests have
	// been seen to take over a second. The tests assert the order of events
	// and the epochs exactly, and their safety bounds (never before a claim
	// ran out, never before a back-off ended) without slack; slack only
	// bounds how late something may happen.
	slack = 3 * time.Second
)

// claimerVerbs returns the verbs the claimer uses on leases: it reads with
// get (never list), watches with a field selector, creates a missing Lease
// and writes acquisitions, renewals and vacates as updates (never patch).
func claimerVerbs() []string { return []string{"get", "watch", "create", "update"} }

// env is one test's namespace, Lease name and the claimer log it keeps.
type env struct {
	cp    *cluster.ControlPlane
	ctx   context.Context // ends with the test
	ns    string
	lease string
	logs  *logBuffer
}

func newEnv(t *testing.T) *env {
	t.Helper()
	cp := shared.Get(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	ns, err := cp.NewNamespace(ctx, "leader-")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{cp: cp, ctx: ctx, ns: ns, lease: "quietpatch-leader", logs: &logBuffer{}}
	// Registered first, so it runs after every replica has stopped.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("claimer logs (namespace %s):\n%s", ns, e.logs.String())
		}
	})
	return e
}

// user is the name the API server (RBAC, audit) knows ServiceAccount sa by.
func (e *env) user(sa string) string { return cluster.ServiceAccountUsername(e.ns, sa) }

// identity returns a client config authenticating as ServiceAccount sa of
// the test namespace, granted verbs on leases there (none if verbs is
// empty), once RBAC enforces the grant.
func (e *env) identity(t *testing.T, sa string, verbs ...string) *rest.Config {
	t.Helper()
	cfg, err := e.cp.ConfigFor(e.ctx, e.ns, sa)
	if err != nil {
		t.Fatal(err)
	}
	// A claimer makes a few requests per second at most; client-go's
	// default limit (5/s, burst 10) would never bind, but set one that
	// plainly cannot delay a renewal.
	cfg.QPS, cfg.Burst = 50, 100
	if len(verbs) == 0 {
		return cfg
	}
	rule := rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: verbs}
	if err := e.cp.Grant(e.ctx, e.ns, sa, rule); err != nil {
		t.Fatal(err)
	}
	// The RBAC authorizer learns of new Roles through an informer: wait
	// until it allows every granted verb.
	sars := e.cp.AdminClient().AuthorizationV1().SubjectAccessReviews()
	poll(t, 15*time.Second, "RBAC grant to "+sa+" in effect", func() error {
		for _, v := range verbs {
			r, err := sars.Create(e.ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   e.user(sa),
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + e.ns, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: e.ns, Verb: v, Group: "coordination.k8s.io", Resource: "leases",
				},
			}}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			if !r.Status.Allowed {
				return fmt.Errorf("%s on leases not allowed yet", v)
			}
		}
		return nil
	})
	return cfg
}

// config is the claimer configuration the tests use, for identity id.
func (e *env) config(id string) leader.Config {
	return leader.Config{
		Namespace:     e.ns,
		Name:          e.lease,
		Identity:      id,
		LeaseDuration: leaseDuration,
		RenewGrace:    renewGrace,
		RetryPeriod:   retryPeriod,
		CallTimeout:   callTimeout,
		Logger:        slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

// replica is one claimer, running.
type replica struct {
	id     string // holder identity, also the ServiceAccount's name
	c      *leader.Claimer
	rec    *recorder
	cancel context.CancelFunc
	done   chan struct{} // closed when Run has returned
	err    error         // Run's result, readable once done is closed
	ended  time.Time     // when Run returned, readable once done is closed
}

// start runs a claimer with identity id (the ServiceAccount's name) and
// client config rc, with cfg from env.config adjusted by tune (if non-nil).
// It is stopped when the test ends.
func (e *env) start(t *testing.T, id string, rc *rest.Config, tune func(*leader.Config)) *replica {
	t.Helper()
	leases, err := leader.NewLeaseClient(rc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.config(id)
	if tune != nil {
		tune(&cfg)
	}
	c, err := leader.NewClaimer(leases, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{id: id, c: c, rec: newRecorder(c), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.WithoutCancel(e.ctx))
	r.cancel = cancel
	go func() {
		defer close(r.done)
		r.err = c.Run(ctx)
		r.ended = time.Now()
	}()
	t.Cleanup(func() {
		if _, err := r.stop(); err != nil {
			t.Error(err)
		}
		r.rec.close()
	})
	return r
}

// startClaimer is start with a fresh ServiceAccount id granted claimerVerbs.
func (e *env) startClaimer(t *testing.T, id string) *replica {
	t.Helper()
	return e.start(t, id, e.identity(t, id, claimerVerbs()...), nil)
}

// stop cancels Run's context and waits for Run to return (it vacates
// first, bounded by CallTimeout). It returns Run's result, and an error if
// Run did not return in time. Calling it again returns the same.
func (r *replica) stop() (runErr, err error) {
	r.cancel()
	return r.wait(callTimeout + 5*time.Second)
}

// wait waits up to d for Run to return, and returns its result.
func (r *replica) wait(d time.Duration) (runErr, err error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.done:
		return r.err, nil
	case <-t.C:
		return nil, fmt.Errorf("claimer %s: Run did not return within %v", r.id, d)
	}
}

// holds reports whether r believes it holds a current claim now.
func (r *replica) holds() bool { return r.c.Current().IsCurrentFor(r.id, time.Now()) }

// observation is a claim a subscriber received, and when.
type observation struct {
	at    time.Time
	claim leader.Claim
}

func (o observation) String() string {
	return fmt.Sprintf("{holder %q epoch %d expiry in %v, received %s}",
		o.claim.Holder, o.claim.Epoch, o.claim.Expiry.Sub(o.at).Round(time.Millisecond), o.at.Format("15:04:05.000"))
}

// recorder keeps every claim one claimer's subscription delivers, stamped
// with the time it was received.
type recorder struct {
	id     string
	stopCh func()
	done   chan struct{}

	mu  sync.Mutex
	obs []observation
}

func newRecorder(c *leader.Claimer) *recorder {
	ch, cancel := c.Subscribe()
	r := &recorder{id: c.Identity(), stopCh: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for cl := range ch {
			o := observation{at: time.Now(), claim: cl}
			r.mu.Lock()
			r.obs = append(r.obs, o)
			r.mu.Unlock()
		}
	}()
	return r
}

// close ends the subscription and waits for the recording goroutine.
func (r *recorder) close() {
	r.stopCh()
	<-r.done
}

func (r *recorder) all() []observation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.obs)
}

// acquiredAfter returns the first claim of our own under an epoch above
// after that was current when received: our first sight of an acquisition.
func (r *recorder) acquiredAfter(after int64) (observation, bool) {
	for _, o := range r.all() {
		if o.claim.Epoch > after && o.claim.IsCurrentFor(r.id, o.at) {
			return o, true
		}
	}
	return observation{}, false
}

// renewals counts the renewals of our claim under epoch: distinct expiries
// of current claims of our own under it, less the acquisition.
func (r *recorder) renewals(epoch int64) int {
	var exp []time.Time
	for _, o := range r.all() {
		if o.claim.Epoch == epoch && o.claim.IsCurrentFor(r.id, o.at) &&
			!slices.ContainsFunc(exp, o.claim.Expiry.Equal) {
			exp = append(exp, o.claim.Expiry)
		}
	}
	return max(len(exp)-1, 0)
}

// lastExpiry returns the latest expiry of any claim of holder under epoch
// that r received: for our own claim, when it ran out on our own
// reckoning; for another's, when it would have run out as we saw it.
func (r *recorder) lastExpiry(holder string, epoch int64) time.Time {
	var last time.Time
	for _, o := range r.all() {
		if o.claim.Holder == holder && o.claim.Epoch == epoch && o.claim.Expiry.After(last) {
			last = o.claim.Expiry
		}
	}
	return last
}

// waitAcquired waits until one of reps has seen itself acquire the lease
// under an epoch above after, and returns that replica and the observation.
func waitAcquired(t *testing.T, reps []*replica, after int64, within time.Duration) (*replica, observation) {
	t.Helper()
	var who *replica
	var got observation
	poll(t, within, fmt.Sprintf("a claimer acquires the lease under an epoch above %d", after), func() error {
		for _, r := range reps {
			if o, ok := r.rec.acquiredAfter(after); ok && (who == nil || o.at.Before(got.at)) {
				who, got = r, o
			}
		}
		if who == nil {
			return errors.New("none did; current claims: " + describe(reps))
		}
		return nil
	})
	return who, got
}

// waitRenewals waits until r has renewed its claim under epoch n times.
func waitRenewals(t *testing.T, r *replica, epoch int64, n int) {
	t.Helper()
	within := time.Duration(n)*(leaseDuration-renewGrace) + leaseDuration
	poll(t, within, fmt.Sprintf("%s renews its claim (epoch %d) %d times", r.id, epoch, n), func() error {
		if got := r.rec.renewals(epoch); got < n {
			return fmt.Errorf("%d renewals; current claims: %s", got, describe([]*replica{r}))
		}
		return nil
	})
}

// waitSees waits until r's current claim names holder under epoch.
func waitSees(t *testing.T, r *replica, holder string, epoch int64) {
	t.Helper()
	poll(t, 5*time.Second, fmt.Sprintf("%s sees %s hold epoch %d", r.id, holder, epoch), func() error {
		if c := r.c.Current(); c.Holder != holder || c.Epoch != epoch {
			return fmt.Errorf("it sees %s", describe([]*replica{r}))
		}
		return nil
	})
}

// waitSeesRenewal waits until r sees holder renew its claim under epoch:
// a claim of holder under epoch whose expiry is later than any r had
// received when waitSeesRenewal was called. Stopping holder right after
// leaves it nearly a whole LeaseDuration of claim, as r sees it.
func waitSeesRenewal(t *testing.T, r *replica, holder string, epoch int64) {
	t.Helper()
	before := r.rec.lastExpiry(holder, epoch)
	poll(t, leaseDuration+slack, fmt.Sprintf("%s sees %s renew its claim (epoch %d)", r.id, holder, epoch), func() error {
		if r.rec.lastExpiry(holder, epoch).After(before) {
			return nil
		}
		return fmt.Errorf("it sees %s", describe([]*replica{r}))
	})
}

// checkHandover checks, in every version of the Lease the administrator's
// watch hist delivered (up to the Lease as it is now), how the Lease
// passed from holder from under epoch to holder to: to's acquisition under
// epoch+1 must follow from's last version — right after from's vacate
// (holder cleared, epoch kept) if vacated, directly if not (from could not
// vacate).
func checkHandover(t *testing.T, e *env, hist *leaseHistory, from, to string, epoch int64, vacated bool) {
	t.Helper()
	lease, err := e.cp.AdminClient().CoordinationV1().Leases(e.ns).Get(e.ctx, e.lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vs := hist.waitFor(t, lease.ResourceVersion)
	last := -1
	for i, v := range vs {
		if v.holder == from && v.transitions == epoch {
			last = i
		}
	}
	if last < 0 {
		t.Errorf("the Lease's versions %v show no claim of %s under epoch %d", vs, from, epoch)
		return
	}
	next := vs[last+1:]
	if vacated {
		if len(next) == 0 || next[0].holder != "" || next[0].transitions != epoch {
			t.Errorf("after %s's last version under epoch %d the Lease's versions are %v, want its vacate (holder cleared, epoch %d) first", from, epoch, next, epoch)
			return
		}
		next = next[1:]
	}
	if len(next) == 0 || next[0].holder != to || next[0].transitions != epoch+1 {
		t.Errorf("the Lease's versions after %s's claim under epoch %d (vacated: %v) are %v, want %s's acquisition under epoch %d next",
			from, epoch, vacated, vs[last+1:], to, epoch+1)
	}
}

// describe lists the current claim of each replica, for failure messages.
func describe(reps []*replica) string {
	now := time.Now()
	var b strings.Builder
	for i, r := range reps {
		if i > 0 {
			b.WriteString(", ")
		}
		c := r.c.Current()
		fmt.Fprintf(&b, "%s: {holder %q epoch %d remaining %v}", r.id, c.Holder, c.Epoch, c.Remaining(now).Round(time.Millisecond))
	}
	return b.String()
}

// poll calls cond every 5 ms until it returns nil, and fails the test with
// its last error if that does not happen within d.
func poll(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, d, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// logBuffer collects the claimers' log records; the test prints them if it
// fails.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// seconds formats d as seconds with two decimals, for the logged figures.
func seconds(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }
