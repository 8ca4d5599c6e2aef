package toolcall

import (
	"fmt"
	"slices"
	"strings"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/wire"
)

// KimiK2 is Kimi K2's format: the calls in one section, each its id
// (functions.NAME:INDEX), then its arguments as JSON, all between
// special tokens:
//
//	<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>
//
// Kimi K2 Instruct and K2 Thinking write it.
var KimiK2 Format = kimiK2Format{}

// isKimiK2 reports a template that writes <|tool_call_begin|>.
func isKimiK2(src string) bool { return strings.Contains(src, k2Call) }

// Kimi K2's markup.
const (
	k2Section    = "<|tool_calls_section_begin|>"
	k2SectionEnd = "<|tool_calls_section_end|>"
	k2Call       = "<|tool_call_begin|>"
	k2Args       = "<|tool_call_argument_begin|>"
	k2CallEnd    = "<|tool_call_end|>"
	k2MaxID      = 256 // a longer id is not markup
)

type kimiK2Format struct{}

// Name is the format's name.
func (kimiK2Format) Name() string { return "kimi-k2" }

// Markers are the format's special tokens.
func (kimiK2Format) Markers() []string {
	return []string{k2Section, k2SectionEnd, k2Call, k2Args, k2CallEnd}
}

// Parser returns the format's parser.
func (kimiK2Format) Parser(_ []wire.Tool, max int) Parser {
	return newMarkupParser(kimiK2Scanner{}, []string{k2Section, k2Call}, max)
}

type kimiK2Scanner struct{}

func (kimiK2Scanner) scan(marker, s string, end, cut bool) callScan {
	var r callScan
	i := 0
	if marker == k2Section {
		var st int
		if i, st = firstCall(s, k2Call); st != readDone {
			r.bad = st == readBad
			return r
		}
	}
	a := strings.Index(s[i:], k2Args)
	if a < 0 {
		r.bad = len(s)-i > k2MaxID
		return r
	}
	name, ok := kimiK2Name(strings.TrimSpace(s[i : i+a]))
	if !ok {
		r.bad = true
		return r
	}
	r.name = name
	// Arguments written as a JSON string are decoded once whole, and
	// must hold an object.
	args, e, st := readArgs(s, i+a+len(k2Args))
	if st == readDone && !strings.HasPrefix(strings.TrimSpace(args), "{") {
		st = readBad
	}
	if st != readDone {
		r.args, r.bad = args, st == readBad
		return r
	}
	r.args, r.complete = args, true
	i = skipSpace(s, e)
	switch rest := s[i:]; {
	case strings.HasPrefix(rest, k2CallEnd):
		r = closeWith(s, i+len(k2CallEnd), k2SectionEnd, end, r)
	case strings.HasPrefix(k2CallEnd, rest) && !end:
		// the call's end may be arriving
	case rest == "" || strings.HasPrefix(k2CallEnd, rest):
		// The end of the answer: a stop string took the call's end.
	default:
		r.bad = true
	}
	return r
}

// kimiK2Name reads the function's name from a call's id,
// functions.NAME:INDEX (the prefix and the index may be missing).
func kimiK2Name(id string) (string, bool) {
	id = strings.TrimPrefix(id, "functions.")
	if c := strings.LastIndexByte(id, ':'); c >= 0 {
		id = id[:c]
	}
	return id, validName(id, k2MaxID)
}

// Grammar forces calls in Kimi K2's markup, in one section, each call's
// arguments following its function's schema.
func (kimiK2Format) Grammar(tools []wire.Tool, parallel bool, lim grammar.SchemaLimits) (string, error) {
	if len(tools) == 0 {
		return "", fmt.Errorf("tool-call grammar: no tools")
	}
	b := grammar.NewBuilder(lim)
	calls, err := schemaCalls(b, tools, func(name string, args grammar.Expr) grammar.Expr {
		return grammar.Seq(grammar.Lit(k2Call+"functions."+name+":"), digits(), grammar.Lit(k2Args), args, grammar.Lit(k2CallEnd))
	})
	if err != nil {
		return "", err
	}
	return callList(b, calls, parallel, k2Section, k2SectionEnd)
}

// KimiK3 is Kimi K3's format, in its tagged markup (each tag
// <|open|>NAME ATTRS<|sep|> ... <|close|>NAME<|sep|>): the calls in a
// tools element after the response, each a call element naming the tool,
// with an argument element per argument, its JSON type in an attribute
// and its value as text (a string) or JSON (anything else):
//
//	<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|><|open|>argument key="days" type="number"<|sep|>3<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>
//
// A call may instead hold its arguments whole, as JSON in a json element
// (<|open|>json type="object"<|sep|>{...}<|close|>json<|sep|>). The
// reasoning format of Kimi K3 (package reasoning) takes the think and
// response elements around the answer apart and passes the tools element
// on as content.
var KimiK3 Format = &xmlCall{
	name:    "kimi-k3",
	markers: []string{k3Open, k3Close, k3Sep},
	opens:   []string{k3Tools, k3Call}, call: k3Call, head: k3Head, callEnd: k3CallEnd,
	listEnds: []string{k3ToolsEnd}, listEndWhole: true,
	param: k3Arg, key: k3Key, paramEnd: k3ArgEnd, value: k3Value,
	whole: k3JSON, wholeArgs: k3WholeArgs,
	endTagCut: true,
	writeCall: func(name string, params []grammar.Expr) grammar.Expr {
		return grammar.Seq(grammar.Lit(k3Call+`tool="`+k3Escape(name)+`" index="`), digits(), grammar.Lit(`"`+k3Sep), grammar.Seq(params...), grammar.Lit(k3CallEnd))
	},
	writeParam: k3Param,
	writeList:  [2]string{k3Tools, k3ToolsEnd},
	stop:       k3ArgEnd,
}

