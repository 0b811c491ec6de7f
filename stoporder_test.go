package quietpatch_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/internal/pipeline"
)

// watchedSource is a Source of n changed objects that counts the reads
// begun after the test marks its context cancelled, and can hold every Get
// until the test lets them go. Its objects never converge (the patcher
// writes nothing), so passes keep finding them changed: a storm.
type watchedSource struct {
	n         int
	cancelled atomic.Bool
	late      atomic.Int64 // List and Get calls begun after the cancel
	gets      atomic.Int64
	lists     atomic.Int64

	mu      sync.Mutex
	hold    chan struct{} // Gets wait for it to close while set
	holding int           // Gets waiting
}

func (s *watchedSource) List() ([]*item, error) {
	if s.cancelled.Load() {
		s.late.Add(1)
	}
	s.lists.Add(1)
	out := make([]*item, s.n)
	for i := range out {
		out[i] = &item{name: fmt.Sprintf("o%04d", i), gen: 2, state: 1}
	}
	return out, nil
}

func (s *watchedSource) Get(key types.NamespacedName) (*item, bool, error) {
	if s.cancelled.Load() {
		s.late.Add(1)
	}
	s.gets.Add(1)
	s.mu.Lock()
	hold := s.hold
	if hold != nil {
		s.holding++
	}
	s.mu.Unlock()
	if hold != nil {
		<-hold
	}
	return &item{name: key.Name, gen: 2, state: 1}, true, nil
}

func (s *watchedSource) HasSynced() bool { return true }

func (s *watchedSource) startHolding() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold = make(chan struct{})
}

func (s *watchedSource) held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holding
}

func (s *watchedSource) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.hold)
	s.hold = nil
}

// The stop order, through Run, as users meet it: once Run's context is
// done, no pass and no serve starts reading the Source — so the informers
// may stop with that context —, and a pass under way stops within 256
// objects. Cancelled in the middle of a pass that queues a storm of 2,000
// changed objects while 4 calls are being served: every worker is held
// inside Source.Get at the cancel (so none is between its check of the
// context and its read), then let go; no read may begin after the cancel.
func TestRunStopsReadingTheSourceWhenItsContextEnds(t *testing.T) {
	src := &watchedSource{n: 2000}
	var visited, visitedLate atomic.Int64 // objects the passes computed, and after the cancel
	comp := itemComputer
	comp.DesiredFunc = func(o *item) (int64, error) {
		visited.Add(1)
		if src.cancelled.Load() {
			visitedLate.Add(1)
		}
		time.Sleep(100 * time.Microsecond) // a pass of 2,000 takes at least 0.2 s
		return o.gen, nil
	}
	var calls atomic.Int64
	patcher := pipeline.PatcherFunc[string](func(context.Context, string) error {
		calls.Add(1)
		return nil
	})
	cfg := baseConfig(fake.NewClientset())
	cfg.Workers = 4
	c, err := quietpatch.New(src, comp, patcher, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	// Mid-pass and mid-storm: calls made, the first pass still going.
	waitUntil(t, "calls during the first pass", func() bool { return calls.Load() >= 20 })
	if n := visited.Load(); n >= int64(src.n) {
		t.Fatalf("the first pass ended (%d objects) before the cancel: make it slower", n)
	}
	src.startHolding()
	waitUntil(t, "every worker inside Source.Get", func() bool { return src.held() == 4 })
	cancel()
	src.cancelled.Store(true)
	src.release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return")
	}
	if n := src.late.Load(); n != 0 {
		t.Errorf("%d Source reads began after Run's context was cancelled (of %d Gets, %d Lists), want 0", n, src.gets.Load(), src.lists.Load())
	}
	if n := visitedLate.Load(); n > 256+4 { // the pass, and the 4 serves let go
		t.Errorf("%d statuses computed after the cancel, want at most 256 (the pass) + 4 (the serves let go)", n)
	}
	if st := c.Stats(); st.Dispatcher.Dropped["shutdown"] == 0 {
		t.Errorf("no queued key dropped at shutdown (%v): the storm was not under way", st.Dispatcher.Dropped)
	}
}
