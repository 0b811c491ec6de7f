package routestatus

import (
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// selectorCacheSize bounds the label selectors a Computer keeps parsed:
// one per listener with allowedRoutes.namespaces.from Selector, for every
// version of a Gateway seen since the cache was last emptied.
const selectorCacheSize = 4096

// selectorCache keeps the label selectors of listeners parsed, keyed by
// the *metav1.LabelSelector they were parsed from: objects from a Lookup
// are never modified (informer caches, Snapshot), so a pointer stands for
// its value, and parsing one (metav1.LabelSelectorAsSelector) costs about a
// microsecond and a dozen allocations per route otherwise. When it holds
// selectorCacheSize selectors it is emptied. A nil cache parses every time.
type selectorCache struct {
	m sync.Map // *metav1.LabelSelector → parsed
	n atomic.Int64
}

type parsed struct{ s labels.Selector } // s nil: the selector is invalid

// get returns sel parsed, and false if it is invalid (it then matches
// nothing).
func (c *selectorCache) get(sel *metav1.LabelSelector) (labels.Selector, bool) {
	if c != nil {
		if v, ok := c.m.Load(sel); ok {
			p := v.(parsed)
			return p.s, p.s != nil
		}
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		s = nil
	}
	if c != nil {
		if c.n.Add(1) > selectorCacheSize {
			c.m.Clear()
			c.n.Store(1)
		}
		c.m.Store(sel, parsed{s})
	}
	return s, s != nil
}
