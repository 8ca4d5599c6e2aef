package toolcall

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/wire"
)

// xmlCall is the markup of a family that writes each call as an element
// (or a head naming the function) holding one element per argument, the
// argument's value as text when its parameter is a string and as JSON
// otherwise: Qwen3-Coder's <function=NAME><parameter=KEY>, MiniMax's
// <invoke>, DSML's, Hy3's and GLM's keys and values, Kimi K3's and
// MiniCPM's elements. A family is a value of this table: its literal
// markup, and a hook where it reads or writes a piece its own way. The
// shared code reads calls as they arrive (xmlScanner) and writes the
// grammar that forces them.
//
// A region of markup (see markupParser) opens at one of opens: at the tag
// of a list of calls (a block, or Qwen3-Coder's tags around each call),
// whose first call's tag, call, follows past whitespace; or at call
// itself, where a family lets the next calls of a list open their own
// region. A call is call, its head (the function's name), its
// arguments' elements, each param KEY [valueTag] VALUE paramEnd, and
// callEnd; the list's end tag (one of listEnds) may follow it.
type xmlCall struct {
	name    string
	markers []string // see Format.Markers

	opens    []string // the tags at which a region opens
	call     string   // the tag that opens a call ("" when its name follows the list's tag)
	head     tagReader
	callEnd  string
	listEnds []string // the tags that end a list after a call; none: callEnd ends the region
	// openList: a region opens at call only while a list is open, which
	// a call's end leaves open unless the list's end tag follows it
	// (MiniMax's <invoke>; elsewhere call opens text).
	openList bool
	// listEndWhole: the list's end tag belongs to the region only whole,
	// even at the answer's end (Kimi K3); a tag broken off there is not
	// the region's.
	listEndWhole bool

	param    string    // opens an argument's element
	key      tagReader // reads the element's key, after param
	valueTag string    // opens the value, past whitespace after the key (Hy3's and GLM's); "" for none
	paramEnd string    // ends the value, and the element
	cdata    bool      // a value may be a CDATA section, its text as it is (MiniCPM)
	// value is the JSON text of an argument's value written as text,
	// given its tag's attributes and the types its parameter's schema
	// allows; nil: typedValue.
	value func(text string, attrs map[string]string, types []string) string
	// nested, when set, reads a whole argument's element at s[i:], param
	// included, in place of key, valueTag and paramEnd: one whose value
	// may be elements in turn (MiniMax M3), typed by the schema of the
	// call's parameters.
	nested func(s string, i int, params *xmlSchema) (key, value string, next, state int)
	// whole is the tag of an element that may hold a call's arguments
	// whole, as JSON, instead of argument elements (Kimi K3's json), and
	// wholeArgs reads it after the tag: the arguments as far as they
	// arrived, streamed as written. Nothing of the arguments is certain
	// before it is known which way the call writes them.
	whole     string
	wholeArgs func(s string, i int) (args string, next, state int)

	// endTagCut: at the answer's end, a call's end tag broken off leaves
	// the call cut off; otherwise the region is not a call, unless what
	// broke off may be an argument's tag.
	endTagCut bool
	// endOptional: a stop string may take the call's end tag, so at the
	// answer's end (not cut off) a call is complete after its name or
	// any argument (GLM).
	endOptional bool
	// plain: the markup is plain text, not special tokens (MiniCPM): the
	// function's name is certain only once an argument or the call's end
	// follows it, and at the answer's end an argument's tag broken off is
	// not markup.
	plain bool

	// The grammar: each call as writeCall writes it, its arguments'
	// elements as writeParam writes them around their values; the calls
	// between the two texts of writeList, or when sep is set one after
	// another, each after sep. A string's free text stops before stop.
	writeCall  func(name string, params []grammar.Expr) grammar.Expr
	writeParam func(key string, types []string, value grammar.Expr) grammar.Expr
	writeList  [2]string
	sep        func() grammar.Expr
	stop       string
}

// A tagReader reads the name a tag gives (a function's, an argument's
// key) at s[i:], after the tag's opening text: the name, the tag's
// attributes where it has them, the index after the tag, and how far it
// was read (readDone, readMore, readBad). ended says that the answer
// ended after s, not cut off.
type tagReader func(s string, i int, ended bool) (name string, attrs map[string]string, next, state int)

// Name is the format's name.
func (f *xmlCall) Name() string { return f.name }

// Markers are the markup the model may write as special tokens.
func (f *xmlCall) Markers() []string { return f.markers }

