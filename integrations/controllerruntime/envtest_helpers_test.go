package controllerruntime_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	examplev1 "github.com/quietpatch/quietpatch/integrations/controllerruntime/examples/widget/api/v1"
	"github.com/quietpatch/quietpatch/integrations/controllerruntime/examples/widget/readiness"
)

// The shared control plane: envtest's kube-apiserver and etcd, started by
// the first test that needs it and stopped by TestMain.
var shared struct {
	once sync.Once
	env  *envtest.Environment
	cfg  *rest.Config
	err  error
}

// crdDir is the CRD controller-gen generates for the example.
var crdDir = filepath.Join("examples", "widget", "config", "crd")

// assetsDir returns the folder holding kube-apiserver and etcd:
// $KUBEBUILDER_ASSETS (envtest's convention, which envtest itself prefers
// too), else e2e/.bin of this repository, where `make bins` links them.
func assetsDir() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	src := "KUBEBUILDER_ASSETS"
	if dir == "" {
		dir, src = filepath.Join("..", "..", "e2e", ".bin"), "e2e/.bin"
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for _, name := range []string{"kube-apiserver", "etcd"} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("no executable %s in %s (%s): run `make bins` in the repository root, or set KUBEBUILDER_ASSETS to a folder holding kube-apiserver and etcd", name, dir, src)
		}
	}
	return dir, nil
}

// testEnv returns the shared envtest control plane, starting it on first
// use: the Widget CRD installed, an admin rest.Config. With -short, it
// skips the test instead.
func testEnv(t testing.TB) (*envtest.Environment, *rest.Config) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no envtest control plane (kube-apiserver and etcd)")
	}
	shared.once.Do(func() {
		dir, err := assetsDir()
		if err != nil {
			shared.err = err
			return
		}
		start := time.Now()
		env := &envtest.Environment{
			BinaryAssetsDirectory: dir,
			CRDDirectoryPaths:     []string{crdDir},
			ErrorIfCRDPathMissing: true,
			Scheme:                testScheme(),
		}
		cfg, err := env.Start()
		if err != nil {
			shared.err = fmt.Errorf("starting envtest with the binaries in %s: %w", dir, err)
			_ = env.Stop()
			return
		}
		shared.env, shared.cfg = env, cfg
		fmt.Fprintf(os.Stderr, "envtest: control plane up in %s (binaries from %s)\n", time.Since(start).Round(time.Millisecond), dir)
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.env, shared.cfg
}

func stopTestEnv() {
	if shared.env != nil {
		if err := shared.env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "envtest: stop:", err)
		}
	}
}

func testScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := examplev1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

func adminClient(t testing.TB, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: testScheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func createNamespace(t testing.TB, c client.Client, name string) {
	t.Helper()
	err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// createWidgets creates n Widgets named w-0000… in ns, widget i of size
// size(i), with a few creators at once.
func createWidgets(t testing.TB, c client.Client, ns string, n int, size func(i int) int32) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	const creators = 8
	for g := range creators {
		wg.Go(func() {
			for i := g; i < n; i += creators {
				w := &examplev1.Widget{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("w-%04d", i)},
					Spec:       examplev1.WidgetSpec{Size: size(i)},
				}
				if err := c.Create(context.Background(), w); err != nil {
					errs <- fmt.Errorf("creating widget %s/%s: %w", ns, w.Name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// wantReady is the Ready condition the example computes for a size,
// under a policy of maxSize.
func wantReady(size, maxSize int32) (metav1.ConditionStatus, string) {
	if size > maxSize {
		return metav1.ConditionFalse, "TooLarge"
	}
	return metav1.ConditionTrue, "Sized"
}

// converged reports whether w's status is what the example computes from
// its spec and generation under the default policy, or what is missing.
func converged(w *examplev1.Widget) (bool, string) { return convergedUnder(w, readiness.MaxSize) }

// convergedUnder is converged under a policy of maxSize.
func convergedUnder(w *examplev1.Widget, maxSize int32) (bool, string) {
	if w.Status.ObservedGeneration != w.Generation {
		return false, fmt.Sprintf("%s: observedGeneration %d, generation %d", w.Name, w.Status.ObservedGeneration, w.Generation)
	}
	status, reason := wantReady(w.Spec.Size, maxSize)
	for _, c := range w.Status.Conditions {
		if c.Type == "Ready" {
			if c.Status == status && c.Reason == reason && c.ObservedGeneration == w.Generation {
				return true, ""
			}
			return false, fmt.Sprintf("%s: Ready=%s/%s (gen %d), want %s/%s", w.Name, c.Status, c.Reason, c.ObservedGeneration, status, reason)
		}
	}
	return false, fmt.Sprintf("%s: no Ready condition", w.Name)
}

// countConverged lists the Widgets of ns from the API server (not a cache)
// and counts those converged, returning one example of those that are not.
func countConverged(ctx context.Context, c client.Client, ns string) (total, ok int, example string, err error) {
	return countConvergedUnder(ctx, c, ns, readiness.MaxSize)
}

// countConvergedUnder is countConverged under a policy of maxSize.
func countConvergedUnder(ctx context.Context, c client.Client, ns string, maxSize int32) (total, ok int, example string, err error) {
	var list examplev1.WidgetList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return 0, 0, "", err
	}
	for i := range list.Items {
		if good, why := convergedUnder(&list.Items[i], maxSize); good {
			ok++
		} else if example == "" {
			example = why
		}
	}
	return len(list.Items), ok, example, nil
}

// poll calls cond every interval until it returns true or an error, or
// until timeout; it fails the test with what cond last said.
func poll(t testing.TB, timeout, interval time.Duration, what string, cond func() (bool, string, error)) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	last := ""
	for {
		done, msg, err := cond()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if done {
			return time.Since(start)
		}
		last = msg
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %s", what, timeout, last)
		}
		time.Sleep(interval)
	}
}

// statusPatches returns the API server's count of PATCH requests to the
// status of widgets, by response code (apiserver_request_total).
func statusPatches(ctx context.Context, cfg *rest.Config) (map[string]float64, error) {
	fams, err := scrape(ctx, cfg)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	fam := fams["apiserver_request_total"]
	if fam == nil {
		return nil, fmt.Errorf("the API server's /metrics has no apiserver_request_total")
	}
	for _, m := range fam.GetMetric() {
		l := labels(m)
		if l["verb"] == "PATCH" && l["group"] == "example.com" && l["resource"] == "widgets" && l["subresource"] == "status" {
			out[l["code"]] += m.GetCounter().GetValue()
		}
	}
	return out, nil
}

func sum(m map[string]float64) float64 {
	var n float64
	for _, v := range m {
		n += v
	}
	return n
}

// scrape reads the API server's /metrics with cfg's credentials and parses
// them (a few MB: tens of milliseconds).
func scrape(ctx context.Context, cfg *rest.Config) (map[string]*dto.MetricFamily, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET the API server's /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET the API server's /metrics: %s", resp.Status)
	}
	return parseMetrics(resp.Body)
}

// scrapeURL reads a plain-HTTP /metrics (a manager's) and parses every
// family.
func scrapeURL(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseMetrics(resp.Body)
}

// parseMetrics parses the Prometheus text format.
func parseMetrics(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// freePort returns a loopback address with a port free at the time of the
// call.
func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// httpStatus GETs url and returns the status code, or 0 if unreachable.
func httpStatus(url string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}
