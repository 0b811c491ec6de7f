package shard

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// holders spells a Holders slice: one letter per shard, "-" for free.
func holders(s string) []string {
	hs := make([]string, len(s))
	for i, c := range s {
		if c != '-' {
			hs[i] = string(c)
		}
	}
	return hs
}

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		label   string
		me      string
		members []string
		holders string
		mine    []int
		// take is checked by count when takeN >= 0 (the order depends on
		// the identity's offset), else exactly.
		take  []int
		takeN int
		stop  []int
	}{
		{label: "fresh start, one replica takes all", me: "a", members: []string{"a"},
			holders: "------", takeN: 6},
		{label: "fresh start, one of three takes two", me: "b", members: []string{"a", "b", "c"},
			holders: "------", takeN: 2},
		{label: "fresh start, not yet listed as a member itself", me: "a", members: nil,
			holders: "------", takeN: 6},
		{label: "balanced holds still", me: "b", members: []string{"a", "b", "c"},
			holders: "aabbcc", mine: []int{2, 3}, takeN: 0},
		{label: "joiner: the smallest identity among those holding most gives one", me: "a", members: []string{"a", "b", "c", "d"},
			holders: "aabbcc", mine: []int{0, 1}, takeN: 0, stop: []int{1}},
		{label: "joiner: another holding as many does not give", me: "b", members: []string{"a", "b", "c", "d"},
			holders: "aabbcc", mine: []int{2, 3}, takeN: 0},
		{label: "joiner: the donor is the one holding most, not the smallest", me: "c", members: []string{"a", "b", "c", "d"},
			holders: "abcccc", mine: []int{2, 3, 4, 5}, takeN: 0, stop: []int{5, 4}},
		{label: "joiner: donor holding one more than hi gives the extras only", me: "a", members: []string{"a", "b", "c", "d"},
			holders: "aaabbc", mine: []int{0, 1, 2}, takeN: 0, stop: []int{2}},
		{label: "joiner takes nothing while nothing is free", me: "d", members: []string{"a", "b", "c", "d"},
			holders: "aabbcc", takeN: 0},
		{label: "joiner takes the shard given up", me: "d", members: []string{"a", "b", "c", "d"},
			holders: "a-bbcc", take: []int{1}, takeN: -1},
		{label: "no second donor while the shard given up is free", me: "b", members: []string{"a", "b", "c", "d"},
			holders: "a-bbcc", mine: []int{2, 3}, takeN: 0},
		{label: "donor ties broken by identity even when me is not listed", me: "a", members: []string{"b", "c"},
			holders: "aabb", mine: []int{0, 1}, takeN: 0, stop: []int{1}},
		{label: "lost race: stop the shard another holds", me: "a", members: []string{"a", "b"},
			holders: "ab--", mine: []int{0, 1}, takeN: 1, stop: []int{1}},
		{label: "more than hi: stop the extras, unheld first", me: "a", members: []string{"a", "b"},
			holders: "aa-a--", mine: []int{0, 1, 2, 3, 4}, takeN: 0, stop: []int{4, 2}},
		{label: "more than hi, all held: stop the highest", me: "a", members: []string{"a", "b", "c"},
			holders: "aaaa--", mine: []int{0, 1, 2, 3}, takeN: 0, stop: []int{3, 2}},
		{label: "K < R: one shard each at most", me: "c", members: []string{"a", "b", "c"},
			holders: "a-", takeN: 1},
		{label: "K < R: a replica holding one takes no more", me: "a", members: []string{"a", "b", "c"},
			holders: "a-", mine: []int{0}, takeN: 0},
		{label: "K < R: holding two gives one up", me: "a", members: []string{"a", "b", "c"},
			holders: "aa", mine: []int{0, 1}, takeN: 0, stop: []int{1}},
		{label: "starved replica takes up to hi", me: "c", members: []string{"a", "b", "c"},
			holders: "aa-b--c", mine: []int{6}, takeN: 2},
		{label: "non-starved replica does not take while someone is starved", me: "a", members: []string{"a", "b", "c"},
			holders: "aa-b--c", mine: []int{0, 1}, takeN: 0},
		{label: "non-starved replica below hi takes when nobody is starved", me: "a", members: []string{"a", "b", "c"},
			holders: "aa-bbcc", mine: []int{0, 1}, take: []int{2}, takeN: -1},
		{label: "a dead holder's shard is not free", me: "a", members: []string{"a"},
			holders: "ax", mine: []int{0}, takeN: 0},
		{label: "competing for a free shard is kept", me: "a", members: []string{"a", "b"},
			holders: "-b--", mine: []int{0}, takeN: 1},
	} {
		t.Run(tc.label, func(t *testing.T) {
			v := View{Members: tc.members, Holders: holders(tc.holders)}
			before := fmt.Sprint(v, tc.mine)
			take, stop := Plan(tc.me, v, slices.Clone(tc.mine))
			if after := fmt.Sprint(v, tc.mine); after != before {
				t.Errorf("Plan changed its input: %s -> %s", before, after)
			}
			if !slices.Equal(stop, tc.stop) {
				t.Errorf("stop = %v, want %v", stop, tc.stop)
			}
			if tc.takeN >= 0 {
				if len(take) != tc.takeN {
					t.Errorf("take = %v, want %d shards", take, tc.takeN)
				}
			} else if !slices.Equal(take, tc.take) {
				t.Errorf("take = %v, want %v", take, tc.take)
			}
			for _, s := range take {
				if v.Holders[s] != "" || slices.Contains(tc.mine, s) {
					t.Errorf("take %d: held by %q or already mine", s, v.Holders[s])
				}
			}
			if n := len(slices.Compact(slices.Sorted(slices.Values(take)))); n != len(take) {
				t.Errorf("take %v has duplicates", take)
			}
		})
	}
}