// Parser returns a parser that types values by the tools' schemas.
func (f *xmlCall) Parser(tools []wire.Tool, max int) Parser {
	x := &xmlScanner{f: f}
	if f.nested != nil {
		x.schemas = map[string]*xmlSchema{}
		for _, t := range tools {
			x.schemas[t.Function.Name] = newXMLSchema(parameters(t), 0)
		}
	} else {
		x.types = paramTypes(tools)
	}
	return newMarkupParser(x, f.opens, max)
}

// xmlScanner reads one call of an xmlCall family's markup.
type xmlScanner struct {
	f       *xmlCall
	types   map[string]map[string][]string // tool → parameter → JSON types its schema allows
	schemas map[string]*xmlSchema          // tool → its parameters, for nested arguments
	open    bool                           // a list is open (see xmlCall.openList)
}

// scan reads a region's call (see callScanner).
func (x *xmlScanner) scan(marker, s string, end, cut bool) callScan {
	var r callScan
	ended := end && !cut
	name, i, st := x.head(marker, s, ended)
	if st != readDone {
		r.bad = st == readBad
		return r
	}
	f := x.f
	if !f.plain {
		r.name = name
	}
	var args argsObject
	if f.whole == "" {
		r.args = args.text()
	}
	whole := "" // the arguments, when they came whole
	for n := 0; ; n++ {
		i = skipSpace(s, i)
		rest := s[i:]
		switch {
		case strings.HasPrefix(rest, f.callEnd):
			r.name, r.args, r.complete = name, args.whole(), true
			if whole != "" {
				r.args = whole
			}
			return x.close(s, i+len(f.callEnd), end, r)
		case rest == "" && ended && f.endOptional:
			r.args, r.complete = args.whole(), true
			return r
		case strings.HasPrefix(f.callEnd, rest) && (!end || f.endTagCut):
			return r // the call's end tag is arriving, or broke off
		case f.whole != "" && (strings.HasPrefix(f.whole, rest) || strings.HasPrefix(f.param, rest)):
			return r // which element follows is not certain yet
		case f.whole != "" && strings.HasPrefix(rest, f.whole) && n == 0:
			a, j, st := f.wholeArgs(s, i+len(f.whole))
			r.args = a
			if st != readDone {
				r.bad = st == readBad
				return r
			}
			whole, i = a, j
			continue
		case strings.HasPrefix(rest, f.param) && whole == "":
			r.name = name // certain now, where the markup is plain
		case strings.HasPrefix(f.param, rest) && (!end || !f.plain):
			return r // an argument's tag is arriving, or broke off
		default:
			r.bad = true
			return r
		}
		if n == 0 {
			r.args = args.text() // an argument's element: the object begins
		}
		key, value, j, st := x.arg(name, s, i, end, ended)
		if st != readDone {
			r.bad = st == readBad
			return r
		}
		r.args = args.add(key, value)
		i = j
	}
}

// head reads what opens a region after its marker, up to the call's
// arguments: the function's name and the index after it.
func (x *xmlScanner) head(marker, s string, ended bool) (name string, next, state int) {
	f := x.f
	i := 0
	switch {
	case marker != f.call:
		var st int
		if i, st = firstCall(s, f.call); st != readDone {
			return "", 0, st
		}
	case f.openList && !x.open:
		return "", 0, readBad // a call's tag outside a list is text
	}
	name, _, next, state = f.head(s, i, ended)
	return name, next, state
}

// arg reads the argument's element at s[i:], of a call of tool: its key,
// its value's JSON text and the index after it.
func (x *xmlScanner) arg(tool, s string, i int, end, ended bool) (key, value string, next, state int) {
	f := x.f
	if f.nested != nil {
		return f.nested(s, i, x.schemas[tool])
	}
	key, attrs, i, st := f.key(s, i+len(f.param), ended)
	if st != readDone {
		return "", "", 0, st
	}
	if f.valueTag != "" {
		i = skipSpace(s, i)
		switch rest := s[i:]; {
		case strings.HasPrefix(rest, f.valueTag):
			i += len(f.valueTag)
		case strings.HasPrefix(f.valueTag, rest):
			return "", "", 0, readMore
		default:
			return "", "", 0, readBad
		}
	}
	text, i, st := x.text(s, i, end)
	if st != readDone {
		return "", "", 0, st
	}
	types := x.types[tool][key]
	if f.value == nil {
		return key, typedValue(text, types), i, readDone
	}
	return key, f.value(text, attrs, types), i, readDone
}

// The CDATA section a value may be (see xmlCall.cdata).
const (
	cdataOpen  = "<![CDATA["
	cdataClose = "]]>"
)

