package perf

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/e2e/cluster"
)

// profileEnv names the folder where the storm benchmarks write profiles
// and samples of each controller phase, for a diagnosis: the benchmark
// process's CPU, mutex and block profiles, the API server's CPU profile
// (its /debug/pprof, served to the admin once the control plane runs with
// --profiling=true, which this variable also turns on), and the
// controller's state every storm sample. Unset: no profile.
const profileEnv = "QP_PERF_PROFILE"

// apiserverProfileFor is how long the API server's CPU is profiled, from
// 2 s into a phase.
const apiserverProfileFor = 20 * time.Second

// cpuTimes are the CPU seconds used so far by the benchmark process and
// by the control plane's processes.
type cpuTimes struct {
	at                 time.Time
	self, server, etcd float64
	gcCPU, gcCycles    float64 // the benchmark process's, from runtime/metrics
}

func readCPUTimes(cp *cluster.ControlPlane) cpuTimes {
	t := cpuTimes{at: time.Now()}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		t.self = float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
	}
	for _, p := range cp.Processes() {
		secs := procCPU(p.PID)
		switch p.Name {
		case cluster.EtcdBinary:
			t.etcd = secs
		case cluster.APIServerBinary:
			t.server = secs
		}
	}
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindFloat64 {
		t.gcCPU = s[0].Value.Float64()
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		t.gcCycles = float64(s[1].Value.Uint64())
	}
	return t
}

// procCPU reads utime + stime of a process from /proc (0 if unreadable).
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command (in parentheses, which may hold spaces).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// cpuSpent is what each process used between two readings.
type cpuSpent struct {
	wall                   time.Duration
	self, server, etcd, gc float64
	gcCycles               float64
}

func (a cpuTimes) until(b cpuTimes) cpuSpent {
	return cpuSpent{wall: b.at.Sub(a.at), self: b.self - a.self, server: b.server - a.server, etcd: b.etcd - a.etcd,
		gc: b.gcCPU - a.gcCPU, gcCycles: b.gcCycles - a.gcCycles}
}

func (c cpuSpent) String() string {
	return fmt.Sprintf("CPU over %.1f s: benchmark process %.1f s (GC %.1f s, %.0f cycles), kube-apiserver %.1f s, etcd %.1f s; load %s",
		c.wall.Seconds(), c.self, c.gc, c.gcCycles, c.server, c.etcd, loadAverage())
}

