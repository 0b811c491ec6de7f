package leader

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/quietpatch/quietpatch/internal/base"
	"k8s.io/client-go/kubernetes/fake"
)

func TestConfigDefaults(t *testing.T) {
	for _, tc := range []struct {
		label                        string
		in                           Config
		lease, grace, retry, timeout time.Duration
	}{
		{
			label: "all defaults",
			in:    Config{},
			lease: 15 * time.Second, grace: 10 * time.Second, retry: 2 * time.Second, timeout: 5 * time.Second,
		},
		{
			label: "short lease: the others scale down",
			in:    Config{LeaseDuration: 3 * time.Second},
			lease: 3 * time.Second, grace: 2 * time.Second, retry: time.Second, timeout: time.Second,
		},
		{
			label: "shortest lease",
			in:    Config{LeaseDuration: time.Second},
			lease: time.Second, grace: 666666666, retry: 333333333, timeout: 333333333,
		},
		{
			label: "long lease: retry and timeout stay at their caps",
			in:    Config{LeaseDuration: 60 * time.Second},
			lease: 60 * time.Second, grace: 40 * time.Second, retry: 2 * time.Second, timeout: 5 * time.Second,
		},
		{
			label: "explicit values kept",
			in:    Config{LeaseDuration: 30 * time.Second, RenewGrace: 20 * time.Second, RetryPeriod: 3 * time.Second, CallTimeout: 4 * time.Second},
			lease: 30 * time.Second, grace: 20 * time.Second, retry: 3 * time.Second, timeout: 4 * time.Second,
		},
	} {
		t.Run(tc.label, func(t *testing.T) {
			in := tc.in
			in.Namespace, in.Name, in.Identity = "ns", "lease", "me"
			c, err := NewClaimer(fake.NewSimpleClientset().CoordinationV1(), in)
			if err != nil {
				t.Fatal(err)
			}
			got := c.cfg // what NewClaimer applied
			for _, f := range []struct {
				name      string
				got, want time.Duration
			}{
				{"LeaseDuration", got.LeaseDuration, tc.lease},
				{"RenewGrace", got.RenewGrace, tc.grace},
				{"RetryPeriod", got.RetryPeriod, tc.retry},
				{"CallTimeout", got.CallTimeout, tc.timeout},
			} {
				if f.got != f.want {
					t.Errorf("%s = %v, want %v", f.name, f.got, f.want)
				}
			}
			if got.Clock == nil || got.Logger == nil || got.Meter == nil {
				t.Errorf("Clock, Logger, Meter not defaulted: %+v", got)
			}
			if got.RequireExisting {
				t.Error("RequireExisting defaulted to true")
			}
		})
	}
}

