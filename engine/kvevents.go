package engine

import (
	"slices"

	"github.com/corral-llm/corral/kvevents"
)

// KV events: what the prefix caches hold, told to a router block by block
// (package kvevents: llm-d's stream, as vLLM publishes it), so that it
// can send a returning prompt where its prefix is cached. The engine
// describes each slot's cache as blocks of kvevents.BlockSize tokens,
// each named by a hash chained to the block before it; a slot's partial
// last block is not told. The three functions that change a slot's cache
// (appendToken, share and truncate, pool.go and admit.go) keep its
// blocks; a block is stored when its first holder (a slot, or a host
// cache entry for the host tier) takes it, and removed when its last
// holder lets it go. At Close every block is removed and the caches
// cleared. The scheduler publishes a step's events as one batch, after
// the step.

// KVEventSink takes the engine's batches of KV events (Config.KVEvents);
// Publish must not block, nor wait for the sink's subscribers. A sink
// that lost a batch (it could not queue it) reports it once through
// Resync: the engine then publishes, after its next step, that nothing
// is held (AllBlocksCleared) and then every block it holds, so that the
// sink's view is whole again. A subscriber that joins late learns the
// state from the sink, never from the engine: *kvevents.Stream keeps the
// state its batches tell, and restates it to joiners itself, off the
// scheduler.
type KVEventSink interface {
	Publish(events []kvevents.Event)
	Resync() bool
}

// kvBlocks follows the blocks the slots and the host cache hold. Its
// methods do nothing on a nil *kvBlocks: the engine publishes no events.
// Only the scheduler uses it.
type kvBlocks struct {
	sink    KVEventSink
	root    kvevents.Hash
	held    map[kvevents.Hash]int32 // slots holding each block
	host    map[kvevents.Hash]int32 // host cache entries holding each block
	pending []kvevents.Event
}

func newKVBlocks(sink KVEventSink) *kvBlocks {
	if sink == nil {
		return nil
	}
	return &kvBlocks{
		sink: sink, root: kvevents.Root(""),
		held: make(map[kvevents.Hash]int32), host: make(map[kvevents.Hash]int32),
	}
}

// extra is a block's extra keys: a sequence's first block carries its
// cache salt, as vLLM's does, so that tenants' blocks never share names.
func extra(i int, salt string) []string {
	if i > 0 || salt == "" {
		return nil
	}
	return []string{salt}
}

// appended follows a token joining sl's cache: every BlockSize tokens
// complete a block.
func (k *kvBlocks) appended(sl *slot) {
	n := len(sl.cache)
	if k == nil || n%kvevents.BlockSize != 0 {
		return
	}
	i := len(sl.blocks)
	parent, tokens := k.root, sl.cache[n-kvevents.BlockSize:]
	if i > 0 {
		parent = sl.blocks[i-1]
	}
	h := kvevents.Sum(parent, tokens, extra(i, sl.salt))
	sl.blocks = append(sl.blocks, h)
	if k.held[h]++; k.held[h] == 1 {
		k.stored(h, i > 0, parent, tokens, "")
	}
}

// shared follows dst taking the first n tokens of src's cache; dst's was
// empty.
func (k *kvBlocks) shared(src, dst *slot, n int) {
	if k == nil {
		return
	}
	dst.blocks = append(dst.blocks, src.blocks[:n/kvevents.BlockSize]...)
	for _, h := range dst.blocks {
		k.held[h]++
	}
}

// truncated follows sl's cache losing its tokens from position n on.
func (k *kvBlocks) truncated(sl *slot, n int) {
	if k == nil {
		return
	}
	keep := n / kvevents.BlockSize
	for _, h := range sl.blocks[keep:] {
		if k.held[h]--; k.held[h] == 0 {
			delete(k.held, h)
			k.removed(h, "")
		}
	}
	sl.blocks = sl.blocks[:keep]
}

