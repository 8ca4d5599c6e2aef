package toolcall

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/wire"
)

// Gemma4 is Gemma 4's format: each call between <|tool_call> and
// <tool_call|>, call: and the function's name, then its arguments in
// Gemma's own object notation, keys bare and strings between <|"|>
// tokens:
//
//	<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3,where:{lat:48.8}}<tool_call|>
//
// Numbers, true, false and null are written as in JSON, objects and
// lists with braces and brackets. Several calls follow one another. The
// model may go on with <|tool_response>, where the template writes the
// tools' answers (an end of generation, normally). The parser also reads
// keys and strings written as JSON, as the grammar writes values other
// than strings (their schemas are JSON Schema).
var Gemma4 Format = gemma4Format{}

// isGemma4 reports a template that writes <|tool_call>.
func isGemma4(src string) bool { return strings.Contains(src, gemmaOpen) }

// Gemma 4's markup: special tokens of its vocabulary.
const (
	gemmaOpen     = "<|tool_call>"
	gemmaClose    = "<tool_call|>"
	gemmaQuote    = `<|"|>`
	gemmaResponse = "<|tool_response>"
	gemmaCall     = "call:"
	gemmaMaxName  = 256 // a longer name or key is not markup
	gemmaMaxDepth = 64  // objects and lists nested deeper are not markup
)

type gemma4Format struct{}

// Name is the format's name.
func (gemma4Format) Name() string { return "gemma4" }

// Markers are Gemma 4's tool-call tokens.
func (gemma4Format) Markers() []string {
	return []string{gemmaOpen, gemmaClose, gemmaQuote, gemmaResponse}
}

// Parser returns the format's parser; the markup types its values.
func (gemma4Format) Parser(_ []wire.Tool, max int) Parser {
	return newMarkupParser(gemma4Scanner{}, []string{gemmaOpen}, max)
}

type gemma4Scanner struct{}

func (gemma4Scanner) scan(_, s string, end, cut bool) callScan {
	var r callScan
	i, st := firstCall(s, gemmaCall)
	if st != readDone {
		r.bad = st == readBad
		return r
	}
	b := strings.IndexByte(s[i:], '{')
	if b < 0 {
		r.bad = len(s)-i > gemmaMaxName
		return r
	}
	name := strings.TrimSpace(s[i : i+b])
	if !validName(name, gemmaMaxName) {
		r.bad = true
		return r
	}
	r.name = name
	var args argsObject
	r.args = args.text()
	i += b + 1
	for n := 0; ; n++ {
		i = skipSpace(s, i)
		if i == len(s) {
			return r
		}
		if s[i] == '}' {
			r.args, r.complete = args.whole(), true
			return gemmaEnd(s, i+1, end, r)
		}
		if n > 0 {
			if s[i] != ',' {
				r.bad = true
				return r
			}
			i = skipSpace(s, i+1)
		}
		key, j, st := gemmaKey(s, i)
		if st != readDone {
			r.bad = st == readBad
			return r
		}
		value, j, st := gemmaValue(s, skipSpace(s, j), 0, end && !cut)
		if st != readDone {
			r.bad = st == readBad
			return r
		}
		r.args = args.add(key, value)
		i = j
	}
}

// gemmaEnd reads what closes a call whose arguments end at s[i:]: its
// <tool_call|>, and the <|tool_response> the model may write after it.
func gemmaEnd(s string, i int, end bool, r callScan) callScan {
	i = skipSpace(s, i)
	rest := s[i:]
	switch {
	case strings.HasPrefix(rest, gemmaClose):
		r = closeWith(s, i+len(gemmaClose), gemmaResponse, end, r)
	case strings.HasPrefix(gemmaClose, rest) && !end:
		// the closing token may be arriving
	default:
		// No closing token (a stop string took it): the call ends with
		// its arguments.
		r.closed, r.end = true, i
	}
	return r
}

// gemmaKey reads an object key at s[i:], bare or quoted, and the index
// after its colon.
func gemmaKey(s string, i int) (key string, next, state int) {
	rest := s[i:]
	switch {
	case strings.HasPrefix(rest, gemmaQuote) || strings.HasPrefix(rest, `"`):
		v, j, st := gemmaValue(s, i, 0, false)
		if st != readDone {
			return "", 0, st
		}
		if json.Unmarshal([]byte(v), &key) != nil {
			return "", 0, readBad
		}
		i = skipSpace(s, j)
		switch {
		case i == len(s):
			return "", 0, readMore
		case s[i] != ':':
			return "", 0, readBad
		}
		return key, i + 1, readDone
	case strings.HasPrefix(gemmaQuote, rest):
		return "", 0, readMore
	}
	c := strings.IndexByte(rest, ':')
	switch {
	case c < 0 && len(rest) > gemmaMaxName:
		return "", 0, readBad
	case c < 0:
		return "", 0, readMore
	}
	key = strings.TrimSpace(rest[:c])
	if !validName(key, gemmaMaxName) || strings.ContainsAny(key, ",[]") {
		return "", 0, readBad
	}
	return key, i + c + 1, readDone
}