// isKimiK3 reports a template that writes Kimi K3's tags and call
// elements.
func isKimiK3(src string) bool {
	return strings.Contains(src, k3Open) && strings.Contains(src, k3Sep) && strings.Contains(src, "'call'")
}

// Kimi K3's markup.
const (
	k3Open      = "<|open|>"
	k3Close     = "<|close|>"
	k3Sep       = "<|sep|>"
	k3Tools     = k3Open + "tools" + k3Sep
	k3ToolsEnd  = k3Close + "tools" + k3Sep
	k3Call      = k3Open + "call "
	k3CallEnd   = k3Close + "call" + k3Sep
	k3Arg       = k3Open + "argument "
	k3ArgEnd    = k3Close + "argument" + k3Sep
	k3JSON      = k3Open + "json"
	k3JSONEnd   = k3Close + "json" + k3Sep
	k3MaxHeader = 1024 // a tag longer than this is not markup
)

// k3Head reads a call's attributes at s[i:]: the tool's name.
func k3Head(s string, i int, _ bool) (name string, _ map[string]string, next, state int) {
	attrs, next, st := k3Attrs(s, i)
	if st != readDone {
		return "", nil, 0, st
	}
	name = attrs["tool"]
	if !validName(name, k3MaxHeader) {
		return "", nil, 0, readBad
	}
	return name, nil, next, readDone
}

// k3Key reads an argument's attributes at s[i:]: its key, and its type.
func k3Key(s string, i int, _ bool) (key string, attrs map[string]string, next, state int) {
	attrs, next, st := k3Attrs(s, i)
	if st != readDone {
		return "", nil, 0, st
	}
	if attrs["key"] == "" {
		return "", nil, 0, readBad
	}
	return attrs["key"], attrs, next, readDone
}

// k3Value is the JSON text of an argument's value, typed by its type
// attribute, or by its parameter's schema where it has none.
func k3Value(text string, attrs map[string]string, types []string) string {
	if t, ok := attrs["type"]; ok {
		types = []string{t}
	}
	return typedValue(text, types)
}

// k3WholeArgs reads a json element at s[i:], after its tag's name: the
// arguments whole, as far as they arrived.
func k3WholeArgs(s string, i int) (args string, next, state int) {
	_, j, st := k3Attrs(s, i)
	if st != readDone {
		return "", 0, st
	}
	j = skipSpace(s, j)
	switch {
	case j == len(s):
		return "", 0, readMore
	case s[j] != '{':
		return "", 0, readBad
	}
	e, complete := valueEnd(s, j)
	args = s[j:e]
	if !complete {
		return args, 0, readMore
	}
	e = skipSpace(s, e)
	switch rest := s[e:]; {
	case strings.HasPrefix(rest, k3JSONEnd):
		return args, e + len(k3JSONEnd), readDone
	case strings.HasPrefix(k3JSONEnd, rest):
		return args, 0, readMore
	}
	return args, 0, readBad
}

// k3Attrs reads a tag's attributes (name="value" pairs, &amp; and &quot;
// escaped) up to its <|sep|> at s[i:], and returns the index after it.
func k3Attrs(s string, i int) (attrs map[string]string, next, state int) {
	e := strings.Index(s[i:], k3Sep)
	if e < 0 {
		if len(s)-i > k3MaxHeader {
			return nil, 0, readBad
		}
		return nil, 0, readMore
	}
	if e > k3MaxHeader {
		return nil, 0, readBad
	}
	attrs = map[string]string{}
	h := s[i : i+e]
	for {
		h = strings.TrimLeft(h, " ")
		if h == "" {
			return attrs, i + e + len(k3Sep), readDone
		}
		name, rest, ok := strings.Cut(h, `="`)
		if !ok || !validName(name, k3MaxHeader) {
			return nil, 0, readBad
		}
		q := strings.IndexByte(rest, '"')
		if q < 0 {
			return nil, 0, readBad
		}
		attrs[name] = strings.NewReplacer("&quot;", `"`, "&amp;", "&").Replace(rest[:q])
		h = rest[q+1:]
	}
}

// k3Escape escapes an attribute's value as Kimi K3's template does.
func k3Escape(s string) string {
	return strings.NewReplacer("&", "&amp;", `"`, "&quot;").Replace(s)
}

// k3Param is the grammar of an argument's element: a string's value is
// its text, any other's the JSON its schema describes, with its JSON type.
func k3Param(key string, types []string, value grammar.Expr) grammar.Expr {
	head := k3Arg + `key="` + k3Escape(key) + `" type="`
	if len(types) == 1 && types[0] == "string" {
		return grammar.Seq(grammar.Lit(head+`string"`+k3Sep), value, grammar.Lit(k3ArgEnd))
	}
	// The type attribute: one of the types the schema allows but string
	// (any when it does not say); the parser reads the value as JSON by
	// it.
	var alts []grammar.Expr
	for _, ty := range []string{"number", "boolean", "null", "object", "array"} {
		if len(types) == 0 || slices.Contains(types, ty) || ty == "number" && slices.Contains(types, "integer") {
			alts = append(alts, grammar.Lit(ty))
		}
	}
	if len(alts) == 0 {
		alts = []grammar.Expr{grammar.Lit("null")} // a string written as JSON: read as such
	}
	return grammar.Seq(grammar.Lit(head), grammar.Alt(alts...), grammar.Lit(`"`+k3Sep), value, grammar.Lit(k3ArgEnd))
}
