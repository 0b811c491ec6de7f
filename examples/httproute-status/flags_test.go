package main

import (
	"errors"
	"flag"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// envOf returns an env over m.
func envOf(m map[string]string) env { return func(k string) string { return m[k] } }

func TestParseFlagsDefaults(t *testing.T) {
	t.Setenv("POD_NAME", "pod-0") // read by leader.DefaultIdentity
	cfg, err := parseFlags(nil, envOf(map[string]string{"POD_NAMESPACE": "qp-system"}))
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.opts
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"Kubeconfig", o.Kubeconfig, ""},
		{"ControllerName", o.ControllerName, "quietpatch.io/httproute-status"},
		{"Mesh", o.Mesh, true},
		{"LeaseNamespace", o.LeaseNamespace, "qp-system"},
		{"LeaseName", o.LeaseName, "quietpatch-httproute-status"},
		{"Identity is $POD_NAME_<random>", strings.HasPrefix(o.Identity, "pod-0_") && len(o.Identity) == len("pod-0_")+8, true},
		{"LeaseDuration", o.LeaseDuration, 15 * time.Second},
		{"ReconcileInterval", o.ReconcileInterval, 10 * time.Second},
		{"QueueCapacity (0: the library's default)", o.QueueCapacity, 0},
		{"PatchTimeout", o.PatchTimeout, 5 * time.Second},
		{"Workers (automatic)", o.Workers, 0},
		{"KubeQPS (no client-side limit)", o.KubeQPS, float32(-1)},
		{"KubeBurst", o.KubeBurst, 100},
		{"MetricsAddr", o.MetricsAddr, ":8080"},
		{"HealthAddr", o.HealthAddr, ":8081"},
		{"CacheSyncTimeout", o.CacheSyncTimeout, 2 * time.Minute},
		{"ReferenceGrantVersion", o.ReferenceGrantVersion, "auto"},
		{"FieldManager", o.FieldManager, "quietpatch-httproute-status"},
		{"Logger", o.Logger == nil, true},
		{"log level", cfg.logLevel, slog.LevelInfo},
		{"log format", cfg.logFormat, "text"},
		{"warnings", len(cfg.warnings), 0},
	} {
		if c.got != c.want {
			t.Errorf("default %s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestParseFlagsEnvironmentDefaults(t *testing.T) {
	t.Setenv("POD_NAME", "")
	cfg, err := parseFlags(nil, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.opts.LeaseNamespace != "default" {
		t.Errorf("LeaseNamespace without $POD_NAMESPACE = %q, want default", cfg.opts.LeaseNamespace)
	}
	again, err := parseFlags(nil, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if id := cfg.opts.Identity; id == "" || !strings.Contains(id, "_") || id == again.opts.Identity {
		t.Errorf("Identity without $POD_NAME = %q, then %q: want <hostname>_<random>, distinct per process", id, again.opts.Identity)
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		check func(c config) bool
	}{
		{"kubeconfig", []string{"--kubeconfig", "/tmp/kc"}, func(c config) bool { return c.opts.Kubeconfig == "/tmp/kc" }},
		{"controller name", []string{"--controller-name=example.com/x"}, func(c config) bool { return c.opts.ControllerName == "example.com/x" }},
		{"lease", []string{"--lease-namespace=ns", "--lease-name=l", "--identity=me"}, func(c config) bool {
			return c.opts.LeaseNamespace == "ns" && c.opts.LeaseName == "l" && c.opts.Identity == "me"
		}},
		{"short lease timings for tests", []string{"--lease-duration=2s", "--renew-grace=1s", "--retry-period=200ms"}, func(c config) bool {
			return c.opts.LeaseDuration == 2*time.Second && c.opts.RenewGrace == time.Second && c.opts.RetryPeriod == 200*time.Millisecond
		}},
		{"interval", []string{"--reconcile-interval=1m"}, func(c config) bool {
			return c.opts.ReconcileInterval == time.Minute && c.opts.QueueCapacity == 0
		}},
		{"client-side limiter", []string{"--kube-qps=5", "--kube-burst=10"}, func(c config) bool {
			return c.opts.KubeQPS == 5 && c.opts.KubeBurst == 10
		}},
		{"automatic workers", []string{"--workers=0"}, func(c config) bool { return c.opts.Workers == 0 }},
		{"patch latency: deprecated, ignored, warned about", []string{"--patch-latency=15ms"}, func(c config) bool {
			return c.opts.QueueCapacity == 0 && len(c.warnings) == 1 && strings.Contains(c.warnings[0], "--patch-latency is deprecated")
		}},
		{"explicit capacity", []string{"--queue-capacity=42"}, func(c config) bool { return c.opts.QueueCapacity == 42 }},
		{"patch timeout and workers", []string{"--patch-timeout=2s", "--workers=8"}, func(c config) bool {
			return c.opts.PatchTimeout == 2*time.Second && c.opts.Workers == 8
		}},
		{"endpoints disabled", []string{"--metrics-addr=", "--health-addr=0"}, func(c config) bool {
			return c.opts.MetricsAddr == "" && c.opts.HealthAddr == "0"
		}},
		{"logging", []string{"--log-level=DEBUG", "--log-format=json"}, func(c config) bool {
			return c.logLevel == slog.LevelDebug && c.logFormat == "json"
		}},
		{"warn", []string{"--log-level=warn"}, func(c config) bool { return c.logLevel == slog.LevelWarn }},
		{"mesh off", []string{"--mesh=false"}, func(c config) bool { return !c.opts.Mesh }},
		{"reference grants", []string{"--reference-grant-version=v1beta1"}, func(c config) bool { return c.opts.ReferenceGrantVersion == "v1beta1" }},
		{"cache sync", []string{"--cache-sync-timeout=30s"}, func(c config) bool { return c.opts.CacheSyncTimeout == 30*time.Second }},
		{"single dash", []string{"-workers", "3"}, func(c config) bool { return c.opts.Workers == 3 }},
		{"fence", []string{"--fence"}, func(c config) bool { return c.opts.Fence }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseFlags(tt.args, envOf(nil))
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(c) {
				t.Errorf("parseFlags(%q) = %+v", tt.args, c.opts)
			}
		})
	}
}

func TestParseFlagsInvalid(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // substring of the error
	}{
		{"unknown flag", []string{"--nope"}, "flag provided but not defined: -nope"},
		{"not a duration", []string{"--reconcile-interval=10"}, `invalid value "10" for flag -reconcile-interval`},
		{"not a number", []string{"--workers=many"}, `invalid value "many" for flag -workers`},
		{"argument", []string{"extra"}, `unexpected argument "extra"`},
		{"zero interval", []string{"--reconcile-interval=0s"}, "--reconcile-interval: must be > 0"},
		{"negative timeout", []string{"--patch-timeout=-1s"}, "--patch-timeout: must be > 0"},
		{"zero lease duration", []string{"--lease-duration=0"}, "--lease-duration: must be > 0"},
		{"zero cache sync", []string{"--cache-sync-timeout=0"}, "--cache-sync-timeout: must be > 0"},
		{"negative workers", []string{"--workers=-1"}, "--workers: must be between 0 (automatic) and 1024, got -1"},
		{"too many workers", []string{"--workers=5000"}, "--workers: must be between 0 (automatic) and 1024, got 5000"},
		{"zero QPS", []string{"--kube-qps=0"}, "--kube-qps: must be > 0, or negative"},
		{"absurd QPS", []string{"--kube-qps=1e9"}, "--kube-qps: must be at most"},
		{"zero burst", []string{"--kube-burst=0"}, "--kube-burst: must be >= 1"},
		{"negative capacity", []string{"--queue-capacity=-5"}, "--queue-capacity: must be between 0 (meaning 50000) and 10000000, got -5"},
		{"bad controller name", []string{"--controller-name=nope"}, "--controller-name: must be DOMAIN/PATH"},
		{"bad lease namespace", []string{"--lease-namespace=Bad_NS"}, "--lease-namespace: must be a valid namespace name"},
		{"empty lease namespace", []string{"--lease-namespace="}, "--lease-namespace: must not be empty"},
		{"bad lease name", []string{"--lease-name=Bad Name"}, "--lease-name: must be a valid object name"},
		{"long identity", []string{"--identity=" + strings.Repeat("x", 254)}, "--identity: must be at most 253 characters"},
		{"fractional lease", []string{"--lease-duration=1500ms"}, "--lease-duration: must be a whole number of seconds"},
		{"renew grace too long", []string{"--renew-grace=20s"}, "--renew-grace: must be < --lease-duration (15s), got 20s"},
		{"retry period too long", []string{"--lease-duration=3s", "--retry-period=2s"}, "--retry-period: must be < --renew-grace (2s)"},
		{"log level", []string{"--log-level=verbose"}, `--log-level: must be debug, info, warn or error, got "verbose"`},
		{"log format", []string{"--log-format=xml"}, `--log-format: must be text or json, got "xml"`},
		{"reference grant version", []string{"--reference-grant-version=v2"}, "--reference-grant-version: must be"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseFlags(tt.args, envOf(nil))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("parseFlags(%q): %v, want an error containing %q", tt.args, err, tt.want)
			}
		})
	}
}

func TestParseFlagsHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help"} {
		if _, err := parseFlags([]string{arg}, envOf(nil)); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("parseFlags(%s): %v, want flag.ErrHelp", arg, err)
		}
	}
}

// TestFlagOf: every field the controller can reject maps to a flag that
// exists.
func TestFlagOf(t *testing.T) {
	fs, _ := newFlagSet(envOf(nil))
	for field, name := range flagOf {
		if fs.Lookup(name) == nil {
			t.Errorf("flagOf[%s] = %s, which is not a flag", field, name)
		}
	}
	// Every flag's usage text ends up in the help.
	var b strings.Builder
	usage(&b, envOf(nil))
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(b.String(), "-"+f.Name) {
			t.Errorf("usage lacks -%s", f.Name)
		}
	})
	for _, s := range []string{"0: automatic", "0: the library's default (50000)", "negative: none, the default", "Priority and Fairness"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("usage lacks %q", s)
		}
	}
}
