package shard_test

import (
	"fmt"

	"github.com/quietpatch/quietpatch/internal/shard"
)

// Three replicas hold two shards each of six; a fourth joins, holding
// none. The replica holding the most (ties: the smallest identity) gives
// one shard up; the others do nothing; the newcomer waits for it to be
// free.
func ExamplePlan() {
	view := shard.View{
		Members: []string{"a", "b", "c", "d"},
		Holders: []string{"a", "a", "b", "b", "c", "c"},
	}
	for _, me := range view.Members {
		var mine []int
		for i, h := range view.Holders {
			if h == me {
				mine = append(mine, i)
			}
		}
		take, stop := shard.Plan(me, view, mine)
		fmt.Printf("%s: take %v, give up %v\n", me, take, stop)
	}
	// Once shard 1 is free, only the starved replica takes it.
	view.Holders[1] = ""
	take, _ := shard.Plan("d", view, nil)
	fmt.Println("d then takes", take)
	// Output:
	// a: take [], give up [1]
	// b: take [], give up []
	// c: take [], give up []
	// d: take [], give up []
	// d then takes [1]
}
