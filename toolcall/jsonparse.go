package toolcall

import (
	"strings"
	"unicode"

	"github.com/corral-llm/corral/wire"
)

// jsonParser is the Parser of the formats that write each call as a JSON
// object ({"name": ..., "arguments": {...}}) after a marker, in a list or
// alone (hermes, llama3, mistral, json): it splits a model's answer, as it
// arrives, into content and the calls. Push gives the pieces that are
// certain so far, in OpenAI's streaming shape: content text, and for each
// call its index, id and name first, then fragments of its arguments.
// Text that may still turn out to be call markup (a marker's first
// characters, the whitespace before a call) is held back until it is
// decided, so the markup never leaks into the content.
//
// Arguments are passed on as the model wrote them (the JSON text of an
// object), fragment by fragment while the call is written when the call
// object names the function before its arguments, whole when it is
// complete otherwise. Arguments written as a JSON string are decoded.
//
// Markup around something that is not a call is given back as content,
// if none of its calls has been sent yet. A call cut off by the end of the
// answer is dropped, or stays as far as it was streamed; the answer's
// finish reason ("length") says it was cut. (An answer that merely begins
// with '{' in a format without a marker is content when it is not a
// complete call.)
//
// A jsonParser belongs to one goroutine.
type jsonParser struct {
	sx  syntax
	max int // calls kept at most; 0: no limit

	buf   strings.Builder // the answer so far, appended to (no copy per piece)
	text  string          // buf's contents
	pos   int             // text[:pos] is decided
	space int             // text[space:pos] is whitespace held after content (-1: none)
	said  bool            // non-space content was sent: a bare call can no longer open

	cut    bool   // the answer was cut off (see Cut)
	calls  bool   // pos is inside a calls region
	marker string // the marker that opened the region ("" when bare)
	from   int    // where the region's text, with the whitespace before it, begins
	sent   []sentCall
	done   []wire.ToolCall // complete calls, in order
	starts []int           // where each call's region began (see Spans)
	failed int             // where the first region that was not a call began; -1: none
}

// sentCall is what was sent of the call at one index of the region.
type sentCall struct {
	id       string
	named    bool
	argsSent int // bytes of the raw arguments sent
}

// newJSONParser returns a parser for answers in the markup sx that keeps
// at most max calls (0: all of them; 1 when parallel calls are off).
func newJSONParser(sx syntax, max int) *jsonParser {
	return &jsonParser{sx: sx, max: max, space: -1, failed: -1}
}

// Push adds text to the answer and returns the pieces it decided.
func (p *jsonParser) Push(text string) []wire.Delta {
	p.buf.WriteString(text)
	p.text = p.buf.String()
	return p.step(false)
}

// Finish ends the answer and returns the pieces still held.
func (p *jsonParser) Finish() []wire.Delta {
	return p.step(true)
}

// Cut marks the answer as cut off (max_tokens, the end of the context):
// at Finish, the first characters of a marker at its end are markup that
// broke off, dropped rather than given as content.
func (p *jsonParser) Cut() { p.cut = true }

// Calls are the complete calls parsed so far.
func (p *jsonParser) Calls() []wire.ToolCall { return p.done }

// spans reports where the calls' regions and the first failed one
// began (see Spans). A bare region that is not a call is text that
// begins with '{', not a failed call.
func (p *jsonParser) spans() ([]int, int) { return p.starts, p.failed }

// whole takes the whole answer at once: nothing of it is sent before
// Finish decides it all (see Parse).
func (p *jsonParser) whole(text string) []wire.Delta {
	p.buf.WriteString(text)
	p.text = p.buf.String()
	return nil
}

// step decides as much of the text as it can; at the end, all of it.
func (p *jsonParser) step(end bool) []wire.Delta {
	var out []wire.Delta
	for {
		var progressed bool
		if p.calls {
			out, progressed = p.stepCalls(out, end)
		} else {
			out, progressed = p.stepContent(out, end)
		}
		if !progressed {
			return out
		}
	}
}

// stepContent sends content up to the next call region or up to what may
// still begin one; it reports whether a region opened.
func (p *jsonParser) stepContent(out []wire.Delta, end bool) ([]wire.Delta, bool) {
	rest := p.text[p.pos:]
	// A bare call opens an answer that so far has only whitespace.
	if p.sx.bare && !p.said {
		trimmed := strings.TrimLeftFunc(rest, unicode.IsSpace)
		if trimmed == "" && !end {
			return out, false
		}
		if trimmed != "" && (trimmed[0] == '{' || trimmed[0] == '[') && !p.atMarker(trimmed) {
			p.open(p.pos, p.pos+len(rest)-len(trimmed), "")
			return out, true
		}
	}
	at, marker := -1, ""
	for _, m := range p.sx.start {
		if i := strings.Index(rest, m); i >= 0 && (at < 0 || i < at) {
			at, marker = i, m
		}
	}
	if at >= 0 {
		out = p.content(out, p.pos+at, false)
		from := p.pos
		if p.space >= 0 {
			from = p.space
		}
		p.open(from, p.pos+len(marker), marker)
		return out, true
	}
	upto := len(p.text) - heldBack(rest, p.sx.start, end, p.cut)
	// Whitespace after the last call is not content.
	return p.content(out, upto, end && len(p.done) == 0), false
}

// atMarker reports whether s begins with a marker, or may as more text
// arrives.
func (p *jsonParser) atMarker(s string) bool {
	for _, m := range p.sx.start {
		if strings.HasPrefix(s, m) || strings.HasPrefix(m, s) {
			return true
		}
	}
	return false
}

