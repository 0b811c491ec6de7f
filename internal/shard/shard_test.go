package shard_test

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"regexp"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/types"

	"github.com/quietpatch/quietpatch/internal/shard"
)

// randomUID is a UID of the form the API server assigns, drawn from r.
func randomUID(r *rand.Rand) types.UID {
	var b [16]byte
	for i := range b {
		b[i] = byte(r.UintN(256))
	}
	return types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]))
}

func rng(t *testing.T) *rand.Rand {
	t.Helper()
	return rand.New(rand.NewPCG(uint64(len(t.Name())), 42))
}

// sampleCounts are the K the exhaustive checks run on.
func sampleCounts() []int {
	ks := []int{1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 31, 64, 100, 127, 128, 255, 256, 333, 512, 1000, 1023}
	return append(ks, shard.MaxShards)
}

var two64 = new(big.Int).Lsh(big.NewInt(1), 64)

func TestSplitCoversTheHashSpace(t *testing.T) {
	for _, k := range sampleCounts() {
		rs, err := shard.Split(k)
		if err != nil {
			t.Fatalf("Split(%d): %v", k, err)
		}
		if len(rs) != k {
			t.Fatalf("Split(%d) gave %d ranges", k, len(rs))
		}
		if rs[0].Start != 0 {
			t.Errorf("k=%d: first range starts at %#x, want 0", k, rs[0].Start)
		}
		for i, r := range rs {
			if r.Index != i || r.Count != k {
				t.Errorf("k=%d: range %d is %+v", k, i, r)
			}
			if r.Last() != (i == k-1) {
				t.Errorf("k=%d: range %d Last()=%v", k, i, r.Last())
			}
			end := new(big.Int).SetUint64(r.End)
			if r.Last() {
				end = two64
			} else if rs[i+1].Start != r.End {
				t.Errorf("k=%d: range %d ends at %#x, range %d starts at %#x (gap or overlap)", k, i, r.End, i+1, rs[i+1].Start)
			}
			// Each range has floor or ceil of 2^64/k hashes.
			size := new(big.Int).Sub(end, new(big.Int).SetUint64(r.Start))
			lo := new(big.Int).Div(two64, big.NewInt(int64(k)))
			hi := new(big.Int).Add(lo, big.NewInt(1))
			if size.Cmp(lo) < 0 || size.Cmp(hi) > 0 {
				t.Errorf("k=%d: range %d has %s hashes, want %s or %s", k, i, size, lo, hi)
			}
			// The bounds belong where they should.
			if !r.ContainsHash(r.Start) {
				t.Errorf("k=%d: range %d does not contain its start", k, i)
			}
			if r.Last() {
				if !r.ContainsHash(^uint64(0)) {
					t.Errorf("k=%d: last range does not contain 2^64-1", k)
				}
			} else {
				if r.ContainsHash(r.End) {
					t.Errorf("k=%d: range %d contains its end", k, i)
				}
				if !r.ContainsHash(r.End - 1) {
					t.Errorf("k=%d: range %d does not contain its end-1", k, i)
				}
			}
			if i > 0 && r.ContainsHash(r.Start-1) {
				t.Errorf("k=%d: range %d contains start-1", k, i)
			}
		}
	}
}

func TestSplitRejectsCountsOutOfRange(t *testing.T) {
	for _, k := range []int{-1, 0, shard.MaxShards + 1} {
		if rs, err := shard.Split(k); err == nil {
			t.Errorf("Split(%d) = %d ranges, want an error", k, len(rs))
		}
	}
}

// Every hash lies in exactly one range, and Of names it.
func TestOfAgreesWithContains(t *testing.T) {
	r := rng(t)
	for _, k := range sampleCounts() {
		rs, _ := shard.Split(k)
		for range max(200, 20000/k) {
			uid := randomUID(r)
			in := -1
			for _, rg := range rs {
				if rg.Contains(uid) {
					if in >= 0 {
						t.Fatalf("k=%d: %s in ranges %d and %d", k, uid, in, rg.Index)
					}
					in = rg.Index
				}
			}
			if got := shard.Of(uid, k); got != in {
				t.Fatalf("k=%d: Of(%s) = %d, Contains says %d (hash %#x)", k, uid, got, in, shard.Hash(uid))
			}
		}
	}
}

