package quietpatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// The library's errors for bad configuration, a second Run, and caches
// that do not sync. Every constructor of the library — here and in
// packages leader, statuspatch, conditions and ewma — rejects invalid
// input with a [*ConfigError] naming the field or argument, which wraps
// ErrInvalidConfig.
var (
	ErrInvalidConfig  = base.ErrInvalidConfig
	ErrAlreadyStarted = base.ErrAlreadyStarted
	// ErrNotSynced is wrapped by the error Run returns when the caches did
	// not sync within Config.SyncTimeout, and by Ready until they have.
	ErrNotSynced = errors.New("quietpatch: caches not synced")
)

// ConfigError names an invalid field or argument and says why; it wraps
// [ErrInvalidConfig]. Read it with errors.As. Its Error is
// "quietpatch: invalid config: <Field> <Reason>".
type ConfigError = base.ConfigError

// Runner is what a [Controller] and a [Sharded] share: hold either through
// it. Run runs it once; Enqueue is for event handlers; Ready and Live are
// the probes; Leading is the cheap question "do we lead now" (any shard,
// for a Sharded); Stats the snapshot.
type Runner interface {
	Run(ctx context.Context) error
	Enqueue(keys ...types.NamespacedName)
	Ready() error
	Live() error
	Leading() bool
	Stats() Stats
}

// Stats is a snapshot of a [Runner], for logs, tests and status pages: it
// needs no metrics SDK.
//
// The shard fields (Shards to Unfiltered) are the shard group's as this
// replica sees it; a Controller is one shard, shard 0 of 1, held while it
// leads. The pipeline fields (Reconciler to Claim) are a Controller's; a
// Sharded leaves them zero and has each shard's in PerShard.
type Stats struct {
	// Shards is K; Members the replicas alive as this one sees them.
	Shards  int
	Members []string
	// Held lists the shards this replica leads; Running those it runs
	// (leading or competing for).
	Held, Running []int
	// Acquired, GivenUp and Lost count this replica's shard moves.
	Acquired, GivenUp, Lost int64
	// Objects is the number of objects in the caches of the shards run (a
	// Sharded's).
	Objects int64
	// Unfiltered is true once the API server returned an object outside
	// the range asked for (it does not honour ShardSelector): each shard's
	// cache is then filtered client-side.
	Unfiltered bool

	Reconciler ReconcilerStats
	Dispatcher DispatcherStats
	Queue      statuspatch.QueueStats
	// Capacity is the capacity of each lane of the queue.
	Capacity int
	// Claim is the latest claim observed; Leading whether it is ours now
	// (for a Sharded: whether any shard's is).
	Claim   leader.Claim
	Leading bool
	// PerShard has the pipeline fields of each shard a Sharded runs.
	PerShard map[int]Stats
}

// ReconcilerStats are the passes' counters: passes by result (completed,
// halted, not_leader, error, canceled, closed), objects by result
// (unchanged, changed, error), and halted passes.
type ReconcilerStats struct {
	Passes, Objects map[string]int64
	Halted          int64
}

// DispatcherStats are the dispatcher's counters, and the state of its
// in-flight limit and Retry-After window.
type DispatcherStats struct {
	// Patches counts patch calls by outcome; Dropped keys served without
	// a call, by reason: unchanged (the status was right by then), deleted,
	// error (the Source or the StatusComputer failed), not_leader,
	// stale_epoch (calls were made under a newer epoch), claim_ending
	// (less than the claim margin left), released (the claim was being
	// given up), shutdown, held (the cache did not yet hold our own last
	// write of the key: requeued once it does, or after a second).
	Patches map[outcome.Outcome]int64
	Dropped map[string]int64
	// Echoes counts the events of our own writes dropped without a serve:
	// with a statuspatch.VersionPatcher, the event of each write.
	Echoes int64
	// InFlight is the number of calls in progress; Unanswered counts calls
	// that ended without an answer from the API server (such a write may
	// still land).
	InFlight   int
	Unanswered int64
	// Limit is the in-flight limit now, Latency its latency estimate,
	// DrainRate = Limit / Latency in patches per second (0 before the first
	// call), Backoff what is left of a Retry-After window, RetryAfters the
	// windows honoured.
	Limit       int
	Latency     time.Duration
	DrainRate   float64
	Backoff     time.Duration
	RetryAfters int64
}

// ProbeHandler serves a probe from a check: 200 "ok" while it returns nil,
// else 503 with the error's text. Typically:
//
//	func serveProbes(r quietpatch.Runner) *http.ServeMux {
//		mux := http.NewServeMux()
//		mux.Handle("/readyz", quietpatch.ProbeHandler(r.Ready))
//		mux.Handle("/healthz", quietpatch.ProbeHandler(r.Live))
//		return mux
//	}
func ProbeHandler(check func() error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := check(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintln(w, err)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
}

// waitSynced waits at most timeout for every cache of synced; nil as well
// when ctx ended first (nothing to report), else an ErrNotSynced with hint.
func waitSynced(ctx context.Context, log *slog.Logger, timeout time.Duration, synced []cache.InformerSynced, hint string) error {
	if len(synced) == 0 {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	log.Info("quietpatch: waiting for the caches to sync", slog.Int("caches", len(synced)), slog.Duration("timeout", timeout))
	if !cache.WaitForCacheSync(sctx.Done(), synced...) {
		if ctx.Err() != nil {
			return nil // stopped before the sync: nothing to report
		}
		return fmt.Errorf("%w within %s (SyncTimeout): %s", ErrNotSynced, timeout, hint)
	}
	return nil
}
