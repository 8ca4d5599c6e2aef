package chat

import (
	"crypto/rand"
	"encoding/json"
	"regexp"
	"strings"
	"unicode"

	"github.com/corral-llm/corral/openai/wire"
)

// ToolParser splits a model's answer, as it arrives, into content and the
// tool calls written in one format. Push gives the pieces that are
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
// A ToolParser belongs to one goroutine.
type ToolParser struct {
	sx  syntax
	max int // calls kept at most; 0: no limit

	text  string // the whole answer so far
	pos   int    // text[:pos] is decided
	space int    // text[space:pos] is whitespace held after content (-1: none)
	said  bool   // non-space content was sent: a bare call can no longer open

	cut    bool   // the answer was cut off (see Cut)
	calls  bool   // pos is inside a calls region
	marker string // the marker that opened the region ("" when bare)
	from   int    // where the region's text, with the whitespace before it, begins
	sent   []sentCall
	done   []wire.ToolCall // complete calls, in order
}

// sentCall is what was sent of the call at one index of the region.
type sentCall struct {
	id       string
	named    bool
	argsSent int // bytes of the raw arguments sent
}

// NewToolParser returns a parser for answers in format f that keeps at
// most max calls (0: all of them; 1 when parallel calls are off).
func NewToolParser(f ToolFormat, max int) *ToolParser {
	return &ToolParser{sx: f.syntax(), max: max, space: -1}
}

// Push adds text to the answer and returns the pieces it decided.
func (p *ToolParser) Push(text string) []wire.Delta {
	p.text += text
	return p.step(false)
}

// Finish ends the answer and returns the pieces still held.
func (p *ToolParser) Finish() []wire.Delta {
	return p.step(true)
}

// Cut marks the answer as cut off (max_tokens, the end of the context):
// at Finish, the first characters of a marker at its end are markup that
// broke off, dropped rather than given as content.
func (p *ToolParser) Cut() { p.cut = true }

// Calls are the complete calls parsed so far.
func (p *ToolParser) Calls() []wire.ToolCall { return p.done }

// ParseToolCalls splits a whole answer in format f into its content and
// calls, as a ToolParser fed the same text in pieces would (except that a
// call cut off by the answer's end is not among the calls here, where
// nothing of it was sent). cut says the answer was cut off (see Cut).
func ParseToolCalls(f ToolFormat, text string, max int, cut bool) (content string, calls []wire.ToolCall) {
	p := NewToolParser(f, max)
	p.text, p.cut = text, cut
	var b strings.Builder
	for _, d := range p.Finish() {
		b.WriteString(d.Text())
	}
	return b.String(), p.Calls()
}

// step decides as much of the text as it can; at the end, all of it.
func (p *ToolParser) step(end bool) []wire.Delta {
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
func (p *ToolParser) stepContent(out []wire.Delta, end bool) ([]wire.Delta, bool) {
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
	upto := len(p.text)
	if !end || p.cut {
		upto -= heldPrefix(rest, p.sx.start)
	}
	// Whitespace after the last call is not content.
	return p.content(out, upto, end && len(p.done) == 0), false
}

// atMarker reports whether s begins with a marker, or may as more text
// arrives.
func (p *ToolParser) atMarker(s string) bool {
	for _, m := range p.sx.start {
		if strings.HasPrefix(s, m) || strings.HasPrefix(m, s) {
			return true
		}
	}
	return false
}

// content sends text[pos:upto] as content, holding back trailing
// whitespace unless flush: whitespace before a call region is dropped.
func (p *ToolParser) content(out []wire.Delta, upto int, flush bool) []wire.Delta {
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
func (p *ToolParser) open(from, at int, marker string) {
	p.from, p.pos, p.space = from, at, -1
	p.calls, p.marker = true, marker
	p.sent = nil
}

// stepCalls sends what the region decides: call starts and argument
// fragments, and at the region's end the text after it goes back to
// content. It reports whether the region ended.
func (p *ToolParser) stepCalls(out []wire.Delta, end bool) ([]wire.Delta, bool) {
	r := scanRegion(p.text[p.pos:], p.marker == "<tool_call>")
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
		calls, ok := o.call()
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
		}
	}
	p.pos += r.end
	p.calls = false
	p.said = true
	return out, true
}

// keep reports whether the call at index i of the current region is
// within the limit of calls.
func (p *ToolParser) keep(i int) bool {
	return p.max <= 0 || len(p.done)+i < p.max
}

