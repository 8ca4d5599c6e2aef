package toolcall

import (
	"fmt"
	"strings"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/wire"
)

// Llama3 is the JSON tool calling of Llama 3.1, 3.2, 3.3 and 4: the whole
// answer is {"name": ..., "parameters": {...}}, calls separated by ";",
// possibly after <|python_tag|>:
//
//	{"name": "get_weather", "parameters": {"city": "Paris"}}
//
// Its parser also reads the other ways Llama models call tools: the
// built-in tools of Llama 3.1 after <|python_tag|>, brave_search.call(
// query="...") as a call of the tool of that name; code after
// <|python_tag|> as a call of code_interpreter (or python) when offered
// (its "code"); and the Python list of calls of Llama 3.2 and 4 (see
// Pythonic), bare or inside <|python_start|> and <|python_end|>.
var Llama3 Format = llamaFormat{name: "llama3"}

// Pythonic is Llama 3.2's and Llama 4's tool calling when their system
// prompt asks for a Python list of calls, the whole answer:
//
//	[get_weather(city="Paris", days=3), get_time()]
//
// Values are Python literals. It reads answers as Llama3 does, and forces
// calls in this form.
var Pythonic Format = llamaFormat{name: "pythonic", pythonic: true}

// isPythonic reports a template that asks for a Python list of calls, as
// the pythonic templates of Llama 3.2 and 4 do in their instructions.
func isPythonic(src string) bool {
	return strings.Contains(src, "[func_name1(")
}

// isLlama3 reports a template with <|python_tag|> or the Llama 3 or
// Llama 4 headers.
func isLlama3(src string) bool {
	return strings.Contains(src, llamaPythonTag) || strings.Contains(src, "<|start_header_id|>") || strings.Contains(src, "<|header_start|>")
}

// Llama's markup.
const (
	llamaPythonTag   = "<|python_tag|>"
	llamaPythonStart = "<|python_start|>"
	llamaPythonEnd   = "<|python_end|>"
)

// llamaJSON is the JSON form's grammar.
var llamaJSON = &jsonFormat{
	name: "llama3",
	sx:   syntax{argsKey: "parameters", frame: grammar.Frame{Sep: "; "}},
}

type llamaFormat struct {
	name     string
	pythonic bool // the grammar writes the Python list of calls
}

// Name is the format's name.
func (f llamaFormat) Name() string { return f.name }

// Markers are Llama's markup tokens.
func (llamaFormat) Markers() []string {
	return []string{llamaPythonTag, llamaPythonStart, llamaPythonEnd}
}

// Parser returns a parser of Llama's calls; a tool named code_interpreter
// or python runs the code written after <|python_tag|>.
func (llamaFormat) Parser(tools []wire.Tool, max int) Parser {
	code, key := codeTool(tools, "code_interpreter", "python")
	sc := llamaScanner{code: code, codeKey: key}
	return newMarkupParser(sc, []string{llamaPythonTag, llamaPythonStart}, max).leading()
}

// Grammar forces calls as JSON objects separated by "; ", or for
// Pythonic as a Python list.
func (f llamaFormat) Grammar(tools []wire.Tool, parallel bool, lim grammar.SchemaLimits) (string, error) {
	if f.pythonic {
		return pyCallsGrammar(tools, parallel, lim, "", "")
	}
	return llamaJSON.Grammar(tools, parallel, lim)
}

// llamaScanner reads Llama's regions: the answer's start (marker ""),
// after <|python_tag|> or <|python_start|>, and the calls chained after a
// call: a marker of one byte, ';' for JSON objects, ',' for a JSON list,
// '(' for a Python list, then the marker that closes the region.
type llamaScanner struct {
	code, codeKey string // the tool that runs code, and its parameter; "" for none
}

func (l llamaScanner) scan(marker, s string, end, cut bool) callScan {
	return leadEnd(l.read(marker, s, end, cut), marker, end)
}

func (l llamaScanner) read(marker, s string, end, cut bool) callScan {
	var r callScan
	close := ""
	switch marker {
	case "", llamaPythonTag:
	case llamaPythonStart:
		close = llamaPythonEnd
	default:
		close = marker[1:]
		switch marker[0] {
		case ';':
			return l.object(r, s, 0, end, close)
		case ',':
			return readJSONItem(r, s, 0, end, close)
		default:
			return readPyItem(r, s, 0, end, close)
		}
	}
	i := skipSpace(s, 0)
	if i == len(s) {
		return r
	}
	switch s[i] {
	case '{':
		return l.object(r, s, i, end, close)
	case '[':
		k := skipSpace(s, i+1)
		switch {
		case k == len(s):
			return r
		case s[k] == '{':
			return readJSONItem(r, s, k, end, close)
		}
		return readPyItem(r, s, k, end, close)
	}
	if marker != llamaPythonTag {
		r.bad = true
		return r
	}
	// A built-in tool's call, or code.
	j := i
	for j < len(s) && (isNameByte(s[j]) || s[j] == '.') && j-i <= maxNameLen {
		j++
	}
	if j == len(s) && !end {
		return r
	}
	if name := s[i:j]; j < len(s) && s[j] == '(' && strings.HasSuffix(name, ".call") {
		c := readPyCall(s, i)
		if c.bad {
			r.bad = true
			return r
		}
		r.name, r.args = strings.TrimSuffix(c.name, ".call"), c.args
		if c.complete {
			r.complete, r.closed, r.end = true, true, c.end
		}
		return r
	}
	return codeCall(r, l.code, l.codeKey, s[i:], end, cut)
}

