package engine

import (
	"slices"

	"github.com/corral-llm/corral/kvevents"
)

// Prefix reuse. Every slot's cache is a token sequence whose KV cells the
// unified cache holds; a new request may start from the longest prefix of
// its prompt found in any slot, busy or idle (llama_memory_seq_cp shares
// those cells, it copies nothing), or in the host cache below, where the
// KV of sequences pushed out of the slots is kept up to a byte budget.
// Every slot's cache and every host entry carries the Request.CacheSalt
// of the requests that made it, and a request looks only at those of its
// own salt: tenants never share cells, so what a prompt finds cached says
// nothing about another tenant's prompts.
//
// The search is a scan: with one sequence per slot and a bounded number
// of host entries, comparing token slices costs microseconds per admission
// (BenchmarkPrefixSearch: 32 µs for 16 slots and 64 host entries all
// sharing a 1,000-token prefix with the prompt), far below one decode
// step (10 ms and more); an index over token
// ids would have to follow every slot's cache through every step to save
// that.

// minHostSave is the shortest tail of a slot's cache worth saving to host
// memory when the slot is reused for something else: below it, evaluating
// the tokens again costs about as much as restoring them.
const minHostSave = 64

// hostEntry is the saved KV state of one sequence.
type hostEntry struct {
	tokens []int32
	salt   string // the Request.CacheSalt of the requests that made it
	state  []byte
	// checkpoints are the slot's checkpoints within tokens when it was
	// saved (models whose memory cannot be cut back at will): a restore
	// keeps the state to one of them when the next prompt shares less
	// than all of tokens. Their bytes count in the entry's size.
	checkpoints []checkpoint
	used        uint64          // hostCache.clock at the last save or restore
	blocks      []kvevents.Hash // its whole blocks, when the engine publishes KV events
}

// hostCache holds KV states of evicted sequences, least recently used
// first out, within budget bytes. Only the scheduler uses it.
type hostCache struct {
	budget  int64
	size    int64
	clock   uint64
	entries []*hostEntry

	saved, restored uint64 // counters for Stats
	// perToken is the size of one token's state, learnt from the first
	// state saved (0 before), so that a state too large for the budget
	// is not copied out of the KV cache for nothing.
	perToken int64
	// spill, when set, takes the entries the budget pushes out (and a
	// state larger than the whole budget), with their checkpoints: the
	// disk tier (disk.go).
	spill func(tokens []int32, salt string, state []byte, cps []checkpoint)
	// kv follows the blocks the entries hold (nil: no KV events).
	kv *kvBlocks
	// other holds bytes of the same budget (the slots' checkpoints:
	// checkpoint.go), evicted with the entries in one least recently used
	// order on the clock; nil for none.
	other budgetHolder
}

// budgetHolder is what else holds bytes of the host cache's budget.
type budgetHolder interface {
	// held is the bytes it holds.
	held() int64
	// oldest is when its least recently used item was last used, on
	// the host cache's clock; false when it holds nothing.
	oldest() (used uint64, ok bool)
	// dropOldest drops that item.
	dropOldest()
}

// tick advances the clock and returns it: a use's time.
func (c *hostCache) tick() uint64 {
	c.clock++
	return c.clock
}

// longest returns the entry of salt sharing the longest prefix with
// tokens, and the length of that prefix.
func (c *hostCache) longest(tokens []int32, salt string) (*hostEntry, int) {
	var best *hostEntry
	n := 0
	for _, e := range c.entries {
		if e.salt != salt {
			continue
		}
		if m := commonPrefix(e.tokens, tokens); m > n {
			best, n = e, m
		}
	}
	return best, n
}

// covers reports whether some entry of salt already holds all of tokens.
func (c *hostCache) covers(tokens []int32, salt string) bool {
	_, n := c.longest(tokens, salt)
	return n == len(tokens)
}

// touch marks e as just used.
func (c *hostCache) touch(e *hostEntry) { e.used = c.tick() }

// size is the bytes e holds: its state and checkpoints.
func (e *hostEntry) size() int64 {
	n := int64(len(e.state))
	for _, c := range e.checkpoints {
		n += int64(len(c.state))
	}
	return n
}

// keep returns the most of e's tokens a restore can keep for a prompt
// sharing its first m tokens when only whole keeps whole states and
// checkpoints (see scheduler.restorable): m, or else its last checkpoint
// within m, or 0.
func (e *hostEntry) keep(m int, whole bool) int {
	return keepOf(m, len(e.tokens), e.checkpoints, whole)
}

// keepOf is what a restore of a state of total tokens with the
// checkpoints cps keeps for a prompt sharing its first m: see
// hostEntry.keep.
func keepOf(m, total int, cps []checkpoint, whole bool) int {
	if whole || m == total {
		return m
	}
	return lastCheckpoint(cps, m)
}

// add stores state for tokens of salt, with the checkpoints cps within
// them, dropping the entries it makes redundant (those of salt whose
// tokens are a prefix of these) and then the least recently used entries
// and checkpoints until the cache fits its budget (entries handed to
// spill, when set, with their checkpoints). A state larger than the
// whole budget is not kept (but spilled).
func (c *hostCache) add(tokens []int32, salt string, state []byte, cps []checkpoint) {
	if c.perToken == 0 && len(tokens) > 0 {
		c.perToken = int64(len(state) / len(tokens))
	}
	e := &hostEntry{tokens: slices.Clone(tokens), salt: salt, state: state, checkpoints: cps}
	if e.size() > c.budget {
		if c.spill != nil {
			c.spill(tokens, salt, state, cps)
		}
		return
	}
	c.entries = slices.DeleteFunc(c.entries, func(old *hostEntry) bool {
		if old.salt == salt && commonPrefix(old.tokens, tokens) == len(old.tokens) {
			c.size -= old.size()
			c.kv.hostDropped(old)
			return true
		}
		return false
	})
	c.touch(e)
	c.entries = append(c.entries, e)
	c.kv.hostAdded(e)
	c.size += e.size()
	c.saved++
	c.fit(0)
}

// fit drops, least recently used first, the entries (handed to spill,
// when set) and the other holder's items until they fit the budget with
// extra bytes more, or nothing is left to drop.
func (c *hostCache) fit(extra int64) {
	for {
		var other int64
		if c.other != nil {
			other = c.other.held()
		}
		if c.size+other+extra <= c.budget {
			return
		}
		oldest := -1
		for i, e := range c.entries {
			if oldest < 0 || e.used < c.entries[oldest].used {
				oldest = i
			}
		}
		var used uint64
		ok := false
		if c.other != nil {
			used, ok = c.other.oldest()
		}
		switch {
		case oldest >= 0 && (!ok || c.entries[oldest].used < used):
			e := c.entries[oldest]
			c.size -= e.size()
			c.entries = slices.Delete(c.entries, oldest, oldest+1)
			c.kv.hostDropped(e)
			if c.spill != nil {
				c.spill(e.tokens, e.salt, e.state, e.checkpoints)
			}
		case ok:
			c.other.dropOldest()
		default:
			return
		}
	}
}
