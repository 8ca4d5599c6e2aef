package toolcall

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/wire"
)

// MiniMaxM1 is MiniMax-M1's format: the calls as JSON objects, one a
// line, in one <tool_calls> block after any text:
//
//	<tool_calls>
//	{"name": "get_weather", "arguments": {"city": "Paris"}}
//	{"name": "get_time", "arguments": {}}
//	</tool_calls>
//
// (MiniMax M2 writes XML: see MiniMaxM2.)
var MiniMaxM1 Format = &jsonFormat{
	name:    "minimax-m1",
	markers: []string{"<tool_calls>", "</tool_calls>"},
	sx: syntax{
		start: []string{"<tool_calls>"}, end: "</tool_calls>", argsKey: "arguments",
		frame: grammar.Frame{Open: "<tool_calls>\n", Close: "\n</tool_calls>", Sep: "\n"},
	},
}

// isMiniMaxM1 reports a template that writes calls in a <tool_calls>
// block one a line; Apriel's JSON list in the same tags (<tool_calls>[)
// is not MiniMax's.
func isMiniMaxM1(src string) bool {
	return strings.Contains(src, "<tool_calls>") && !strings.Contains(src, "<tool_calls>[")
}

// MiniMaxM2 is MiniMax M2's format: the calls in one
// <minimax:tool_call> block, each an <invoke> element with a <parameter>
// element per argument, its value as text:
//
//	<minimax:tool_call>
//	<invoke name="get_weather">
//	<parameter name="city">Paris</parameter>
//	<parameter name="days">3</parameter>
//	</invoke>
//	</minimax:tool_call>
//
// A value is typed by its parameter's schema, as Qwen3Coder's are: a
// string stays the text, anything else is read as JSON.
var MiniMaxM2 Format = minimaxFormat{}

// isMiniMaxM2 reports a template that writes <minimax:tool_call>.
func isMiniMaxM2(src string) bool { return strings.Contains(src, mmSection) }

// MiniMax M2's markup.
const (
	mmSection    = "<minimax:tool_call>"
	mmSectionEnd = "</minimax:tool_call>"
	mmInvoke     = `<invoke name="`
	mmInvokeEnd  = "</invoke>"
	mmParam      = `<parameter name="`
	mmParamEnd   = "</parameter>"
	mmMaxName    = 256 // a longer name is not markup
)

type minimaxFormat struct{}

// Name is the format's name.
func (minimaxFormat) Name() string { return "minimax-m2" }

// Markers are the block's tags, special tokens of MiniMax's vocabulary.
func (minimaxFormat) Markers() []string { return []string{mmSection, mmSectionEnd} }

// Parser returns a parser that types values by the tools' schemas.
func (minimaxFormat) Parser(tools []wire.Tool, max int) Parser {
	return newMarkupParser(&minimaxScanner{types: paramTypes(tools)}, []string{mmSection, mmInvoke}, max)
}

// minimaxScanner reads one <invoke> element, after the block's start
// tag or after the <invoke> of a block still open.
type minimaxScanner struct {
	types map[string]map[string][]string // tool → parameter → JSON types its schema allows
	invokeBlock
}

// invokeBlock is whether a block of <invoke> elements (MiniMax M2's, M3's)
// is open: then <invoke> begins a call.
type invokeBlock struct{ open bool }

func (m *minimaxScanner) scan(marker, s string, end, cut bool) callScan {
	var r callScan
	i := 0
	if marker == mmSection {
		var st int
		if i, st = firstCall(s, mmInvoke); st != readDone {
			r.bad = st == readBad
			return r
		}
	} else if !m.open {
		r.bad = true // an <invoke> outside a block is text
		return r
	}
	name, i, st := quotedName(s, i)
	if st != readDone {
		r.bad = st == readBad
		return r
	}
	r.name = name
	var args argsObject
	r.args = args.text()
	for {
		i = skipSpace(s, i)
		rest := s[i:]
		switch {
		case strings.HasPrefix(rest, mmInvokeEnd):
			r.args, r.complete = args.whole(), true
			return m.close(s, i+len(mmInvokeEnd), mmSectionEnd, end, r)
		case strings.HasPrefix(mmInvokeEnd, rest) || strings.HasPrefix(mmParam, rest):
			return r // a tag is arriving, or broke off
		case !strings.HasPrefix(rest, mmParam):
			r.bad = true
			return r
		}
		param, j, st := quotedName(s, i+len(mmParam))
		if st != readDone {
			r.bad = st == readBad
			return r
		}
		k := strings.Index(s[j:], mmParamEnd)
		if k < 0 {
			return r // the value is still arriving
		}
		r.args = args.add(param, typedValue(s[j:j+k], m.types[name][param]))
		i = j + k + len(mmParamEnd)
	}
}

// close ends a call at s[i:], after its </invoke>: with the block's end
// tag when it follows, which closes the block; without, the block stays
// open for the next <invoke>.
func (b *invokeBlock) close(s string, i int, sectionEnd string, end bool, r callScan) callScan {
	j := skipSpace(s, i)
	switch rest := s[j:]; {
	case strings.HasPrefix(rest, sectionEnd):
		r.closed, r.end = true, j+len(sectionEnd)
		b.open = false
	case strings.HasPrefix(sectionEnd, rest) && !end:
		// the end tag may be arriving
	default:
		r.closed, r.end = true, i
		b.open = true
	}
	return r
}

// quotedName reads NAME"> at s[i:], the rest of an element's name
// attribute, and returns the index after it.
func quotedName(s string, i int) (name string, next, state int) {
	q := strings.IndexByte(s[i:], '"')
	switch {
	case q < 0 && len(s)-i > mmMaxName:
		return "", 0, readBad
	case q < 0:
		return "", 0, readMore
	}
	name = s[i : i+q]
	if !validName(name, mmMaxName) {
		return "", 0, readBad
	}
	switch j := i + q + 1; {
	case j == len(s):
		return "", 0, readMore
	case s[j] != '>':
		return "", 0, readBad
	default:
		return name, j + 1, readDone
	}
}

// Grammar forces calls in MiniMax M2's markup, in one block: each tool's
// required parameters in the order of its schema, then its optional
// ones.
func (minimaxFormat) Grammar(tools []wire.Tool, parallel bool, lim grammar.SchemaLimits) (string, error) {
	if len(tools) == 0 {
		return "", fmt.Errorf("tool-call grammar: no tools")
	}
	b := grammar.NewBuilder(lim)
	types := paramTypes(tools)
	calls := make([]grammar.Expr, len(tools))
	for i, t := range tools {
		name := t.Function.Name
		parts, err := paramElements(t, func(p property, params json.RawMessage) (grammar.Expr, error) {
			value, err := textOrJSON(b, params, p, types[name][p.name], mmParamEnd)
			if err != nil {
				return grammar.Expr{}, err
			}
			return grammar.Seq(grammar.Lit(mmParam+p.name+`">`), value, grammar.Lit(mmParamEnd+"\n")), nil
		})
		if err != nil {
			return "", fmt.Errorf("tool %q: parameters: %w", name, err)
		}
		call := append([]grammar.Expr{grammar.Lit(mmInvoke + name + "\">\n")}, parts...)
		calls[i] = grammar.Seq(append(call, grammar.Lit(mmInvokeEnd+"\n"))...)
	}
	call := b.Rule("call", grammar.Alt(calls...))
	if parallel {
		call = grammar.Repeat(call, 1, -1)
	}
	return b.Grammar(grammar.Seq(grammar.Lit(mmSection+"\n"), call, grammar.Lit(mmSectionEnd)))
}