// leadEnd makes a region without a marker (the answer's start) that has
// not named a call by the answer's end text (it is content); one with a
// marker is markup cut off.
func leadEnd(r callScan, marker string, end bool) callScan {
	if end && marker == "" && r.name == "" && !r.closed {
		r.bad = true
	}
	return r
}

// object reads the JSON call object at s[i:] and what follows: ';' and
// another one, chained, or the marker close.
func (l llamaScanner) object(r callScan, s string, i int, end bool, close string) callScan {
	r, e, ok := callObjectScan(r, s, i)
	if !ok {
		return r
	}
	j := skipSpace(s, e)
	if j == len(s) && !end {
		return r // a ';' and another call may follow
	}
	if j < len(s) && (s[j] == ';' || s[j] == ',') {
		k := skipSpace(s, j+1)
		switch {
		case k == len(s) && !end:
			return r
		case k < len(s) && s[k] == '{':
			r.closed, r.end, r.next = true, k, ";"+close
			return r
		}
		r.closed, r.end = true, j+1
		return r
	}
	return closeTail(r, s, e, end, close)
}

// readJSONItem reads a call object of a JSON list at s[i:] and what
// follows it (see listTail).
func readJSONItem(r callScan, s string, i int, end bool, close string) callScan {
	r, e, ok := callObjectScan(r, s, i)
	if !ok {
		return r
	}
	return listTail(r, s, e, end, close, ","+close)
}

// codeTool finds, among the tools, the first with one of names: the tool
// that runs the code a model writes raw, and the parameter that takes it
// (its only one, else "code"). "" when none is offered.
func codeTool(tools []wire.Tool, names ...string) (name, key string) {
	for _, n := range names {
		for _, t := range tools {
			if t.Function.Name != n {
				continue
			}
			key = "code"
			if props := paramTypes([]wire.Tool{t})[n]; len(props) == 1 {
				for k := range props {
					key = k
				}
			}
			return n, key
		}
	}
	return "", ""
}

// codeCall reads code as the call of the tool code, its text the
// parameter key: the code runs to the end of the answer, which completes
// the call unless the answer was cut off. No such tool: not a call.
func codeCall(r callScan, code, key, text string, end, cut bool) callScan {
	if code == "" {
		r.bad = true
		return r
	}
	r.name = code
	if end && !cut {
		r.args = "{" + quote(key) + ": " + quote(strings.TrimSpace(text)) + "}"
		r.complete = true
	}
	return r
}

// pyCallsGrammar forces calls written as a Python list, [f(a=1), g()],
// between before and after (one call when parallel is off): each tool's
// required parameters in the order of its schema, then its optional
// ones, each optional, values as JSON (which the parser reads as Python
// literals).
func pyCallsGrammar(tools []wire.Tool, parallel bool, lim grammar.SchemaLimits, before, after string) (string, error) {
	if len(tools) == 0 {
		return "", fmt.Errorf("tool-call grammar: no tools")
	}
	b := grammar.NewBuilder(lim)
	calls := make([]grammar.Expr, len(tools))
	for i, t := range tools {
		params := parameters(t)
		props, required, err := orderedProperties(params)
		if err != nil {
			return "", fmt.Errorf("tool %q: parameters: %w", t.Function.Name, err)
		}
		var req, opt []grammar.Expr
		for _, p := range props {
			value, err := b.Schema(params, propertyPointer(p.name))
			if err != nil {
				return "", fmt.Errorf("tool %q: parameters: %w", t.Function.Name, err)
			}
			arg := grammar.Seq(grammar.Lit(p.name+"="), value)
			if required[p.name] {
				req = append(req, arg)
			} else {
				opt = append(opt, arg)
			}
		}
		calls[i] = grammar.Seq(grammar.Lit(t.Function.Name+"("), argList(b, req, opt, ", "), grammar.Lit(")"))
	}
	call := b.Rule("call", grammar.Alt(calls...))
	list := call
	if parallel {
		list = grammar.Seq(call, grammar.Repeat(grammar.Seq(grammar.Lit(", "), call), 0, -1))
	}
	return b.Grammar(grammar.Seq(grammar.Lit(before+"["), list, grammar.Lit("]"+after)))
}

// argList matches the required arguments req, in order, then any of the
// optional ones opt, in order, all separated by sep.
func argList(b *grammar.Builder, req, opt []grammar.Expr, sep string) grammar.Expr {
	// rest[k]: any of opt[k:], in order, each after sep.
	rest := make([]grammar.Expr, len(opt)+1)
	rest[len(opt)] = grammar.Lit("")
	for k := len(opt) - 1; k >= 0; k-- {
		rest[k] = b.Rule("args", grammar.Seq(grammar.Opt(grammar.Seq(grammar.Lit(sep), opt[k])), rest[k+1]))
	}
	if len(req) > 0 {
		parts := []grammar.Expr{req[0]}
		for _, e := range req[1:] {
			parts = append(parts, grammar.Lit(sep), e)
		}
		return grammar.Seq(append(parts, rest[0])...)
	}
	// No required argument: the first one written is any optional one.
	alts := []grammar.Expr{grammar.Lit("")}
	for k, e := range opt {
		alts = append(alts, grammar.Seq(e, rest[k+1]))
	}
	return grammar.Alt(alts...)
}