func TestConfigRejected(t *testing.T) {
	valid := Config{Namespace: "ns", Name: "lease", Identity: "me"}
	for _, tc := range []struct {
		label  string
		mutate func(*Config)
		want   string // the message names the field
	}{
		{"no namespace", func(c *Config) { c.Namespace = "" }, "Namespace must not be empty"},
		{"bad namespace", func(c *Config) { c.Namespace = "Not_A_Label" }, "Namespace must be a valid namespace name"},
		{"no name", func(c *Config) { c.Name = "" }, "Name must not be empty"},
		{"bad name", func(c *Config) { c.Name = "UPPER/case" }, "Name must be a valid object name"},
		{"no identity", func(c *Config) { c.Identity = "" }, "Identity must not be empty"},
		{"long identity", func(c *Config) { c.Identity = strings.Repeat("x", 254) }, "Identity must be at most 253 characters, got 254"},
		{"negative lease", func(c *Config) { c.LeaseDuration = -time.Second }, "LeaseDuration must be >= 1s, got -1s"},
		{"sub-second lease", func(c *Config) { c.LeaseDuration = 500 * time.Millisecond }, "LeaseDuration must be >= 1s"},
		{"fractional lease", func(c *Config) { c.LeaseDuration = 1500 * time.Millisecond }, "LeaseDuration must be a whole number of seconds"},
		{"grace = duration", func(c *Config) { c.RenewGrace = 15 * time.Second }, "RenewGrace must be < LeaseDuration (15s), got 15s"},
		{"grace > duration", func(c *Config) { c.RenewGrace = time.Minute }, "RenewGrace must be < LeaseDuration"},
		{"negative grace", func(c *Config) { c.RenewGrace = -1 }, "RenewGrace must be > 0"},
		{"retry = grace", func(c *Config) { c.RetryPeriod = 10 * time.Second }, "RetryPeriod must be < RenewGrace (10s), got 10s"},
		{"negative retry", func(c *Config) { c.RetryPeriod = -time.Second }, "RetryPeriod must be > 0"},
		{"timeout = duration", func(c *Config) { c.CallTimeout = 15 * time.Second }, "CallTimeout must be < LeaseDuration (15s), got 15s"},
		{"negative timeout", func(c *Config) { c.CallTimeout = -time.Second }, "CallTimeout must be > 0"},
	} {
		t.Run(tc.label, func(t *testing.T) {
			cfg := valid
			tc.mutate(&cfg)
			c, err := NewClaimer(fake.NewSimpleClientset().CoordinationV1(), cfg)
			if err == nil {
				t.Fatalf("accepted: %+v", c.cfg)
			}
			if !errors.Is(err, base.ErrInvalidConfig) {
				t.Errorf("error %v does not wrap base.ErrInvalidConfig", err)
			}
			if want := "quietpatch: invalid config: " + tc.want; !strings.HasPrefix(err.Error(), want) {
				t.Errorf("error %q, want it to start with %q", err, want)
			}
			// The field is in the error's type, for callers that map it
			// to a flag or option of their own.
			var ce *base.ConfigError
			field, _, _ := strings.Cut(tc.want, " ")
			if !errors.As(err, &ce) || ce.Field != field {
				t.Errorf("error %v: base.ConfigError %+v, want Field %q", err, ce, field)
			}
			if _, verr := cfg.Complete(); verr == nil || verr.Error() != err.Error() {
				t.Errorf("Complete() = %v, NewClaimer: %v", verr, err)
			}
		})
	}
	t.Run("nil client", func(t *testing.T) {
		if _, err := NewClaimer(nil, valid); !errors.Is(err, base.ErrInvalidConfig) {
			t.Errorf("NewClaimer(nil) = %v, want base.ErrInvalidConfig", err)
		}
	})
}

func TestConfigCompleteAppliesTheDefaults(t *testing.T) {
	cfg, err := Config{Namespace: "ns", Name: "lease", Identity: DefaultIdentity()}.Complete()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LeaseDuration != DefaultLeaseDuration || cfg.RenewGrace != 10*time.Second || cfg.RetryPeriod != DefaultRetryPeriod ||
		cfg.CallTimeout != DefaultCallTimeout || cfg.Clock == nil || cfg.Logger == nil || cfg.Meter == nil {
		t.Errorf("Complete() = %+v, want the defaults", cfg)
	}
}

func TestDefaultIdentityIsPerProcess(t *testing.T) {
	t.Setenv("POD_NAME", "web-0")
	a, b := DefaultIdentity(), DefaultIdentity()
	if a == b {
		t.Fatalf("two identities drawn alike: %q", a)
	}
	for _, id := range []string{a, b} {
		if !strings.HasPrefix(id, "web-0_") || len(id) != len("web-0_")+8 {
			t.Errorf("identity %q, want web-0_ and 8 hex digits", id)
		}
	}
	t.Setenv("POD_NAME", "")
	if host, _ := os.Hostname(); host != "" && !strings.HasPrefix(DefaultIdentity(), host+"_") {
		t.Errorf("without POD_NAME: %q, want the host name %q first", DefaultIdentity(), host)
	}
}
