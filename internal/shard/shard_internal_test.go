package shard

import "testing"

// Of at the bounds themselves, where the proportional guess is off by one
// and random UIDs never land.
func TestOfHashAtTheBounds(t *testing.T) {
	for _, k := range []int{1, 2, 3, 5, 6, 7, 10, 100, 333, 1000, MaxShards - 1, MaxShards} {
		rs, _ := Split(k)
		for _, r := range rs {
			hs := []uint64{r.Start, r.Start + 1, ^uint64(0)}
			if r.Index > 0 {
				hs = append(hs, r.Start-1)
			}
			if !r.Last() {
				hs = append(hs, r.End-1, r.End)
			}
			for _, h := range hs {
				want := -1
				for _, o := range rs {
					if o.ContainsHash(h) {
						want = o.Index
					}
				}
				if got := ofHash(h, k); got != want {
					t.Fatalf("k=%d: ofHash(%#x) = %d, the range containing it is %d", k, h, got, want)
				}
			}
		}
	}
}
