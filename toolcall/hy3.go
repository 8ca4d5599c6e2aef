package toolcall

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/wire"
)

// Tencent Hy3's markup: tags that end in its template's suffix,
// ":opensource" (special tokens of its vocabulary).
const (
	hy3CallsOpen  = "<tool_calls:opensource>"
	hy3CallsClose = "</tool_calls:opensource>"
	hy3CallOpen   = "<tool_call:opensource>"
	hy3CallClose  = "</tool_call:opensource>"
	hy3Sep        = "<tool_sep:opensource>"
	hy3KeyOpen    = "<arg_key:opensource>"
	hy3KeyClose   = "</arg_key:opensource>"
	hy3ValueOpen  = "<arg_value:opensource>"
	hy3ValueClose = "</arg_value:opensource>"
)

// Hy3 is Tencent Hy3's format: a block of calls, each the function's
// name, a separator, then each argument as a key and a value, the value
// as text (a string) or JSON (anything else: typed by the parameter's
// schema):
//
//	<tool_calls:opensource>
//	<tool_call:opensource>get_weather<tool_sep:opensource>
//	<arg_key:opensource>city</arg_key:opensource>
//	<arg_value:opensource>Paris</arg_value:opensource>
//	</tool_call:opensource>
//	</tool_calls:opensource>
var Hy3 Format = hy3Format{}

// isHy3 reports a template that writes Hy3's suffixed tags (it builds
// them with format(), so the source has "<arg_key{}>").
func isHy3(src string) bool {
	return strings.Contains(src, "<arg_key{}>") && strings.Contains(src, ":opensource")
}

type hy3Format struct{}

// Name is the format's name.
func (hy3Format) Name() string { return "hy3" }

// Markers are Hy3's tags.
func (hy3Format) Markers() []string {
	return []string{hy3CallsOpen, hy3CallsClose, hy3CallOpen, hy3CallClose, hy3Sep, hy3KeyOpen, hy3KeyClose, hy3ValueOpen, hy3ValueClose}
}

// Parser returns a parser that types values by the tools' schemas. Each
// call is a region: the first opens at the block's tag, the next ones at
// their own, and the last one takes the block's closing tag.
func (hy3Format) Parser(tools []wire.Tool, max int) Parser {
	return newMarkupParser(&hy3Scanner{types: paramTypes(tools)}, []string{hy3CallsOpen, hy3CallOpen}, max)
}

type hy3Scanner struct {
	types map[string]map[string][]string // tool → parameter → JSON types its schema allows
}

func (x *hy3Scanner) scan(marker, s string, end, cut bool) callScan {
	var r callScan
	i := 0
	if marker == hy3CallsOpen {
		var st int
		if i, st = firstCall(s, hy3CallOpen); st != readDone {
			r.bad = st == readBad
			return r
		}
	}
	k := strings.Index(s[i:], hy3Sep)
	if k < 0 {
		r.bad = len(s)-i > dsMaxHead
		return r
	}
	name := strings.TrimSpace(s[i : i+k])
	if !validHead(name) {
		r.bad = true
		return r
	}
	r.name = name
	i += k + len(hy3Sep)
	var args argsObject
	r.args = args.text()
	for {
		i = skipSpace(s, i)
		rest := s[i:]
		switch {
		case strings.HasPrefix(rest, hy3CallClose):
			r.args, r.complete = args.whole(), true
			return closeList(s, i+len(hy3CallClose), end, r, hy3CallsClose)
		case strings.HasPrefix(hy3CallClose, rest) && !end:
			return r
		}
		key, j, ok := hy3Element(s, i, hy3KeyOpen, hy3KeyClose)
		switch {
		case !ok || (j >= 0 && (key == "" || len(key) > dsMaxHead)):
			r.bad = true
			return r
		case j < 0:
			return r
		}
		j = skipSpace(s, j)
		value, j, ok := hy3Element(s, j, hy3ValueOpen, hy3ValueClose)
		switch {
		case !ok:
			r.bad = true
			return r
		case j < 0:
			return r
		}
		r.args = args.add(key, typedValue(value, x.types[name][key]))
		i = j
	}
}

// hy3Element reads open TEXT close at s[i:]: the text and the index after
// it, or next < 0 when it may still be arriving; ok is false when s[i:]
// is something else.
func hy3Element(s string, i int, open, close string) (text string, next int, ok bool) {
	rest := s[i:]
	if !strings.HasPrefix(rest, open) {
		return "", -1, strings.HasPrefix(open, rest)
	}
	rest = rest[len(open):]
	e := strings.Index(rest, close)
	if e < 0 {
		return "", -1, true
	}
	return rest[:e], i + len(open) + e + len(close), true
}

// Grammar forces calls in Hy3's block: each tool's required parameters
// in the order of its schema, then its optional ones, each optional; a
// string parameter's value as text, any other's as the JSON its schema
// describes.
func (hy3Format) Grammar(tools []wire.Tool, parallel bool, lim grammar.SchemaLimits) (string, error) {
	if len(tools) == 0 {
		return "", fmt.Errorf("tool-call grammar: no tools")
	}
	b := grammar.NewBuilder(lim)
	types := paramTypes(tools)
	calls := make([]grammar.Expr, len(tools))
	for i, t := range tools {
		name := t.Function.Name
		parts, err := paramElements(t, func(p property, params json.RawMessage) (grammar.Expr, error) {
			value, err := textOrJSON(b, params, p, types[name][p.name], hy3ValueClose)
			if err != nil {
				return grammar.Expr{}, err
			}
			return grammar.Seq(grammar.Lit(hy3KeyOpen+p.name+hy3KeyClose+"\n"+hy3ValueOpen), value, grammar.Lit(hy3ValueClose+"\n")), nil
		})
		if err != nil {
			return "", fmt.Errorf("tool %q: parameters: %w", name, err)
		}
		call := append([]grammar.Expr{grammar.Lit(hy3CallOpen + name + hy3Sep + "\n")}, parts...)
		calls[i] = grammar.Seq(append(call, grammar.Lit(hy3CallClose+"\n"))...)
	}
	call := b.Rule("call", grammar.Alt(calls...))
	list := call
	if parallel {
		list = grammar.Repeat(call, 1, -1)
	}
	return b.Grammar(grammar.Seq(grammar.Lit(hy3CallsOpen+"\n"), list, grammar.Lit(hy3CallsClose)))
}
