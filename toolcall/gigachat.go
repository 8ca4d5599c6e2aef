package toolcall

import (
	"fmt"
	"strings"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/wire"
)

// GigaChat3 is Sber GigaChat 3's format: after the assistant's message,
// which <|message_sep|> ends, a message of the role "function call" with
// the call as JSON, one call per answer:
//
//	<|message_sep|>
//
//	function call<|role_sep|>
//	{"name": "get_weather", "arguments": {"city": "Paris"}}
var GigaChat3 Format = gigachatFormat{name: "gigachat3", head: gigaRole + "\n"}

// GigaChat31 is GigaChat 3.1's format: <|function_call|> and the call as
// JSON at the end of the assistant's message, one call per answer:
//
//	<|function_call|>{"name": "get_weather", "arguments": {"city": "Paris"}}
//
// Both read either markup.
var GigaChat31 Format = gigachatFormat{name: "gigachat3.1", head: gigaCall}

// GigaChat's markup.
const (
	gigaCall       = "<|function_call|>"
	gigaRole       = "function call<|role_sep|>"
	gigaMessageSep = "<|message_sep|>"
)

// isGigaChat31 reports a template that writes <|function_call|>.
func isGigaChat31(src string) bool {
	return strings.Contains(src, gigaCall) && strings.Contains(src, "<|role_sep|>")
}

// isGigaChat3 reports a template with GigaChat's roles and the role
// "function call".
func isGigaChat3(src string) bool {
	return strings.Contains(src, "function call") && strings.Contains(src, "<|role_sep|>")
}

type gigachatFormat struct {
	name string
	head string // what the grammar writes before the call
}

// Name is the format's name.
func (f gigachatFormat) Name() string { return f.name }

// Markers are GigaChat's special tokens.
func (gigachatFormat) Markers() []string {
	return []string{gigaMessageSep, gigaCall, "<|role_sep|>"}
}

// Parser returns the format's parser: <|message_sep|>, the end of a
// message, is taken out of the answer.
func (gigachatFormat) Parser(_ []wire.Tool, max int) Parser {
	p := newMarkupParser(gigachatScanner{}, []string{gigaCall, gigaRole}, max)
	return dropping(p, []string{gigaMessageSep}, nil)
}

type gigachatScanner struct{}

func (gigachatScanner) scan(_, s string, end, cut bool) callScan {
	var r callScan
	i := skipSpace(s, 0)
	r, e, ok := callObjectScan(r, s, i)
	if ok {
		r.closed, r.end = true, e
	}
	return r
}

// Grammar forces one call (the template writes one per answer).
func (f gigachatFormat) Grammar(tools []wire.Tool, _ bool, lim grammar.SchemaLimits) (string, error) {
	if len(tools) == 0 {
		return "", fmt.Errorf("tool-call grammar: no tools")
	}
	b := grammar.NewBuilder(lim)
	calls, err := schemaCalls(b, tools, func(name string, args grammar.Expr) grammar.Expr {
		return grammar.Seq(grammar.Lit(`{"name": `+quote(name)+`, "arguments": `), args, grammar.Lit("}"))
	})
	if err != nil {
		return "", err
	}
	return b.Grammar(grammar.Seq(grammar.Lit(f.head), grammar.Alt(calls...)))
}
