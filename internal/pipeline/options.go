// Package pipeline is the machinery behind quietpatch.New: the reconciler
// that finds the objects whose status changed and queues their keys, and
// the dispatcher that builds and sends each patch when a call can be made,
// under the claim. Package quietpatch composes them and documents what
// holds; this package documents each part's own contract.
package pipeline

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/leader"
)

// Defaults of [Options]: what a zero field means.
const (
	DefaultName         = "quietpatch"
	DefaultCapacity     = 50_000
	DefaultInterval     = 10 * time.Second
	DefaultMaxInFlight  = 64
	DefaultPatchTimeout = 5 * time.Second
	// DefaultSettle is the Settle quietpatch.New gives its pipelines: a
	// burst of events a few milliseconds apart is one batch, and an edit
	// waits 50 ms (250 ms at most, in a burst) before it is served.
	DefaultSettle = 50 * time.Millisecond
	// MinClaimMargin is the least claim margin a zero ClaimMargin gives:
	// twice the latency estimate, within MinClaimMargin and PatchTimeout/2.
	MinClaimMargin = 250 * time.Millisecond
	// MaxInFlightLimit bounds Workers and MaxInFlight: far above what an
	// API server absorbs, low enough that a typo cannot start a million
	// calls.
	MaxInFlightLimit = 1024
)

// Errors of the parts.
var (
	// ErrNotLeader is returned by [Reconciler.ReconcileAll] while the claim
	// is not current for our identity.
	ErrNotLeader = errors.New("quietpatch: not leader")
	// ErrNotRunning is wrapped by Healthy before Run was called and after
	// it returned.
	ErrNotRunning = errors.New("quietpatch: not running")
)

// Leader is what the parts need of the Lease: *leader.Claimer.
type Leader interface {
	Identity() string
	Current() leader.Claim
	Subscribe() (<-chan leader.Claim, func())
}

// Options are what the parts of one pipeline share: its name, clock and
// logger, the few numbers that size it, and the Lease its writes are made
// under. quietpatch.Config's fields of the same names document them; the
// zero Options is valid.
type Options struct {
	Name         string
	Capacity     int
	Interval     time.Duration
	Workers      int
	MaxInFlight  int
	PatchTimeout time.Duration
	ClaimMargin  time.Duration
	DiffOptions  []gocmp.Option
	Logger       *slog.Logger
	Clock        clock.WithTicker
	// Lease names the Lease of the WriteClaim every call carries.
	Lease types.NamespacedName
	// Attrs are added to the pipeline attribute of every instrument (the
	// shard of a sharded pipeline).
	Attrs []attribute.KeyValue
	// Settle, when positive, has the keys of Enqueue wait until no event
	// came for Settle (at most settleMax × Settle), then enter the fresh
	// lane together; zero enqueues them at once. quietpatch.New sets
	// DefaultSettle.
	Settle time.Duration
}

// Complete checks o and fills in the defaults. Errors are
// *base.ConfigError naming the field as quietpatch.Config names it.
func (o Options) Complete() (Options, error) {
	bad := func(field, format string, args ...any) (Options, error) {
		return o, &base.ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
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
	o.Name = cmp.Or(o.Name, DefaultName)
	o.Capacity = cmp.Or(o.Capacity, DefaultCapacity)
	o.Interval = cmp.Or(o.Interval, DefaultInterval)
	o.MaxInFlight = cmp.Or(o.MaxInFlight, DefaultMaxInFlight)
	o.PatchTimeout = cmp.Or(o.PatchTimeout, DefaultPatchTimeout)
	o.Logger = cmp.Or(o.Logger, slog.New(slog.DiscardHandler)).With(slog.String(pipelineAttr, o.Name))
	o.Clock = cmp.Or[clock.WithTicker](o.Clock, clock.RealClock{})
	return o, nil
}

// stopped records on l that part's Run returned, for reason: Healthy then
// reports an error wrapping ErrNotRunning.
func stopped(l *base.Lifecycle, part, reason string) {
	l.Stop(fmt.Errorf("%w: %s stopped: %s", ErrNotRunning, part, reason))
}

// healthy returns nil while l's Run runs, else why it does not.
func healthy(l *base.Lifecycle) error {
	switch started, running, why := l.State(); {
	case running:
		return nil
	case started:
		return why
	}
	return fmt.Errorf("%w: Run not called", ErrNotRunning)
}
