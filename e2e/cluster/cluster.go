package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
)

// Sentinel errors.
var (
	// ErrBinariesMissing: kube-apiserver or etcd is not where the harness
	// looks (see FindBinDir). Run `make bins`.
	ErrBinariesMissing = errors.New("cluster: control-plane binaries missing")
	// ErrStopped: the control plane was stopped; it cannot be used again.
	ErrStopped = errors.New("cluster: control plane stopped")
	// ErrUnsupported: the harness needs Linux (process groups, parent-death signal).
	ErrUnsupported = errors.New("cluster: only Linux is supported")
)

// ServiceClusterIPRange is the --service-cluster-ip-range the API server runs with.
const ServiceClusterIPRange = "10.0.0.0/24"

// ServiceAccountIssuer is the --service-account-issuer (and so the default
// audience of tokens) the API server runs with.
const ServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// Defaults for the Options durations.
const (
	DefaultStartTimeout = 3 * time.Minute
	DefaultStopTimeout  = 5 * time.Second
)

// Options configures Start. The zero value is ready to use: binaries from
// FindBinDir, state in a fresh temporary directory removed by Stop, the
// Gateway API standard CRDs installed.
type Options struct {
	// BinDir holds the kube-apiserver and etcd executables.
	// Default: FindBinDir ($KUBEBUILDER_ASSETS, else $QP_BIN_DIR, else the
	// e2e module's .bin).
	BinDir string

	// Dir is where the control plane keeps its state: pki/ (CA, serving and
	// admin certificates, service-account key), kubeconfig, the audit policy
	// and audit.log, etcd-data/, etcd.log and kube-apiserver.log. It is
	// created if missing and never removed by Stop.
	// Default: a new directory under os.TempDir, removed by Stop unless
	// KeepDir is set (or, with StartT, the test failed).
	Dir string

	// KeepDir keeps a temporary Dir after Stop, for inspecting logs.
	KeepDir bool

	// SkipGatewayAPI skips installing the Gateway API standard-channel CRDs.
	// Default false: they are installed and Established before Start returns.
	SkipGatewayAPI bool

	// StartTimeout bounds Start, and each later (re)start of a component
	// until it is ready again. Default DefaultStartTimeout (3 min: a cold
	// kube-apiserver takes 5–20 s on two busy cores). Must be >= 0.
	StartTimeout time.Duration

	// StopTimeout is how long a component may take to exit after SIGTERM
	// before it gets SIGKILL. Default DefaultStopTimeout. Must be >= 0.
	StopTimeout time.Duration

	// APIServerArgs are appended to the kube-apiserver flags the harness
	// sets (a later flag overrides an earlier one).
	APIServerArgs []string

	// EtcdArgs are appended to the etcd flags the harness sets.
	EtcdArgs []string

	// Logger receives progress messages (component ready, restarts). nil
	// discards them; StartT logs to the test instead.
	Logger *slog.Logger
}

func (o Options) validate() error {
	if o.StartTimeout < 0 {
		return fmt.Errorf("cluster: Options.StartTimeout must be >= 0, got %v", o.StartTimeout)
	}
	if o.StopTimeout < 0 {
		return fmt.Errorf("cluster: Options.StopTimeout must be >= 0, got %v", o.StopTimeout)
	}
	return nil
}

// Ports are the loopback TCP ports a control plane listens on; they stay the
// same across restarts of its components.
type Ports struct {
	EtcdClient int // etcd client URL http://127.0.0.1:EtcdClient
	EtcdPeer   int // etcd peer URL (a single member; nobody connects)
	APIServer  int // kube-apiserver https://127.0.0.1:APIServer
}

// List returns the ports as a slice, for checks such as "all free again".
func (p Ports) List() []int { return []int{p.EtcdClient, p.EtcdPeer, p.APIServer} }

// Process identifies a running component.
type Process struct {
	Name string // "etcd" or "kube-apiserver"
	PID  int    // also the id of its process group
}

// Timings records how long the last Start took, by phase.
type Timings struct {
	Etcd       time.Duration // etcd start until /health answers true
	APIServer  time.Duration // kube-apiserver start until /readyz is ok
	GatewayAPI time.Duration // CRDs created until all are Established (0 if skipped)
	Total      time.Duration // the whole of Start, PKI and files included
}

