package shard

import (
	"slices"
	"testing"
)

// simulate applies Plan to every member in turn, with a shard stopped
// becoming free and a shard taken becoming held by the taker only after
// delay rounds (a claim in transit), and returns how many shards were
// given up once held and the final holders.
func simulate(t *testing.T, members []string, holders []string, delay, rounds int) (gaveUp int, final []string) {
	t.Helper()
	type pending struct {
		shard int
		by    string
		at    int
	}
	running := map[string][]int{}
	for i, h := range holders {
		if h != "" {
			running[h] = append(running[h], i)
		}
	}
	var inFlight []pending
	for round := range rounds {
		for _, p := range inFlight {
			if p.at == round && holders[p.shard] == "" && slices.Contains(running[p.by], p.shard) {
				holders[p.shard] = p.by
			}
		}
		for _, me := range members {
			mine := slices.Clone(running[me])
			slices.Sort(mine)
			take, stop := Plan(me, View{Members: members, Holders: slices.Clone(holders)}, mine)
			for _, s := range stop {
				if holders[s] == me {
					holders[s] = ""
					gaveUp++
				}
				running[me] = slices.DeleteFunc(running[me], func(x int) bool { return x == s })
			}
			for _, s := range take {
				running[me] = append(running[me], s)
				inFlight = append(inFlight, pending{s, me, round + delay})
			}
		}
	}
	return gaveUp, holders
}

// TestPlanJoinMovesOnlyWhatIsNeeded: a fourth replica joins three holding
// 2/2/2 of 6 shards; its claims take a few rounds to land. The spread
// becomes 2/2/1/1 with exactly one shard given up — not one by every
// replica in turn while the first donated shard is in transit.
func TestPlanJoinMovesOnlyWhatIsNeeded(t *testing.T) {
	members := []string{"a", "b", "c", "d"}
	holders := []string{"a", "a", "b", "b", "c", "c"}
	gave, final := simulate(t, members, holders, 3, 30)
	count := map[string]int{}
	for _, h := range final {
		count[h]++
	}
	if count["d"] != 1 || count[""] != 0 || count["a"]+count["b"]+count["c"] != 5 {
		t.Errorf("final holders %v (%v), want d with 1 and every shard held", final, count)
	}
	if gave != 1 {
		t.Errorf("%d shards given up, want 1", gave)
	}
	// And a restarted third replica next to two holding 3/3: two moves.
	gave, final = simulate(t, []string{"a", "b", "c"}, []string{"a", "a", "a", "b", "b", "b"}, 3, 40)
	count = map[string]int{}
	for _, h := range final {
		count[h]++
	}
	if count["a"] != 2 || count["b"] != 2 || count["c"] != 2 || gave != 2 {
		t.Errorf("final holders %v, %d given up; want 2/2/2 after 2", final, gave)
	}
}

// TestPlanSurvivorsTakeDifferentShards: two survivors of three, holding
// 2 each, take the dead replica's two shards — one each, not both the
// same one (the loser of a race needs a new claimer, a lease duration
// more); and three replicas starting together try disjoint shards.
func TestPlanSurvivorsTakeDifferentShards(t *testing.T) {
	v := View{Members: []string{"shard-a-0", "shard-b-0"}, Holders: []string{"shard-b-0", "shard-b-0", "shard-a-0", "shard-a-0", "", ""}}
	ta, sa := Plan("shard-a-0", v, []int{2, 3})
	tb, sb := Plan("shard-b-0", v, []int{0, 1})
	if len(sa)+len(sb) != 0 || len(ta) != 1 || len(tb) != 1 || ta[0] == tb[0] {
		t.Errorf("a takes %v stops %v, b takes %v stops %v: want one free shard each, different", ta, sa, tb, sb)
	}
	v = View{Members: []string{"a", "b", "c"}, Holders: make([]string, 6)}
	seen := map[int]string{}
	for _, m := range v.Members {
		take, _ := Plan(m, v, nil)
		if len(take) != 2 {
			t.Errorf("%s takes %v, want 2 shards", m, take)
		}
		for _, s := range take {
			if o, ok := seen[s]; ok {
				t.Errorf("shard %d tried by %s and %s", s, o, m)
			}
			seen[s] = m
		}
	}
}
