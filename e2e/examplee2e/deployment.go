package examplee2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quietpatch/quietpatch/e2e/cluster"
)

// Config describes a Deployment: the controller binary, the identity its
// replicas run as, and the flags they share. Zero durations and counts leave
// the controller's own default, except where noted.
type Config struct {
	// Binary is the controller executable (BuildController). Required.
	Binary string
	// Dir receives the kubeconfig and one log file per replica. Required.
	Dir string
	// RBAC is granted to the ServiceAccount (LoadRBAC). Required.
	RBAC *RBAC

	// Namespace holds the ServiceAccount and the Lease; it is created if
	// missing. Required.
	Namespace string
	// ServiceAccount the replicas run as. Default "httproute-status".
	ServiceAccount string
	// Replicas is the number of processes. Default 1.
	Replicas int
	// IdentityPrefix names the replicas PREFIX-0, PREFIX-1, ... (their
	// --identity). Default the ServiceAccount name.
	IdentityPrefix string

	// ControllerName (--controller-name).
	ControllerName string
	// LeaseName (--lease-name). Default DefaultLeaseName, the name the
	// deploy Role's resourceNames allow: use another only with RBAC that
	// allows it. Deployments that must not share a Lease take different
	// Namespaces.
	LeaseName string
	// Durations of the claim (--lease-duration, --renew-grace,
	// --retry-period), the interval (--reconcile-interval) and the patch
	// timeout (--patch-timeout).
	LeaseDuration, RenewGrace, RetryPeriod time.Duration
	ReconcileInterval, PatchTimeout        time.Duration
	// Workers (--workers), QueueCapacity (--queue-capacity).
	Workers, QueueCapacity int
	// Shards (--shards): the shard count K; 0 or 1 runs one Lease. With
	// K > 1 the RBAC must include the Role of ShardsDeployDir.
	Shards int
	// KubeQPS and KubeBurst (--kube-qps, --kube-burst). Zero leaves the
	// controller's default: no client-side limit.
	KubeQPS   float64
	KubeBurst int
	// LogLevel (--log-level). Default "info".
	LogLevel string
	// ExtraArgs are appended to the flags above.
	ExtraArgs []string

	// ReadyTimeout bounds the wait for each replica's /readyz. Default 2 min.
	ReadyTimeout time.Duration
	// StopGrace is how long a replica may take to exit after SIGTERM in
	// Stop before it gets SIGKILL. Default 10 s.
	StopGrace time.Duration
}

func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Binary == "":
		return c, fmt.Errorf("%w: Config.Binary must be set", ErrInvalidConfig)
	case c.Dir == "":
		return c, fmt.Errorf("%w: Config.Dir must be set", ErrInvalidConfig)
	case c.RBAC == nil:
		return c, fmt.Errorf("%w: Config.RBAC must be set", ErrInvalidConfig)
	case c.Namespace == "":
		return c, fmt.Errorf("%w: Config.Namespace must be set", ErrInvalidConfig)
	case c.Replicas < 0:
		return c, fmt.Errorf("%w: Config.Replicas must be >= 0, got %d", ErrInvalidConfig, c.Replicas)
	case c.Shards < 0:
		return c, fmt.Errorf("%w: Config.Shards must be >= 0, got %d", ErrInvalidConfig, c.Shards)
	}
	if c.ServiceAccount == "" {
		c.ServiceAccount = "httproute-status"
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.IdentityPrefix == "" {
		c.IdentityPrefix = c.ServiceAccount
	}
	if c.LeaseName == "" {
		c.LeaseName = DefaultLeaseName
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = 2 * time.Minute
	}
	if c.StopGrace == 0 {
		c.StopGrace = 10 * time.Second
	}
	return c, nil
}

