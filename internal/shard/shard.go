package shard

import (
	"fmt"
	"hash/fnv"
	"math/bits"

	"k8s.io/apimachinery/pkg/types"
)

// Key is the field the ranges hash, in the selector's syntax.
const Key = "object.metadata.uid"

// MaxShards bounds K: more shards than this cost more Leases and informers
// than any replica count needs.
const MaxShards = 1024

// Range is shard Index of Count: the objects whose UID hashes to h with
// Start <= h < End, where the last shard's End is 2^64 (Last is true and
// End is 0). The zero value is invalid; use [Split] or [Of].
type Range struct {
	Index, Count int
	Start, End   uint64
}

// Split returns the K ranges that cover [0, 2^64) in order, each of equal
// size up to rounding. K must be between 1 and MaxShards.
func Split(k int) ([]Range, error) {
	if k < 1 || k > MaxShards {
		return nil, fmt.Errorf("shard: count must be between 1 and %d, got %d", MaxShards, k)
	}
	rs := make([]Range, k)
	for i := range rs {
		rs[i] = Range{Index: i, Count: k, Start: bound(i, k)}
		if i+1 < k {
			rs[i].End = bound(i+1, k)
		}
	}
	return rs, nil
}

// bound is floor(i * 2^64 / k), for 0 <= i < k.
func bound(i, k int) uint64 {
	q, _ := bits.Div64(uint64(i), 0, uint64(k))
	return q
}

// Hash is the 64-bit FNV-1a hash of a UID, as the API server computes it.
func Hash(uid types.UID) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(uid))
	return h.Sum64()
}

// Last reports whether r is the last range (its End is 2^64).
func (r Range) Last() bool { return r.Index == r.Count-1 }

// ContainsHash reports whether h lies in r.
func (r Range) ContainsHash(h uint64) bool { return h >= r.Start && (r.Last() || h < r.End) }

// Contains reports whether the object with uid belongs to r.
func (r Range) Contains(uid types.UID) bool { return r.ContainsHash(Hash(uid)) }

// Selector is r as a metav1.ListOptions.ShardSelector.
func (r Range) Selector() string {
	end := fmt.Sprintf("0x%016x", r.End)
	if r.Last() {
		end = "0x10000000000000000"
	}
	return fmt.Sprintf("shardRange(%s, '0x%016x', '%s')", Key, r.Start, end)
}

// String is "shard i of k".
func (r Range) String() string { return fmt.Sprintf("shard %d of %d", r.Index, r.Count) }

// Of returns the index of the shard of k that holds uid.
func Of(uid types.UID, k int) int { return ofHash(Hash(uid), k) }

// ofHash is the index of the shard of k that holds the hash h.
func ofHash(h uint64, k int) int {
	// bound is monotone: start from the proportional guess and correct.
	hi, _ := bits.Mul64(h, uint64(k))
	i := int(hi)
	for i+1 < k && h >= bound(i+1, k) {
		i++
	}
	for i > 0 && h < bound(i, k) {
		i--
	}
	return i
}
