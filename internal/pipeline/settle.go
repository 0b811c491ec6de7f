package pipeline

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// settleMax bounds how long a batch of event keys waits: at most
// settleMax × Options.Settle after its first key.
const settleMax = 5

// settler gathers the keys of events that come close together and lets
// them into the fresh lane at once, when no event came for Options.Settle
// or settleMax × Settle after the batch's first: a burst of events — a
// dozen route edits moving routes between Gateways in a tenth of a second
// — costs one serve, and one write, per key, not one per event. The keys
// wait in a set: a key of several events of the batch is there once.
type settler struct {
	mu          sync.Mutex
	keys        map[types.NamespacedName]struct{}
	first, last time.Time
	begun       chan struct{} // buffer 1: a batch began
}

func newSettler() *settler {
	return &settler{keys: map[types.NamespacedName]struct{}{}, begun: make(chan struct{}, 1)}
}

// add puts keys in the batch at now, as long as it holds at most max
// keys; it reports false when one did not fit.
func (s *settler) add(now time.Time, max int, keys []types.NamespacedName) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.keys) == 0 {
		s.first = now
		select {
		case s.begun <- struct{}{}:
		default:
		}
	}
	s.last = now
	for _, k := range keys {
		if _, in := s.keys[k]; !in && len(s.keys) >= max {
			return false
		}
		s.keys[k] = struct{}{}
	}
	return true
}

// due returns how long the batch still waits at now (≤ 0: it is due), and
// false when there is none.
func (s *settler) due(now time.Time, settle time.Duration) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.keys) == 0 {
		return 0, false
	}
	return min(s.last.Add(settle).Sub(now), s.first.Add(settleMax*settle).Sub(now)), true
}

// take empties the batch and returns its keys.
func (s *settler) take() []types.NamespacedName {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]types.NamespacedName, 0, len(s.keys))
	for k := range s.keys {
		keys = append(keys, k)
	}
	clear(s.keys)
	return keys
}
