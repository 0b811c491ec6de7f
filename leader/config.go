package leader

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/quietpatch/quietpatch/internal/base"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"
)

// Defaults applied by [NewClaimer] to zero fields of [Config].
const (
	// DefaultLeaseDuration is the default Config.LeaseDuration.
	DefaultLeaseDuration = 15 * time.Second
	// DefaultRetryPeriod is the default Config.RetryPeriod, unless half of
	// RenewGrace is shorter.
	DefaultRetryPeriod = 2 * time.Second
	// DefaultCallTimeout is the default Config.CallTimeout, unless a third
	// of LeaseDuration is shorter.
	DefaultCallTimeout = 5 * time.Second
)

// DefaultIdentity returns an identity unique to this process: the pod's
// name ($POD_NAME, else the host name) followed by "_" and 8 random hex
// digits drawn at each call. A new process — a restarted container
// keeps its pod name — therefore never takes its predecessor's identity.
// (The Claimer does not inherit a claim held under its own identity by an
// earlier process either; see [Claimer].)
func DefaultIdentity() string {
	host, _ := os.Hostname()
	base := cmp.Or(os.Getenv("POD_NAME"), host, "replica")
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return base + "_" + hex.EncodeToString(b[:])
}

// Config configures a [Claimer]. Zero fields take the documented default;
// [NewClaimer] rejects impossible combinations with an error naming the field.
//
// The timing fields relate as follows (defaults in parentheses):
//
//	0 < RetryPeriod (2s) < RenewGrace (⅔·LeaseDuration = 10s) < LeaseDuration (15s)
//	0 < CallTimeout (min(5s, LeaseDuration/3) = 5s) < LeaseDuration
//
// A holder writes the Lease about once per LeaseDuration−RenewGrace (every 5s
// with the defaults); a failed renewal is retried every RetryPeriod until the
// claim runs out, so with the defaults a holder survives about RenewGrace/
// RetryPeriod = 5 failed attempts, or an API server outage of up to
// RenewGrace, without losing the lease.
type Config struct {
	// Namespace of the Lease. Required; must be a valid namespace name
	// (RFC 1123 label).
	Namespace string

	// Name of the Lease. Required; must be a valid object name (RFC 1123
	// subdomain).
	Name string

	// Identity is this replica's holder identity, written to
	// spec.holderIdentity; at most 253 characters. Required by
	// NewClaimer; quietpatch.New fills it with [DefaultIdentity] when
	// empty. It must be
	// unique among the processes that run at the same time: two live
	// processes sharing an identity would both believe they hold the
	// lease. [DefaultIdentity] gives the pod name plus a random suffix
	// drawn at start-up. A process restarted with the identity of its
	// predecessor is safe: it waits out a claim it did not make itself
	// like anyone else's.
	Identity string

	// LeaseDuration is how long a claim lasts after it was last written,
	// and is stored in the Lease as spec.leaseDurationSeconds. Other
	// replicas wait this long after they last saw the Lease change before
	// they take it over. Default DefaultLeaseDuration (15s). Must be a
	// whole number of seconds (the Lease stores seconds) and at least 1s.
	LeaseDuration time.Duration

	// RenewGrace: the holder renews its claim once less than RenewGrace of
	// it remains, and keeps retrying every RetryPeriod until it succeeds or
	// the claim runs out (client-go calls the equivalent span RenewDeadline).
	// Default ⅔ of LeaseDuration (10s with the default LeaseDuration). Must
	// be > 0 and < LeaseDuration.
	RenewGrace time.Duration

	// RetryPeriod is how often a request that failed for a transient reason
	// (timeout, 5xx, 429, conflict) is retried, and how often a replica
	// that does not hold the lease re-checks it (re-reading it from the API
	// when its watch of the Lease is broken). Default DefaultRetryPeriod
	// (2s), or RenewGrace/2 when that is shorter. Must be > 0 and <
	// RenewGrace, so a failed renewal is retried before the claim runs out.
	RetryPeriod time.Duration

	// CallTimeout bounds every single API request (get, create, update,
	// and opening the watch); a renewal is further bounded by the time
	// left on our claim. It is a
	// context deadline, so it is measured on the real clock even when
	// Clock is a fake. Default min(DefaultCallTimeout, LeaseDuration/3)
	// (5s with the default LeaseDuration). Must be > 0 and < LeaseDuration.
	// The vacate request sent after Run's context is cancelled gets a fresh
	// CallTimeout of its own.
	CallTimeout time.Duration

	// RequireExisting, when true, forbids the Claimer to create the Lease:
	// it must exist already (created by the deployment), and Run returns
	// an error wrapping ErrLeaseNotFound when it is missing or deleted. The
	// default (false) creates the Lease, with this replica as the holder,
	// whenever it is missing.
	RequireExisting bool

	// Clock is the clock all claim arithmetic and waiting use. Default
	// (nil): the real clock. Tests inject k8s.io/utils/clock/testing's
	// FakeClock.
	Clock clock.Clock

	// Logger receives an info record when this replica acquires the lease,
	// loses it (with the reason), vacates it or decides not to, and when
	// Run stops; a debug record when another holder is observed and when
	// requests start or stop failing — never one per unchanged renewal —;
	// one warning if the Lease cannot be watched (say, RBAC lacks the watch
	// verb); and an error record when Run fails. Nil discards all records.
	Logger *slog.Logger

	// Meter creates the quietpatch.leader instruments (docs/metrics.md).
	// Nil means a no-op meter.
	Meter metric.Meter
}

