package engine

import (
	"fmt"
	"testing"
)

// BenchmarkActiveCells is what publishing Stats.KVCellsActive costs a
// step (scheduler.activeCells: the distinct cells of the running
// requests' caches): slots requests of held cells each, the first
// shared cells of every request one prefix (a common system prompt).
func BenchmarkActiveCells(b *testing.B) {
	for _, tc := range []struct{ slots, held, shared int }{{1, 16384, 0}, {16, 1024, 0}, {16, 4096, 1024}} {
		b.Run(fmt.Sprintf("slots=%d/held=%d/shared=%d", tc.slots, tc.held, tc.shared), func(b *testing.B) {
			p := newCellPool(tc.slots * tc.held)
			prefix := make([]int32, tc.shared)
			for i := range prefix {
				prefix[i] = p.take()
			}
			lists := make([][]int32, tc.slots)
			for s := range lists {
				lists[s] = append(lists[s], prefix...)
				p.hold(prefix)
				for len(lists[s]) < tc.held {
					lists[s] = append(lists[s], p.take())
				}
			}
			want := tc.shared + tc.slots*(tc.held-tc.shared)
			for b.Loop() {
				if n := p.distinct(nil, lists); n != want {
					b.Fatalf("%d distinct cells, want %d", n, want)
				}
			}
		})
	}
}