// hostAdded follows a host cache entry being kept: its blocks are held in
// host memory.
func (k *kvBlocks) hostAdded(e *hostEntry) {
	if k == nil {
		return
	}
	parent := k.root
	for i := 0; (i+1)*kvevents.BlockSize <= len(e.tokens); i++ {
		tokens := e.tokens[i*kvevents.BlockSize : (i+1)*kvevents.BlockSize]
		h := kvevents.Sum(parent, tokens, extra(i, e.salt))
		e.blocks = append(e.blocks, h)
		if k.host[h]++; k.host[h] == 1 {
			k.stored(h, i > 0, parent, tokens, kvevents.MediumCPU)
		}
		parent = h
	}
}

// hostDropped follows a host cache entry leaving it.
func (k *kvBlocks) hostDropped(e *hostEntry) {
	if k == nil {
		return
	}
	for _, h := range e.blocks {
		if k.host[h]--; k.host[h] == 0 {
			delete(k.host, h)
			k.removed(h, kvevents.MediumCPU)
		}
	}
	e.blocks = nil
}

// stored adds h to the pending events: to the last one when it stores
// h's parent in the same medium (a sequence's blocks in one event, as
// vLLM sends them), else as a new one.
func (k *kvBlocks) stored(h kvevents.Hash, hasParent bool, parent kvevents.Hash, tokens []int32, medium string) {
	if n := len(k.pending); n > 0 && hasParent {
		if last := &k.pending[n-1]; last.Kind == kvevents.Stored && last.Medium == medium && last.Hashes[len(last.Hashes)-1] == parent {
			last.Hashes = append(last.Hashes, h)
			last.Tokens = append(last.Tokens, tokens...)
			return
		}
	}
	e := kvevents.Event{Kind: kvevents.Stored, Hashes: []kvevents.Hash{h}, Tokens: slices.Clone(tokens), Medium: medium}
	if hasParent {
		e.Parent = &parent
	}
	k.pending = append(k.pending, e)
}

// removed adds h to the pending events.
func (k *kvBlocks) removed(h kvevents.Hash, medium string) {
	if n := len(k.pending); n > 0 {
		if last := &k.pending[n-1]; last.Kind == kvevents.Removed && last.Medium == medium {
			last.Hashes = append(last.Hashes, h)
			return
		}
	}
	k.pending = append(k.pending, kvevents.Event{Kind: kvevents.Removed, Hashes: []kvevents.Hash{h}, Medium: medium})
}

// rejoined reports whether the sink must be told the whole state again,
// as to a subscriber that joins afresh: it lost a batch (Resync). The
// pending changes give way to AllBlocksCleared; the caller tells every
// block (restate), then flushes. Only a loss makes the scheduler do this
// O(cache) work: subscribers that join cost it nothing.
func (k *kvBlocks) rejoined() bool {
	if k == nil || !k.sink.Resync() {
		return false
	}
	k.pending = append(k.pending[:0], kvevents.Event{Kind: kvevents.Cleared})
	return true
}

// restate tells again that the blocks of a sequence (its whole blocks,
// named by blocks, and its tokens) are held in medium; blocks told once
// in this restatement (seen) are skipped.
func (k *kvBlocks) restate(blocks []kvevents.Hash, tokens []int32, medium string, seen map[kvevents.Hash]bool) {
	for i, h := range blocks {
		if seen[h] {
			continue
		}
		seen[h] = true
		var parent kvevents.Hash
		if i > 0 {
			parent = blocks[i-1]
		}
		k.stored(h, i > 0, parent, tokens[i*kvevents.BlockSize:(i+1)*kvevents.BlockSize], medium)
	}
}

// flush publishes the pending events as one batch.
func (k *kvBlocks) flush() {
	if k == nil || len(k.pending) == 0 {
		return
	}
	k.sink.Publish(k.pending)
	k.pending = nil
}

// close tells that every block is gone, as the engine closes: each one
// removed (llm-d's indexer acts on removals), then the caches cleared.
func (k *kvBlocks) close() {
	if k == nil {
		return
	}
	for h := range k.held {
		k.removed(h, "")
	}
	for h := range k.host {
		k.removed(h, kvevents.MediumCPU)
	}
	clear(k.held)
	clear(k.host)
	k.pending = append(k.pending, kvevents.Event{Kind: kvevents.Cleared})
	k.flush()
}