func TestHashIsTheAPIServersHash(t *testing.T) {
	r := rng(t)
	for _, uid := range append([]types.UID{"", "a", "0b7e5d8a-1f2c-4e3d-9a8b-7c6d5e4f3a2b"}, func() []types.UID {
		var u []types.UID
		for range 1000 {
			u = append(u, randomUID(r))
		}
		return u
	}()...) {
		want := sharding.HashField(string(uid))
		if got := fmt.Sprintf("%016x", shard.Hash(uid)); got != want {
			t.Fatalf("Hash(%q) = %s, HashField = %s", uid, got, want)
		}
	}
}

var selectorRE = regexp.MustCompile(`^shardRange\(object\.metadata\.uid, '(0x[0-9a-f]+)', '(0x[0-9a-f]+)'\)$`)

// The selector we send selects, by apimachinery's own Matches, exactly the
// objects Contains keeps.
func TestSelectorMatchesWhatContainsKeeps(t *testing.T) {
	r := rng(t)
	for _, k := range []int{1, 2, 3, 6, 7, 16, 100, shard.MaxShards} {
		rs, _ := shard.Split(k)
		sels := make([]sharding.Selector, k)
		for i, rg := range rs {
			m := selectorRE.FindStringSubmatch(rg.Selector())
			if m == nil {
				t.Fatalf("k=%d: selector %q is not shardRange(%s, '0x…', '0x…')", k, rg.Selector(), shard.Key)
			}
			sels[i] = sharding.NewSelector(sharding.ShardRangeRequirement{Key: shard.Key, Start: m[1], End: m[2]})
			if got := sels[i].String(); got != rg.Selector() {
				t.Errorf("k=%d: apimachinery prints %q, we send %q", k, got, rg.Selector())
			}
			wantEnd := fmt.Sprintf("0x%016x", rg.End)
			if rg.Last() {
				wantEnd = "0x10000000000000000"
			}
			if m[1] != fmt.Sprintf("0x%016x", rg.Start) || m[2] != wantEnd {
				t.Errorf("k=%d: range %d selector %q, want start 0x%016x end %s", k, i, rg.Selector(), rg.Start, wantEnd)
			}
		}
		for range max(100, 20000/k) {
			uid := randomUID(r)
			obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm", UID: uid}}
			for i, rg := range rs {
				ok, err := sels[i].Matches(obj)
				if err != nil {
					t.Fatalf("Matches: %v", err)
				}
				if ok != rg.Contains(uid) {
					t.Fatalf("k=%d range %d, uid %s (hash %#x): Matches=%v Contains=%v", k, i, uid, shard.Hash(uid), ok, !ok)
				}
			}
		}
	}
}

// At the bounds themselves, a hash compares as the API server compares it
// (hex strings of equal length).
func TestSelectorBoundsCompareAsTheServerDoes(t *testing.T) {
	for _, k := range []int{2, 3, 6, 7, 1000} {
		rs, _ := shard.Split(k)
		for _, rg := range rs {
			m := selectorRE.FindStringSubmatch(rg.Selector())
			for _, h := range []uint64{rg.Start, rg.Start - 1, rg.Start + 1, rg.End, rg.End - 1} {
				hash := "0x" + fmt.Sprintf("%016x", h)
				server := !sharding.HexLess(hash, m[1]) && sharding.HexLess(hash, m[2])
				if server != rg.ContainsHash(h) {
					t.Errorf("k=%d range %d hash %s: server %v, ContainsHash %v", k, rg.Index, hash, server, !server)
				}
			}
		}
	}
}

func TestShardsAreRoughlyEqual(t *testing.T) {
	const k, n = 6, 60000
	r := rng(t)
	counts := make([]int, k)
	for range n {
		counts[shard.Of(randomUID(r), k)]++
	}
	for i, c := range counts {
		if d := float64(c)/float64(n/k) - 1; d < -0.05 || d > 0.05 {
			t.Errorf("shard %d has %d of %d UIDs (%+.1f%%), want within ±5%% of %d", i, c, n, 100*d, n/k)
		}
	}
	t.Logf("counts %v", counts)
}

func TestRangeString(t *testing.T) {
	rs, _ := shard.Split(3)
	if got := rs[1].String(); got != "shard 1 of 3" {
		t.Errorf("String() = %q", got)
	}
	if _, err := strconv.ParseUint(selectorRE.FindStringSubmatch(rs[1].Selector())[1][2:], 16, 64); err != nil {
		t.Error(err)
	}
}
