package toolcall

import (
	"strings"

	"github.com/corral-llm/corral/wire"
)

// dropParser is a Parser that takes markup out of the answer before its
// parser reads it: the framing some families write around their text
// (Command R7B's <|START_RESPONSE|>, functionary's >>>all), which is
// neither content nor a call. A string of drop goes wherever it is; one
// of lead only at the answer's start. Text that may still be the start
// of one is held back until it is decided; at the end of an answer that
// was cut off, such a piece is markup that broke off, and dropped.
type dropParser struct {
	Parser
	drop, lead []string

	pending string // text not passed on yet
	started bool   // the answer's start is decided
	cut     bool
	// passed counts the bytes passed on to Parser; drops are where
	// markup was taken out, in Parser's offsets, for spans.
	passed int
	drops  []drop
}

// drop is markup of n bytes taken out where Parser's text reached at.
type drop struct{ at, n int }

// dropping wraps p so that drop and lead (see dropParser) are taken out
// of the answer.
func dropping(p Parser, drop, lead []string) Parser {
	return &dropParser{Parser: p, drop: drop, lead: lead}
}

// Push adds text to the answer and returns the pieces it decided.
func (d *dropParser) Push(text string) []wire.Delta {
	d.pending += text
	return d.Parser.Push(d.take(false))
}

// Finish ends the answer and returns the pieces still held.
func (d *dropParser) Finish() []wire.Delta {
	out := d.Parser.Push(d.take(true))
	return append(out, d.Parser.Finish()...)
}

// Cut marks the answer as cut off (see Parser.Cut).
func (d *dropParser) Cut() {
	d.cut = true
	d.Parser.Cut()
}

// take returns the pending text that is decided, less the markup; at the
// end, all of it.
func (d *dropParser) take(end bool) string {
	if !d.started {
		for _, l := range d.lead {
			if strings.HasPrefix(d.pending, l) {
				d.pending = d.pending[len(l):]
				d.drops = append(d.drops, drop{d.passed, len(l)})
				break
			}
			if strings.HasPrefix(l, d.pending) && !end {
				return "" // the lead may be arriving
			}
		}
		d.started = true
	}
	var b strings.Builder
	for {
		at, marker := -1, ""
		for _, m := range d.drop {
			if i := strings.Index(d.pending, m); i >= 0 && (at < 0 || i < at) {
				at, marker = i, m
			}
		}
		if at < 0 {
			break
		}
		b.WriteString(d.pending[:at])
		d.pending = d.pending[at+len(marker):]
		d.drops = append(d.drops, drop{d.passed + b.Len(), len(marker)})
	}
	n := len(d.pending)
	if !end || d.cut {
		n -= heldPrefix(d.pending, d.drop)
	}
	b.WriteString(d.pending[:n])
	d.pending = d.pending[n:]
	if end {
		d.pending = ""
	}
	d.passed += b.Len()
	return b.String()
}

// spans are Parser's (see Spans), in the answer's offsets: each past the
// markup taken out before it, and at its own offset.
func (d *dropParser) spans() ([]int, int) {
	sp, ok := d.Parser.(interface{ spans() ([]int, int) })
	if !ok {
		return nil, -1
	}
	starts, failed := sp.spans()
	out := make([]int, len(starts))
	for i, at := range starts {
		out[i] = d.outer(at)
	}
	if failed >= 0 {
		failed = d.outer(failed)
	}
	return out, failed
}

// outer is Parser's offset at in the answer's offsets.
func (d *dropParser) outer(at int) int {
	n := at
	for _, x := range d.drops {
		if x.at > at {
			break
		}
		n += x.n
	}
	return n
}
