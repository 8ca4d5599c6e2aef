package kvevents

import (
	"encoding/binary"
	"math"
	"time"
)

// Kind is what an Event says.
type Kind uint8

const (
	// Stored: the blocks named by Hashes are now held. Their tokens are
	// Tokens, BlockSize per block; Parent names the block before the
	// first (nil: the first is a sequence's first block).
	Stored Kind = iota + 1
	// Removed: the blocks named by Hashes are no longer held.
	Removed
	// Cleared: no block is held any more.
	Cleared
)

// Medium names where blocks are held, as vLLM names its tiers: "" is the
// engine's KV cache (the index's default tier, "gpu"), MediumCPU the host
// memory a cache pushes prefixes out to.
const MediumCPU = "CPU"

// Event is one change of what a cache holds.
type Event struct {
	Kind   Kind
	Hashes []Hash
	Parent *Hash
	Tokens []int32
	Medium string
}

// appendBatch appends the msgpack encoding of an event batch as vLLM's
// KVEventBatch and llm-d's EventBatch decode it: an array of the time
// (seconds since the epoch, a float), the events, and the data-parallel
// rank (nil). Each event is a tagged union, an array led by its kind's
// name:
//
//	["BlockStored", hashes, parent hash or nil, token ids, block size, LoRA id (nil), medium or nil]
//	["BlockRemoved", hashes, medium or nil]
//	["AllBlocksCleared"]
//
// A hash is a 32-byte binary; llm-d keys its index by its last 8 bytes.
// With omitTokens a BlockStored event's token ids are an empty array:
// the field stays, as llm-d's decoder reads it.
func appendBatch(b []byte, at time.Time, events []Event, omitTokens bool) []byte {
	b = mpArray(b, 3)
	b = append(b, 0xcb) // float64
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(float64(at.UnixNano())/1e9))
	b = mpArray(b, len(events))
	for _, e := range events {
		switch e.Kind {
		case Stored:
			b = mpArray(b, 7)
			b = mpString(b, "BlockStored")
			b = mpHashes(b, e.Hashes)
			if e.Parent == nil {
				b = append(b, 0xc0)
			} else {
				b = mpBin(b, e.Parent[:])
			}
			if omitTokens {
				b = mpArray(b, 0)
			} else {
				b = mpArray(b, len(e.Tokens))
				for _, t := range e.Tokens {
					b = mpUint(b, uint64(uint32(t)))
				}
			}
			b = mpUint(b, BlockSize)
			b = append(b, 0xc0) // no LoRA
			b = mpMedium(b, e.Medium)
		case Removed:
			b = mpArray(b, 3)
			b = mpString(b, "BlockRemoved")
			b = mpHashes(b, e.Hashes)
			b = mpMedium(b, e.Medium)
		default:
			b = mpArray(b, 1)
			b = mpString(b, "AllBlocksCleared")
		}
	}
	return append(b, 0xc0) // no data-parallel rank
}

func mpHashes(b []byte, hs []Hash) []byte {
	b = mpArray(b, len(hs))
	for _, h := range hs {
		b = mpBin(b, h[:])
	}
	return b
}

func mpMedium(b []byte, m string) []byte {
	if m == "" {
		return append(b, 0xc0)
	}
	return mpString(b, m)
}

// The msgpack heads used above, each in its shortest form.

func mpArray(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
	}
}

func mpString(b []byte, s string) []byte {
	if len(s) < 32 {
		return append(append(b, 0xa0|byte(len(s))), s...)
	}
	return append(append(b, 0xd9, byte(len(s))), s...) // the names here are short
}

func mpBin(b []byte, p []byte) []byte {
	return append(append(b, 0xc4, byte(len(p))), p...) // hashes: 32 bytes
}

func mpUint(b []byte, n uint64) []byte {
	switch {
	case n < 128:
		return append(b, byte(n))
	case n <= math.MaxUint8:
		return append(b, 0xcc, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(n))
	case n <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(n))
	default:
		return binary.BigEndian.AppendUint64(append(b, 0xcf), n)
	}
}