// Replicas starting together try different shards first.
func TestPlanSpreadsTheFirstTries(t *testing.T) {
	v := View{Members: []string{"a", "b", "c", "d"}, Holders: make([]string, 12)}
	firsts := map[int]bool{}
	for _, me := range v.Members {
		take, _ := Plan(me, v, nil)
		firsts[take[0]] = true
	}
	if len(firsts) < 2 {
		t.Errorf("four replicas all try shard %v first", firsts)
	}
}

// sim is a synchronous model of a shard group: every round each replica
// alive computes Plan on the same view; then the shard Leases decide:
// a stop frees a held shard (seen next round), and of the replicas
// competing for a free shard the first in this round's order wins it.
// A killed replica's Leases run out after expiry rounds.
type sim struct {
	t      *testing.T
	k      int
	rng    *rand.Rand
	expiry int

	alive  []string
	mine   map[string][]int
	lease  []string // holder of each shard, "" free
	expire []int    // round a dead holder's Lease runs out
	round  int
	moves  int // held shards released (given up or run out)
	next   int
}

func newSim(t *testing.T, k int, seed uint64) *sim {
	return &sim{t: t, k: k, rng: rand.New(rand.NewPCG(seed, uint64(k))), expiry: 2,
		mine: map[string][]int{}, lease: make([]string, k), expire: make([]int, k)}
}

func (s *sim) join() string {
	id := fmt.Sprintf("r%02d", s.next)
	s.next++
	s.alive = append(s.alive, id)
	slices.Sort(s.alive)
	return id
}

func (s *sim) kill(id string) {
	s.alive = slices.DeleteFunc(s.alive, func(m string) bool { return m == id })
	delete(s.mine, id)
	for i, h := range s.lease {
		if h == id {
			s.expire[i] = s.round + s.expiry
		}
	}
}

func (s *sim) isAlive(id string) bool { return slices.Contains(s.alive, id) }

// step runs one round and reports whether any Lease changed hands.
func (s *sim) step() bool {
	s.round++
	changed := false
	for i, h := range s.lease { // dead holders run out
		if h != "" && !s.isAlive(h) && s.round >= s.expire[i] {
			s.lease[i] = ""
			s.moves++
			changed = true
		}
	}
	v := View{Members: slices.Clone(s.alive), Holders: slices.Clone(s.lease)}
	type plan struct{ take, stop []int }
	plans := map[string]plan{}
	for _, id := range s.alive {
		take, stop := Plan(id, v, slices.Sorted(slices.Values(s.mine[id])))
		plans[id] = plan{take, stop}
	}
	order := slices.Clone(s.alive)
	s.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	for _, id := range order {
		p := plans[id]
		for _, sh := range p.stop {
			if !slices.Contains(s.mine[id], sh) {
				s.t.Fatalf("round %d: %s stops %d, not its own (%v)", s.round, id, sh, s.mine[id])
			}
			s.mine[id] = slices.DeleteFunc(s.mine[id], func(x int) bool { return x == sh })
			if s.lease[sh] == id {
				s.lease[sh] = ""
				s.moves++
				changed = true
			}
		}
		for _, sh := range p.take {
			if slices.Contains(s.mine[id], sh) {
				s.t.Fatalf("round %d: %s takes %d twice", s.round, id, sh)
			}
			s.mine[id] = append(s.mine[id], sh)
		}
	}
	// The Leases decide; shards freed this round are seen free next round,
	// and nobody competes for them yet.
	for _, id := range order {
		for _, sh := range s.mine[id] {
			if v.Holders[sh] == "" && s.lease[sh] == "" && !freedNow(v, s.lease, sh) {
				s.lease[sh] = id
				changed = true
			}
		}
	}
	return changed
}

