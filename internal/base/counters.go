package base

import (
	"slices"
	"sync/atomic"
)

// Counters are int64 counters by key — an attribute value such as an
// Outcome — for a set of keys fixed when they are made. They are safe for
// concurrent use without a lock; a key outside the set is not counted.
type Counters[K comparable] struct {
	keys []K
	n    map[K]*atomic.Int64
}

// NewCounters returns counters at zero for keys, in that order.
func NewCounters[K comparable](keys ...K) Counters[K] {
	c := Counters[K]{keys: keys, n: make(map[K]*atomic.Int64, len(keys))}
	for _, k := range keys {
		c.n[k] = new(atomic.Int64)
	}
	return c
}

// Add adds 1 to the counter of k.
func (c Counters[K]) Add(k K) {
	if n := c.n[k]; n != nil {
		n.Add(1)
	}
}

// Get returns the counter of k.
func (c Counters[K]) Get(k K) int64 {
	if n := c.n[k]; n != nil {
		return n.Load()
	}
	return 0
}

// Keys returns the keys, in the order given to NewCounters.
func (c Counters[K]) Keys() []K { return slices.Clone(c.keys) }

// Snapshot returns the counters that are not zero.
func (c Counters[K]) Snapshot() map[K]int64 {
	m := make(map[K]int64)
	for _, k := range c.keys {
		if v := c.n[k].Load(); v != 0 {
			m[k] = v
		}
	}
	return m
}