// args are the flags every replica gets, --identity, --metrics-addr and
// --health-addr aside.
func (c Config) args(kubeconfig string) []string {
	a := []string{"--kubeconfig=" + kubeconfig, "--lease-namespace=" + c.Namespace, "--log-level=" + c.LogLevel}
	str := func(flag, v string) {
		if v != "" {
			a = append(a, "--"+flag+"="+v)
		}
	}
	dur := func(flag string, d time.Duration) {
		if d != 0 {
			a = append(a, "--"+flag+"="+d.String())
		}
	}
	num := func(flag string, n int) {
		if n != 0 {
			a = append(a, "--"+flag+"="+strconv.Itoa(n))
		}
	}
	str("controller-name", c.ControllerName)
	str("lease-name", c.LeaseName)
	dur("lease-duration", c.LeaseDuration)
	dur("renew-grace", c.RenewGrace)
	dur("retry-period", c.RetryPeriod)
	dur("reconcile-interval", c.ReconcileInterval)
	dur("patch-timeout", c.PatchTimeout)
	num("workers", c.Workers)
	num("queue-capacity", c.QueueCapacity)
	num("shards", c.Shards)
	if c.KubeQPS != 0 {
		a = append(a, "--kube-qps="+strconv.FormatFloat(c.KubeQPS, 'g', -1, 64))
	}
	num("kube-burst", c.KubeBurst)
	return append(a, c.ExtraArgs...)
}

// Deployment is a set of controller replicas running as separate processes
// under one least-privilege ServiceAccount, like a Kubernetes Deployment of
// the example. Create it with Deploy; stop it with Stop. Its methods are
// safe for concurrent use.
type Deployment struct {
	cp         *cluster.ControlPlane
	cfg        Config
	kubeconfig string
	spawner    *cluster.Spawner

	mu       sync.Mutex
	replicas []*Replica
	stopped  bool
}

// Deploy creates the ServiceAccount, grants it cfg.RBAC, writes a kubeconfig
// with a token for it into cfg.Dir, starts cfg.Replicas replicas and waits
// until each answers /readyz (caches synced, lease loop running). On error,
// whatever started is stopped again.
func Deploy(ctx context.Context, cp *cluster.ControlPlane, cfg Config) (*Deployment, error) {
	if !supported {
		return nil, ErrUnsupported
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("examplee2e: %w", err)
	}
	rc, err := cp.ConfigFor(ctx, cfg.Namespace, cfg.ServiceAccount)
	if err != nil {
		return nil, err
	}
	if err := cfg.RBAC.Apply(ctx, cp.AdminClient(), cfg.Namespace, cfg.ServiceAccount); err != nil {
		return nil, err
	}
	d := &Deployment{cp: cp, cfg: cfg, kubeconfig: filepath.Join(cfg.Dir, cfg.ServiceAccount+".kubeconfig"), spawner: cluster.NewSpawner()}
	if err := WriteKubeconfig(d.kubeconfig, rc); err != nil {
		d.spawner.Close()
		return nil, err
	}
	for i := range cfg.Replicas {
		if _, err := d.start(cfg.IdentityPrefix + "-" + strconv.Itoa(i)); err != nil {
			return nil, errors.Join(err, d.Stop())
		}
	}
	for _, r := range d.Replicas() {
		if err := d.waitReady(ctx, r); err != nil {
			return nil, errors.Join(err, d.Stop())
		}
	}
	return d, nil
}

// start forks one replica with that identity, replacing an earlier
// (exited) one of the same identity.
func (d *Deployment) start(identity string) (*Replica, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return nil, ErrStopped
	}
	logPath := filepath.Join(d.cfg.Dir, identity+".log")
	args := append(d.cfg.args(d.kubeconfig), "--identity="+identity)
	r, err := startReplica(d.spawner, identity, d.cfg.Binary, args, logPath)
	if err != nil {
		return nil, err
	}
	for i, old := range d.replicas {
		if old.Identity == identity {
			d.replicas[i] = r
			return r, nil
		}
	}
	d.replicas = append(d.replicas, r)
	return r, nil
}

// waitReady waits until r is ready; a replica that exited because a port
// picked for it was taken in between is started again with new ports.
func (d *Deployment) waitReady(ctx context.Context, r *Replica) error {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.ReadyTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		err := waitReplica(ctx, r)
		if err == nil || !r.bindFailed() || attempt == 3 {
			if err != nil {
				return fmt.Errorf("examplee2e: replica %s not ready: %w", r.Identity, err)
			}
			return nil
		}
		if r, err = d.start(r.Identity); err != nil {
			return err
		}
	}
}