// gemmaValue reads the value at s[i:] and returns its JSON text and the
// index after it. A bare word ends where the text ends only at the
// answer's end (whole).
func gemmaValue(s string, i, depth int, whole bool) (value string, next, state int) {
	if depth > gemmaMaxDepth {
		return "", 0, readBad
	}
	rest := s[i:]
	switch {
	case rest == "":
		return "", 0, readMore
	case strings.HasPrefix(rest, gemmaQuote):
		e := strings.Index(rest[len(gemmaQuote):], gemmaQuote)
		if e < 0 {
			return "", 0, readMore
		}
		text := rest[len(gemmaQuote) : len(gemmaQuote)+e]
		return quote(text), i + len(gemmaQuote) + e + len(gemmaQuote), readDone
	case strings.HasPrefix(gemmaQuote, rest):
		return "", 0, readMore
	case rest[0] == '"':
		e, ok := valueEnd(s, i)
		if !ok {
			return "", 0, readMore
		}
		if !json.Valid([]byte(s[i:e])) {
			return "", 0, readBad
		}
		return s[i:e], e, readDone
	case rest[0] == '{' || rest[0] == '[':
		return gemmaList(s, i, depth, whole)
	}
	// A bare word: a number, true, false, null, or text.
	e := strings.IndexAny(rest, ",}]\n")
	if e < 0 {
		if !whole {
			return "", 0, readMore
		}
		e = len(rest)
	}
	word := strings.TrimSpace(rest[:e])
	switch word {
	case "":
		return "", 0, readBad
	case "True":
		word = "true"
	case "False":
		word = "false"
	case "None":
		word = "null"
	}
	if !gemmaScalar.MatchString(word) {
		word = quote(word)
	}
	return word, i + e, readDone
}

// gemmaScalar matches the bare words that are JSON as they are.
var gemmaScalar = regexp.MustCompile(`^(true|false|null|-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?)$`)

// gemmaList reads an object or a list at s[i:].
func gemmaList(s string, i, depth int, whole bool) (value string, next, state int) {
	object := s[i] == '{'
	closer := byte(']')
	if object {
		closer = '}'
	}
	var b strings.Builder
	b.WriteByte(s[i])
	i++
	for n := 0; ; n++ {
		i = skipSpace(s, i)
		if i == len(s) {
			return "", 0, readMore
		}
		if s[i] == closer {
			b.WriteByte(closer)
			return b.String(), i + 1, readDone
		}
		if n > 0 {
			if s[i] != ',' {
				return "", 0, readBad
			}
			i = skipSpace(s, i+1)
			b.WriteString(", ")
		}
		if object {
			key, j, st := gemmaKey(s, i)
			if st != readDone {
				return "", 0, st
			}
			b.WriteString(quote(key))
			b.WriteString(": ")
			i = skipSpace(s, j)
		}
		v, j, st := gemmaValue(s, i, depth+1, whole)
		if st != readDone {
			return "", 0, st
		}
		b.WriteString(v)
		i = j
	}
}

// Grammar forces calls in Gemma 4's markup, each tool's parameters in
// the order of their names (as the template writes earlier calls), the
// optional ones optional. A string parameter's value is its text between
// <|"|> tokens; any other's is the JSON its schema describes, which the
// parser reads too.
func (gemma4Format) Grammar(tools []wire.Tool, parallel bool, lim grammar.SchemaLimits) (string, error) {
	if len(tools) == 0 {
		return "", fmt.Errorf("tool-call grammar: no tools")
	}
	b := grammar.NewBuilder(lim)
	types := paramTypes(tools)
	calls := make([]grammar.Expr, len(tools))
	for i, t := range tools {
		name := t.Function.Name
		params := parameters(t)
		props, required, err := orderedProperties(params)
		if err != nil {
			return "", fmt.Errorf("tool %q: parameters: %w", name, err)
		}
		slices.SortStableFunc(props, func(a, b property) int { return strings.Compare(a.name, b.name) })
		elems := make([]grammar.Expr, len(props))
		for k, p := range props {
			var value grammar.Expr
			if slices.Equal(types[name][p.name], []string{"string"}) {
				value = grammar.Seq(grammar.Lit(gemmaQuote), textValue(b, p, gemmaQuote), grammar.Lit(gemmaQuote))
			} else if value, err = b.Schema(params, propertyPointer(p.name)); err != nil {
				return "", fmt.Errorf("tool %q: parameters: %w", name, err)
			}
			key := p.name
			if !gemmaBareKey.MatchString(key) {
				key = gemmaQuote + key + gemmaQuote
			}
			elems[k] = grammar.Seq(grammar.Lit(key+":"), value)
		}
		args := commaList(b, elems, func(k int) bool { return required[props[k].name] })
		calls[i] = grammar.Seq(grammar.Lit(gemmaOpen+gemmaCall+name+"{"), args, grammar.Lit("}"+gemmaClose))
	}
	return callList(b, calls, parallel, "", "")
}

// gemmaBareKey matches the keys Gemma writes without quotes.
var gemmaBareKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)

// commaList is the grammar of elems in their order, separated by commas,
// each present when required(k) and optional otherwise.
func commaList(b *grammar.Builder, elems []grammar.Expr, required func(k int) bool) grammar.Expr {
	// after[k]: elements k.. after one already written, each with its
	// comma; first[k]: elements k.. with none written before.
	after := make([]grammar.Expr, len(elems)+1)
	first := make([]grammar.Expr, len(elems)+1)
	after[len(elems)], first[len(elems)] = grammar.Seq(), grammar.Seq()
	for k := len(elems) - 1; k >= 0; k-- {
		withComma := grammar.Seq(grammar.Lit(","), elems[k])
		if required(k) {
			after[k] = grammar.Seq(withComma, after[k+1])
			first[k] = grammar.Seq(elems[k], after[k+1])
		} else {
			after[k] = grammar.Seq(grammar.Opt(withComma), after[k+1])
			first[k] = grammar.Alt(grammar.Seq(elems[k], after[k+1]), first[k+1])
		}
		if k > 0 {
			after[k] = b.Rule("args", after[k])
			first[k] = b.Rule("args", first[k])
		}
	}
	return first[0]
}
