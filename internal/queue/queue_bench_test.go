package queue_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/quietpatch/quietpatch/internal/queue"
	"github.com/quietpatch/quietpatch/statuspatch"
)

// queueBenchKeys are the distinct keys the benchmarks cycle through, shaped
// like the namespace/name keys of a controller.
func queueBenchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "namespace-" + strconv.Itoa(i%7) + "/httproute-" + strconv.Itoa(i)
	}
	return keys
}

// BenchmarkQueue compares one Add, one Get and one Done, keys cycling
// through 1024 distinct keys, on:
//
//   - chan: a buffered channel, the floor (no keys, no bound, no
//     coalescing);
//   - workqueue: client-go's typed workqueue (Add, Get, Done), the peer
//     with the same dirty/processing rules but no bound and no lanes;
//   - patchqueue: the bare queue (no clock), in the fresh lane;
//   - patchqueue-pass: the same in the pass lane;
//   - patchqueue-clock: the queue as the pipeline builds it, on the real
//     clock: each key stamped when added, the depth's Peak-EWMA recorded
//     at every insertion and removal, each key's stamp returned by
//     GetSince (the pipeline's instruments read Stats at collection and
//     record the wait on the dispatcher's own reading of the clock);
//   - patchqueue-public: statuspatch.PatchQueue, the public facade over
//     the clocked queue.
//
// Compare them from one run: go test -run '^$' -bench Queue -benchmem.
func BenchmarkQueue(b *testing.B) {
	const nkeys = 1024
	keys := queueBenchKeys(nkeys)
	ctx := context.Background()

	b.Run("chan", func(b *testing.B) {
		ch := make(chan string, nkeys)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			ch <- keys[i%nkeys]
			<-ch
		}
	})

	b.Run("workqueue", func(b *testing.B) {
		q := workqueue.NewTyped[string]()
		defer q.ShutDown()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			q.Add(keys[i%nkeys])
			k, _ := q.Get()
			q.Done(k)
		}
	})

	addGetDone := func(b *testing.B, q *queue.Queue[string], lane queue.Lane) time.Time {
		defer q.Close()
		var latest time.Time
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if err := q.Add(keys[i%nkeys], lane); err != nil {
				b.Fatal(err)
			}
			k, since, err := q.GetSince(ctx)
			if err != nil {
				b.Fatal(err)
			}
			latest = since
			q.Done(k)
		}
		return latest
	}

	b.Run("patchqueue", func(b *testing.B) {
		addGetDone(b, queue.New[string](nkeys, nil), queue.LaneFresh)
	})

	b.Run("patchqueue-pass", func(b *testing.B) {
		addGetDone(b, queue.New[string](nkeys, nil), queue.LanePass)
	})

	b.Run("patchqueue-clock", func(b *testing.B) {
		q := queue.New[string](nkeys, clock.RealClock{})
		if since := addGetDone(b, q, queue.LaneFresh); since.IsZero() {
			b.Error("the keys were not stamped")
		}
		if peak := q.Stats().DepthPeak; peak <= 0 {
			b.Errorf("DepthPeak %v, want the depths recorded (1, decaying since)", peak)
		}
	})

	b.Run("patchqueue-public", func(b *testing.B) {
		q, err := statuspatch.NewPatchQueue[string](nkeys)
		if err != nil {
			b.Fatal(err)
		}
		defer q.Close()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if err := q.Add(keys[i%nkeys], statuspatch.LaneFresh); err != nil {
				b.Fatal(err)
			}
			k, err := q.Get(ctx)
			if err != nil {
				b.Fatal(err)
			}
			q.Done(k)
		}
		if peak := q.Stats().DepthPeak; peak <= 0 {
			b.Errorf("DepthPeak %v, want the depths recorded (1, decaying since)", peak)
		}
	})
}
