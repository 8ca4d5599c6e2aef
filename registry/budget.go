package registry

import (
	"math"
	"sync/atomic"
)

// Budget accounts memory reserved by models against a limit. Reservations
// are a compare-and-swap on one counter: no lock is held while a model
// loads, runs or unloads, and two models reserving at once cannot both
// take the last bytes.
type Budget struct {
	limit int64 // bytes; math.MaxInt64 when unlimited
	used  atomic.Int64
}

// NewBudget returns a budget of limit bytes; limit <= 0 means unlimited.
func NewBudget(limit int64) *Budget {
	if limit <= 0 {
		limit = math.MaxInt64
	}
	return &Budget{limit: limit}
}

// TryReserve takes n bytes if they fit and reports whether they did.
func (b *Budget) TryReserve(n int64) bool {
	for {
		used := b.used.Load()
		if n > b.limit-used {
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

// Release gives back n bytes taken by TryReserve.
func (b *Budget) Release(n int64) {
	if b.used.Add(-n) < 0 {
		panic("registry: budget released more than was reserved")
	}
}

// Used is the number of bytes reserved now.
func (b *Budget) Used() int64 { return b.used.Load() }

// Limit is the budget in bytes, math.MaxInt64 when unlimited.
func (b *Budget) Limit() int64 { return b.limit }

// Unlimited reports whether the budget has no limit.
func (b *Budget) Unlimited() bool { return b.limit == math.MaxInt64 }
