package shard

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/internal/leases"
	"github.com/quietpatch/quietpatch/leader"
)

// syncBuffer is a bytes.Buffer for concurrent log writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// shardPoints collects reader and returns the integer data points of the
// quietpatch.shard instruments, by name and direction.
func shardPoints(t *testing.T, reader sdkmetric.Reader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if !strings.HasPrefix(m.Name, "quietpatch.shard.") {
				continue
			}
			var points []metricdata.DataPoint[int64]
			switch d := m.Data.(type) {
			case metricdata.Gauge[int64]:
				points = d.DataPoints
			case metricdata.Sum[int64]:
				points = d.DataPoints
			}
			for _, p := range points {
				name := m.Name
				if v, ok := p.Attributes.Value("direction"); ok {
					name += "{" + v.AsString() + "}"
				}
				got[name] = p.Value
			}
		}
	}
	return got
}

// stepUntil steps clk by d whenever something waits on it, until cond
// holds, for 10 s at most.
func stepUntil(t *testing.T, clk *clocktesting.FakeClock, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for start := time.Now(); !cond(); time.Sleep(time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("timed out waiting for %s", what)
		}
		if clk.HasWaiters() {
			clk.Step(d)
		}
	}
}

// TestCoordinatorRun: the coordinator builds each shard's pipeline on the
// shard's Lease (Name set, Logger with the shard attribute, the Clock and
// Meter of Config.Lease) and on the Lease client the group checked, which
// tells the claimer when the group first saw the Lease; it registers the
// quietpatch.shard instruments on Lease.Meter when Run starts and
// unregisters them when Run returns; it logs to Lease.Logger with the
// pipeline attribute.
func TestCoordinatorRun(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = provider.Shutdown(context.Background()) }()
	meter := provider.Meter("test")
	var logs syncBuffer
	lease := leaseConfig(t, "a", clk)
	lease.Meter, lease.Logger = meter, slog.New(slog.NewTextHandler(&logs, nil))
	client := newFakeLeases().cs.CoordinationV1()

	type built struct {
		lease  leader.Config
		leases coordinationv1client.LeasesGetter
	}
	var (
		mu     sync.Mutex
		builds = map[int]built{}
	)
	build := func(i int, l leader.Config, lc coordinationv1client.LeasesGetter, lw cache.ListerWatcher) (*fakePipeline, error) {
		if lw == nil {
			t.Errorf("shard %d: no ListerWatcher", i)
		}
		l.Logger.Info("built")
		mu.Lock()
		defer mu.Unlock()
		builds[i] = built{l, lc}
		return &fakePipeline{objects: 3}, nil
	}
	c, err := NewCoordinator(Config{Shards: 2, Leases: client, Lease: lease, Name: "p"}, &cache.ListWatch{}, build)
	if err != nil {
		t.Fatal(err)
	}
	if got := shardPoints(t, reader); len(got) != 0 {
		t.Errorf("before Run: %v, want no instruments", got)
	}
	if err := c.Ready(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Ready before Run = %v, want ErrNotRunning", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	stepUntil(t, clk, lease.RetryPeriod, "both shards running", func() bool { return len(c.Stats().Running) == 2 })

	mu.Lock()
	for i := range 2 {
		b, ok := builds[i]
		if !ok {
			t.Errorf("shard %d not built", i)
			continue
		}
		if b.lease.Name != LeaseName(testName, i, 2) || b.lease.Namespace != testNS || b.lease.Identity != "a" ||
			b.lease.Meter != meter || b.lease.Clock != lease.Clock || b.lease.LeaseDuration != lease.LeaseDuration {
			t.Errorf("shard %d built on %+v, want the shard's Lease in Config.Lease", i, b.lease)
		}
		checked, ok := b.leases.(leases.Checked)
		if !ok || checked.LeasesGetter != client || checked.Seen == nil {
			t.Errorf("shard %d built on the Lease client %#v, want a leases.Checked of Config.Leases with Seen", i, b.leases)
		}
	}
	mu.Unlock()
	for _, want := range []string{"shard=0", "shard=1", "pipeline=p"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %s:\n%s", want, logs.String())
		}
	}
	want := map[string]int64{
		"quietpatch.shard.held": 0, "quietpatch.shard.running": 2, "quietpatch.shard.members": 1, "quietpatch.shard.objects": 6,
		"quietpatch.shard.unfiltered": 0, "quietpatch.shard.moves{acquired}": 0, "quietpatch.shard.moves{given_up}": 0, "quietpatch.shard.moves{lost}": 0,
	}
	if got := shardPoints(t, reader); !maps.Equal(got, want) {
		t.Errorf("while running: %v, want %v", got, want)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	if got := shardPoints(t, reader); len(got) != 0 {
		t.Errorf("after Run: %v, want the instruments unregistered", got)
	}
	if err := c.Ready(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Ready after Run = %v, want ErrNotRunning", err)
	}
	if err := c.Run(context.Background()); !errors.Is(err, base.ErrAlreadyStarted) {
		t.Errorf("a second Run = %v, want ErrAlreadyStarted", err)
	}
}

// refusingMeter refuses to register callbacks.
type refusingMeter struct{ noop.Meter }

func (refusingMeter) RegisterCallback(metric.Callback, ...metric.Observable) (metric.Registration, error) {
	return nil, errors.New("refused")
}

// A meter that refuses the instruments fails Run at once, with a
// ConfigError, before anything joins the group or is built.
func TestCoordinatorRunWithARefusingMeter(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	lease := leaseConfig(t, "a", clk)
	lease.Meter = refusingMeter{}
	api := newFakeLeases()
	built := false
	build := func(int, leader.Config, coordinationv1client.LeasesGetter, cache.ListerWatcher) (*fakePipeline, error) {
		built = true
		return &fakePipeline{}, nil
	}
	c, err := NewCoordinator(Config{Shards: 2, Leases: api.cs.CoordinationV1(), Lease: lease, Name: "p"}, &cache.ListWatch{}, build)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(context.Background()); !errors.Is(err, base.ErrInvalidConfig) {
		t.Fatalf("Run = %v, want a ConfigError", err)
	}
	if built || len(api.cs.Actions()) != 0 {
		t.Errorf("built %v, %d Lease requests; want nothing done", built, len(api.cs.Actions()))
	}
	if err := c.Ready(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Ready = %v, want ErrNotRunning", err)
	}
}