// freedNow reports whether shard sh was given up in this round.
func freedNow(v View, lease []string, sh int) bool { return v.Holders[sh] != "" && lease[sh] == "" }

// balanced reports whether every shard is held by a replica alive, each
// holding ⌊K/R⌋ or ⌈K/R⌉ and competing for nothing else.
func (s *sim) balanced() (bool, string) {
	r := len(s.alive)
	lo, hi := s.k/r, (s.k+r-1)/r
	count := map[string]int{}
	for _, h := range s.lease {
		if h == "" || !s.isAlive(h) {
			return false, "shards not held: " + s.String()
		}
		count[h]++
	}
	for _, id := range s.alive {
		if c := count[id]; c < lo || c > hi {
			return false, fmt.Sprintf("%s holds %d, want %d..%d: %s", id, c, lo, hi, s.String())
		}
		if len(s.mine[id]) != count[id] {
			return false, fmt.Sprintf("%s runs %v, holds %d", id, s.mine[id], count[id])
		}
	}
	return true, ""
}

func (s *sim) String() string {
	var b strings.Builder
	for _, h := range s.lease {
		if h == "" {
			h = "--"
		}
		b.WriteString(h[1:] + " ")
	}
	return fmt.Sprintf("round %d, alive %v, leases [%s]", s.round, s.alive, strings.TrimSpace(b.String()))
}

// converge runs rounds until balanced, at most 3K (and a few for the
// Leases of the dead to run out), then 50 more in which nothing moves.
func (s *sim) converge(what string) (rounds int) {
	s.t.Helper()
	limit := 3*s.k + s.expiry + 2
	for rounds = 0; ; rounds++ {
		if ok, _ := s.balanced(); ok {
			break
		}
		if rounds >= limit {
			_, why := s.balanced()
			s.t.Fatalf("%s: not balanced after %d rounds: %s", what, rounds, why)
		}
		s.step()
	}
	for range 50 {
		if s.step() {
			s.t.Fatalf("%s: a shard moved after balance: %s", what, s.String())
		}
	}
	if ok, why := s.balanced(); !ok {
		s.t.Fatalf("%s: balance lost: %s", what, why)
	}
	return rounds
}

// minMoves is the fewest shards that must change hands for a joiner:
// it must reach ⌊K/R'⌋, and nobody may keep more than ⌈K/R'⌉.
func (s *sim) minMoves() int {
	r := len(s.alive) + 1
	lo, hi := s.k/r, (s.k+r-1)/r
	excess := 0
	for _, id := range s.alive {
		excess += max(0, len(s.mine[id])-hi)
	}
	return max(lo, excess)
}

func TestPlanSimulationConvergesWithoutThrash(t *testing.T) {
	for r := 1; r <= 5; r++ {
		for k := 1; k <= 12; k++ {
			t.Run(fmt.Sprintf("R=%d/K=%d", r, k), func(t *testing.T) {
				for seed := range uint64(3) {
					s := newSim(t, k, seed)
					for range r { // start together
						s.join()
					}
					s.converge("start")
					// Joins, one by one.
					for range 2 {
						want := s.minMoves()
						before := s.moves
						s.join()
						s.converge("join")
						// One donor at a time and none while a shard is free:
						// in this model, a join moves no more than it must.
						if got := s.moves - before; got > want {
							t.Errorf("seed %d: a join to %d replicas moved %d shards, the minimum is %d", seed, len(s.alive), got, want)
						}
					}
					// Kills: the oldest, then a random one.
					s.kill(s.alive[0])
					s.converge("kill the first")
					s.kill(s.alive[s.rng.IntN(len(s.alive))])
					s.converge("kill another")
					// Join and kill at once.
					s.kill(s.alive[s.rng.IntN(len(s.alive))])
					s.join()
					s.converge("kill and join")
				}
			})
		}
	}
}