// Restart starts r's replica again — a new process with the same flags and
// the same --identity, as a kubelet restarts a crashed container — once r
// has exited, and waits until the new process is ready. The new replica
// takes r's place in Replicas and is returned.
func (d *Deployment) Restart(ctx context.Context, r *Replica) (*Replica, error) {
	if !r.Exited() {
		return nil, fmt.Errorf("examplee2e: replica %s (pid %d) is still running; Kill or Stop it first", r.Identity, r.PID())
	}
	nr, err := d.start(r.Identity)
	if err != nil {
		return nil, err
	}
	if err := d.waitReady(ctx, nr); err != nil {
		return nil, err
	}
	return d.Replica(r.Identity), nil // waitReady may have started it again on other ports
}

// Config returns the configuration with defaults applied.
func (d *Deployment) Config() Config { return d.cfg }

// Kubeconfig is the path of the ServiceAccount's kubeconfig.
func (d *Deployment) Kubeconfig() string { return d.kubeconfig }

// Username is the ServiceAccount's user name, as audit events show it.
func (d *Deployment) Username() string {
	return cluster.ServiceAccountUsername(d.cfg.Namespace, d.cfg.ServiceAccount)
}

// Replicas returns every replica started, exited ones included, in start
// order.
func (d *Deployment) Replicas() []*Replica {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*Replica(nil), d.replicas...)
}

// Live returns the replicas that have not exited.
func (d *Deployment) Live() []*Replica {
	var out []*Replica
	for _, r := range d.Replicas() {
		if !r.Exited() {
			out = append(out, r)
		}
	}
	return out
}

// Replica returns the replica with that identity, or nil.
func (d *Deployment) Replica(identity string) *Replica {
	for _, r := range d.Replicas() {
		if r.Identity == identity {
			return r
		}
	}
	return nil
}

// Lease reads the Deployment's Lease (nil if it does not exist yet).
func (d *Deployment) Lease(ctx context.Context) (*coordinationv1.Lease, error) {
	name := d.cfg.LeaseName
	l, err := d.cp.AdminClient().CoordinationV1().Leases(d.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("examplee2e: reading lease %s/%s: %w", d.cfg.Namespace, name, err)
	}
	return l, nil
}

// Holder returns the Lease's holderIdentity ("" if none or no Lease).
func (d *Deployment) Holder(ctx context.Context) (string, error) {
	l, err := d.Lease(ctx)
	if err != nil || l == nil || l.Spec.HolderIdentity == nil {
		return "", err
	}
	return *l.Spec.HolderIdentity, nil
}

// WaitLeader polls the Lease until its holder is a live replica of this
// Deployment other than those in except, and returns it.
func (d *Deployment) WaitLeader(ctx context.Context, except ...string) (*Replica, error) {
	var leader *Replica
	err := Poll(ctx, 20*time.Millisecond, func(ctx context.Context) error {
		h, err := d.Holder(ctx)
		if err != nil {
			return err
		}
		for _, e := range except {
			if h == e {
				return fmt.Errorf("lease still held by %q", h)
			}
		}
		r := d.Replica(h)
		if r == nil || r.Exited() {
			return fmt.Errorf("lease holder %q is not a live replica", h)
		}
		leader = r
		return nil
	})
	return leader, err
}

// Stop stops every replica (SIGTERM, SIGKILL after Config.StopGrace) and
// waits until all have exited. It is idempotent.
func (d *Deployment) Stop() error {
	d.mu.Lock()
	if d.stopped {
		d.mu.Unlock()
		return nil
	}
	d.stopped = true
	replicas := d.replicas
	d.mu.Unlock()
	var wg sync.WaitGroup
	for _, r := range replicas {
		wg.Go(func() { r.Stop(d.cfg.StopGrace) })
	}
	wg.Wait()
	d.spawner.Close()
	return nil
}

// DefaultLeaseName is the controller's default --lease-name, which the
// example's deploy manifests grant.
const DefaultLeaseName = "quietpatch-httproute-status"
