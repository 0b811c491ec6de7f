package queue_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/quietpatch/quietpatch/internal/queue"
)

// TestQueueConcurrent runs producers and consumers on a small queue (under
// -race in CI) and checks:
//
//   - exclusivity: no key is ever held by two consumers at once;
//   - no add is lost: every key added successfully is delivered after
//     that add (a key's version, bumped before each add, is read by the
//     consumer that gets it: the last version added successfully must be
//     seen);
//   - the counters add up: enqueued adds, refused adds, deliveries;
//   - no goroutine is left behind (TestMain's goleak).
//
// Each producer owns its keys and adds them by Add or Reserve+Send, to
// either lane; when a lane is full it waits for Room and tries again, or
// gives up (a refused add). Consumers hold each key for a moment, and
// sometimes Get with a short deadline. The queue has the real clock, so
// its stamps and the depth's Peak-EWMA run under -race too.
func TestQueueConcurrent(t *testing.T) {
	const (
		producers = 4
		consumers = 4
		keysEach  = 4
		adds      = 2000 // per producer
		capacity  = 4
	)
	q := queue.New[string](capacity, clock.RealClock{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	type keyState struct {
		version  atomic.Int64 // bumped before each add
		lastOK   atomic.Int64 // version of the last successful add
		seen     atomic.Int64 // highest version a consumer read at Get
		holders  atomic.Int32
		delivers atomic.Int64
	}
	states := map[string]*keyState{}
	var keys [][]string
	for p := range producers {
		var own []string
		for k := range keysEach {
			key := fmt.Sprintf("p%d/k%d", p, k)
			states[key] = &keyState{}
			own = append(own, key)
		}
		keys = append(keys, own)
	}
	var (
		failed         atomic.Value
		added, refused atomic.Int64
		deliveries     atomic.Int64
	)
	fail := func(format string, args ...any) { failed.CompareAndSwap(nil, fmt.Sprintf(format, args...)) }

	var cwg sync.WaitGroup
	for c := range consumers {
		cwg.Go(func() {
			for i := 0; ; i++ {
				getCtx, getCancel := ctx, context.CancelFunc(func() {})
				if i%7 == c {
					getCtx, getCancel = context.WithTimeout(ctx, time.Millisecond)
				}
				key, since, err := q.GetSince(getCtx)
				getCancel()
				if wait := time.Since(since); err == nil && wait < 0 {
					fail("consumer %d: key %s waited %v", c, key, wait)
				}
				switch {
				case errors.Is(err, queue.ErrClosed):
					return
				case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
					continue
				case err != nil:
					fail("consumer %d: Get: %v", c, err)
					return
				}
				st := states[key]
				if n := st.holders.Add(1); n != 1 {
					fail("key %s held by %d consumers", key, n)
				}
				if v := st.version.Load(); v > st.seen.Load() {
					st.seen.Store(v) // only the holder writes seen
				}
				st.delivers.Add(1)
				deliveries.Add(1)
				if i%3 == 0 {
					runtime.Gosched()
				}
				st.holders.Add(-1)
				q.Done(key)
			}
		})
	}

	var pwg sync.WaitGroup
	for p := range producers {
		pwg.Go(func() {
			for i := range adds {
				key := keys[p][i%keysEach]
				lane := queue.Lane(i / keysEach % 2)
				st := states[key]
				v := st.version.Add(1)
				var err error
				for try := 0; ; try++ {
					if i%2 == 0 {
						err = q.Add(key, lane)
					} else {
						var permit queue.Permit[string]
						if permit, err = q.Reserve(lane); err == nil {
							err = permit.Send(key)
						}
					}
					if !errors.Is(err, queue.ErrFull) || try == 3 {
						break
					}
					select {
					case <-roomOf(q.Room(lane, 1)):
					case <-ctx.Done():
						fail("producer %d: no room within the deadline", p)
						return
					}
				}
				switch {
				case err == nil:
					added.Add(1)
					st.lastOK.Store(v)
				case errors.Is(err, queue.ErrFull):
					refused.Add(1)
				default:
					fail("producer %d: add %s: %v", p, key, err)
					return
				}
			}
		})
	}
	pwg.Wait()
	q.Close()
	cwg.Wait()
	if f := failed.Load(); f != nil {
		t.Fatal(f)
	}
	for key, st := range states {
		if last, seen := st.lastOK.Load(), st.seen.Load(); seen < last {
			t.Errorf("key %s: last added at version %d, delivered only up to version %d", key, last, seen)
		}
	}
	s := q.Stats()
	t.Logf("added %d, refused %d, deliveries %d, stats %+v", added.Load(), refused.Load(), deliveries.Load(), s)
	if s.Enqueued != added.Load() || s.Dequeued != deliveries.Load() || s.DroppedClosed != 0 ||
		s.Enqueued-s.Coalesced != s.Dequeued || s.Depth != 0 || s.Held != 0 || s.Reserved != 0 {
		t.Errorf("stats %+v; want enqueued = %d adds, dequeued = %d deliveries = enqueued - coalesced, nothing left",
			s, added.Load(), deliveries.Load())
	}
	if s.DroppedFull < refused.Load() {
		t.Errorf("stats: %d dropped full, fewer than the %d adds refused", s.DroppedFull, refused.Load())
	}
	if s.DepthPeak <= 0 || s.DepthPeak > 2*capacity {
		t.Errorf("stats: DepthPeak %v, want in (0, %d]: the depth never exceeds both lanes' capacity", s.DepthPeak, 2*capacity)
	}
	if added.Load()+refused.Load() != producers*adds {
		t.Errorf("%d added + %d refused != %d adds", added.Load(), refused.Load(), producers*adds)
	}
}

// TestQueueCloseWakesEveryone closes a queue with consumers waiting in
// Get and producers waiting for Room: all of them return.
func TestQueueCloseWakesEveryone(t *testing.T) {
	q := queue.New[int](1, nil)
	if err := q.Add(1, queue.LanePass); err != nil {
		t.Fatal(err)
	}
	if k, err := q.Get(context.Background()); k != 1 || err != nil {
		t.Fatalf("Get = %d, %v", k, err)
	}
	if err := q.Add(1, queue.LanePass); err != nil { // held back until Done
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 4 {
		wg.Go(func() {
			_, err := q.Get(context.Background())
			errs <- err
		})
		wg.Go(func() {
			<-roomOf(q.Room(queue.LanePass, 1))
			errs <- q.Add(2, queue.LanePass)
		})
	}
	q.Close()
	q.Done(1)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("goroutines still waiting a minute after Close")
	}
	close(errs)
	var got1, closedN int
	for err := range errs {
		switch {
		case err == nil:
			got1++ // the consumer that got key 1 after Done
		case errors.Is(err, queue.ErrClosed):
			closedN++
		default:
			t.Errorf("unexpected error %v", err)
		}
	}
	if got1 != 1 || closedN != 7 {
		t.Errorf("%d got key 1, %d ErrClosed; want 1 and 7", got1, closedN)
	}
}
