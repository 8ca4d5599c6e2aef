// Package kvevents publishes what a KV cache holds as llm-d's KV-event
// stream, the one vLLM publishes, so that a router indexing those events
// (llm-d's KV-cache indexer and its precise prefix scorer) knows which
// server holds which prompt prefix exactly, from token ids rather than
// guessed from text.
//
// The cache is described in blocks of BlockSize tokens. A block is
// named by a hash of its tokens chained to the hash of the block before
// it (hash.go), so one hash names a whole prefix. The events
// (event.go) say that blocks are now held (BlockStored), no longer held
// (BlockRemoved), or that nothing is (AllBlocksCleared). A Publisher
// (publisher.go) sends them in batches over ZeroMQ PUB, one topic per
// model, each batch with a sequence number, as msgpack, keeps what each
// topic's batches say is held (state.go) and restates it to a subscriber
// that joins. Where it binds or connects is an Endpoint (endpoint.go);
// what subscribers may make it hold is bounded (Options).
package kvevents

import (
	"crypto/sha256"
	"encoding/binary"
)

// BlockSize is the number of tokens in a block: vLLM's default, the
// block_size corral's vllm:cache_config_info metric reports, and what
// llm-d's token processor chunks a prompt into by default.
const BlockSize = 16

// Hash names a block and, through its chain of parents, every token
// before it.
type Hash [sha256.Size]byte

// Uint64 is the hash as llm-d's index keys it: its last 8 bytes, big
// endian.
func (h Hash) Uint64() uint64 { return binary.BigEndian.Uint64(h[len(h)-8:]) }

// Root is the parent hash of a sequence's first block: the SHA-256 of
// the seed encoded as a CBOR text string. vLLM derives it from its hash
// seed (PYTHONHASHSEED) and llm-d from its token processor's HashSeed;
// both default to "".
func Root(seed string) Hash {
	return sha256.Sum256(append(cborHead(nil, 3, uint64(len(seed))), seed...))
}

// Sum is the hash of a block of tokens after parent: the SHA-256 of the
// canonical CBOR encoding of [parent, tokens, extra], vLLM's
// sha256_cbor block hash. extra is the block's extra keys: nil for none
// (CBOR null), or text strings such as a cache salt, which vLLM puts in
// a sequence's first block. Ids are non-negative.
func Sum(parent Hash, tokens []int32, extra []string) Hash {
	b := make([]byte, 0, 3+2+len(parent)+3+5*len(tokens)+8)
	b = cborHead(b, 4, 3) // [parent, tokens, extra]
	b = cborHead(b, 2, uint64(len(parent)))
	b = append(b, parent[:]...)
	b = cborHead(b, 4, uint64(len(tokens)))
	for _, t := range tokens {
		b = cborHead(b, 0, uint64(uint32(t)))
	}
	if extra == nil {
		b = append(b, 0xf6) // null
	} else {
		b = cborHead(b, 4, uint64(len(extra)))
		for _, s := range extra {
			b = cborHead(b, 3, uint64(len(s)))
			b = append(b, s...)
		}
	}
	return sha256.Sum256(b)
}

// cborHead appends the head of a CBOR data item of major type major and
// argument n in its shortest form, as canonical CBOR requires.
func cborHead(b []byte, major byte, n uint64) []byte {
	m := major << 5
	switch {
	case n < 24:
		return append(b, m|byte(n))
	case n <= 0xff:
		return append(b, m|24, byte(n))
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, m|25), uint16(n))
	case n <= 0xffffffff:
		return binary.BigEndian.AppendUint32(append(b, m|26), uint32(n))
	default:
		return binary.BigEndian.AppendUint64(append(b, m|27), n)
	}
}
