package toolcall

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/wire"
)

// FunctionaryV31 is MeetKai functionary v3.1's format (on Llama 3.1): each
// call is <function=NAME>, its arguments as JSON, </function>, after any
// text; code for the python tool follows <|python_tag|> raw, to the end
// of the answer:
//
//	<function=get_weather>{"city": "Paris"}</function>
var FunctionaryV31 Format = functionaryV31{}

// FunctionaryV32 is MeetKai functionary v3.2's format: the answer is a
// series of messages, each >>> and its recipient on a line, then the
// message: text for "all" (the user), the arguments as JSON for a
// function, code for python. The generation prompt writes the first >>>:
//
//	all
//	Let me look.>>>get_weather
//	{"city": "Paris"}
var FunctionaryV32 Format = functionaryV32{}

// isFunctionaryV31 reports a template that writes calls as
// <function=NAME>{...}</function> and code after <|python_tag|> (the
// <function= of Qwen3-Coder and Seed-OSS has <parameter= elements).
func isFunctionaryV31(src string) bool {
	return strings.Contains(src, fnV31Open) && strings.Contains(src, fnV31Close) && strings.Contains(src, llamaPythonTag) &&
		!strings.Contains(src, "<parameter=")
}

// isFunctionaryV32 reports a template that writes each message after >>>
// and its recipient.
func isFunctionaryV32(src string) bool {
	return strings.Contains(src, "'>>>all\\n'") || strings.Contains(src, ">>>${recipient}")
}

// Functionary's markup.
const (
	fnV31Open  = "<function="
	fnV31Close = "</function>"
	fnV32Start = ">>>"
	fnV32Text  = ">>>all\n"
)

type functionaryV31 struct{}

// Name is the format's name.
func (functionaryV31) Name() string { return "functionary-v3.1" }

// Markers are the format's markup.
func (functionaryV31) Markers() []string { return []string{fnV31Open, fnV31Close, llamaPythonTag} }

// Parser returns the format's parser; a tool named python runs the code
// written after <|python_tag|>.
func (functionaryV31) Parser(tools []wire.Tool, max int) Parser {
	code, key := codeTool(tools, "python")
	return newMarkupParser(fnV31Scanner{code: code, codeKey: key}, []string{fnV31Open, llamaPythonTag}, max)
}

type fnV31Scanner struct {
	code, codeKey string
}

func (f fnV31Scanner) scan(marker, s string, end, cut bool) callScan {
	var r callScan
	if marker == llamaPythonTag {
		return codeCall(r, f.code, f.codeKey, s, end, cut)
	}
	e := strings.IndexAny(s, ">\n<{ ")
	switch {
	case e < 0 && len(s) <= maxNameLen && !end:
		return r
	case e <= 0 || e > maxNameLen || s[e] != '>':
		r.bad = true
		return r
	}
	return jsonArgs(r, s[:e], s, e+1, end, fnV31Close)
}

// jsonArgs reads the arguments of a call of the function name, a JSON
// object at s[i:] past whitespace, and the marker close after them, if
// any. The name is certain, and sent, once the object has begun: markup
// around something else is given back whole.
func jsonArgs(r callScan, name, s string, i int, end bool, close string) callScan {
	i = skipSpace(s, i)
	if i == len(s) {
		return r
	}
	if s[i] != '{' {
		r.bad = true
		return r
	}
	r.name = name
	e, whole := valueEnd(s, i)
	r.args = s[i:e]
	if !whole {
		return r
	}
	if !jsonObject(r.args) {
		r.bad = true
		return r
	}
	r.complete = true
	return closeTail(r, s, e, end, close)
}

// jsonObject reports whether s is a JSON object.
func jsonObject(s string) bool {
	var v map[string]json.RawMessage
	return json.Unmarshal([]byte(s), &v) == nil && v != nil
}

// isName reports whether s is made of the characters of a function's
// name: letters, digits, '_', '-' and '.'.
func isName(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isNameByte(s[i]) && s[i] != '-' && s[i] != '.' {
			return false
		}
	}
	return true
}

// Grammar forces <function=NAME>{...}</function> calls.
func (functionaryV31) Grammar(tools []wire.Tool, parallel bool, lim grammar.SchemaLimits) (string, error) {
	return simpleCallsGrammar(tools, parallel, lim, func(name string) (string, string, string) {
		return fnV31Open + name + ">", fnV31Close, ""
	})
}

