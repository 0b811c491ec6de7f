package leader

import (
	"hash/fnv"
	"slices"
)

// Plan says what the replica me, running the shards in mine (holding them
// or competing for them), should do given v: which free shards to start
// competing for, and which of mine to stop (giving a held one up on
// purpose: quiesced, vacated). With K shards and R replicas alive, let
// lo = ⌊K/R⌋ and hi = ⌈K/R⌉:
//
//   - a shard of mine that another replica holds is stopped (lost race);
//   - more than hi shards: stop the extras, those not held first;
//   - a replica alive holds fewer than lo (one joined) and no shard is
//     free: the replica holding the most, ties broken by the smaller
//     identity, stops one — one replica, one shard at a time (none while
//     the last one given up is still free), so the spread converges
//     without bouncing;
//   - free shards are taken up to hi, but while a replica holds fewer than
//     lo only such a replica takes.
//
// Each replica computes the same donor from the same view; views differ for
// at most the Leases' list period, and the shard Leases themselves decide
// every race.
func Plan(me string, v View, mine []int) (take, stop []int) {
	k := len(v.Holders)
	members := v.Members
	if !slices.Contains(members, me) {
		members = append(slices.Clone(members), me)
		slices.Sort(members) // donor breaks ties by order
	}
	r := len(members)
	lo, hi := k/r, (k+r-1)/r
	held := map[string]int{}
	free := 0
	for _, h := range v.Holders {
		if h != "" {
			held[h]++
		} else {
			free++
		}
	}
	var keep []int
	for _, s := range mine {
		if h := v.Holders[s]; h != "" && h != me {
			stop = append(stop, s)
			continue
		}
		keep = append(keep, s)
	}
	// Held shards last, so that extras not yet held go first.
	slices.SortStableFunc(keep, func(a, b int) int {
		ha, hb := v.Holders[a] == me, v.Holders[b] == me
		switch {
		case ha == hb:
			return b - a
		case hb:
			return -1
		default:
			return 1
		}
	})
	// keep is now: not held (highest index first), then held (highest first).
	for len(keep) > hi {
		stop, keep = append(stop, keep[0]), keep[1:]
	}
	starved := false
	for _, m := range members {
		if held[m] < lo {
			starved = true
		}
	}
	// No donation while a shard is free: a starved replica takes it (only
	// they take while one is starved), and a second donor would give up a
	// shard too many while the first one's is still changing hands.
	if starved && free == 0 && len(stop) == 0 && held[me] > lo && donor(members, held) == me {
		for i, s := range keep {
			if v.Holders[s] == me {
				stop = append(stop, s)
				keep = slices.Delete(keep, i, i+1)
				break
			}
		}
	}
	if starved && held[me] >= lo {
		return take, stop
	}
	avail := freeShards(me, v, keep)
	for len(keep)+len(take) < hi && len(avail) > 0 {
		take, avail = append(take, avail[0]), avail[1:]
	}
	return take, stop
}

// donor is the member holding the most shards, ties to the smaller identity.
func donor(members []string, held map[string]int) string {
	best := ""
	for _, m := range members { // members are sorted
		if best == "" || held[m] > held[best] {
			best = m
		}
	}
	return best
}

// freeShards lists the free shards not in mine, starting at an offset
// drawn from me, so that replicas starting together try different shards.
func freeShards(me string, v View, mine []int) []int {
	k := len(v.Holders)
	h := fnv.New32a()
	_, _ = h.Write([]byte(me))
	start := int(h.Sum32() % uint32(k))
	var free []int
	for j := range k {
		s := (start + j) % k
		if v.Holders[s] == "" && !slices.Contains(mine, s) {
			free = append(free, s)
		}
	}
	return free
}
