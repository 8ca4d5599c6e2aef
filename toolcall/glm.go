package toolcall

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/wire"
)

// GLM is the format of GLM 4.5 and later: each call in <tool_call> tags,
// the function's name first, then a key and a value element per
// argument, the value as text:
//
//	<tool_call>get_weather
//	<arg_key>city</arg_key>
//	<arg_value>Paris</arg_value>
//	<arg_key>days</arg_key>
//	<arg_value>3</arg_value>
//	</tool_call>
//
// GLM 4.5 and 4.6 write the line breaks, GLM 4.7 none
// (<tool_call>get_time<arg_key>...); Poolside's Laguna writes it too. A
// value is typed by its parameter's schema, as Qwen3Coder's are: a string
// stays the text, anything else is read as JSON.
var GLM Format = glmFormat{}

// isGLM reports a template that writes <arg_key> inside <tool_call>.
func isGLM(src string) bool {
	return strings.Contains(src, "<tool_call>") && strings.Contains(src, "<arg_key>")
}

// GLM's markup.
const (
	glmOpen     = "<tool_call>"
	glmClose    = "</tool_call>"
	glmKey      = "<arg_key>"
	glmKeyEnd   = "</arg_key>"
	glmValue    = "<arg_value>"
	glmValueEnd = "</arg_value>"
	glmMaxName  = 256 // a longer name or key is not markup
)

type glmFormat struct{}

// Name is the format's name.
func (glmFormat) Name() string { return "glm" }

// Markers are GLM's tags, special tokens of its vocabulary.
func (glmFormat) Markers() []string {
	return []string{glmOpen, glmClose, glmKey, glmKeyEnd, glmValue, glmValueEnd}
}

// Parser returns a parser that types values by the tools' schemas.
func (glmFormat) Parser(tools []wire.Tool, max int) Parser {
	return newMarkupParser(&glmScanner{types: paramTypes(tools)}, []string{glmOpen}, max)
}

// glmScanner reads a region after <tool_call>.
type glmScanner struct {
	types map[string]map[string][]string // tool → parameter → JSON types its schema allows
}

func (g *glmScanner) scan(_, s string, end, cut bool) callScan {
	var r callScan
	i := skipSpace(s, 0)
	e := strings.IndexAny(s[i:], "<\n")
	if e < 0 {
		switch {
		case len(s)-i > glmMaxName:
			r.bad = true
		case end && !cut && validName(strings.TrimSpace(s[i:]), glmMaxName):
			// A call without arguments whose closing tag a stop took.
			r.name, r.args, r.complete = strings.TrimSpace(s[i:]), "{}", true
		}
		return r
	}
	name := strings.TrimSpace(s[i : i+e])
	if !validName(name, glmMaxName) {
		r.bad = true
		return r
	}
	r.name = name
	var args argsObject
	r.args = args.text()
	i += e
	for {
		i = skipSpace(s, i)
		rest := s[i:]
		switch {
		case strings.HasPrefix(rest, glmClose):
			r.args, r.complete = args.whole(), true
			r.closed, r.end = true, i+len(glmClose)
			return r
		case rest == "":
			if end && !cut {
				// The closing tag was taken by a stop string.
				r.args, r.complete = args.whole(), true
			}
			return r
		case strings.HasPrefix(glmClose, rest) || strings.HasPrefix(glmKey, rest):
			return r // a tag is arriving, or broke off
		case !strings.HasPrefix(rest, glmKey):
			r.bad = true
			return r
		}
		i += len(glmKey)
		k := strings.Index(s[i:], glmKeyEnd)
		if k < 0 {
			r.bad = len(s)-i > glmMaxName
			return r
		}
		key := strings.TrimSpace(s[i : i+k])
		if key == "" || len(key) > glmMaxName || strings.ContainsAny(key, "<>") {
			r.bad = true
			return r
		}
		i = skipSpace(s, i+k+len(glmKeyEnd))
		rest = s[i:]
		switch {
		case strings.HasPrefix(glmValue, rest):
			return r
		case !strings.HasPrefix(rest, glmValue):
			r.bad = true
			return r
		}
		i += len(glmValue)
		v := strings.Index(s[i:], glmValueEnd)
		if v < 0 {
			return r // the value is still arriving
		}
		r.args = args.add(key, typedValue(s[i:i+v], g.types[name][key]))
		i += v + len(glmValueEnd)
	}
}

// Grammar forces calls in GLM's markup, each tool's required parameters
// in the order of its schema, then its optional ones. The line breaks
// between the tags are optional, as GLM 4.6 writes them and 4.7 does not.
func (glmFormat) Grammar(tools []wire.Tool, parallel bool, lim grammar.SchemaLimits) (string, error) {
	if len(tools) == 0 {
		return "", fmt.Errorf("tool-call grammar: no tools")
	}
	b := grammar.NewBuilder(lim)
	types := paramTypes(tools)
	nl := grammar.Opt(grammar.Lit("\n"))
	calls := make([]grammar.Expr, len(tools))
	for i, t := range tools {
		name := t.Function.Name
		parts, err := paramElements(t, func(p property, params json.RawMessage) (grammar.Expr, error) {
			value, err := textOrJSON(b, params, p, types[name][p.name], glmValueEnd)
			if err != nil {
				return grammar.Expr{}, err
			}
			return grammar.Seq(grammar.Lit(glmKey+p.name+glmKeyEnd), nl, grammar.Lit(glmValue), value, grammar.Lit(glmValueEnd), nl), nil
		})
		if err != nil {
			return "", fmt.Errorf("tool %q: parameters: %w", name, err)
		}
		call := append([]grammar.Expr{grammar.Lit(glmOpen + name), nl}, parts...)
		calls[i] = grammar.Seq(append(call, grammar.Lit(glmClose))...)
	}
	call := b.Rule("call", grammar.Alt(calls...))
	if parallel {
		return b.Grammar(grammar.Seq(call, grammar.Repeat(grammar.Seq(nl, call), 0, -1)))
	}
	return b.Grammar(call)
}
