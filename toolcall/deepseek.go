package toolcall

import (
	"fmt"
	"strings"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/wire"
)

// DeepSeek's tool-call markup: special tokens of its vocabulary, written
// with fullwidth vertical bars (U+FF5C) and lower one-eighth blocks
// (U+2581) for spaces.
const (
	dsCallsBegin = "<｜tool▁calls▁begin｜>"
	dsCallsEnd   = "<｜tool▁calls▁end｜>"
	dsCallBegin  = "<｜tool▁call▁begin｜>"
	dsCallEnd    = "<｜tool▁call▁end｜>"
	dsSep        = "<｜tool▁sep｜>"
	dsFence      = "```"
	// dsMaxHead bounds what may come between a call's begin token and
	// its separator (a name or the type), and the name line after it.
	dsMaxHead = 256
)

// DeepSeekR1 is the format of DeepSeek R1 (and V3 before 3.1), and of
// the R1 distills of Llama and Qwen: the calls between
// <｜tool▁calls▁begin｜> and <｜tool▁calls▁end｜>, each its type, the
// function's name and its arguments in a fenced JSON block, one a line:
//
//	<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
//	```json
//	{"city": "Paris"}
//	```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
//
// Its parser also reads DeepSeekV31's calls.
var DeepSeekR1 Format = &deepSeekFormat{name: "deepseek-r1", fenced: true}

// DeepSeekV31 is the format of DeepSeek V3.1: R1's tokens, each call the
// function's name, the separator and the arguments as JSON:
//
//	<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>
//
// Its parser also reads DeepSeekR1's calls.
var DeepSeekV31 Format = &deepSeekFormat{name: "deepseek-v3.1"}

// isDeepSeek reports a template that writes DeepSeek's call tokens.
func isDeepSeek(src string) bool { return strings.Contains(src, dsCallBegin) }

// isDeepSeekR1 reports a DeepSeek template whose calls are fenced JSON.
func isDeepSeekR1(src string) bool { return isDeepSeek(src) && strings.Contains(src, "```json") }

// isDeepSeekV31 reports a DeepSeek template whose calls are bare JSON.
func isDeepSeekV31(src string) bool { return isDeepSeek(src) && !strings.Contains(src, "```json") }

// deepSeekFormat is R1's markup (fenced) or V3.1's.
type deepSeekFormat struct {
	name   string
	fenced bool
}

// Name is the format's name.
func (f *deepSeekFormat) Name() string { return f.name }

// Markers are DeepSeek's call tokens.
func (f *deepSeekFormat) Markers() []string {
	return []string{dsCallsBegin, dsCallsEnd, dsCallBegin, dsCallEnd, dsSep}
}

// Parser returns a parser of either layout. Each call is a region: the
// first opens at <｜tool▁calls▁begin｜>, the next ones at
// <｜tool▁call▁begin｜>, and the last one takes <｜tool▁calls▁end｜>.
func (f *deepSeekFormat) Parser(_ []wire.Tool, max int) Parser {
	return newMarkupParser(deepSeekScanner{}, []string{dsCallsBegin, dsCallBegin}, max)
}

type deepSeekScanner struct{}

func (deepSeekScanner) scan(marker, s string, end, cut bool) callScan {
	var r callScan
	i := 0
	if marker == dsCallsBegin {
		var st int
		if i, st = firstCall(s, dsCallBegin); st != readDone {
			r.bad = st == readBad
			return r
		}
	}
	k := strings.Index(s[i:], dsSep)
	if k < 0 {
		r.bad = len(s)-i > dsMaxHead
		return r
	}
	head := strings.TrimSpace(s[i : i+k])
	i += k + len(dsSep)
	fence := false
	if j := skipSpace(s, i); head == "function" && (j == len(s) || (s[j] != '{' && s[j] != '"')) {
		// R1: the type, then the name on its line, then a fenced block.
		e := strings.IndexAny(s[i:], "\n`")
		if e < 0 {
			r.bad = len(s)-i > dsMaxHead
			return r
		}
		head = strings.TrimSpace(s[i : i+e])
		i = skipSpace(s, i+e)
		rest := s[i:]
		switch {
		case strings.HasPrefix(rest, dsFence):
			nl := strings.IndexByte(rest, '\n')
			if nl < 0 {
				r.bad = len(rest) > 16
				return r
			}
			i, fence = i+nl+1, true
		case strings.HasPrefix(dsFence, rest):
			return r // the fence may be arriving
		}
	}
	if !validHead(head) {
		r.bad = true
		return r
	}
	r.name = head
	// Arguments written as a JSON string (V3.1's template writes the
	// history's this way) are decoded once whole.
	args, e, st := readArgs(s, i)
	r.args = args
	if st != readDone {
		r.bad = st == readBad
		return r
	}
	r.complete = true
	i = skipSpace(s, e)
	if fence {
		rest := s[i:]
		switch {
		case strings.HasPrefix(rest, dsFence):
			i = skipSpace(s, i+len(dsFence))
		case strings.HasPrefix(dsFence, rest) && !end:
			return r
		}
	}
	return closeCall(s, i, dsCallEnd, dsCallsEnd, end, r)
}

// validHead reports whether s may be a function's name: not empty, not
// too long, without space or markup.
func validHead(s string) bool {
	return s != "" && len(s) <= dsMaxHead && !strings.ContainsAny(s, " \t\r\n<>{}[]\"`")
}

// Grammar forces calls in the format's own layout, each call's arguments
// following its function's schema.
func (f *deepSeekFormat) Grammar(tools []wire.Tool, parallel bool, lim grammar.SchemaLimits) (string, error) {
	if len(tools) == 0 {
		return "", fmt.Errorf("tool-call grammar: no tools")
	}
	b := grammar.NewBuilder(lim)
	calls, err := schemaCalls(b, tools, func(name string, args grammar.Expr) grammar.Expr {
		if f.fenced {
			return grammar.Seq(grammar.Lit(dsCallBegin+"function"+dsSep+name+"\n"+dsFence+"json\n"), args, grammar.Lit("\n"+dsFence+dsCallEnd))
		}
		return grammar.Seq(grammar.Lit(dsCallBegin+name+dsSep), args, grammar.Lit(dsCallEnd))
	})
	if err != nil {
		return "", err
	}
	call := b.Rule("call", grammar.Alt(calls...))
	list := call
	switch {
	case parallel && f.fenced:
		list = grammar.Seq(call, grammar.Repeat(grammar.Seq(grammar.Lit("\n"), call), 0, -1))
	case parallel:
		list = grammar.Repeat(call, 1, -1)
	}
	return b.Grammar(grammar.Seq(grammar.Lit(dsCallsBegin), list, grammar.Lit(dsCallsEnd)))
}
