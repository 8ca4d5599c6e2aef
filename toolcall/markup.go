package toolcall

import (
	"strings"
	"unicode"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/wire"
)

// markupParser is the Parser of the formats that write one call per
// region of markup, a region opening at a marker anywhere in the answer:
// Qwen3-Coder's XML, harmony's tool messages, Mistral's NAME[ARGS]{...}.
// It owns what they share (content around the regions, markers held back
// while they may still be arriving, the whitespace before a region, ids,
// streaming, the limit of calls, a region cut off by the answer's end); a
// callScanner reads a region's own markup.
//
// A region that turns out not to be a call (scan says bad) is given back
// as content, unless something of its call was sent; text after a region
// is content again. A call cut off by the end of the answer is dropped,
// or stays as far as it was streamed.
type markupParser struct {
	sc    callScanner
	start []string // the markers that open a region
	max   int      // calls kept at most; 0: no limit
	// lead: the answer's start, after whitespace, may be a region without
	// a marker (its marker is ""), as formats that write their calls bare
	// or after a marker the prompt wrote have it; led: that is decided.
	lead, led bool

	buf   strings.Builder // the answer so far
	text  string          // buf's contents
	pos   int             // text[:pos] is decided
	space int             // text[space:pos] is whitespace held after content (-1: none)
	cut   bool

	trim   bool   // a region closed: the whitespace after it is not content
	inCall bool   // pos is inside a region, after its marker
	marker string // the marker that opened it
	from   int    // where the region, with the whitespace before it, begins
	sent   sentCall
	done   []wire.ToolCall
	starts []int // where each call's region began (see Spans)
	failed int   // where the first region that was not a call began; -1: none
}

// callScan is what a region's text says so far.
type callScan struct {
	name string // the function's name, once it is certain ("" before)
	// args is the text of the arguments (JSON) as far as it is certain:
	// each scan of the same region gives the one before's args or a
	// longer text that begins with it. Whole when complete.
	args     string
	complete bool // the call is whole
	closed   bool // the region ended: its text is end bytes long
	end      int
	// bad: the region is not a call; the marker and its first end bytes
	// are content, and the text after them is read again.
	bad bool
	// broken, with bad: a region without a marker (a bare one) was a
	// call that failed all the same, to be repaired as a marked one is
	// (see Regions.Failed); a bare region that is bad is otherwise text.
	broken bool
	// next, when the region closed with a complete call, opens another
	// region right after it (end), whose marker is next: the next call
	// of a list the region's call began. The scanner alone reads such a
	// marker; it is not in the text.
	next string
}

// callScanner reads one region's markup.
type callScanner interface {
	// scan reads s, a region's text after its marker, as far as it has
	// arrived; marker is the marker that opened it. At the answer's end
	// (end), an unclosed region's call may be complete by the format's
	// rules, unless the answer was cut off (cut).
	scan(marker, s string, end, cut bool) callScan
}

func newMarkupParser(sc callScanner, start []string, max int) *markupParser {
	return &markupParser{sc: sc, start: start, max: max, space: -1, failed: -1}
}

// leading makes the answer's start, after whitespace, a region with the
// marker "" (see markupParser.lead).
func (p *markupParser) leading() *markupParser {
	p.lead = true
	return p
}

// Push adds text to the answer and returns the pieces it decided.
func (p *markupParser) Push(text string) []wire.Delta {
	p.buf.WriteString(text)
	p.text = p.buf.String()
	return p.step(false)
}

// Finish ends the answer and returns the pieces still held.
func (p *markupParser) Finish() []wire.Delta { return p.step(true) }

// Cut marks the answer as cut off (see Parser.Cut).
func (p *markupParser) Cut() { p.cut = true }

// Calls are the complete calls parsed so far.
func (p *markupParser) Calls() []wire.ToolCall { return p.done }

// spans reports where the calls' regions and the first failed one
// began (see Spans). A leading region without a marker that is not a
// call is text, not a failed call.
func (p *markupParser) spans() ([]int, int) { return p.starts, p.failed }

func (p *markupParser) step(end bool) []wire.Delta {
	var out []wire.Delta
	for {
		var progressed bool
		if p.inCall {
			out, progressed = p.stepCall(out, end)
		} else {
			out, progressed = p.stepContent(out, end)
		}
		if !progressed {
			return out
		}
	}
}