// Complete returns cfg with zero fields set to the defaults [NewClaimer]
// applies, or a [*base.ConfigError] naming the first invalid field:
// what NewClaimer would reject.
func (cfg Config) Complete() (Config, error) {
	if cfg.Namespace == "" {
		return cfg, configErr("Namespace must not be empty")
	}
	if errs := validation.IsDNS1123Label(cfg.Namespace); len(errs) > 0 {
		return cfg, configErr("Namespace must be a valid namespace name, got %q: %s", cfg.Namespace, strings.Join(errs, "; "))
	}
	if cfg.Name == "" {
		return cfg, configErr("Name must not be empty")
	}
	if errs := validation.IsDNS1123Subdomain(cfg.Name); len(errs) > 0 {
		return cfg, configErr("Name must be a valid object name, got %q: %s", cfg.Name, strings.Join(errs, "; "))
	}
	if cfg.Identity == "" {
		return cfg, configErr("Identity must not be empty")
	}
	if len(cfg.Identity) > 253 {
		return cfg, configErr("Identity must be at most 253 characters, got %d", len(cfg.Identity))
	}

	cfg.LeaseDuration = cmp.Or(cfg.LeaseDuration, DefaultLeaseDuration)
	if cfg.LeaseDuration < time.Second {
		return cfg, configErr("LeaseDuration must be >= 1s, got %v", cfg.LeaseDuration)
	}
	if cfg.LeaseDuration%time.Second != 0 {
		return cfg, configErr("LeaseDuration must be a whole number of seconds (the Lease stores leaseDurationSeconds), got %v", cfg.LeaseDuration)
	}
	if cfg.LeaseDuration/time.Second > (1<<31 - 1) {
		return cfg, configErr("LeaseDuration must fit leaseDurationSeconds (int32), got %v", cfg.LeaseDuration)
	}

	cfg.RenewGrace = cmp.Or(cfg.RenewGrace, cfg.LeaseDuration*2/3)
	if cfg.RenewGrace <= 0 {
		return cfg, configErr("RenewGrace must be > 0, got %v", cfg.RenewGrace)
	}
	if cfg.RenewGrace >= cfg.LeaseDuration {
		return cfg, configErr("RenewGrace must be < LeaseDuration (%v), got %v", cfg.LeaseDuration, cfg.RenewGrace)
	}

	cfg.RetryPeriod = cmp.Or(cfg.RetryPeriod, min(DefaultRetryPeriod, cfg.RenewGrace/2))
	if cfg.RetryPeriod <= 0 {
		return cfg, configErr("RetryPeriod must be > 0, got %v", cfg.RetryPeriod)
	}
	if cfg.RetryPeriod >= cfg.RenewGrace {
		return cfg, configErr("RetryPeriod must be < RenewGrace (%v), got %v", cfg.RenewGrace, cfg.RetryPeriod)
	}

	cfg.CallTimeout = cmp.Or(cfg.CallTimeout, min(DefaultCallTimeout, cfg.LeaseDuration/3))
	if cfg.CallTimeout <= 0 {
		return cfg, configErr("CallTimeout must be > 0, got %v", cfg.CallTimeout)
	}
	if cfg.CallTimeout >= cfg.LeaseDuration {
		return cfg, configErr("CallTimeout must be < LeaseDuration (%v), got %v", cfg.LeaseDuration, cfg.CallTimeout)
	}

	cfg.Clock = cmp.Or[clock.Clock](cfg.Clock, clock.RealClock{})
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	cfg.Meter = cmp.Or[metric.Meter](cfg.Meter, noop.Meter{})
	return cfg, nil
}

// configErr builds a *ConfigError from "<Field> <reason>", the field being
// the first word of format.
func configErr(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	field, reason, _ := strings.Cut(msg, " ")
	return &base.ConfigError{Field: field, Reason: reason}
}