// ControlPlane is a running etcd and kube-apiserver on loopback ports, with
// the certificates, kubeconfig and clients to use them. Create it with Start
// or StartT; stop it with Stop.
//
// Its methods are safe for concurrent use. Lifecycle operations (Stop,
// Restart*, Stop*/Start* of a component) are serialized with one another;
// clients obtained before a component restart keep working after it.
type ControlPlane struct {
	opts    Options
	log     *slog.Logger
	binDir  string
	dir     string
	tempDir bool // dir was created by Start
	ports   Ports
	pki     *pki
	spawner *Spawner

	admin      *rest.Config
	adminKube  *kubernetes.Clientset
	adminGW    *gatewayclient.Clientset
	httpClient *http.Client // admin identity, own transport (metrics, readyz)

	lifecycle sync.Mutex // serializes Stop / restarts

	mu        sync.Mutex // guards the fields below
	etcd      *process
	apiserver *process
	proxies   map[*FaultProxy]struct{}
	stopped   bool
	keepDir   bool
	timings   Timings
}

// Start starts etcd and kube-apiserver on free 127.0.0.1 ports, writes the
// kubeconfig, installs the Gateway API CRDs (unless opts.SkipGatewayAPI) and
// returns once the API server's /readyz is ok and the CRDs are Established.
// ctx bounds the start (together with opts.StartTimeout); it is not retained.
//
// Children run in their own process groups and are SIGKILLed by the kernel if
// the calling process dies, so an interrupted or timed-out test leaves nothing
// running. Call Stop when done (StartT registers it with t.Cleanup).
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if !supported {
		return nil, ErrUnsupported
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	if opts.StopTimeout == 0 {
		opts.StopTimeout = DefaultStopTimeout
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	begin := time.Now()
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()

	binDir := opts.BinDir
	if binDir == "" {
		d, err := FindBinDir()
		if err != nil {
			return nil, err
		}
		binDir = d
	} else if name := missingBinary(binDir); name != "" {
		return nil, fmt.Errorf("%w: %s is not an executable file in Options.BinDir %s; run `make bins`", ErrBinariesMissing, name, binDir)
	}

	cp := &ControlPlane{opts: opts, log: logger, binDir: binDir, dir: opts.Dir, proxies: map[*FaultProxy]struct{}{}}
	if cp.dir == "" {
		d, err := os.MkdirTemp("", "quietpatch-e2e-")
		if err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		cp.dir, cp.tempDir = d, true
	} else if err := os.MkdirAll(cp.dir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: Options.Dir: %w", err)
	}
	cp.keepDir = opts.KeepDir

	if err := cp.prepare(); err != nil {
		cp.cleanupDir()
		return nil, err
	}
	cp.spawner = NewSpawner()
	if err := cp.startAll(ctx); err != nil {
		cp.killAll()
		// Keep the logs of a failed start around; say where they are.
		return nil, fmt.Errorf("%w (state and logs kept in %s)", err, cp.dir)
	}
	cp.mu.Lock()
	cp.timings.Total = time.Since(begin)
	t := cp.timings
	cp.mu.Unlock()
	logger.Info("control plane ready", "dir", cp.dir, "apiserver", cp.Host(), "etcd", cp.EtcdURL(),
		"etcd_ready", t.Etcd.Round(time.Millisecond), "apiserver_ready", t.APIServer.Round(time.Millisecond),
		"gateway_api_established", t.GatewayAPI.Round(time.Millisecond), "total", t.Total.Round(time.Millisecond))
	return cp, nil
}

// StartT is Start for tests: it fails t if the control plane cannot start,
// logs progress to t, and registers Stop with t.Cleanup. If the test failed,
// the state directory (logs, audit log) is kept and its path logged.
func StartT(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	cp, err := Start(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			cp.mu.Lock()
			cp.keepDir = true
			cp.mu.Unlock()
			t.Logf("control plane state kept for inspection in %s", cp.Dir())
		}
		if err := cp.Stop(); err != nil {
			t.Errorf("stopping control plane: %v", err)
		}
	})
	return cp
}

