package statuspatch_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quietpatch/quietpatch/statuspatch"
)

// queueRaceItem is what the concurrent tests send: a producer's sequence
// number for one key. Each key belongs to one producer, so "later" is well
// defined per key.
type queueRaceItem struct {
	key string
	seq int
}

func queueRaceKey(it queueRaceItem) string { return it.key }

// queueRaceSend sends it by one of the three producer paths, falling back
// to the blocking Send when the non-blocking ones find the queue full. It
// returns the error of the call that settled the item.
func queueRaceSend(ctx context.Context, q *statuspatch.PatchQueue[queueRaceItem], it queueRaceItem, how int) error {
	switch how % 3 {
	case 0:
		if err := q.TrySend(it); !errors.Is(err, statuspatch.ErrFull) {
			return err
		}
	case 1:
		p, err := q.Reserve()
		if err == nil {
			return p.Send(it)
		}
		if !errors.Is(err, statuspatch.ErrFull) {
			return err
		}
	}
	return q.Send(ctx, it)
}

// TestQueueConcurrent runs many producers and consumers on a small queue,
// under -race in CI, and checks: no key is ever in flight twice, each key's
// deliveries are in increasing order with no duplicate, the latest item of
// every key is delivered (coalescing may drop only older ones), capacity is
// never exceeded, and the counters add up.
func TestQueueConcurrent(t *testing.T) {
	const (
		producers = 6
		consumers = 4
		keysEach  = 3
		perKey    = 300
		capacity  = 5
	)
	q, err := statuspatch.NewPatchQueue(statuspatch.QueueConfig[queueRaceItem]{Capacity: capacity, Key: queueRaceKey})
	if err != nil {
		t.Fatal(err)
	}
	// A deadline turns a lost wake-up or a stuck key into a failure
	// instead of a hung test.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var (
		mu        sync.Mutex
		delivered = map[string][]int{}
		busy      sync.Map // key → *atomic.Bool
		failed    atomic.Value
	)
	fail := func(format string, args ...any) { failed.CompareAndSwap(nil, fmt.Sprintf(format, args...)) }
	for p := range producers {
		for k := range keysEach {
			busy.Store(fmt.Sprintf("p%d/k%d", p, k), new(atomic.Bool))
		}
	}

	var cwg sync.WaitGroup
	for range consumers {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			for {
				it, err := q.Receive(ctx)
				if errors.Is(err, statuspatch.ErrClosed) {
					return
				}
				if err != nil {
					fail("Receive: %v", err)
					return
				}
				if st := q.Stats(); st.Depth+st.Reserved > capacity {
					fail("capacity exceeded: %+v", st)
				}
				b, _ := busy.Load(it.Key())
				if !b.(*atomic.Bool).CompareAndSwap(false, true) {
					fail("key %s delivered while in flight", it.Key())
				}
				mu.Lock()
				seqs := delivered[it.Key()]
				if n := len(seqs); n > 0 && seqs[n-1] >= it.Value.seq {
					fail("key %s: seq %d delivered after %d", it.Key(), it.Value.seq, seqs[n-1])
				}
				delivered[it.Key()] = append(seqs, it.Value.seq)
				mu.Unlock()
				b.(*atomic.Bool).Store(false)
				q.Done(it)
			}
		}()
	}

	var pwg sync.WaitGroup
	for p := range producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for i := range perKey * keysEach {
				it := queueRaceItem{key: fmt.Sprintf("p%d/k%d", p, i%keysEach), seq: i / keysEach}
				if err := queueRaceSend(ctx, q, it, i+p); err != nil {
					fail("send %v: %v", it, err)
					return
				}
				if i%4 == 0 {
					runtime.Gosched() // let consumers keep up, some of the time
				}
			}
		}()
	}
	pwg.Wait()
	q.Close()
	cwg.Wait()
	if f := failed.Load(); f != nil {
		t.Fatal(f)
	}

	total := 0
	for p := range producers {
		for k := range keysEach {
			key := fmt.Sprintf("p%d/k%d", p, k)
			seqs := delivered[key]
			if len(seqs) == 0 || seqs[len(seqs)-1] != perKey-1 {
				t.Errorf("key %s: latest item (seq %d) not delivered; got %v", key, perKey-1, seqs)
			}
			total += len(seqs)
		}
	}
	st := q.Stats()
	sent := int64(producers * keysEach * perKey)
	if st.Dequeued != int64(total) || st.Enqueued != sent || st.Dequeued+st.Superseded != sent ||
		st.Depth != 0 || st.InFlight != 0 || st.Reserved != 0 || st.DroppedClosed != 0 || st.DroppedExpired != 0 {
		t.Errorf("stats %+v: want enqueued = %d = dequeued (%d delivered) + superseded, nothing left", st, sent, total)
	}
	t.Logf("delivered %d of %d sends (%d superseded, %d rejections retried)", total, sent, st.Superseded, st.DroppedFull)
}

// TestQueueConcurrentKeyless checks that without a Key function every item
// sent is delivered exactly once, by many producers and consumers.
func TestQueueConcurrentKeyless(t *testing.T) {
	const (
		producers = 6
		consumers = 4
		each      = 500
	)
	q, err := statuspatch.NewPatchQueue(statuspatch.QueueConfig[queueRaceItem]{Capacity: 3})
	if err != nil {
		t.Fatal(err)
	}
	// A deadline turns a lost wake-up or a stuck key into a failure
	// instead of a hung test.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		mu   sync.Mutex
		seen = map[queueRaceItem]int{}
		errs = make(chan error, producers+consumers)
	)
	var cwg sync.WaitGroup
	for range consumers {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			for {
				it, err := q.Receive(ctx)
				if errors.Is(err, statuspatch.ErrClosed) {
					return
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				seen[it.Value]++
				mu.Unlock()
				q.Done(it)
			}
		}()
	}
	var pwg sync.WaitGroup
	for p := range producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for i := range each {
				if err := queueRaceSend(ctx, q, queueRaceItem{key: fmt.Sprint(p), seq: i}, i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	pwg.Wait()
	q.Close()
	cwg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != producers*each {
		t.Errorf("%d distinct items delivered, want %d", len(seen), producers*each)
	}
	for it, n := range seen {
		if n != 1 {
			t.Errorf("item %v delivered %d times", it, n)
		}
	}
}
