package shard_test

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/quietpatch/quietpatch/internal/shard"
)

// Split the UIDs into three shards; each range's selector is what a list
// and watch of that shard sends, and Of tells which shard an object is in.
func Example() {
	ranges, err := shard.Split(3)
	if err != nil {
		panic(err)
	}
	for _, r := range ranges {
		fmt.Println(r, r.Selector())
	}
	uid := types.UID("0b7e5d8a-1f2c-4e3d-9a8b-7c6d5e4f3a2b")
	i := shard.Of(uid, 3)
	fmt.Printf("%s hashes to %#016x: shard %d (%v)\n", uid, shard.Hash(uid), i, ranges[i].Contains(uid))
	// Output:
	// shard 0 of 3 shardRange(object.metadata.uid, '0x0000000000000000', '0x5555555555555555')
	// shard 1 of 3 shardRange(object.metadata.uid, '0x5555555555555555', '0xaaaaaaaaaaaaaaaa')
	// shard 2 of 3 shardRange(object.metadata.uid, '0xaaaaaaaaaaaaaaaa', '0x10000000000000000')
	// 0b7e5d8a-1f2c-4e3d-9a8b-7c6d5e4f3a2b hashes to 0x1a01843408b15145: shard 0 (true)
}
