package toolcall

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/wire"
)

// MistralV11 is the format of Mistral's tokenizers from v11 on: each call
// is [TOOL_CALLS], the function's name, [ARGS] and its arguments as JSON,
// after any text, with an optional [CALL_ID] and id before [ARGS]:
//
//	[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}
//
// Devstral, Mistral Small 3.2, Magistral and Ministral 3 write it.
var MistralV11 Format = mistralV11Format{}

// isMistralV11 reports a template that writes [ARGS] after a call's name.
func isMistralV11(src string) bool {
	return strings.Contains(src, "[TOOL_CALLS]") && strings.Contains(src, "[ARGS]")
}

// Mistral v11's markup: control tokens of its vocabulary.
const (
	mistralCalls  = "[TOOL_CALLS]"
	mistralArgs   = "[ARGS]"
	mistralCallID = "[CALL_ID]"
	// mistralMaxName bounds what may come between [TOOL_CALLS] and
	// [ARGS]: the name, and an id.
	mistralMaxName = 256
)

type mistralV11Format struct{}

// Name is the format's name.
func (mistralV11Format) Name() string { return "mistral-v11" }

// Markers are the format's control tokens.
func (mistralV11Format) Markers() []string { return []string{mistralCalls, mistralArgs, mistralCallID} }

// Parser returns the format's parser.
func (mistralV11Format) Parser(_ []wire.Tool, max int) Parser {
	return newMarkupParser(mistralV11Scanner{}, []string{mistralCalls}, max)
}

type mistralV11Scanner struct{}

func (mistralV11Scanner) scan(_, s string, end, cut bool) callScan {
	var r callScan
	a := strings.Index(s, mistralArgs)
	if a < 0 {
		r.bad = len(s) > mistralMaxName
		return r
	}
	name, _, _ := strings.Cut(s[:a], mistralCallID)
	name = strings.TrimSpace(name)
	if name == "" || a > mistralMaxName || strings.ContainsAny(name, " \n\t{[<\"") {
		r.bad = true
		return r
	}
	r.name = name
	at := skipSpace(s, a+len(mistralArgs))
	if at == len(s) {
		return r
	}
	e, complete := valueEnd(s, at)
	value := s[at:e]
	switch value[0] {
	case '{', '[':
		r.args = value // streamed as it is written
	case '"':
		// Arguments written as a JSON string: decoded once whole.
		var text string
		if !complete || json.Unmarshal([]byte(value), &text) != nil {
			r.bad = complete
			return r
		}
		value = text
		r.args = ""
	default:
		r.bad = true
		return r
	}
	if complete {
		r.args, r.complete = value, true
		r.closed, r.end = true, e
	}
	return r
}

// Grammar forces calls in the format's markup, each call's arguments
// following its function's schema.
func (mistralV11Format) Grammar(tools []wire.Tool, parallel bool, lim grammar.SchemaLimits) (string, error) {
	if len(tools) == 0 {
		return "", fmt.Errorf("tool-call grammar: no tools")
	}
	b := grammar.NewBuilder(lim)
	calls, err := schemaCalls(b, tools, func(name string, args grammar.Expr) grammar.Expr {
		return grammar.Seq(grammar.Lit(mistralCalls+name+mistralArgs), args)
	})
	if err != nil {
		return "", err
	}
	call := b.Rule("call", grammar.Alt(calls...))
	if parallel {
		return b.Grammar(grammar.Repeat(call, 1, -1))
	}
	return b.Grammar(call)
}
