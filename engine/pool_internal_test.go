package engine

import (
	"fmt"
	"testing"
	"time"
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
				if n := p.distinct(lists); n != want {
					b.Fatalf("%d distinct cells, want %d", n, want)
				}
			}
		})
	}
}

// BenchmarkIdleTails is what finding the idle caches to free costs when
// the pool runs short (scheduler.idleTails, once per freeIdle or trimIdle
// call): slots caches of held cells, half of them running and half idle,
// every cache's first shared cells one prefix (a common system prompt).
func BenchmarkIdleTails(b *testing.B) {
	for _, tc := range []struct{ slots, held, shared int }{{4, 4096, 0}, {16, 1024, 0}, {16, 4096, 1024}, {16, 4096, 4000}} {
		b.Run(fmt.Sprintf("slots=%d/held=%d/shared=%d", tc.slots, tc.held, tc.shared), func(b *testing.B) {
			p := newCellPool(tc.slots * tc.held)
			prefix := make([]int32, tc.shared)
			for i := range prefix {
				prefix[i] = p.take()
			}
			s := &scheduler{}
			start := time.Now()
			for i := range tc.slots {
				sl := &slot{id: i, lastUsed: start.Add(time.Duration(i) * time.Second)}
				if i%2 == 0 {
					sl.state = stateDecode
				}
				sl.cells = append(sl.cells, prefix...)
				for len(sl.cells) < tc.held {
					sl.cells = append(sl.cells, p.take())
				}
				sl.cache = make([]int32, tc.held)
				s.slots = append(s.slots, sl)
			}
			for b.Loop() {
				if tails := s.idleTails(); len(tails) != tc.slots/2 || tails[0].keep != tc.shared {
					b.Fatalf("%d idle tails, the first keeping %d; want %d keeping %d", len(tails), tails[0].keep, tc.slots/2, tc.shared)
				}
			}
		})
	}
}
