package engine

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/corral-llm/corral/llama"
)

// checkMarkup bounds what a request says about the model's markup
// (Request.ShowTokens and Request.Reasoning) before any work, and checks
// its tokens are in a vocabulary of n tokens.
func checkMarkup(req *Request, n int) error {
	inVocab := func(toks []int32) error {
		for _, t := range toks {
			if t < 0 || int(t) >= n {
				return fmt.Errorf("%w: token %d out of range [0,%d)", ErrBadReasoning, t, n)
			}
		}
		return nil
	}
	if len(req.ShowTokens) > MaxMarker {
		return fmt.Errorf("%w: %d tokens to show, at most %d", ErrBadReasoning, len(req.ShowTokens), MaxMarker)
	}
	if err := inVocab(req.ShowTokens); err != nil {
		return err
	}
	r := req.Reasoning
	if r == nil {
		return nil
	}
	switch {
	case r.End == "" || len(r.End) > MaxMarker || len(r.Start) > MaxMarker:
		return fmt.Errorf("%w: markers of %d and %d bytes, want 1 to %d", ErrBadReasoning, len(r.Start), len(r.End), MaxMarker)
	case !r.Open && r.Start == "":
		return fmt.Errorf("%w: no start marker", ErrBadReasoning)
	case r.Budget < 0 && len(r.Close) > MaxMarker:
		return fmt.Errorf("%w: %d closing tokens, want at most %d", ErrBadReasoning, len(r.Close), MaxMarker)
	case r.Budget >= 0 && (len(r.Close) == 0 || len(r.Close) > MaxMarker):
		return fmt.Errorf("%w: %d closing tokens, want 1 to %d", ErrBadReasoning, len(r.Close), MaxMarker)
	}
	return inVocab(r.Close)
}

// budget tracks a request's reasoning (Request.Reasoning) as the
// scheduler generates it: whether it is open, how many tokens it took,
// and the closing tokens still to write.
type budget struct {
	r       *Reasoning
	open    bool
	used    int     // tokens generated while it was open
	counted int     // the reasoning's tokens, its markers' included (Usage.ReasoningTokens)
	tail    []byte  // the end of the output, where a marker may be arriving
	forcing []int32 // Close's tokens still to write
	refused bool    // the grammar refused Close: the budget no longer applies
}

// bounds reports whether b bounds the reasoning (a Budget), rather than
// only counting it; false for nil.
func (b *budget) bounds() bool { return b != nil && b.r.Budget >= 0 }

// tokens is the count of the reasoning's tokens; 0 for nil.
func (b *budget) tokens() int {
	if b == nil {
		return 0
	}
	return b.counted
}

func newBudget(r *Reasoning) *budget { return &budget{r: r, open: r.Open} }

// next returns the token to write for the model at this step instead of
// sampling one: Close's next token, once the budget is spent with the
// reasoning open. sm accepts it as if sampled. A grammar that does not
// allow it ends the forcing, and the step samples.
func (b *budget) next(sm *llama.Sampler) (llama.Token, bool, error) {
	if !b.bounds() || b.refused {
		return 0, false, nil
	}
	if len(b.forcing) == 0 {
		if !b.open || b.used < b.r.Budget {
			return 0, false, nil
		}
		b.forcing = slices.Clone(b.r.Close)
	}
	tok := b.forcing[0]
	switch err := sm.Accept(tok); {
	case errors.Is(err, llama.ErrNotAllowed):
		// Within a character (the output ended in the first bytes of
		// one) a grammar takes only its next bytes: try again after it.
		b.refused, b.forcing = !midRune(b.tail), nil
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	b.forcing = b.forcing[1:]
	return tok, true, nil
}

// midRune reports whether p ends inside a UTF-8 character: the first
// bytes of one, waiting for the rest.
func midRune(p []byte) bool {
	for i := len(p) - 1; i >= 0 && i >= len(p)-utf8.UTFMax; i-- {
		if utf8.RuneStart(p[i]) {
			return !utf8.FullRune(p[i:])
		}
	}
	return false
}

// see records a generated token whose output is piece.
func (b *budget) see(piece []byte) {
	if b == nil {
		return
	}
	in := b.open // the token is the reasoning's: written inside it, or opening it
	if b.open {
		b.used++
	}
	b.tail = append(b.tail, piece...)
	for {
		marker := b.r.End
		if !b.open {
			marker = b.r.Start
		}
		i := bytes.Index(b.tail, []byte(marker))
		if marker == "" || i < 0 {
			break
		}
		b.open = !b.open
		in = in || b.open
		b.tail = b.tail[i+len(marker):]
	}
	if in {
		b.counted++
	}
	// Keep what may be the first bytes of a marker.
	if keep := max(len(b.r.Start), len(b.r.End)) - 1; len(b.tail) > keep {
		b.tail = append(b.tail[:0], b.tail[len(b.tail)-keep:]...)
	}
}