// stepContent sends content up to the next region or up to what may
// still begin one; it reports whether a region opened.
func (p *markupParser) stepContent(out []wire.Delta, end bool) ([]wire.Delta, bool) {
	rest := p.text[p.pos:]
	if p.lead && !p.led {
		trimmed := strings.TrimLeftFunc(rest, unicode.IsSpace)
		if trimmed == "" && !end {
			return out, false
		}
		p.led = true
		if trimmed != "" {
			p.from, p.pos, p.space = p.pos, p.pos+len(rest)-len(trimmed), -1
			p.inCall, p.marker, p.sent = true, "", sentCall{}
			return out, true
		}
	}
	at, marker := -1, ""
	for _, m := range p.start {
		if i := strings.Index(rest, m); i >= 0 && (at < 0 || i < at) {
			at, marker = i, m
		}
	}
	if at >= 0 {
		at += p.pos
		out = p.content(out, at, false)
		p.from = p.pos
		if p.space >= 0 {
			p.from = p.space
		}
		p.pos, p.space = at+len(marker), -1
		p.inCall, p.marker, p.sent = true, marker, sentCall{}
		return out, true
	}
	upto := len(p.text) - heldBack(rest, p.start, end, p.cut)
	// Whitespace after the last call is not content.
	return p.content(out, upto, end && len(p.done) == 0), false
}