// prepare makes the PKI, the audit policy and the admin clients.
func (cp *ControlPlane) prepare() error {
	p, err := newPKI()
	if err != nil {
		return fmt.Errorf("cluster: generating certificates: %w", err)
	}
	cp.pki = p
	if err := p.write(cp.path("pki")); err != nil {
		return fmt.Errorf("cluster: writing certificates: %w", err)
	}
	if err := os.WriteFile(cp.path(auditPolicyFile), []byte(AuditPolicy), 0o644); err != nil {
		return fmt.Errorf("cluster: writing audit policy: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.caPEM)
	adminPair, err := tls.X509KeyPair(p.adminCertPEM, p.adminKeyPEM)
	if err != nil {
		return fmt.Errorf("cluster: admin certificate: %w", err)
	}
	cp.httpClient = &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{adminPair}, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true,
		IdleConnTimeout:   30 * time.Second,
	}}
	return nil
}

func (cp *ControlPlane) path(name string) string { return filepath.Join(cp.dir, name) }

// startAll picks ports and starts both components, retrying with new ports if
// one was taken in between.
func (cp *ControlPlane) startAll(ctx context.Context) error {
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		if cp.ports, err = freePorts(); err != nil {
			return err
		}
		if err = cp.startEtcd(ctx); err == nil {
			if err = cp.startAPIServer(ctx); err == nil {
				break
			}
		}
		if !strings.Contains(err.Error(), "address already in use") || ctx.Err() != nil {
			return err
		}
		cp.log.Warn("port taken meanwhile; retrying with new ports", "attempt", attempt, "err", err)
		cp.killAll()
		cp.spawner = NewSpawner()
	}
	if err != nil {
		return err
	}
	if err := cp.makeClients(); err != nil {
		return err
	}
	if err := cp.writeKubeconfig(); err != nil {
		return err
	}
	if !cp.opts.SkipGatewayAPI {
		begin := time.Now()
		if err := cp.InstallGatewayAPI(ctx); err != nil {
			return err
		}
		cp.mu.Lock()
		cp.timings.GatewayAPI = time.Since(begin)
		cp.mu.Unlock()
	}
	return nil
}

// freePorts returns three distinct loopback ports free at the time of the call.
func freePorts() (Ports, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports [3]int
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return Ports{}, fmt.Errorf("cluster: finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return Ports{EtcdClient: ports[0], EtcdPeer: ports[1], APIServer: ports[2]}, nil
}

// EtcdURL is etcd's client URL.
func (cp *ControlPlane) EtcdURL() string {
	return "http://127.0.0.1:" + strconv.Itoa(cp.ports.EtcdClient)
}

// Host is the API server's URL, https://127.0.0.1:PORT.
func (cp *ControlPlane) Host() string {
	return "https://127.0.0.1:" + strconv.Itoa(cp.ports.APIServer)
}

// Ports returns the ports the control plane listens on.
func (cp *ControlPlane) Ports() Ports { return cp.ports }

// Dir is the state directory (see Options.Dir).
func (cp *ControlPlane) Dir() string { return cp.dir }

// KubeconfigPath is the admin kubeconfig (client certificate, O=system:masters).
func (cp *ControlPlane) KubeconfigPath() string { return cp.path("kubeconfig") }

// AuditLogPath is the API server's audit log (JSON lines; see AuditPolicy).
func (cp *ControlPlane) AuditLogPath() string { return cp.path(auditLogFile) }

// EtcdLogPath is etcd's output, appended to across restarts.
func (cp *ControlPlane) EtcdLogPath() string { return cp.path("etcd.log") }

// APIServerLogPath is kube-apiserver's output, appended to across restarts.
func (cp *ControlPlane) APIServerLogPath() string { return cp.path("kube-apiserver.log") }

// CACertPEM is the PEM of the CA that signed the API server's serving
// certificate (and the fault proxy's).
func (cp *ControlPlane) CACertPEM() []byte { return append([]byte(nil), cp.pki.caPEM...) }

// Timings reports how long Start took, by phase.
func (cp *ControlPlane) Timings() Timings {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.timings
}

// Processes lists the running components (a stopped component is omitted).
func (cp *ControlPlane) Processes() []Process {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var out []Process
	for _, p := range []*process{cp.etcd, cp.apiserver} {
		if p != nil && !p.exited() {
			out = append(out, Process{Name: p.name, PID: p.pid()})
		}
	}
	return out
}

// AdminConfig returns a new rest.Config for the admin identity (client
// certificate CN=quietpatch-admin, O=system:masters, which bypasses RBAC).
// Its client-side rate limiter is off (QPS -1) so test setup is fast; set
// QPS/Burst on the copy to study client limits.
func (cp *ControlPlane) AdminConfig() *rest.Config { return rest.CopyConfig(cp.admin) }

// AdminClient is a clientset for the admin identity (see AdminConfig).
func (cp *ControlPlane) AdminClient() *kubernetes.Clientset { return cp.adminKube }

// AdminGatewayClient is a Gateway API clientset for the admin identity.
func (cp *ControlPlane) AdminGatewayClient() *gatewayclient.Clientset { return cp.adminGW }

func (cp *ControlPlane) makeClients() error {
	cp.admin = &rest.Config{
		Host: cp.Host(),
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   cp.pki.caPEM,
			CertData: cp.pki.adminCertPEM,
			KeyData:  cp.pki.adminKeyPEM,
		},
		QPS:       -1,
		UserAgent: "quietpatch-e2e/admin",
	}
	var err error
	if cp.adminKube, err = kubernetes.NewForConfig(cp.AdminConfig()); err != nil {
		return fmt.Errorf("cluster: admin client: %w", err)
	}
	if cp.adminGW, err = gatewayclient.NewForConfig(cp.AdminConfig()); err != nil {
		return fmt.Errorf("cluster: admin gateway client: %w", err)
	}
	return nil
}

