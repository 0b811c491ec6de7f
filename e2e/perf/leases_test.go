package perf

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/e2e/cluster"
	"github.com/quietpatch/quietpatch/internal/pipeline"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch/source"
)

// leaseTotals sums apiserver_request_total for coordination.k8s.io leases,
// by verb.
func leaseTotals(ctx context.Context, cp *cluster.ControlPlane) (map[string]float64, error) {
	series, err := cp.RequestTotals(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, s := range series {
		if s.Group == "coordination.k8s.io" && s.Resource == "leases" {
			out[s.Verb] += s.Value
		}
	}
	return out, nil
}

func leaseRates(before, after map[string]float64, over time.Duration) (map[string]float64, float64) {
	rates, total := map[string]float64{}, 0.0
	for verb, v := range after {
		if d := (v - before[verb]) / over.Seconds(); d > 0 {
			rates[verb], total = d, total+d
		}
	}
	return rates, total
}

func formatRates(r map[string]float64) string {
	var parts []string
	for _, verb := range slices.Sorted(maps.Keys(r)) {
		parts = append(parts, fmt.Sprintf("%s %.2f", verb, r[verb]))
	}
	return strings.Join(parts, ", ")
}

// BenchmarkLeaseRequests measures the Lease requests per second a sharded
// deployment makes, on a control plane of its own: R = 2 replicas in
// process (quietpatch.NewSharded over the ConfigMaps of a namespace, or
// quietpatch.New for K = 1; a computer that never patches;
// leader.NewLeaseClient; the default lease
// timings, LeaseDuration 15 s, RenewGrace 10 s, RetryPeriod 2 s), for
// K = 1, 8 and 32. Once the shards are spread, it counts the API server's
// apiserver_request_total for leases over three lease durations, less the
// rate measured before any replica ran (the API server's own Lease). It
// reports lease-req/s, and the expected rate beside it:
// K/(LeaseDuration−RenewGrace) renewals, and per replica a list every
// RetryPeriod and a GET and an update of its membership Lease every
// LeaseDuration−RenewGrace — with K = 1 (the unsharded pipeline: no group)
// the follower's GET after each renewal its watch shows it instead.
func BenchmarkLeaseRequests(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cp, err := cluster.Start(ctx, cluster.Options{SkipGatewayAPI: true})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cp.Stop() }()
	const (
		replicas = 2
		window   = 3 * leader.DefaultLeaseDuration
		period   = leader.DefaultLeaseDuration - leader.DefaultLeaseDuration*2/3 // LeaseDuration − RenewGrace
	)
	kube := cp.AdminClient()
	before, err := leaseTotals(ctx, cp)
	if err != nil {
		b.Fatal(err)
	}
	time.Sleep(window) // the baseline: nothing of ours runs
	after, err := leaseTotals(ctx, cp)
	if err != nil {
		b.Fatal(err)
	}
	baseRates, base := leaseRates(before, after, window)
	b.Logf("baseline (the API server's own Leases): %.2f requests/s (%s)", base, formatRates(baseRates))
	for _, k := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("k%d", k), func(b *testing.B) {
			ns := fmt.Sprintf("leases-k%d", k)
			if err := cp.EnsureNamespace(ctx, ns); err != nil {
				b.Fatal(err)
			}
			for i := range 20 {
				if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%02d", i)}}, metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			type running struct {
				s    quietpatch.Runner
				stop context.CancelFunc
				done chan error
			}
			var rs []running
			defer func() {
				for _, r := range rs {
					r.stop()
					if err := <-r.done; err != nil {
						b.Error(err)
					}
				}
			}()
			for i := range replicas {
				s, err := newLeaseReplica(cp, kube, ns, fmt.Sprintf("r%d", i), k)
				if err != nil {
					b.Fatal(err)
				}
				rctx, stop := context.WithCancel(ctx)
				r := running{s: s, stop: stop, done: make(chan error, 1)}
				go func() { r.done <- s.Run(rctx) }()
				rs = append(rs, r)
			}
			if err := poll(ctx, 200*time.Millisecond, fmt.Sprintf("the %d shards spread over %d replicas", k, replicas), func() error {
				held, most := 0, 0
				for _, r := range rs {
					st := r.s.Stats()
					held += len(st.Held)
					most = max(most, len(st.Held))
				}
				if held != k || most > (k+replicas-1)/replicas {
					return fmt.Errorf("%d shards held, at most %d by one replica", held, most)
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			before, err := leaseTotals(ctx, cp)
			if err != nil {
				b.Fatal(err)
			}
			time.Sleep(window)
			after, err := leaseTotals(ctx, cp)
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			rates, total := leaseRates(before, after, window)
			for verb, r := range baseRates {
				rates[verb] -= r
			}
			total -= base
			expected := float64(k)/period.Seconds() + replicas*(1/leader.DefaultRetryPeriod.Seconds()+2/period.Seconds())
			if k == 1 {
				expected = 2 / period.Seconds() // the holder's renewal, the follower's GET
			}
			b.Logf("K=%d, %d replicas, default lease timings: %.2f Lease requests/s beyond the baseline (%s); expected %.2f",
				k, replicas, total, formatRates(rates), expected)
			b.ReportMetric(total, "lease-req/s")
			b.ReportMetric(expected, "expected-req/s")
		})
	}
}

// newLeaseReplica is one replica of BenchmarkLeaseRequests: a pipeline of
// k shards over the ConfigMaps of ns that never patches — quietpatch.New
// over an informer of its own (run by its Run) for k = 1,
// quietpatch.NewSharded for more.
func newLeaseReplica(cp *cluster.ControlPlane, kube kubernetes.Interface, ns, id string, k int) (quietpatch.Runner, error) {
	leases, err := leader.NewLeaseClient(cp.AdminConfig())
	if err != nil {
		return nil, err
	}
	lw := cache.NewListWatchFromClient(kube.CoreV1().RESTClient(), "configmaps", ns, fields.Everything())
	comp := pipeline.ComputerFuncs[*corev1.ConfigMap, string, string]{
		KeyFunc: func(c *corev1.ConfigMap) types.NamespacedName {
			return types.NamespacedName{Namespace: c.Namespace, Name: c.Name}
		},
		CurrentFunc: func(*corev1.ConfigMap) string { return "" },
		DesiredFunc: func(*corev1.ConfigMap) (string, error) { return "", nil },
		EqualFunc:   func(string, string) bool { return true },
		PatchFunc:   func(*corev1.ConfigMap, string) (string, error) { return "", nil },
	}
	nop := pipeline.PatcherFunc[string](func(context.Context, string) error { return nil })
	cfg := quietpatch.Config{
		Name:   "leases",
		Leases: leases,
		Lease:  leader.Config{Namespace: ns, Name: "leases", Identity: id},
	}
	if k > 1 {
		cfg.Shards = k
		return quietpatch.NewSharded(lw, comp, nop, cfg)
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	ctrl, err := quietpatch.New(source.FromInformer[*corev1.ConfigMap](inf), comp, nop, cfg)
	if err != nil {
		return nil, err
	}
	return withInformer{Runner: ctrl, inf: inf}, nil
}

// withInformer is a Runner whose Run also runs the informer of its
// Source, stopped with Run's context (not waited for).
type withInformer struct {
	quietpatch.Runner
	inf cache.SharedIndexInformer
}

func (r withInformer) Run(ctx context.Context) error {
	go r.inf.RunWithContext(ctx)
	return r.Runner.Run(ctx)
}