type functionaryV32 struct{}

// Name is the format's name.
func (functionaryV32) Name() string { return "functionary-v3.2" }

// Markers are the format's markup.
func (functionaryV32) Markers() []string { return []string{fnV32Start} }

// Parser returns the format's parser: text to "all" is content (the
// first message's "all" line too, whose >>> the prompt wrote), a
// message to a function a call; a tool named python runs the code sent
// to it.
func (functionaryV32) Parser(tools []wire.Tool, max int) Parser {
	code, key := codeTool(tools, "python")
	names := map[string]bool{}
	for _, t := range tools {
		names[t.Function.Name] = true
	}
	p := newMarkupParser(fnV32Scanner{code: code, codeKey: key, names: names}, []string{fnV32Start}, max).leading()
	return dropping(p, []string{fnV32Text}, []string{"all\n"})
}

type fnV32Scanner struct {
	code, codeKey string
	names         map[string]bool // the tools, which the answer's first message may address
}

func (f fnV32Scanner) scan(marker, s string, end, cut bool) callScan {
	var r callScan
	e := strings.IndexByte(s, '\n')
	switch {
	case e < 0 && len(s) <= maxNameLen && (!end || cut && marker != ""):
		// The name may be arriving, or a >>> cut off in it.
		r.bad = !isName(s)
		return r
	case e <= 0 || e > maxNameLen:
		r.bad = true
		return r
	}
	name := s[:e]
	if !isName(name) {
		r.bad = true
		return r
	}
	if marker == "" && len(f.names) > 0 && !f.names[name] {
		// The answer's first message, when it is not to a tool, is text;
		// but one to a name that is not a tool, with a JSON object after
		// it, is a call of a function the request did not offer.
		i := skipSpace(s, e+1)
		if i == len(s) && !end {
			return r // what follows decides
		}
		r.bad, r.broken = true, i < len(s) && s[i] == '{'
		return r
	}
	i := skipSpace(s, e+1)
	if name == f.code && (i == len(s) || s[i] != '{') {
		r.name = name
		if i == len(s) && !end {
			return r
		}
		// Code runs to the next message or the end of the answer.
		if k := strings.Index(s[i:], fnV32Start); k >= 0 {
			r.args = "{" + quote(f.codeKey) + ": " + quote(strings.TrimSpace(s[i:i+k])) + "}"
			r.complete, r.closed, r.end = true, true, i+k
			return r
		}
		if held := heldPrefix(s, []string{fnV32Start}); held > 0 && !end {
			return r
		}
		return codeCall(r, f.code, f.codeKey, s[i:], end, cut)
	}
	return jsonArgs(r, name, s, e+1, end, "")
}

// Grammar forces NAME, a line break and the arguments, after the >>> the
// prompt wrote; more calls each after >>>.
func (functionaryV32) Grammar(tools []wire.Tool, parallel bool, lim grammar.SchemaLimits) (string, error) {
	return simpleCallsGrammar(tools, parallel, lim, func(name string) (string, string, string) {
		return name + "\n", "", fnV32Start
	})
}

// simpleCallsGrammar forces calls that are each markup (head), the
// arguments as JSON, and markup (tail) the markup of a tool's name gives;
// calls after the first begin with sep (one call when parallel is off).
func simpleCallsGrammar(tools []wire.Tool, parallel bool, lim grammar.SchemaLimits, markup func(name string) (head, tail, sep string)) (string, error) {
	if len(tools) == 0 {
		return "", fmt.Errorf("tool-call grammar: no tools")
	}
	b := grammar.NewBuilder(lim)
	sep := ""
	calls, err := schemaCalls(b, tools, func(name string, args grammar.Expr) grammar.Expr {
		head, tail, s := markup(name)
		sep = s
		return grammar.Seq(grammar.Lit(head), args, grammar.Lit(tail))
	})
	if err != nil {
		return "", err
	}
	call := b.Rule("call", grammar.Alt(calls...))
	if parallel {
		return b.Grammar(grammar.Seq(call, grammar.Repeat(grammar.Seq(grammar.Lit(sep), call), 0, -1)))
	}
	return b.Grammar(call)
}