func (cp *ControlPlane) writeKubeconfig() error {
	const name = "quietpatch-e2e"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: cp.Host(), CertificateAuthorityData: cp.pki.caPEM}
	cfg.AuthInfos[AdminUser] = &clientcmdapi.AuthInfo{ClientCertificateData: cp.pki.adminCertPEM, ClientKeyData: cp.pki.adminKeyPEM}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: AdminUser, Namespace: "default"}
	cfg.CurrentContext = name
	if err := clientcmd.WriteToFile(*cfg, cp.KubeconfigPath()); err != nil {
		return fmt.Errorf("cluster: writing kubeconfig: %w", err)
	}
	return nil
}

// ---- etcd ----

func (cp *ControlPlane) etcdArgs() []string {
	client := cp.EtcdURL()
	peer := "http://127.0.0.1:" + strconv.Itoa(cp.ports.EtcdPeer)
	args := []string{
		"--name=qp",
		"--data-dir=" + cp.path("etcd-data"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=qp=" + peer,
		"--initial-cluster-state=new",
		"--unsafe-no-fsync",
		"--log-level=warn",
	}
	return append(args, cp.opts.EtcdArgs...)
}

func (cp *ControlPlane) startEtcd(ctx context.Context) error {
	begin := time.Now()
	p, err := startProcess(cp.spawner, EtcdBinary, filepath.Join(cp.binDir, EtcdBinary), cp.etcdArgs(), cp.EtcdLogPath())
	if err != nil {
		return err
	}
	cp.mu.Lock()
	cp.etcd = p
	cp.mu.Unlock()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	err = waitFor(ctx, "etcd /health", p, 50*time.Millisecond, func(ctx context.Context) error {
		body, code, err := get(ctx, hc, cp.EtcdURL()+"/health")
		if err != nil {
			return err
		}
		if code != http.StatusOK || !strings.Contains(string(body), `"health":"true"`) {
			return fmt.Errorf("etcd /health: %d %s", code, body)
		}
		return nil
	})
	if err != nil {
		return err
	}
	cp.mu.Lock()
	cp.timings.Etcd = time.Since(begin)
	cp.mu.Unlock()
	cp.log.Info("etcd ready", "url", cp.EtcdURL(), "pid", p.pid(), "took", time.Since(begin).Round(time.Millisecond))
	return nil
}

// ---- kube-apiserver ----

func (cp *ControlPlane) apiserverArgs() []string {
	pkiDir := cp.path("pki")
	args := []string{
		"--etcd-servers=" + cp.EtcdURL(),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(cp.ports.APIServer),
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + pkiDir,
		"--tls-cert-file=" + filepath.Join(pkiDir, servingCertFile),
		"--tls-private-key-file=" + filepath.Join(pkiDir, servingKeyFile),
		"--client-ca-file=" + filepath.Join(pkiDir, caCertFile),
		"--authorization-mode=RBAC",
		"--service-account-issuer=" + ServiceAccountIssuer,
		"--service-account-key-file=" + filepath.Join(pkiDir, saPubFile),
		"--service-account-signing-key-file=" + filepath.Join(pkiDir, saKeyFile),
		"--service-cluster-ip-range=" + ServiceClusterIPRange,
		"--audit-policy-file=" + cp.path(auditPolicyFile),
		"--audit-log-path=" + cp.AuditLogPath(),
		"--audit-log-format=json",
		"--audit-log-mode=blocking",
		"--audit-log-maxsize=0",
		"--shutdown-delay-duration=0s",
		"--shutdown-send-retry-after=false",
		"--shutdown-watch-termination-grace-period=0s",
		"--profiling=false",
	}
	return append(args, cp.opts.APIServerArgs...)
}

func (cp *ControlPlane) startAPIServer(ctx context.Context) error {
	begin := time.Now()
	p, err := startProcess(cp.spawner, APIServerBinary, filepath.Join(cp.binDir, APIServerBinary), cp.apiserverArgs(), cp.APIServerLogPath())
	if err != nil {
		return err
	}
	cp.mu.Lock()
	cp.apiserver = p
	cp.mu.Unlock()
	if err := cp.waitReady(ctx, p); err != nil {
		return err
	}
	cp.mu.Lock()
	cp.timings.APIServer = time.Since(begin)
	cp.mu.Unlock()
	cp.log.Info("kube-apiserver ready", "url", cp.Host(), "pid", p.pid(), "took", time.Since(begin).Round(time.Millisecond))
	return nil
}

func (cp *ControlPlane) waitReady(ctx context.Context, p *process) error {
	return waitFor(ctx, "kube-apiserver /readyz", p, 100*time.Millisecond, func(ctx context.Context) error {
		body, code, err := get(ctx, cp.httpClient, cp.Host()+"/readyz")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("/readyz: %d %s", code, lastLines(body, 5))
		}
		return nil
	})
}

