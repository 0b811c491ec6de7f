package controller

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func validOptions() Options {
	return Options{LeaseNamespace: "qp-system", Identity: "replica-a"}
}

func TestOptionsComplete(t *testing.T) {
	got, err := validOptions().Complete()
	if err != nil {
		t.Fatal(err)
	}
	// 10 s × min(2 workers / (1/144 s), 50/s) = 500.
	if got.QueueCapacity != 500 {
		t.Errorf("default QueueCapacity = %d, want 500", got.QueueCapacity)
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"ControllerName", got.ControllerName, DefaultControllerName},
		{"LeaseName", got.LeaseName, DefaultLeaseName},
		{"LeaseDuration", got.LeaseDuration, DefaultLeaseDuration},
		{"ReconcileInterval", got.ReconcileInterval, DefaultReconcileInterval},
		{"PatchTimeout", got.PatchTimeout, DefaultPatchTimeout},
		{"Workers", got.Workers, DefaultWorkers},
		{"KubeQPS", got.KubeQPS, float32(DefaultKubeQPS)},
		{"KubeBurst", got.KubeBurst, DefaultKubeBurst},
		{"FieldManager", got.FieldManager, DefaultFieldManager},
		{"ReferenceGrantVersion", got.ReferenceGrantVersion, ReferenceGrantAuto},
		{"CacheSyncTimeout", got.CacheSyncTimeout, DefaultCacheSyncTimeout},
	} {
		if c.got != c.want {
			t.Errorf("default %s = %v, want %v", c.name, c.got, c.want)
		}
	}
	again, err := got.Complete()
	if err != nil || again.QueueCapacity != got.QueueCapacity || again.Workers != got.Workers {
		t.Errorf("Complete is not idempotent: %+v, %v", again, err)
	}
}

func TestOptionsCapacity(t *testing.T) {
	tests := []struct {
		name string
		opts func(*Options)
		want int
	}{
		{"defaults: the client's QPS decides", func(*Options) {}, 500},
		{"client-go's default limiter", func(o *Options) { o.KubeQPS, o.KubeBurst = 5, 10 }, 50},
		{"limiter off: latency decides", func(o *Options) { o.KubeQPS = -1; o.Workers = 1 }, 1440},
		{"explicit capacity", func(o *Options) { o.QueueCapacity = 42 }, 42},
		{"longer interval", func(o *Options) { o.ReconcileInterval = time.Minute }, 3000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := validOptions()
			tt.opts(&o)
			got, err := o.Complete()
			if err != nil {
				t.Fatal(err)
			}
			if got.QueueCapacity != tt.want {
				t.Errorf("QueueCapacity = %d, want %d", got.QueueCapacity, tt.want)
			}
		})
	}
}

func TestOptionsInvalid(t *testing.T) {
	tests := []struct {
		name      string
		opts      func(*Options)
		wantField string
		wantText  string
	}{
		{"no lease namespace", func(o *Options) { o.LeaseNamespace = "" }, "LeaseNamespace", "must be set"},
		{"bad lease namespace", func(o *Options) { o.LeaseNamespace = "Not_A_Namespace" }, "LeaseNamespace", "RFC 1123"},
		{"bad lease name", func(o *Options) { o.LeaseName = "UPPER" }, "LeaseName", "RFC 1123"},
		{"no identity", func(o *Options) { o.Identity = "" }, "Identity", "must be set"},
		{"bad controller name", func(o *Options) { o.ControllerName = "no-slash" }, "ControllerName", "DOMAIN/PATH"},
		{"negative interval", func(o *Options) { o.ReconcileInterval = -time.Second }, "ReconcileInterval", "negative"},
		{"negative patch timeout", func(o *Options) { o.PatchTimeout = -1 }, "PatchTimeout", "negative"},
		{"too many workers", func(o *Options) { o.Workers = MaxWorkers + 1 }, "Workers", "between 1 and 1024"},
		{"negative workers", func(o *Options) { o.Workers = -1 }, "Workers", "between 1 and 1024"},
		{"negative capacity", func(o *Options) { o.QueueCapacity = -1 }, "QueueCapacity", "between 0"},
		{"negative burst", func(o *Options) { o.KubeBurst = -1 }, "KubeBurst", "negative"},
		{"lease duration not whole seconds", func(o *Options) { o.LeaseDuration = 1500 * time.Millisecond }, "LeaseDuration", "whole number of seconds"},
		{"renew grace too long", func(o *Options) { o.RenewGrace = 20 * time.Second }, "RenewGrace", "< LeaseDuration"},
		{"retry period too long", func(o *Options) { o.RetryPeriod = 12 * time.Second }, "RetryPeriod", "< RenewGrace"},
		{"reference grant version", func(o *Options) { o.ReferenceGrantVersion = "v2" }, "ReferenceGrantVersion", `"auto", "v1" or "v1beta1"`},
		{"long field manager", func(o *Options) { o.FieldManager = strings.Repeat("x", 129) }, "FieldManager", "at most 128"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := validOptions()
			tt.opts(&o)
			_, err := o.Complete()
			var oe *OptionError
			if !errors.As(err, &oe) || !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("Complete: %v, want an *OptionError", err)
			}
			if oe.Field != tt.wantField || !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("error %q (field %s), want field %s and text %q", err, oe.Field, tt.wantField, tt.wantText)
			}
			if !strings.Contains(err.Error(), "Options."+tt.wantField) {
				t.Errorf("error %q does not name Options.%s", err, tt.wantField)
			}
		})
	}
}
