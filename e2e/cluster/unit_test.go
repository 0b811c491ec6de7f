package cluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		label string
		opts  Options
		want  string // substring of the error; "" for none
	}{
		{"zero value", Options{}, ""},
		{"negative start timeout", Options{StartTimeout: -time.Second}, "Options.StartTimeout must be >= 0"},
		{"negative stop timeout", Options{StopTimeout: -time.Second}, "Options.StopTimeout must be >= 0"},
	} {
		t.Run(tc.label, func(t *testing.T) {
			err := tc.opts.validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

// fakeBinDir makes a directory with the given files; those named in exec are
// executable shell scripts, the others plain data files.
func fakeBinDir(t *testing.T, exec []string, plain []string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range exec {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range plain {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("not a program\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestFindBinDir(t *testing.T) {
	both := []string{APIServerBinary, EtcdBinary}
	full := fakeBinDir(t, both, nil)
	other := fakeBinDir(t, both, nil)
	noEtcd := fakeBinDir(t, []string{APIServerBinary}, nil)
	noAPIServer := fakeBinDir(t, []string{EtcdBinary}, nil)
	plainEtcd := fakeBinDir(t, []string{APIServerBinary}, []string{EtcdBinary})
	dirEtcd := fakeBinDir(t, []string{APIServerBinary}, nil)
	if err := os.Mkdir(filepath.Join(dirEtcd, EtcdBinary), 0o755); err != nil {
		t.Fatal(err)
	}
	linked := t.TempDir() // symbolic links to executables, as `make bins` leaves them
	for _, name := range both {
		if err := os.Symlink(filepath.Join(full, name), filepath.Join(linked, name)); err != nil {
			t.Fatal(err)
		}
	}

	for _, tc := range []struct {
		label   string
		assets  string // KUBEBUILDER_ASSETS
		binDir  string // QP_BIN_DIR
		want    string // the directory returned; "" for an error
		wantErr []string
	}{
		{label: "assets only", assets: full, want: full},
		{label: "assets before QP_BIN_DIR", assets: full, binDir: other, want: full},
		{label: "QP_BIN_DIR when assets unset", binDir: other, want: other},
		{label: "symbolic links", assets: linked, want: linked},
		{label: "assets without etcd", assets: noEtcd, binDir: other,
			wantErr: []string{AssetsEnv + "=" + noEtcd, filepath.Join(noEtcd, EtcdBinary), "unset it"}},
		{label: "assets without kube-apiserver", assets: noAPIServer,
			wantErr: []string{AssetsEnv, filepath.Join(noAPIServer, APIServerBinary)}},
		{label: "assets etcd not executable", assets: plainEtcd,
			wantErr: []string{AssetsEnv, filepath.Join(plainEtcd, EtcdBinary)}},
		{label: "assets etcd a directory", assets: dirEtcd,
			wantErr: []string{AssetsEnv, filepath.Join(dirEtcd, EtcdBinary)}},
		{label: "assets folder missing", assets: filepath.Join(full, "nonexistent"),
			wantErr: []string{AssetsEnv, filepath.Join(full, "nonexistent", APIServerBinary)}},
		{label: "QP_BIN_DIR without etcd", binDir: noEtcd,
			wantErr: []string{EtcdBinary + " not found in " + noEtcd, "make bins"}},
	} {
		t.Run(tc.label, func(t *testing.T) {
			t.Setenv(AssetsEnv, tc.assets)
			t.Setenv(BinDirEnv, tc.binDir)
			got, err := FindBinDir()
			if tc.want != "" {
				if err != nil || got != tc.want {
					t.Fatalf("FindBinDir() = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrBinariesMissing) {
				t.Fatalf("FindBinDir() = %q, %v; want an error wrapping ErrBinariesMissing", got, err)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("FindBinDir() error %q does not mention %q", err, want)
				}
			}
		})
	}

	t.Run("relative assets path", func(t *testing.T) {
		t.Chdir(filepath.Dir(full))
		t.Setenv(AssetsEnv, filepath.Base(full))
		t.Setenv(BinDirEnv, "")
		got, err := FindBinDir()
		if err != nil || got != full {
			t.Fatalf("FindBinDir() = %q, %v; want %q", got, err, full)
		}
	})
}

func TestMissingBinaries(t *testing.T) {
	empty := t.TempDir()
	t.Setenv(AssetsEnv, "")
	t.Run("QP_BIN_DIR", func(t *testing.T) {
		t.Setenv(BinDirEnv, empty)
		_, err := FindBinDir()
		if !errors.Is(err, ErrBinariesMissing) || !strings.Contains(err.Error(), "make bins") {
			t.Fatalf("FindBinDir() = %v, want ErrBinariesMissing saying to run make bins", err)
		}
	})
	t.Run("Options.BinDir", func(t *testing.T) {
		_, err := Start(t.Context(), Options{BinDir: empty})
		if !errors.Is(err, ErrBinariesMissing) || !strings.Contains(err.Error(), "make bins") {
			t.Fatalf("Start() = %v, want ErrBinariesMissing saying to run make bins", err)
		}
	})
	t.Run("invalid options", func(t *testing.T) {
		if _, err := Start(t.Context(), Options{StartTimeout: -1}); err == nil || !strings.Contains(err.Error(), "Options.StartTimeout") {
			t.Fatalf("Start() = %v, want an error naming Options.StartTimeout", err)
		}
	})
}

func TestFindModuleDir(t *testing.T) {
	dir, err := findModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	if ModulePathOf(filepath.Join(dir, "go.mod")) != ModulePath {
		t.Fatalf("%s/go.mod is not module %s", dir, ModulePath)
	}
}

const sampleMetrics = `# HELP apiserver_request_total [STABLE] Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="gateway.networking.k8s.io",resource="httproutes",scope="resource",subresource="status",verb="PATCH",version="v1"} 3
apiserver_request_total{code="409",component="apiserver",dry_run="",group="gateway.networking.k8s.io",resource="httproutes",scope="resource",subresource="status",verb="PATCH",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="gateway.networking.k8s.io",resource="httproutes",scope="resource",subresource="",verb="PATCH",version="v1"} 5
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="POST",version="v1"} 7
# HELP apiserver_request_total_other decoy with a longer name
# TYPE apiserver_request_total_other counter
apiserver_request_total_other 100
# HELP apiserver_longrunning_requests Gauge of all active long-running apiserver requests.
# TYPE apiserver_longrunning_requests gauge
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="cluster",subresource="",verb="WATCH",version="v1"} 1
`

func TestParseRequestTotals(t *testing.T) {
	fams, err := ParseMetrics(strings.NewReader(sampleMetrics), RequestTotalMetric)
	if err != nil {
		t.Fatal(err)
	}
	if len(fams) != 1 || fams[RequestTotalMetric] == nil {
		t.Fatalf("families = %v, want only %s", fams, RequestTotalMetric)
	}
	series := RequestTotalsFrom(fams)
	if len(series) != 4 {
		t.Fatalf("got %d series, want 4: %+v", len(series), series)
	}
	for _, tc := range []struct {
		label string
		f     RequestFilter
		want  float64
	}{
		{"all", RequestFilter{}, 17},
		{"status patches, any code", RequestFilter{Verb: "patch", Resource: "httproutes", Subresource: "status"}, 5},
		{"status patches ok", RequestFilter{Verb: "PATCH", Resource: "httproutes", Subresource: "status", Code: "200"}, 3},
		{"main resource only", RequestFilter{Resource: "httproutes", Subresource: NoSubresource}, 5},
		{"by group", RequestFilter{Group: "gateway.networking.k8s.io"}, 10},
		{"core group has no name", RequestFilter{Verb: "POST", Resource: "configmaps"}, 7},
		{"nothing", RequestFilter{Resource: "leases"}, 0},
	} {
		t.Run(tc.label, func(t *testing.T) {
			if got := SumRequests(series, tc.f); got != tc.want {
				t.Errorf("SumRequests(%+v) = %v, want %v", tc.f, got, tc.want)
			}
		})
	}
	all, err := ParseMetrics(strings.NewReader(sampleMetrics))
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 {
		t.Errorf("unfiltered parse: %d families, want 3", len(all))
	}
}

const sampleAudit = `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a1","stage":"ResponseComplete","requestURI":"/apis/gateway.networking.k8s.io/v1/namespaces/ns1/httproutes/web/status","verb":"patch","user":{"username":"system:serviceaccount:ns1:writer","groups":["system:serviceaccounts"]},"objectRef":{"resource":"httproutes","namespace":"ns1","name":"web","apiGroup":"gateway.networking.k8s.io","apiVersion":"v1","subresource":"status"},"responseStatus":{"metadata":{},"code":200},"requestReceivedTimestamp":"2026-01-02T03:04:05.000000Z","stageTimestamp":"2026-01-02T03:04:05.010000Z"}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a2","stage":"ResponseComplete","requestURI":"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/x","verb":"update","user":{"username":"system:apiserver"},"objectRef":{"resource":"leases","namespace":"kube-system","name":"x","apiGroup":"coordination.k8s.io","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a3","stage":"ResponseComplete","verb":"patch","user":{"username":"system:serviceaccount:ns1:writer"},"objectRef":{"resource":"httproutes","namespace":"ns1","name":"web","apiGroup":"gateway.networking.k8s.io","subresource":"status"},"responseStatus":{"metadata":{},"code":409}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","auditID":"partial`

func TestParseAuditLog(t *testing.T) {
	evs, err := ParseAuditLog(strings.NewReader(sampleAudit))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 3 {
		t.Fatalf("got %d events, want 3 (the partial last line dropped)", len(evs))
	}
	if evs[0].StageTimestamp.Time.IsZero() || evs[0].User.Username != "system:serviceaccount:ns1:writer" {
		t.Errorf("event 0 = %+v", evs[0])
	}
	writer := ServiceAccountUsername("ns1", "writer")
	for _, tc := range []struct {
		label string
		f     AuditFilter
		want  []string // audit IDs
	}{
		{"all", AuditFilter{}, []string{"a1", "a2", "a3"}},
		{"by user", AuditFilter{Username: writer}, []string{"a1", "a3"}},
		{"by user and code", AuditFilter{Username: writer, Code: 200}, []string{"a1"}},
		{"verb case-insensitive", AuditFilter{Verb: "PATCH", Code: 409}, []string{"a3"}},
		{"status subresource", AuditFilter{Subresource: "status"}, []string{"a1", "a3"}},
		{"main resource only", AuditFilter{Subresource: NoSubresource}, []string{"a2"}},
		{"object", AuditFilter{APIGroup: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Name: "x"}, []string{"a2"}},
		{"no match", AuditFilter{Name: "other"}, nil},
	} {
		t.Run(tc.label, func(t *testing.T) {
			var got []string
			for i := range evs {
				if tc.f.Matches(&evs[i]) {
					got = append(got, string(evs[i].AuditID))
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("matches = %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := ParseAuditLog(strings.NewReader("{\"kind\":\"Event\"}\nnot json\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("malformed line: got %v, want an error naming line 2", err)
	}
	if !(AuditFilter{}).Matches(&auditv1.Event{}) {
		t.Error("the zero filter must match an event without objectRef or responseStatus")
	}
}

func TestGatewayAPICRDs(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	dir, err := GatewayAPICRDDir(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dir, GatewayAPIModule+"@"+gatewayAPIVersion()) {
		t.Errorf("CRD dir %s is not in %s@%s", dir, GatewayAPIModule, gatewayAPIVersion())
	}
	crds, err := ReadCRDs(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, c := range crds {
		names[c.Name] = true
		if c.Annotations["gateway.networking.k8s.io/channel"] != "standard" {
			t.Errorf("CRD %s is not from the standard channel: %v", c.Name, c.Annotations)
		}
	}
	for _, want := range []string{"httproutes.gateway.networking.k8s.io", "gateways.gateway.networking.k8s.io", "gatewayclasses.gateway.networking.k8s.io", "referencegrants.gateway.networking.k8s.io"} {
		if !names[want] {
			t.Errorf("missing CRD %s in %v", want, names)
		}
	}
	if _, err := ReadCRDs(t.TempDir()); err == nil {
		t.Error("ReadCRDs of an empty directory: want an error")
	}
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "x.yaml"), []byte("kind: CustomResourceDefinition\nspec: {bogus: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadCRDs(bad); err == nil {
		t.Error("ReadCRDs of a CRD with an unknown field: want an error")
	}
}

func TestServiceAccountUsername(t *testing.T) {
	if got := ServiceAccountUsername("ns", "sa"); got != "system:serviceaccount:ns:sa" {
		t.Errorf("got %q", got)
	}
}