// WaitReady waits until the API server's /readyz is ok (it checks etcd too).
func (cp *ControlPlane) WaitReady(ctx context.Context) error {
	cp.mu.Lock()
	p, stopped := cp.apiserver, cp.stopped
	cp.mu.Unlock()
	if stopped {
		return ErrStopped
	}
	return cp.waitReady(ctx, p)
}

func get(ctx context.Context, c *http.Client, url string) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return body, resp.StatusCode, err
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var bad []string
	for _, l := range lines {
		if strings.Contains(l, "failed") {
			bad = append(bad, l)
		}
	}
	if len(bad) > 0 {
		lines = bad
	}
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "; ")
}

// ---- restarts ----

func (cp *ControlPlane) startTimeoutCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, cp.opts.StartTimeout)
}

// StopAPIServer stops kube-apiserver (SIGTERM, SIGKILL after
// Options.StopTimeout) and waits until it has exited. Clients then fail to
// connect until StartAPIServer.
func (cp *ControlPlane) StopAPIServer() error {
	cp.lifecycle.Lock()
	defer cp.lifecycle.Unlock()
	p, err := cp.component(func() *process { return cp.apiserver })
	if err != nil {
		return err
	}
	begin := time.Now()
	p.stop(cp.opts.StopTimeout)
	cp.log.Info("kube-apiserver stopped", "pid", p.pid(), "took", time.Since(begin).Round(time.Millisecond))
	return nil
}

// StartAPIServer starts a stopped kube-apiserver again on the same port,
// with the same certificates, keys and etcd, and waits until /readyz is ok.
// Starting one that is running is an error.
func (cp *ControlPlane) StartAPIServer(ctx context.Context) error {
	cp.lifecycle.Lock()
	defer cp.lifecycle.Unlock()
	p, err := cp.component(func() *process { return cp.apiserver })
	if err != nil {
		return err
	}
	if !p.exited() {
		return errors.New("cluster: kube-apiserver is running; stop it first")
	}
	ctx, cancel := cp.startTimeoutCtx(ctx)
	defer cancel()
	return cp.startAPIServer(ctx)
}

// RestartAPIServer stops kube-apiserver and starts it again (see
// StopAPIServer, StartAPIServer). Data, certificates, tokens and the port are kept.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context) error {
	if err := cp.StopAPIServer(); err != nil {
		return err
	}
	return cp.StartAPIServer(ctx)
}