// perPatch is the CPU each process spent per patch.
func (c cpuSpent) perPatch(n int64) string {
	if n <= 0 {
		return ""
	}
	ms := func(s float64) float64 { return 1000 * s / float64(n) }
	return fmt.Sprintf("per route: benchmark process %.2f ms, kube-apiserver %.2f ms, etcd %.2f ms", ms(c.self), ms(c.server), ms(c.etcd))
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// diag profiles one phase when QP_PERF_PROFILE is set: start it when the
// phase begins, sample the controller with sample, and stop it at the end.
type diag struct {
	dir, name string
	cp        *cluster.ControlPlane
	cpuFile   *os.File
	server    sync.WaitGroup
	cancel    context.CancelFunc
	errs      []error
	mu        sync.Mutex
	rows      [][]string
	begin     time.Time
}

// startDiag starts profiling the phase name, or returns nil when
// QP_PERF_PROFILE is unset.
func startDiag(tb testing.TB, cp *cluster.ControlPlane, name string) *diag {
	dir := os.Getenv(profileEnv)
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Logf("profiles: %v", err)
		return nil
	}
	d := &diag{dir: dir, name: strings.NewReplacer("/", "_", "=", "").Replace(name), cp: cp, begin: time.Now()}
	runtime.SetMutexProfileFraction(10)
	runtime.SetBlockProfileRate(int(100 * time.Microsecond))
	f, err := os.Create(d.path("cpu.pprof"))
	if err == nil {
		if err = pprof.StartCPUProfile(f); err != nil {
			f.Close()
		} else {
			d.cpuFile = f
		}
	}
	if err != nil {
		d.errs = append(d.errs, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	d.server.Go(func() {
		t := time.NewTimer(2 * time.Second)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := d.fetch(ctx, fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(apiserverProfileFor.Seconds())), "apiserver-cpu.pprof"); err != nil && ctx.Err() == nil {
			d.mu.Lock()
			d.errs = append(d.errs, err)
			d.mu.Unlock()
		}
	})
	return d
}

func (d *diag) path(what string) string { return filepath.Join(d.dir, d.name+"-"+what) }

// fetch GETs path from the API server as the admin into the file what.
func (d *diag) fetch(ctx context.Context, path, what string) error {
	hc, err := rest.HTTPClientFor(d.cp.AdminConfig())
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.cp.Host()+path, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(d.path(what), b, 0o644)
}

var diagHeader = []string{"t_s", "limit", "in_flight", "latency_ms", "depth", "fresh", "held", "applied",
	"unchanged", "enqueued", "coalesced", "dequeued", "passes", "objects_unchanged", "objects_changed", "heap_mib", "load1"}

// sample records the controller's state.
func (d *diag) sample(st quietpatch.Stats, applied int64) {
	if d == nil {
		return
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	passes := int64(0)
	for _, n := range st.Reconciler.Passes {
		passes += n
	}
	load := strings.Fields(loadAverage())
	row := []string{
		strconv.FormatFloat(time.Since(d.begin).Seconds(), 'f', 3, 64),
		strconv.Itoa(st.Dispatcher.Limit), strconv.Itoa(st.Dispatcher.InFlight),
		strconv.FormatFloat(float64(st.Dispatcher.Latency)/float64(time.Millisecond), 'f', 2, 64),
		strconv.Itoa(st.Queue.Depth), strconv.Itoa(st.Queue.Fresh), strconv.Itoa(st.Queue.Held),
		strconv.FormatInt(applied, 10), strconv.FormatInt(st.Dispatcher.Dropped["unchanged"], 10),
		strconv.FormatInt(st.Queue.Enqueued, 10), strconv.FormatInt(st.Queue.Coalesced, 10), strconv.FormatInt(st.Queue.Dequeued, 10),
		strconv.FormatInt(passes, 10), strconv.FormatInt(st.Reconciler.Objects["unchanged"], 10), strconv.FormatInt(st.Reconciler.Objects["changed"], 10),
		strconv.FormatFloat(float64(ms.HeapAlloc)/(1<<20), 'f', 1, 64), load[0],
	}
	d.mu.Lock()
	d.rows = append(d.rows, row)
	d.mu.Unlock()
}

// stop ends the profiles and writes them with the samples.
func (d *diag) stop(tb testing.TB) {
	if d == nil {
		return
	}
	if d.cpuFile != nil {
		pprof.StopCPUProfile()
		d.errs = append(d.errs, d.cpuFile.Close())
	}
	d.cancel()
	d.server.Wait()
	for _, p := range []string{"mutex", "block", "heap", "goroutine"} {
		f, err := os.Create(d.path(p + ".pprof"))
		if err != nil {
			d.errs = append(d.errs, err)
			continue
		}
		d.errs = append(d.errs, pprof.Lookup(p).WriteTo(f, 0), f.Close())
	}
	runtime.SetMutexProfileFraction(0)
	runtime.SetBlockProfileRate(0)
	var buf bytes.Buffer
	cw := csv.NewWriter(&buf)
	_ = cw.Write(diagHeader)
	d.mu.Lock()
	_ = cw.WriteAll(d.rows)
	d.mu.Unlock()
	d.errs = append(d.errs, os.WriteFile(d.path("samples.csv"), buf.Bytes(), 0o644))
	for _, err := range d.errs {
		if err != nil {
			tb.Logf("profiles of %s: %v", d.name, err)
		}
	}
	tb.Logf("profiles and samples of %s in %s", d.name, d.dir)
}

// profileArgs are the API server flags QP_PERF_PROFILE needs.
func profileArgs() []string {
	if os.Getenv(profileEnv) == "" {
		return nil
	}
	return []string{"--profiling=true"}
}
