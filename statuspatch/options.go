package statuspatch

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/metric"
	"k8s.io/utils/clock"

	"github.com/quietpatch/quietpatch/leader"
)

// Defaults of [Options]: what a zero field means. They are defined here
// only; compare with them rather than with their values.
const (
	// DefaultName is the default Options.Name.
	DefaultName = "quietpatch"
	// DefaultCapacity is the default Options.Capacity: keys per lane of
	// the queue (a key costs about 100 bytes).
	DefaultCapacity = 50_000
	// DefaultInterval is the default Options.Interval between full passes.
	DefaultInterval = 10 * time.Second
	// DefaultMaxInFlight is the default Options.MaxInFlight, the bound of
	// the adaptive in-flight limit.
	DefaultMaxInFlight = 64
	// DefaultPatchTimeout is the default Options.PatchTimeout.
	DefaultPatchTimeout = 5 * time.Second
	// MinClaimMargin is the least claim margin a zero Options.ClaimMargin
	// gives: twice the latency estimate, within MinClaimMargin and
	// PatchTimeout/2.
	MinClaimMargin = 250 * time.Millisecond
	// MaxInFlightLimit bounds Options.Workers and Options.MaxInFlight: far
	// above what an API server absorbs, low enough that a typo cannot
	// start a million calls.
	MaxInFlightLimit = 1024
)

// minClaimMargin is MinClaimMargin under the name dispatch.go uses.
const minClaimMargin = MinClaimMargin

// Errors of the parts.
var (
	// ErrFull is returned when a lane of a [PatchQueue] has no free slot.
	ErrFull = errors.New("statuspatch: queue is full")
	// ErrClosed is returned by producers once the queue is closed, and by
	// [PatchQueue.Get] once it is closed and drained.
	ErrClosed = errors.New("statuspatch: queue is closed")
	// ErrNotLeader is returned by [Reconciler.ReconcileAll] while the claim
	// is not current for our identity.
	ErrNotLeader = errors.New("statuspatch: not leader")
	// ErrNotRunning is wrapped by Healthy before Run was called and after
	// it returned.
	ErrNotRunning = errors.New("statuspatch: not running")
)

// Options are what the parts of one pipeline share: its name, clock,
// logger and meter, and the few numbers that size it. The zero Options is
// valid: every field has a default. Give the same Options to
// [NewPatchQueue], [NewReconciler] and [NewDispatcher]; each reads the
// fields it needs.
type Options struct {
	// Name is the value of the pipeline attribute on every instrument and
	// log record. Default [DefaultName].
	Name string
	// Capacity bounds each lane of the queue: keys waiting plus
	// reservations. Default [DefaultCapacity].
	Capacity int
	// Interval between full passes while leader. Default
	// [DefaultInterval].
	Interval time.Duration
	// Workers fixes the number of patch calls in flight, 1 to
	// [MaxInFlightLimit]. Zero (the default) makes it adaptive, between 1
	// and MaxInFlight.
	Workers int
	// MaxInFlight bounds the adaptive limit, at most [MaxInFlightLimit].
	// Default [DefaultMaxInFlight].
	MaxInFlight int
	// PatchTimeout bounds every patch call; the claim left bounds it
	// further. Default [DefaultPatchTimeout].
	PatchTimeout time.Duration
	// ClaimMargin: no call starts with less of the claim left. Zero means
	// twice the latency estimate, within [MinClaimMargin] and
	// PatchTimeout/2.
	ClaimMargin time.Duration
	// DiffOptions are the go-cmp options of the debug-level diff logged
	// for every patch, e.g. conditions.IgnoreTransitionTime().
	DiffOptions []cmp.Option
	// Logger receives the parts' records; nil discards.
	Logger *slog.Logger
	// Meter creates the instruments listed in the documentation of package
	// quietpatch; nil creates none (Stats work either way).
	Meter metric.Meter
	// Clock is the parts' clock. Default the real clock.
	Clock clock.WithTicker
}

// complete checks o and fills in the defaults. Errors are
// *leader.ConfigError naming the field.
func (o Options) complete() (Options, error) {
	bad := func(field, format string, args ...any) (Options, error) {
		return o, &leader.ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case o.Capacity < 0:
		return bad("Capacity", "must be >= 0 (0 means %d), got %d", DefaultCapacity, o.Capacity)
	case o.Interval < 0:
		return bad("Interval", "must be >= 0 (0 means %s), got %s", DefaultInterval, o.Interval)
	case o.Workers < 0 || o.Workers > MaxInFlightLimit:
		return bad("Workers", "must be between 0 (adaptive) and %d, got %d", MaxInFlightLimit, o.Workers)
	case o.MaxInFlight < 0 || o.MaxInFlight > MaxInFlightLimit:
		return bad("MaxInFlight", "must be between 0 (meaning %d) and %d, got %d", DefaultMaxInFlight, MaxInFlightLimit, o.MaxInFlight)
	case o.PatchTimeout < 0:
		return bad("PatchTimeout", "must be >= 0 (0 means %s), got %s", DefaultPatchTimeout, o.PatchTimeout)
	case o.ClaimMargin < 0:
		return bad("ClaimMargin", "must be >= 0 (0 means automatic), got %s", o.ClaimMargin)
	}
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.Capacity == 0 {
		o.Capacity = DefaultCapacity
	}
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.PatchTimeout == 0 {
		o.PatchTimeout = DefaultPatchTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Logger = o.Logger.With(slog.String(pipelineAttr, o.Name))
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o, nil
}

// checkLeader validates a leader.Observer argument.
func checkLeader(l leader.Observer) error {
	if l == nil || l.Identity() == "" {
		return &leader.ConfigError{Field: "Leader", Reason: "must be set, with a non-empty Identity()"}
	}
	return nil
}

// lifecycle is the Run state every part shares: Run once, Healthy while it
// runs.
type lifecycle struct {
	mu      sync.Mutex
	started bool
	running bool
	why     error
}

// start marks Run as called; it fails on a second call.
func (l *lifecycle) start() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		return leader.ErrAlreadyStarted
	}
	l.started, l.running = true, true
	return nil
}

// stop records why Run returned.
func (l *lifecycle) stop(part, reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.running = false
	l.why = fmt.Errorf("%w: %s stopped: %s", ErrNotRunning, part, reason)
}

// healthy returns nil while Run runs.
func (l *lifecycle) healthy() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.running:
		return nil
	case l.why != nil:
		return l.why
	}
	return fmt.Errorf("%w: Run not called", ErrNotRunning)
}
