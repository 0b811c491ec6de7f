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
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"ControllerName", got.ControllerName, DefaultControllerName},
		{"LeaseName", got.LeaseName, DefaultLeaseName},
		{"Identity (given)", got.Identity, "replica-a"},
		{"LeaseDuration", got.LeaseDuration, DefaultLeaseDuration},
		{"ReconcileInterval", got.ReconcileInterval, DefaultReconcileInterval},
		{"PatchTimeout", got.PatchTimeout, DefaultPatchTimeout},
		{"Workers (0: automatic)", got.Workers, 0},
		{"QueueCapacity (0: DefaultQueueCapacity)", got.QueueCapacity, 0},
		{"KubeQPS (negative: no client-side limit)", got.KubeQPS, float32(-1)},
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
	if err != nil || again.Identity != got.Identity || again.KubeQPS != got.KubeQPS || again.Workers != got.Workers {
		t.Errorf("Complete is not idempotent: %+v, %v", again, err)
	}
	// Explicit values pass through.
	o := validOptions()
	o.Workers, o.QueueCapacity, o.KubeQPS, o.KubeBurst = 8, 42, 50, 7
	if got, err := o.Complete(); err != nil || got.Workers != 8 || got.QueueCapacity != 42 || got.KubeQPS != 50 || got.KubeBurst != 7 {
		t.Errorf("explicit values: %+v, %v", got, err)
	}
}

// TestOptionsDefaultIdentity: without Options.Identity each Complete draws
// an identity unique to the process, from $POD_NAME.
func TestOptionsDefaultIdentity(t *testing.T) {
	t.Setenv("POD_NAME", "pod-7")
	o := validOptions()
	o.Identity = ""
	a, errA := o.Complete()
	b, errB := o.Complete()
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if !strings.HasPrefix(a.Identity, "pod-7_") || !strings.HasPrefix(b.Identity, "pod-7_") || a.Identity == b.Identity {
		t.Errorf("default identities %q and %q: want pod-7_<random>, distinct", a.Identity, b.Identity)
	}
}

func TestOptionsInvalid(t *testing.T) {
	tests := []struct {
		name      string
		opts      func(*Options)
		wantField string
		wantText  string
	}{
		{"no lease namespace", func(o *Options) { o.LeaseNamespace = "" }, "LeaseNamespace", "must not be empty"},
		{"bad lease namespace", func(o *Options) { o.LeaseNamespace = "Not_A_Namespace" }, "LeaseNamespace", "valid namespace name"},
		{"bad lease name", func(o *Options) { o.LeaseName = "UPPER" }, "LeaseName", "valid object name"},
		{"long identity", func(o *Options) { o.Identity = strings.Repeat("x", 254) }, "Identity", "at most 253"},
		{"bad controller name", func(o *Options) { o.ControllerName = "no-slash" }, "ControllerName", "DOMAIN/PATH"},
		{"negative interval", func(o *Options) { o.ReconcileInterval = -time.Second }, "ReconcileInterval", "negative"},
		{"negative patch timeout", func(o *Options) { o.PatchTimeout = -1 }, "PatchTimeout", "negative"},
		{"too many workers", func(o *Options) { o.Workers = MaxWorkers + 1 }, "Workers", "between 0 (automatic) and 1024"},
		{"negative workers", func(o *Options) { o.Workers = -1 }, "Workers", "between 0 (automatic) and 1024"},
		{"negative capacity", func(o *Options) { o.QueueCapacity = -1 }, "QueueCapacity", "between 0 (meaning 50000)"},
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

// TestOptionsStopBound: the bound Run keeps once its context is done, from
// the options' timeouts (defaults applied) and StopGrace.
func TestOptionsStopBound(t *testing.T) {
	tests := []struct {
		name string
		opts func(*Options)
		want time.Duration
	}{
		{"defaults: 5s + 5s + StopGrace", func(*Options) {}, 10*time.Second + StopGrace},
		{"short lease: CallTimeout is a third of it", func(o *Options) { o.LeaseDuration, o.PatchTimeout = 3*time.Second, time.Second }, 2*time.Second + StopGrace},
		{"shards: leaving the group, the shards' informers", func(o *Options) { o.LeaseDuration, o.PatchTimeout, o.Shards = 3*time.Second, time.Second, 4 },
			2*time.Second + StopGrace + time.Second + time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := validOptions()
			tt.opts(&o)
			if got := o.StopBound(); got != tt.want {
				t.Errorf("StopBound() = %v, want %v", got, tt.want)
			}
		})
	}
}
