package toolcall

import (
	"fmt"
	"strings"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/wire"
)

// Upstage Solar Open's markup: special tokens of its vocabulary.
const (
	solarCalls     = "<|tool_calls|>"
	solarCallBegin = "<|tool_call:begin|>"
	solarCallName  = "<|tool_call:name|>"
	solarCallArgs  = "<|tool_call:args|>"
	solarCallEnd   = "<|tool_call:end|>"
	solarCallsEnd  = "<|calls|>"
)

// SolarOpen is Upstage Solar Open's format: an assistant message on the
// tool_calls channel, each call an id the model makes up, the function's
// name and the arguments as JSON, ended by <|calls|> (an end of the
// turn):
//
//	<|tool_calls|><|tool_call:begin|>a1b2c3d4e5<|tool_call:name|>get_weather<|tool_call:args|>{"city": "Paris"}<|tool_call:end|><|calls|>
//
// The model's ids are not kept: each call gets one of corral's, which the
// template writes back in the history.
var SolarOpen Format = solarOpenFormat{}

// isSolarOpen reports a template that writes Solar Open's call tokens.
func isSolarOpen(src string) bool { return strings.Contains(src, solarCallBegin) }

type solarOpenFormat struct{}

// Name is the format's name.
func (solarOpenFormat) Name() string { return "solar-open" }

// Markers are Solar Open's call tokens.
func (solarOpenFormat) Markers() []string {
	return []string{solarCalls, solarCallBegin, solarCallName, solarCallArgs, solarCallEnd, solarCallsEnd}
}

// Parser returns the format's parser. Each call is a region: the first
// opens at <|tool_calls|>, the next ones at their own begin token, and
// the last one takes <|calls|> when the engine outputs it.
func (solarOpenFormat) Parser(_ []wire.Tool, max int) Parser {
	return newMarkupParser(solarOpenScanner{}, []string{solarCalls, solarCallBegin}, max)
}

type solarOpenScanner struct{}

func (solarOpenScanner) scan(marker, s string, end, cut bool) callScan {
	var r callScan
	i := 0
	if marker == solarCalls {
		var st int
		if i, st = firstCall(s, solarCallBegin); st != readDone {
			r.bad = st == readBad
			return r
		}
	}
	n := strings.Index(s[i:], solarCallName)
	if n < 0 {
		r.bad = len(s)-i > dsMaxHead
		return r
	}
	if id := s[i : i+n]; strings.ContainsAny(id, "<>\n") {
		r.bad = true
		return r
	}
	i += n + len(solarCallName)
	a := strings.Index(s[i:], solarCallArgs)
	if a < 0 {
		r.bad = len(s)-i > dsMaxHead
		return r
	}
	name := strings.TrimSpace(s[i : i+a])
	if !validHead(name) {
		r.bad = true
		return r
	}
	r.name = name
	args, e, st := readArgs(s, i+a+len(solarCallArgs))
	r.args = args
	if st != readDone {
		r.bad = st == readBad
		return r
	}
	r.complete = true
	return closeCall(s, skipSpace(s, e), solarCallEnd, solarCallsEnd, end, r)
}

// Grammar forces calls on the tool_calls channel, each with an id of ten
// digits (not kept) and its arguments following its function's schema.
// <|calls|>, an end of the turn, follows as the model's end of
// generation.
func (solarOpenFormat) Grammar(tools []wire.Tool, parallel bool, lim grammar.SchemaLimits) (string, error) {
	if len(tools) == 0 {
		return "", fmt.Errorf("tool-call grammar: no tools")
	}
	b := grammar.NewBuilder(lim)
	calls, err := schemaCalls(b, tools, func(name string, args grammar.Expr) grammar.Expr {
		return grammar.Seq(grammar.Lit(solarCallName+name+solarCallArgs), args, grammar.Lit(solarCallEnd))
	})
	if err != nil {
		return "", err
	}
	id := b.Rule("id", grammar.Repeat(grammar.Alt(grammar.Lit("0"), grammar.Lit("1"), grammar.Lit("2"), grammar.Lit("3"), grammar.Lit("4"),
		grammar.Lit("5"), grammar.Lit("6"), grammar.Lit("7"), grammar.Lit("8"), grammar.Lit("9")), 10, 10))
	call := b.Rule("call", grammar.Seq(grammar.Lit(solarCallBegin), id, grammar.Alt(calls...)))
	list := call
	if parallel {
		list = grammar.Repeat(call, 1, -1)
	}
	return b.Grammar(grammar.Seq(grammar.Lit(solarCalls), list))
}
