package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Spawner starts child processes from one goroutine locked to its OS
// thread. Children are started with a parent-death signal (SIGKILL, see
// [SysProcAttr]), which Linux ties to the thread that forked them, not the
// process: forking from a thread that nothing else uses, and that lives
// until every child is gone, keeps children from being killed when a Go
// runtime thread happens to exit. Use one Spawner per group of children and
// Close it once they are all dead. Safe for concurrent use.
type Spawner struct {
	reqs chan spawnReq
	quit chan struct{}
	done chan struct{}
	once sync.Once
}

type spawnReq struct {
	cmd *exec.Cmd
	res chan error
}

// NewSpawner starts the spawning goroutine.
func NewSpawner() *Spawner {
	s := &Spawner{reqs: make(chan spawnReq), quit: make(chan struct{}), done: make(chan struct{})}
	go s.loop()
	return s
}

func (s *Spawner) loop() {
	// Never unlocked: when the loop returns the thread exits with it, which
	// is fine then because Close is only called once all children are dead.
	runtime.LockOSThread()
	defer close(s.done)
	for {
		select {
		case r := <-s.reqs:
			r.res <- r.cmd.Start()
		case <-s.quit:
			return
		}
	}
}

// Start starts cmd on the spawning thread; [ErrStopped] after Close.
func (s *Spawner) Start(cmd *exec.Cmd) error {
	res := make(chan error, 1)
	select {
	case s.reqs <- spawnReq{cmd: cmd, res: res}:
		return <-res
	case <-s.done:
		return ErrStopped
	}
}

// Close ends the spawning thread; call it only once every child has
// exited. It is idempotent.
func (s *Spawner) Close() {
	s.once.Do(func() { close(s.quit) })
	<-s.done
}

// process is one running child: etcd or kube-apiserver.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed once Wait returned
	waitErr error         // valid after done is closed
}

// startProcess runs bin with args, its output appended to logPath.
func startProcess(sp *Spawner, name, bin string, args []string, logPath string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cluster: %s log: %w", name, err)
	}
	fmt.Fprintf(logf, "==== %s: starting %s %q\n", time.Now().Format(time.RFC3339Nano), bin, args)
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Stdin = nil
	cmd.SysProcAttr = sysProcAttr()
	if err := sp.Start(cmd); err != nil {
		logf.Close()
		return nil, fmt.Errorf("cluster: starting %s: %w", name, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// pid returns the process id (also the id of its process group).
func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited and been reaped.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after grace, and
// waits until the process is reaped and its group is empty.
func (p *process) stop(grace time.Duration) {
	pid := p.pid()
	if !p.exited() {
		_ = signalGroup(pid, syscall.SIGTERM)
		t := time.NewTimer(grace)
		select {
		case <-p.done:
		case <-t.C:
		}
		t.Stop()
	}
	// Whatever is left of the group (the leader, or anything it forked) goes.
	_ = signalGroup(pid, syscall.SIGKILL)
	<-p.done
	for deadline := time.Now().Add(5 * time.Second); groupAlive(pid) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
}

// exitError describes how the process ended, with the tail of its log.
func (p *process) exitError() error {
	return fmt.Errorf("cluster: %s exited unexpectedly (%v); last lines of %s:\n%s", p.name, p.waitErr, p.logPath, tailFile(p.logPath, 30))
}

// tailFile returns the last n lines of a file (best effort).
func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	defer f.Close()
	const max = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > max {
		_, _ = f.Seek(st.Size()-max, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// waitFor polls check every interval until it returns nil, the process p
// exits (if p is not nil), or ctx ends. The last check error is wrapped.
func waitFor(ctx context.Context, what string, p *process, interval time.Duration, check func(context.Context) error) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = check(cctx)
		cancel()
		if last == nil {
			return nil
		}
		var done <-chan struct{}
		if p != nil {
			done = p.done
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: waiting for %s: %w (last: %v)", what, ctx.Err(), last)
		case <-done:
			return p.exitError()
		case <-t.C:
		}
	}
}

var errNotYet = errors.New("not yet")