// etcdStopGrace caps how long StopEtcd waits after SIGTERM. With the API
// server's watch streams open, etcd's graceful stop waits for them for its
// request timeout (7 s by default) before closing them anyway; a quicker
// SIGKILL loses nothing here, as everything etcd wrote is with the OS.
const etcdStopGrace = time.Second

// StopEtcd stops etcd: SIGTERM, then SIGKILL after at most a second (or
// Options.StopTimeout if shorter); everything it acknowledged is kept. The
// API server keeps running and answers with storage errors and timeouts
// until StartEtcd.
func (cp *ControlPlane) StopEtcd() error {
	cp.lifecycle.Lock()
	defer cp.lifecycle.Unlock()
	p, err := cp.component(func() *process { return cp.etcd })
	if err != nil {
		return err
	}
	begin := time.Now()
	p.stop(min(cp.opts.StopTimeout, etcdStopGrace))
	cp.log.Info("etcd stopped", "pid", p.pid(), "took", time.Since(begin).Round(time.Millisecond))
	return nil
}

// StartEtcd starts a stopped etcd again with the same data directory and
// ports, then waits until etcd is healthy and the API server (if running)
// reports ready again.
func (cp *ControlPlane) StartEtcd(ctx context.Context) error {
	cp.lifecycle.Lock()
	defer cp.lifecycle.Unlock()
	p, err := cp.component(func() *process { return cp.etcd })
	if err != nil {
		return err
	}
	if !p.exited() {
		return errors.New("cluster: etcd is running; stop it first")
	}
	ctx, cancel := cp.startTimeoutCtx(ctx)
	defer cancel()
	if err := cp.startEtcd(ctx); err != nil {
		return err
	}
	cp.mu.Lock()
	api := cp.apiserver
	cp.mu.Unlock()
	if api.exited() {
		return nil
	}
	return cp.waitReady(ctx, api)
}

// RestartEtcd stops etcd and starts it again (see StopEtcd, StartEtcd).
func (cp *ControlPlane) RestartEtcd(ctx context.Context) error {
	if err := cp.StopEtcd(); err != nil {
		return err
	}
	return cp.StartEtcd(ctx)
}

func (cp *ControlPlane) component(get func() *process) (*process, error) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.stopped {
		return nil, ErrStopped
	}
	return get(), nil
}

// ---- stop ----

// Stop closes every fault proxy, stops kube-apiserver and then etcd (SIGTERM
// to each process group, SIGKILL after Options.StopTimeout), waits until both
// have exited, so their ports are free again, and removes a temporary Dir
// (unless kept). Stop is idempotent; the ControlPlane cannot be used after.
func (cp *ControlPlane) Stop() error {
	cp.lifecycle.Lock()
	defer cp.lifecycle.Unlock()
	cp.mu.Lock()
	if cp.stopped {
		cp.mu.Unlock()
		return nil
	}
	cp.stopped = true
	proxies := cp.proxies
	cp.proxies = nil
	cp.mu.Unlock()

	var errs []error
	for p := range proxies {
		if err := p.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	begin := time.Now()
	cp.killAll()
	if cp.httpClient != nil {
		cp.httpClient.CloseIdleConnections()
	}
	cp.log.Info("control plane stopped", "took", time.Since(begin).Round(time.Millisecond))
	if err := cp.cleanupDir(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// killAll stops both components and the spawner.
func (cp *ControlPlane) killAll() {
	cp.mu.Lock()
	api, etcd := cp.apiserver, cp.etcd
	cp.apiserver, cp.etcd = nil, nil
	cp.mu.Unlock()
	// API server first: stopping etcd first would leave it retrying storage.
	if api != nil {
		api.stop(cp.opts.StopTimeout)
	}
	if etcd != nil {
		etcd.stop(cp.opts.StopTimeout)
	}
	if cp.spawner != nil {
		cp.spawner.Close()
		cp.spawner = nil
	}
}

func (cp *ControlPlane) cleanupDir() error {
	cp.mu.Lock()
	keep := cp.keepDir
	cp.mu.Unlock()
	if !cp.tempDir || keep {
		return nil
	}
	if err := os.RemoveAll(cp.dir); err != nil {
		return fmt.Errorf("cluster: removing %s: %w", cp.dir, err)
	}
	return nil
}
