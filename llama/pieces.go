package llama

/*
#include "shim.h"
*/
import "C"

import (
	"slices"
	"sort"
	"strings"
)

// maxPieceMatch bounds the length of the token texts Pieces.Split and
// Pieces.Reach look up: longer ones (runs of spaces in code vocabularies)
// are not worth a lookup per byte of text.
const maxPieceMatch = 64

// Pieces indexes a vocabulary's tokens by their text, as a grammar sees
// them (control tokens by their text too), end-of-generation tokens and
// tokens without text left out. Build it with Model.Pieces; it is
// read-only afterwards and safe for concurrent use.
type Pieces struct {
	// byText maps a text to its preferred token: a normal or
	// user-defined one over a control token, over a byte token, over an
	// unknown or unused one (the lowest id among equals), the token a
	// tokenizer would produce.
	byText map[string]Token
	// sorted holds every text, for prefix queries.
	sorted []string
	maxLen int // the longest text in byText
}

// Pieces returns the model's piece index, built on the first call (a
// pass over the vocabulary).
func (m *Model) Pieces() *Pieces {
	m.piecesOnce.Do(m.buildPieces)
	return m.pieces
}

func (m *Model) buildPieces() {
	n := m.NVocab()
	p := &Pieces{byText: make(map[string]Token, n)}
	rank := make(map[string]int, n)
	var buf []byte
	for id := range Token(n) {
		if m.IsEOG(id) {
			continue
		}
		buf = m.AppendPiece(buf[:0], id, true)
		// llama.cpp's grammar never accepts a token without text (or
		// starting with a NUL byte).
		if len(buf) == 0 || buf[0] == 0 {
			continue
		}
		attr := C.llama_vocab_get_attr(m.vocab, C.llama_token(id))
		r := 3
		switch {
		case attr&(C.LLAMA_TOKEN_ATTR_NORMAL|C.LLAMA_TOKEN_ATTR_USER_DEFINED) != 0:
			r = 0
		case attr&C.LLAMA_TOKEN_ATTR_CONTROL != 0:
			r = 1
		case attr&C.LLAMA_TOKEN_ATTR_BYTE != 0:
			r = 2
		}
		text := string(buf)
		if old, ok := rank[text]; ok && old <= r {
			continue
		}
		if _, ok := rank[text]; !ok {
			p.sorted = append(p.sorted, text)
		}
		rank[text] = r
		p.byText[text] = id
		p.maxLen = max(p.maxLen, len(text))
	}
	slices.Sort(p.sorted)
	m.pieces = p
}

// Split cuts text into tokens from the left, each the token with the
// longest text that text continues with, appending them to dst; it stops
// after max tokens or where no token's text matches. It returns the
// tokens and the bytes of text they cover. It is a guess at how a model
// writes text it must write (a tokenizer's merges may split it another
// way), cheap enough to make at every step.
func (p *Pieces) Split(text []byte, max int, dst []Token) ([]Token, int) {
	pos := 0
	for added := 0; pos < len(text) && added < max; added++ {
		l := min(p.maxLen, maxPieceMatch, len(text)-pos)
		var tok Token
		for ; l > 0; l-- {
			var ok bool
			if tok, ok = p.byText[string(text[pos:pos+l])]; ok {
				break
			}
		}
		if l == 0 {
			break
		}
		dst = append(dst, tok)
		pos += l
	}
	return dst, pos
}

// Reach reports how much of text some sequence of the vocabulary's
// tokens can write: len(text) when one can write all of it (its last
// token may go on beyond it), else the longest prefix some sequence of
// tokens writes exactly, after which no token's text continues text.
func (p *Pieces) Reach(text []byte) int {
	s := string(text)
	reach := make([]bool, len(s)+1)
	reach[0] = true
	best := 0
	for pos := 0; pos < len(s); pos++ {
		if !reach[pos] {
			continue
		}
		best = pos
		rest := s[pos:]
		if i := sort.SearchStrings(p.sorted, rest); i < len(p.sorted) && strings.HasPrefix(p.sorted[i], rest) {
			return len(s) // a token writes the rest, and maybe more
		}
		for l := 1; l <= min(p.maxLen, len(rest)); l++ {
			if _, ok := p.byText[rest[:l]]; ok {
				reach[pos+l] = true
			}
		}
	}
	if reach[len(s)] {
		return len(s)
	}
	return best
}
