package leader

import (
	"testing"
	"time"
)

// BenchmarkCurrent measures what a dispatcher pays per patch to re-check
// leadership.
func BenchmarkCurrent(b *testing.B) {
	var h hub
	h.publish(Claim{Holder: "a", Expiry: t0, Epoch: 1})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !h.current().IsCurrentFor("a", t0.Add(-time.Second)) {
				b.Fatal("not current")
			}
		}
	})
}

// BenchmarkPublish measures a publish to subscribers that never read: the
// cost is a drain and a send per subscriber, never a wait.
func BenchmarkPublish(b *testing.B) {
	for _, n := range []int{1, 8} {
		b.Run(map[int]string{1: "1 subscriber", 8: "8 subscribers"}[n], func(b *testing.B) {
			var h hub
			for range n {
				_, cancel := h.subscribe()
				defer cancel()
			}
			b.ReportAllocs()
			for i := range b.N {
				h.publish(Claim{Holder: "a", Expiry: t0, Epoch: int64(i + 1)})
			}
		})
	}
}