// content sends text[pos:upto] as content, holding back trailing
// whitespace unless flush: whitespace before a region is dropped, and so
// is whitespace after one.
func (p *markupParser) content(out []wire.Delta, upto int, flush bool) []wire.Delta {
	from := p.pos
	if p.space >= 0 {
		from = p.space
	}
	if p.trim {
		from = skipSpace(p.text[:upto], from)
	}
	s := p.text[from:upto]
	keep := s
	if !flush {
		keep = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	p.pos, p.space = upto, -1
	if len(keep) < len(s) {
		p.space = from + len(keep)
	}
	if keep == "" {
		return out
	}
	p.trim = false
	return append(out, wire.Delta{Content: &keep})
}

// stepCall sends what the region decides: the call's start and argument
// fragments, and once it closes the call. It reports whether the region
// ended.
func (p *markupParser) stepCall(out []wire.Delta, end bool) ([]wire.Delta, bool) {
	r := p.sc.scan(p.marker, p.text[p.pos:], end, p.cut)
	if r.bad {
		if r.broken && p.failed < 0 {
			p.failed = p.from
		}
		return p.fail(out, r.end), true
	}
	if end && !r.closed {
		if !r.complete {
			// Cut off: markup, streamed as far as it went, but no call.
			out = p.send(out, r)
			p.pos, p.inCall = len(p.text), false
			return out, true
		}
		r.closed, r.end = true, len(p.text)-p.pos
	}
	out = p.send(out, r)
	if !r.closed {
		return out, false
	}
	if !r.complete {
		return p.fail(out, 0), true
	}
	if p.keep() {
		c := wire.ToolCall{ID: p.sent.id, Type: "function", Function: wire.FunctionCall{Name: r.name, Arguments: r.args}}
		if c.Function.Arguments == "" {
			c.Function.Arguments = "{}"
		}
		if rest := c.Function.Arguments[min(p.sent.argsSent, len(c.Function.Arguments)):]; rest != "" {
			out = append(out, wire.Delta{ToolCalls: []wire.ToolCallDelta{{Index: len(p.done), Function: wire.FunctionCall{Arguments: rest}}}})
		}
		p.done = append(p.done, c)
		p.starts = append(p.starts, p.from)
	}
	p.pos += r.end
	if r.next != "" {
		p.from, p.marker, p.sent = p.pos, r.next, sentCall{}
		return out, true
	}
	p.inCall, p.trim = false, true
	return out, true
}

// keep reports whether the region's call is within the limit of calls.
func (p *markupParser) keep() bool { return p.max <= 0 || len(p.done) < p.max }

// send sends the new pieces of the region's call: its id and name once
// the name is certain, then what is new of its arguments.
func (p *markupParser) send(out []wire.Delta, r callScan) []wire.Delta {
	if r.name == "" || !p.keep() {
		return out
	}
	s := &p.sent
	var piece wire.ToolCallDelta
	piece.Index = len(p.done)
	if !s.named {
		s.id, s.named = newCallID(), true
		piece.ID, piece.Type, piece.Function.Name = s.id, "function", r.name
	}
	if len(r.args) > s.argsSent && !(r.closed && r.complete) {
		piece.Function.Arguments = r.args[s.argsSent:]
		s.argsSent = len(r.args)
	}
	if piece.ID == "" && piece.Function.Arguments == "" {
		return out
	}
	return append(out, wire.Delta{ToolCalls: []wire.ToolCallDelta{piece}})
}

// fail gives the region's marker and the first n bytes of its text back
// as content, when nothing of its call was sent, and reads on after them;
// a region whose call was sent in part is dropped.
func (p *markupParser) fail(out []wire.Delta, n int) []wire.Delta {
	p.inCall = false
	if p.failed < 0 && p.marker != "" {
		p.failed = p.from
	}
	if p.sent.named {
		p.pos = len(p.text)
		return out
	}
	text := p.text[p.from : p.pos+n]
	p.pos += n
	if text == "" {
		return out
	}
	return append(out, wire.Delta{Content: &text})
}

// firstCall reads what opens a region at a list's opening marker: past
// whitespace, the marker of the list's first call, call. It returns the
// index after it, readMore while it may still be arriving, or readBad
// when the region holds something else.
func firstCall(s, call string) (next, state int) {
	i := skipSpace(s, 0)
	switch rest := s[i:]; {
	case strings.HasPrefix(rest, call):
		return i + len(call), readDone
	case strings.HasPrefix(call, rest):
		return 0, readMore
	}
	return 0, readBad
}

// closeCall ends a region at s[i:], after its call's arguments (past
// whitespace): with the call's end marker callEnd, and the list's end
// marker listEnd when it follows (see closeList). Without callEnd (a
// stop string took it, or the model wrote on) the call ends with its
// arguments, and what follows is content.
func closeCall(s string, i int, callEnd, listEnd string, end bool, r callScan) callScan {
	rest := s[i:]
	switch {
	case strings.HasPrefix(rest, callEnd):
		return closeList(s, i+len(callEnd), end, r, listEnd)
	case strings.HasPrefix(callEnd, rest) && !end:
		return r
	case end && (rest == "" || strings.HasPrefix(callEnd, rest)):
		r.closed, r.end = true, len(s)
	default:
		r.closed, r.end = true, i
	}
	return r
}

// closeList ends a region at s[i:], after its call, with the end marker
// of the list of calls (one of ends) when it follows, past whitespace.
// While the marker may be arriving the region stays open, and at the
// answer's end its first characters are the marker cut off, part of the
// region; without it the region ends at the call's end (a stop string
// took the marker, or another call follows).
func closeList(s string, i int, end bool, r callScan, ends ...string) callScan {
	i = skipSpace(s, i)
	rest := s[i:]
	r.closed, r.end = true, i
	for _, e := range ends {
		switch {
		case strings.HasPrefix(rest, e):
			r.end = i + len(e)
		case strings.HasPrefix(e, rest):
			r.closed, r.end = end, len(s)
		}
	}
	return r
}

// closeWith ends a region at s[i:], after its call, with marker when it
// follows, past whitespace. While the marker may be arriving the region
// stays open; otherwise, and at the answer's end, it ends at the call's
// end, past whitespace, and what follows is not the region's.
func closeWith(s string, i int, marker string, end bool, r callScan) callScan {
	i = skipSpace(s, i)
	switch rest := s[i:]; {
	case strings.HasPrefix(rest, marker):
		r.closed, r.end = true, i+len(marker)
	case strings.HasPrefix(marker, rest) && !end:
		// the marker may be arriving
	default:
		r.closed, r.end = true, i
	}
	return r
}

// callList returns the grammar of an answer of calls, each one of calls:
// one call, or one or more when parallel, between the tags open and
// close of their list ("" where the calls stand alone).
func callList(b *grammar.Builder, calls []grammar.Expr, parallel bool, open, close string) (string, error) {
	call := b.Rule("call", grammar.Alt(calls...))
	if parallel {
		call = grammar.Repeat(call, 1, -1)
	}
	return b.Grammar(grammar.Seq(grammar.Lit(open), call, grammar.Lit(close)))
}