// sendCall sends the new pieces of the call at index i of the region.
func (p *ToolParser) sendCall(out []wire.Delta, i int, o object) []wire.Delta {
	for len(p.sent) <= i {
		p.sent = append(p.sent, sentCall{})
	}
	if !p.keep(i) {
		return out
	}
	s := &p.sent[i]
	index := len(p.done) + i
	var piece wire.ToolCallDelta
	name, args, streamable := o.head()
	if !s.named {
		if !streamable && !o.complete {
			return out
		}
		if !streamable {
			// Complete, but not in the name-then-arguments order: send it whole.
			calls, ok := o.call()
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
func (p *ToolParser) fail(out []wire.Delta) []wire.Delta {
	p.calls = false
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

// heldPrefix is the length of the longest suffix of s that begins one of
// markers: text that cannot be sent until more arrives.
func heldPrefix(s string, markers []string) int {
	held := 0
	for _, m := range markers {
		for n := min(len(m)-1, len(s)); n > held; n-- {
			if strings.HasSuffix(s, m[:n]) {
				held = n
				break
			}
		}
	}
	return held
}

// region is one scan of a call region's text.
type region struct {
	objs   []object
	closed bool // the region ended at end: what follows is content
	end    int
	bad    bool // the text is not a call region
}

// complete reports whether every object of the region is complete (so the
// answer's end may close it).
func (r region) complete() bool {
	return len(r.objs) > 0 && r.objs[len(r.objs)-1].complete
}

// scanRegion reads call objects: a list in [...] or objects separated by
// whitespace, ',' or ';'; a Hermes region (tagged) ends with
// </tool_call>. It is run again over the whole region as text arrives.
func scanRegion(s string, tagged bool) region {
	var r region
	i := skipSpace(s, 0)
	list := i < len(s) && s[i] == '['
	if list {
		i++
	}
	for {
		i = skipSpace(s, i)
		if i == len(s) {
			return r
		}
		if list && s[i] == ']' {
			r.closed, r.end = true, i+1
			if tagged {
				return closeTag(s, i+1, r)
			}
			return r
		}
		if s[i] != '{' {
			r.bad = len(r.objs) == 0 || list || tagged
			r.closed, r.end = true, i
			return r
		}
		e, ok := valueEnd(s, i)
		r.objs = append(r.objs, object{text: s[i:e], complete: ok})
		if !ok {
			return r
		}
		i = skipSpace(s, e)
		if i < len(s) && (s[i] == ',' || s[i] == ';') {
			i++
			continue
		}
		if i == len(s) {
			return r
		}
		if tagged && !list {
			return closeTag(s, i, r)
		}
		if !list {
			r.closed, r.end = true, i
			return r
		}
	}
}

// closeTag expects </tool_call> at s[i:].
func closeTag(s string, i int, r region) region {
	const tag = "</tool_call>"
	i = skipSpace(s, i)
	switch rest := s[i:]; {
	case strings.HasPrefix(rest, tag):
		r.closed, r.end = true, i+len(tag)
	case strings.HasPrefix(tag, rest):
		r.closed = false // wait for the rest of the tag
	default:
		r.bad = true
	}
	return r
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// valueEnd finds the end of the JSON value at s[i:], and whether it is
// complete; an incomplete value runs to the end of s.
func valueEnd(s string, i int) (int, bool) {
	depth, inStr, esc := 0, false, false
	for j := i; j < len(s); j++ {
		c := s[j]
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
				if depth == 0 {
					return j + 1, true
				}
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth <= 0 {
				return j + 1, true
			}
		case ' ', '\t', '\r', '\n', ',', ';':
			if depth == 0 {
				return j, j > i
			}
		}
	}
	return len(s), false
}

// object is the text of one call object, complete or not yet.
type object struct {
	text     string
	complete bool
}

// callHead matches a call object's start when it names the function
// before its arguments.
var callHead = regexp.MustCompile(`^\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"(?:arguments|parameters)"\s*:\s*`)

// head returns the function's name and the raw arguments written so far,
// with streamable true when the object names the function before
// arguments that are an object or an array (so they can be sent as they
// arrive).
func (o object) head() (name, args string, streamable bool) {
	m := callHead.FindStringSubmatchIndex(o.text)
	if m == nil {
		return "", "", false
	}
	if json.Unmarshal([]byte(o.text[m[2]:m[3]]), &name) != nil {
		return "", "", false
	}
	rest := o.text[m[1]:]
	if rest == "" || (rest[0] != '{' && rest[0] != '[') {
		return "", "", false
	}
	e, _ := valueEnd(rest, 0)
	return name, rest[:e], true
}

// call decodes a complete object into its calls: {"name", "arguments"}
// (or "parameters"), OpenAI's {"function": {"name", "arguments"}}, or
// {"tool_calls": [...]} of either. Arguments keep the model's JSON text;
// arguments written as a string are decoded; absent ones are "{}".
func (o object) call() ([]wire.ToolCall, bool) {
	if !o.complete {
		return nil, false
	}
	var v struct {
		Name       string          `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
		Function   *struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
		ToolCalls []json.RawMessage `json:"tool_calls"`
	}
	if json.Unmarshal([]byte(o.text), &v) != nil {
		return nil, false
	}
	if v.ToolCalls != nil && v.Name == "" && v.Function == nil {
		var calls []wire.ToolCall
		for _, raw := range v.ToolCalls {
			c, ok := object{text: string(raw), complete: true}.call()
			if !ok {
				return nil, false
			}
			calls = append(calls, c...)
		}
		return calls, len(calls) > 0
	}
	name, args := v.Name, v.Arguments
	if args == nil {
		args = v.Parameters
	}
	if v.Function != nil {
		name, args = v.Function.Name, v.Function.Arguments
	}
	if name == "" {
		return nil, false
	}
	text := string(args)
	var s string
	switch {
	case args == nil || string(args) == "null":
		text = "{}"
	case json.Unmarshal(args, &s) == nil:
		text = s
	}
	return []wire.ToolCall{{Type: "function", Function: wire.FunctionCall{Name: name, Arguments: text}}}, true
}

// newCallID returns a call id in OpenAI's form: "call_" and 24 letters
// and digits.
func newCallID() string {
	const chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 24)
	rand.Read(b)
	for i := range b {
		b[i] = chars[int(b[i])%len(chars)]
	}
	return "call_" + string(b)
}
