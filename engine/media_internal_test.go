package engine

import (
	"crypto/sha256"
	"testing"

	"github.com/corral-llm/corral/llama"
)

// TestPlaceholderPositions: a list of tokens alone tells each cell's
// position, as llama.cpp keeps it. Text "a b", a 6 × 4 M-RoPE image (24
// cells over 6 positions, all of its cells on its first), text "c", a
// sound of 3 cells (a position each), text "d": the cells after the
// image are 18 positions behind their index.
func TestPlaceholderPositions(t *testing.T) {
	key := sha256.Sum256([]byte("image"))
	toks := []int32{1, 2}
	toks = placeholders(toks, key, 0, &llama.MediaChunk{Tokens: 24, Positions: 6, OnePosition: true})
	toks = append(toks, 3)
	toks = placeholders(toks, sha256.Sum256([]byte("sound")), 0, &llama.MediaChunk{Tokens: 3, Positions: 3, Audio: true})
	toks = append(toks, 4)
	if len(toks) != 31 {
		t.Fatalf("%d tokens; want 31", len(toks))
	}
	want := []int{0, 1} // each cell's position
	for range 24 {
		want = append(want, 2)
	}
	want = append(want, 8, 9, 10, 11, 12)
	for i, w := range want {
		if got := cellPos(toks, i); got != w {
			t.Errorf("cell %d (token %d) at %d; want %d", i, toks[i], got, w)
		}
	}
	for n, w := range map[int]int{0: 0, 2: 2, 26: 8, 27: 9, 30: 12, 31: 13} {
		if got := posAfter(toks, n); got != w {
			t.Errorf("after %d cells: position %d; want %d", n, got, w)
		}
	}
	if got := lastPos(toks); got != 12 {
		t.Errorf("last position %d; want 12", got)
	}
	if got := lastPos(toks[:10]); got != 2 {
		t.Errorf("last position within the image %d; want its first, 2", got)
	}
	sl := &slot{cache: toks, shift: shiftOf(toks)}
	if sl.nextPos() != 13 || sl.pos(26) != 8 || sl.pos(2) != 2 {
		t.Errorf("slot: next position %d, after 26 cells %d, after 2 %d; want 13, 8, 2", sl.nextPos(), sl.pos(26), sl.pos(2))
	}
	// The first cell still names the medium: another image of the same
	// shape starts with another token.
	other := placeholders(nil, sha256.Sum256([]byte("other")), 0, &llama.MediaChunk{Tokens: 24, Positions: 6, OnePosition: true})
	if other[0] == toks[2] || chunkShift(other[0]) != 18 || !onePosition(other[0]) || snapMedia(toks, 10) != 2 {
		t.Errorf("another image starts %d (this one %d), shift %d, one position %v; snap 10 → %d", other[0], toks[2], chunkShift(other[0]), onePosition(other[0]), snapMedia(toks, 10))
	}
}
