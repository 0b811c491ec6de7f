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

	"github.com/quietpatch/quietpatch/leader"
	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
	"github.com/quietpatch/quietpatch/statuspatch/shard"
)

// The library's one vocabulary for bad configuration and for a second Run
// (package statuspatch/outcome has it): every constructor's error for a
// configuration it rejects is a [*ConfigError] naming the field, wrapping
// ErrInvalidConfig.
var (
	ErrInvalidConfig  = outcome.ErrInvalidConfig
	ErrAlreadyStarted = outcome.ErrAlreadyStarted
	// ErrNotSynced is wrapped by the error Run returns when the caches did
	// not sync within Config.SyncTimeout, and by Ready until they have.
	ErrNotSynced = errors.New("quietpatch: caches not synced")
)

// ConfigError names an invalid field and says why.
type ConfigError = outcome.ConfigError

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
// The shard fields (shard.Stats: Shards, Members, Held, Running, moves,
// Objects, Unfiltered) are the shard group's as this replica sees it; a
// Controller is one shard, shard 0 of 1, held while it leads. The
// pipeline fields (Reconciler to Claim) are a Controller's; a Sharded
// leaves them zero and has each shard's in PerShard.
type Stats struct {
	shard.Stats
	Reconciler statuspatch.ReconcilerStats
	Dispatcher statuspatch.DispatcherStats
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
