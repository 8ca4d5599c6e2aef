package kvevents

import (
	"bytes"
	"slices"
)

// state is what a topic's batches say is held: each block, by medium and
// hash, with its parent and tokens. The Publisher's encoder keeps it, so
// that it can restate a topic to a subscriber that joins without asking
// its publisher (an engine's scheduler) for anything.
type state struct {
	media map[string]map[Hash]heldBlock
}

type heldBlock struct {
	parent    Hash
	hasParent bool
	tokens    [BlockSize]int32
}

func newState() *state { return &state{media: make(map[string]map[Hash]heldBlock)} }

// apply follows a batch.
func (st *state) apply(events []Event) {
	for _, e := range events {
		switch e.Kind {
		case Stored:
			m := st.media[e.Medium]
			if m == nil {
				m = make(map[Hash]heldBlock)
				st.media[e.Medium] = m
			}
			var b heldBlock
			if e.Parent != nil {
				b.parent, b.hasParent = *e.Parent, true
			}
			for i, h := range e.Hashes {
				if i > 0 {
					b.parent, b.hasParent = e.Hashes[i-1], true
				}
				b.tokens = [BlockSize]int32{}
				if (i+1)*BlockSize <= len(e.Tokens) {
					copy(b.tokens[:], e.Tokens[i*BlockSize:])
				}
				m[h] = b
			}
		case Removed:
			m := st.media[e.Medium]
			for _, h := range e.Hashes {
				delete(m, h)
			}
		case Cleared:
			clear(st.media)
		}
	}
}

// events tells the whole state as BlockStored events: each medium's
// blocks in chains, a block after its parent, a chain that branches off
// another naming its parent, as the batches told them; without tokens
// when omitTokens.
func (st *state) events(omitTokens bool) []Event {
	media := make([]string, 0, len(st.media))
	for m := range st.media {
		media = append(media, m)
	}
	slices.Sort(media) // "" (the engine's cache) first
	var out []Event
	for _, medium := range media {
		blocks := st.media[medium]
		children := make(map[Hash][]Hash)
		var roots []Hash
		for h, b := range blocks {
			if _, ok := blocks[b.parent]; b.hasParent && ok {
				children[b.parent] = append(children[b.parent], h)
			} else {
				roots = append(roots, h)
			}
		}
		byHash := func(a, b Hash) int { return bytes.Compare(a[:], b[:]) }
		slices.SortFunc(roots, byHash)
		stack := slices.Clone(roots)
		slices.Reverse(stack)
		for len(stack) > 0 {
			h := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			b := blocks[h]
			if n := len(out); n > 0 && b.hasParent && out[n-1].Medium == medium && out[n-1].Hashes[len(out[n-1].Hashes)-1] == b.parent {
				out[n-1].Hashes = append(out[n-1].Hashes, h)
				if !omitTokens {
					out[n-1].Tokens = append(out[n-1].Tokens, b.tokens[:]...)
				}
			} else {
				e := Event{Kind: Stored, Hashes: []Hash{h}, Medium: medium}
				if b.hasParent {
					parent := b.parent
					e.Parent = &parent
				}
				if !omitTokens {
					e.Tokens = slices.Clone(b.tokens[:])
				}
				out = append(out, e)
			}
			kids := children[h]
			slices.SortFunc(kids, byHash)
			for i := len(kids) - 1; i >= 0; i-- {
				stack = append(stack, kids[i])
			}
		}
	}
	return out
}