// content sends text[pos:upto] as content, holding back trailing
// whitespace unless flush: whitespace before a call region is dropped.
func (p *jsonParser) content(out []wire.Delta, upto int, flush bool) []wire.Delta {
	from := p.pos
	if p.space >= 0 {
		from = p.space
	}
	s := p.text[from:upto]
	keep := s
	if !flush {
		keep = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	p.pos = upto
	p.space = -1
	if len(keep) < len(s) {
		p.space = from + len(keep)
	}
	if keep == "" {
		return out
	}
	p.said = true
	return append(out, wire.Delta{Content: &keep})
}

// open starts a call region at text[at:], after marker; text[from:at]
// is the marker and the whitespace before it.
func (p *jsonParser) open(from, at int, marker string) {
	p.from, p.pos, p.space = from, at, -1
	p.calls, p.marker = true, marker
	p.sent = nil
}

// stepCalls sends what the region decides: call starts and argument
// fragments, and at the region's end the text after it goes back to
// content. It reports whether the region ended.
func (p *jsonParser) stepCalls(out []wire.Delta, end bool) ([]wire.Delta, bool) {
	tag := ""
	if p.marker != "" {
		tag = p.sx.end
	}
	r := scanRegion(p.text[p.pos:], tag)
	switch {
	case r.bad:
		return p.fail(out), true
	case end && !r.closed && !r.complete() && len(r.objs) > 1:
		// Cut off by the answer's end (max_tokens) within a call: the
		// calls before it stand.
		r.objs = r.objs[:len(r.objs)-1]
	case end && !r.closed && !r.complete() && p.marker != "":
		// Cut off within the first call: markup, but no call.
		p.pos, p.calls = len(p.text), false
		return out, true
	case end && !r.closed && !r.complete():
		// A bare region may be text that begins with '{'.
		return p.fail(out), true
	}
	for i, o := range r.objs {
		out = p.sendCall(out, i, o)
	}
	if !r.closed && !end {
		return out, false
	}
	if !r.closed {
		r.end = len(p.text) - p.pos // the answer ended the region
	}
	for i, o := range r.objs {
		calls, ok := p.call(o)
		if !ok {
			// Complete JSON that is not a call: the region was not one.
			return p.fail(out), true
		}
		for _, c := range calls {
			if p.max > 0 && len(p.done) >= p.max {
				break
			}
			if i < len(p.sent) && p.sent[i].named && len(calls) == 1 {
				c.ID = p.sent[i].id // streamed as it was written
			} else {
				c.ID = newCallID()
				out = append(out, wire.Delta{ToolCalls: []wire.ToolCallDelta{{Index: len(p.done), ID: c.ID, Type: "function", Function: c.Function}}})
			}
			p.done = append(p.done, c)
			p.starts = append(p.starts, p.from)
		}
	}
	p.pos += r.end
	p.calls = false
	p.said = true
	return out, true
}

// keep reports whether the call at index i of the current region is
// within the limit of calls.
func (p *jsonParser) keep(i int) bool {
	return p.max <= 0 || len(p.done)+i < p.max
}

// head is o's head in the format's syntax (see object.head).
func (p *jsonParser) head(o object) (name, args string, streamable bool) {
	if p.sx.keyed {
		return o.keyedHead()
	}
	return o.head()
}

// call decodes a complete object into its calls in the format's syntax
// (see object.call): a keyed object when the format writes those, else
// one of the usual shapes.
func (p *jsonParser) call(o object) ([]wire.ToolCall, bool) {
	if p.sx.keyed {
		if calls, ok := o.keyedCall(); ok {
			return calls, true
		}
	}
	return o.call()
}

// sendCall sends the new pieces of the call at index i of the region.
func (p *jsonParser) sendCall(out []wire.Delta, i int, o object) []wire.Delta {
	for len(p.sent) <= i {
		p.sent = append(p.sent, sentCall{})
	}
	if !p.keep(i) {
		return out
	}
	s := &p.sent[i]
	index := len(p.done) + i
	var piece wire.ToolCallDelta
	name, args, streamable := p.head(o)
	if !s.named {
		if !streamable && !o.complete {
			return out
		}
		if !streamable {
			// Complete, but not in the name-then-arguments order: send it whole.
			calls, ok := p.call(o)
			if !ok || len(calls) != 1 {
				return out // decided (or failed) when the region ends
			}
			name, args = calls[0].Function.Name, calls[0].Function.Arguments
		}
		s.id, s.named = newCallID(), true
		piece = wire.ToolCallDelta{Index: index, ID: s.id, Type: "function", Function: wire.FunctionCall{Name: name}}
	} else {
		piece = wire.ToolCallDelta{Index: index}
	}
	if !streamable && s.argsSent == 0 {
		piece.Function.Arguments = args
		s.argsSent = len(args)
	} else if len(args) > s.argsSent {
		piece.Function.Arguments = args[s.argsSent:]
		s.argsSent = len(args)
	}
	if piece.ID == "" && piece.Function.Arguments == "" {
		return out
	}
	return append(out, wire.Delta{ToolCalls: []wire.ToolCallDelta{piece}})
}

// fail gives the region back as content: its marker and text, if none of
// its calls was sent; otherwise it is dropped.
func (p *jsonParser) fail(out []wire.Delta) []wire.Delta {
	p.calls = false
	if p.failed < 0 && p.marker != "" {
		p.failed = p.from
	}
	sent := false
	for _, s := range p.sent {
		sent = sent || s.named
	}
	if sent {
		p.pos = len(p.text)
		return out
	}
	text := p.text[p.from:]
	p.pos = len(p.text)
	p.said = true
	return append(out, wire.Delta{Content: &text})
}
