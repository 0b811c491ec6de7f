package shard

import "slices"

// View is one replica's view of the shard group: Members are the
// identities alive, sorted; Holders[i] is the holder of shard i's current
// claim, "" when the shard is free (no holder, or its claim ran out).
type View struct {
	Members []string
	Holders []string
}

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
//     identity, stops one — one replica, one shard per call, and none
//     while that shard is free (on its way to the starved replica), so the
//     spread converges without bouncing;
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
		slices.Sort(members)
	}
	r := len(members)
	lo, hi := k/r, (k+r-1)/r
	held := map[string]int{}
	for _, h := range v.Holders {
		if h != "" {
			held[h]++
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
	starved, anyFree := false, slices.Contains(v.Holders, "")
	for _, m := range members {
		if held[m] < lo {
			starved = true
		}
	}
	// A free shard is one a starved replica can take (a donor's shard in
	// transit, until the starved replica's claim lands): donate only when
	// there is none, else every replica in turn would be the donor while
	// the first donor's shard is on its way.
	if starved && !anyFree && len(stop) == 0 && held[me] > lo && donor(members, held) == me {
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
	free := freeShards(me, members, v, keep)
	for len(keep)+len(take) < hi && len(free) > 0 {
		take, free = append(take, free[0]), free[1:]
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
// drawn from me's place among the members (the i-th of r starts i/r of
// the way into the free shards), so that replicas taking free shards at
// the same time — starting together, or survivors taking a dead
// replica's shards — try different ones: each shard lost to a race costs
// its loser a new claimer, which watches the Lease a lease duration
// before it takes a free one.
func freeShards(me string, members []string, v View, mine []int) []int {
	var free []int
	for s := range len(v.Holders) {
		if v.Holders[s] == "" && !slices.Contains(mine, s) {
			free = append(free, s)
		}
	}
	start := slices.Index(members, me) * len(free) / len(members) // Plan put me among them
	return slices.Concat(free[start:], free[:start])
}
