package examplee2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/quietpatch/quietpatch/e2e/cluster"
)

// Replica is one running controller process, started by a Deployment. Its
// methods are safe for concurrent use.
type Replica struct {
	// Identity is the replica's --identity, the holderIdentity of the Lease
	// while it leads.
	Identity string
	// MetricsURL is its Prometheus endpoint, http://127.0.0.1:PORT/metrics.
	MetricsURL string
	// HealthURL is the base of its /healthz and /readyz, http://127.0.0.1:PORT.
	HealthURL string
	// LogPath is the file its standard output and error go to.
	LogPath string
	// Args are the command-line arguments it was started with.
	Args []string

	cmd     *exec.Cmd
	http    *http.Client
	done    chan struct{} // closed when the process has exited
	waitErr error         // valid once done is closed
}

// startReplica forks bin with args (to which the metrics and health
// addresses are appended) and its output appended to logPath.
func startReplica(sp *cluster.Spawner, identity, bin string, args []string, logPath string) (*Replica, error) {
	metricsPort, err := freePort()
	if err != nil {
		return nil, err
	}
	healthPort, err := freePort()
	if err != nil {
		return nil, err
	}
	metricsAddr := "127.0.0.1:" + strconv.Itoa(metricsPort)
	healthAddr := "127.0.0.1:" + strconv.Itoa(healthPort)
	args = append(append([]string(nil), args...), "--metrics-addr="+metricsAddr, "--health-addr="+healthAddr)

	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("examplee2e: replica %s log: %w", identity, err)
	}
	fmt.Fprintf(logf, "==== %s: starting %s %s\n", time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr, cmd.Stdin = logf, logf, nil
	cmd.SysProcAttr = sysProcAttr()
	if err := sp.Start(cmd); err != nil {
		logf.Close()
		return nil, fmt.Errorf("examplee2e: starting replica %s: %w", identity, err)
	}
	r := &Replica{
		Identity:   identity,
		MetricsURL: "http://" + metricsAddr + "/metrics",
		HealthURL:  "http://" + healthAddr,
		LogPath:    logPath,
		Args:       args,
		cmd:        cmd,
		http:       &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
		done:       make(chan struct{}),
	}
	go func() {
		r.waitErr = cmd.Wait()
		logf.Close()
		close(r.done)
	}()
	return r, nil
}

// freePort returns a loopback TCP port that was free a moment ago. Another
// process may take it before the replica listens; Deployment retries a
// replica that fails to bind.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("examplee2e: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// PID is the process id, also the id of the replica's process group.
func (r *Replica) PID() int { return r.cmd.Process.Pid }

// Done is closed once the process has exited.
func (r *Replica) Done() <-chan struct{} { return r.done }

// Exited reports whether the process has exited.
func (r *Replica) Exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// ExitError describes how the process ended, with the tail of its log; nil
// while it runs.
func (r *Replica) ExitError() error {
	if !r.Exited() {
		return nil
	}
	return fmt.Errorf("%w: replica %s (pid %d): %v; last log lines:\n%s", ErrExited, r.Identity, r.PID(), r.waitErr, r.LogTail(15))
}

// Kill sends SIGKILL to the replica's process group — no shutdown, no
// vacated lease, as in a node failure — and waits until it has exited.
func (r *Replica) Kill() {
	_ = signalGroup(r.PID(), syscall.SIGKILL)
	<-r.done
}

// Stop sends SIGTERM (the controller stops reconciling, drops what is
// queued and vacates the lease), then SIGKILL if the process has not exited
// within grace, and waits until it has.
func (r *Replica) Stop(grace time.Duration) {
	if r.Exited() {
		return
	}
	_ = signalGroup(r.PID(), syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-r.done:
		// The group may hold nothing else, but make sure.
		_ = signalGroup(r.PID(), syscall.SIGKILL)
	case <-t.C:
		r.Kill()
	}
}

// Ready returns nil when the replica's /readyz answers 200, else an error
// with its answer (or ErrExited with the log's tail if it has exited).
func (r *Replica) Ready(ctx context.Context) error {
	if err := r.ExitError(); err != nil {
		return err
	}
	body, code, err := r.get(ctx, r.HealthURL+"/readyz")
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("replica %s /readyz: %d %s", r.Identity, code, strings.TrimSpace(string(body)))
	}
	return nil
}

// Scrape reads the replica's /metrics.
func (r *Replica) Scrape(ctx context.Context) (Metrics, error) {
	if err := r.ExitError(); err != nil {
		return nil, err
	}
	body, code, err := r.get(ctx, r.MetricsURL)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("replica %s /metrics: %d %s", r.Identity, code, firstLine(body))
	}
	return ParseMetrics(bytes.NewReader(body))
}

func (r *Replica) get(ctx context.Context, url string) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := r.http.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	return body, resp.StatusCode, err
}

// LogTail returns the last n lines of the replica's log.
func (r *Replica) LogTail(n int) string {
	b, err := os.ReadFile(r.LogPath)
	if err != nil {
		return fmt.Sprintf("(log %s: %v)", r.LogPath, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}

// bindFailed reports whether the replica exited because a port was taken.
func (r *Replica) bindFailed() bool {
	return r.Exited() && strings.Contains(r.LogTail(20), "address already in use")
}

// waitReplica polls until the replica is ready, it exits, or ctx ends.
func waitReplica(ctx context.Context, r *Replica) error {
	return Poll(ctx, 100*time.Millisecond, func(ctx context.Context) error {
		err := r.Ready(ctx)
		if errors.Is(err, ErrExited) {
			return Permanent(err)
		}
		return err
	})
}
