package toolcall

import (
	"encoding/json"
	"regexp"
	"strings"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/wire"
)

// Apertus writes its calls as one JSON list between <|tools_prefix|> and
// <|tools_suffix|>, each call an object whose one key is the function's
// name and whose value is its arguments: Swiss AI's Apertus.
//
//	<|tools_prefix|>[{"get_weather": {"city": "Paris"}}, {"get_time": {}}]<|tools_suffix|>
var Apertus Format = &jsonFormat{
	name:    "apertus",
	markers: []string{"<|tools_prefix|>", "<|tools_suffix|>"},
	sx: syntax{
		start: []string{"<|tools_prefix|>"}, end: "<|tools_suffix|>", argsKey: "arguments", keyed: true,
		frame: grammar.Frame{Open: "<|tools_prefix|>[", Close: "]<|tools_suffix|>", Sep: ", "},
	},
}

// isApertus reports a template that writes <|tools_prefix|>.
func isApertus(src string) bool { return strings.Contains(src, "<|tools_prefix|>") }

// keyedHeadRE matches a keyed call object's start: its key, the name.
var keyedHeadRE = regexp.MustCompile(`^\{\s*("(?:[^"\\]|\\.)*")\s*:\s*`)

// keyedHead is head for a keyed call object, {"NAME": {arguments}}: the
// name and the raw arguments written so far, streamable when they are an
// object.
func (o object) keyedHead() (name, args string, streamable bool) {
	m := keyedHeadRE.FindStringSubmatchIndex(o.text)
	if m == nil || json.Unmarshal([]byte(o.text[m[2]:m[3]]), &name) != nil || name == "" {
		return "", "", false
	}
	rest := o.text[m[1]:]
	if rest == "" || rest[0] != '{' {
		return "", "", false
	}
	e, _ := valueEnd(rest, 0)
	return name, rest[:e], true
}

// keyedCall decodes a complete keyed call object: one key, the name, its
// value the arguments (an object; a JSON string of one is decoded; null
// is none).
func (o object) keyedCall() ([]wire.ToolCall, bool) {
	if !o.complete {
		return nil, false
	}
	var v map[string]json.RawMessage
	if json.Unmarshal([]byte(o.text), &v) != nil || len(v) != 1 {
		return nil, false
	}
	for name, args := range v {
		text := string(args)
		var s string
		switch {
		case name == "":
			return nil, false
		case text == "null":
			text = "{}"
		case json.Unmarshal(args, &s) == nil:
			text = s
		case !strings.HasPrefix(text, "{"):
			return nil, false
		}
		return []wire.ToolCall{{Type: "function", Function: wire.FunctionCall{Name: name, Arguments: text}}}, true
	}
	return nil, false
}

// keyedGrammar forces keyed call objects in frame: {"NAME": ARGS}, the
// arguments following the function's parameters schema.
func keyedGrammar(frame grammar.Frame, tools []wire.Tool, parallel bool, lim grammar.SchemaLimits) (string, error) {
	b := grammar.NewBuilder(lim)
	calls, err := schemaCalls(b, tools, func(name string, args grammar.Expr) grammar.Expr {
		return grammar.Seq(grammar.Lit("{"+quote(name)+": "), args, grammar.Lit("}"))
	})
	if err != nil {
		return "", err
	}
	call := b.Rule("call", grammar.Alt(calls...))
	list := call
	if parallel {
		list = grammar.Seq(call, grammar.Repeat(grammar.Seq(grammar.Lit(frame.Sep), call), 0, -1))
	}
	return b.Grammar(grammar.Seq(grammar.Lit(frame.Open), list, grammar.Lit(frame.Close)))
}