// text reads a value's text at s[i:], up to and past its paramEnd.
func (x *xmlScanner) text(s string, i int, end bool) (text string, next, state int) {
	f := x.f
	if f.cdata {
		if v, ok := strings.CutPrefix(s[i:], cdataOpen); ok {
			k := strings.Index(v, cdataClose)
			if k < 0 {
				return "", 0, readMore
			}
			i += len(cdataOpen) + k + len(cdataClose)
			switch rest := s[i:]; {
			case strings.HasPrefix(rest, f.paramEnd):
				return v[:k], i + len(f.paramEnd), readDone
			case strings.HasPrefix(f.paramEnd, rest):
				return "", 0, readMore
			}
			return "", 0, readBad
		}
		if strings.HasPrefix(cdataOpen, s[i:]) && !end {
			return "", 0, readMore
		}
	}
	k := strings.Index(s[i:], f.paramEnd)
	if k < 0 {
		return "", 0, readMore // the value is still arriving
	}
	return s[i : i+k], i + k + len(f.paramEnd), readDone
}

// close ends a region at s[i:], after its call's end tag.
func (x *xmlScanner) close(s string, i int, end bool, r callScan) callScan {
	f := x.f
	switch {
	case len(f.listEnds) == 0:
		r.closed, r.end = true, i
		return r
	case f.openList:
		return x.closeOpen(s, i, end, r)
	case f.listEndWhole:
		return closeWith(s, i, f.listEnds[0], end, r)
	}
	return closeList(s, i, end, r, f.listEnds...)
}

// closeOpen ends a call at s[i:]: with the list's end tag when it
// follows, which closes the list; without, the list stays open for the
// next call's tag.
func (x *xmlScanner) closeOpen(s string, i int, end bool, r callScan) callScan {
	listEnd := x.f.listEnds[0]
	j := skipSpace(s, i)
	switch rest := s[j:]; {
	case strings.HasPrefix(rest, listEnd):
		r.closed, r.end = true, j+len(listEnd)
		x.open = false
	case strings.HasPrefix(listEnd, rest) && !end:
		// the end tag may be arriving
	default:
		r.closed, r.end = true, i
		x.open = true
	}
	return r
}

// Grammar forces calls in the family's markup: each tool's required
// parameters in the order of its schema, then its optional ones, each
// optional. A string parameter's value is its text (one of its enum's,
// when it has one), any other's the JSON its schema describes.
func (f *xmlCall) Grammar(tools []wire.Tool, parallel bool, lim grammar.SchemaLimits) (string, error) {
	if len(tools) == 0 {
		return "", fmt.Errorf("tool-call grammar: no tools")
	}
	b := grammar.NewBuilder(lim)
	types := paramTypes(tools)
	var text grammar.Expr // a string's free text, when it may be CDATA
	if f.cdata {
		text = b.Rule("text", grammar.Alt(b.TextExcluding("<"), grammar.Seq(grammar.Lit(cdataOpen), b.TextExcluding(cdataClose), grammar.Lit(cdataClose))))
	}
	calls := make([]grammar.Expr, len(tools))
	for i, t := range tools {
		name := t.Function.Name
		parts, err := paramElements(t, func(p property, params json.RawMessage) (grammar.Expr, error) {
			pt := types[name][p.name]
			value, err := f.valueGrammar(b, params, p, pt, text)
			if err != nil {
				return grammar.Expr{}, err
			}
			return f.writeParam(p.name, pt, value), nil
		})
		if err != nil {
			return "", fmt.Errorf("tool %q: parameters: %w", name, err)
		}
		calls[i] = f.writeCall(name, parts)
	}
	if f.sep == nil {
		return callList(b, calls, parallel, f.writeList[0], f.writeList[1])
	}
	call := b.Rule("call", grammar.Alt(calls...))
	if parallel {
		return b.Grammar(grammar.Seq(call, grammar.Repeat(grammar.Seq(f.sep(), call), 0, -1)))
	}
	return b.Grammar(call)
}

// valueGrammar is the grammar of an argument's value: the JSON its
// schema describes, unless the schema allows only strings; then one of
// its enum's values, or any text: text where a value may be CDATA, else
// text without stop.
func (f *xmlCall) valueGrammar(b *grammar.Builder, params json.RawMessage, p property, types []string, text grammar.Expr) (grammar.Expr, error) {
	switch {
	case !slices.Equal(types, []string{"string"}):
		return b.Schema(params, propertyPointer(p.name))
	case f.cdata:
		if e, ok := enumValue(p); ok {
			return e, nil
		}
		return text, nil
	}
	return textValue(b, p, f.stop), nil
}

// newline is the line break between calls.
func newline() grammar.Expr { return grammar.Lit("\n") }
