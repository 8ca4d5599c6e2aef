package toolcall

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/wire"
)

// Reading the call objects that several families write, one after
// another or in a JSON list inside their markup: {"name": ...,
// "arguments": {...}} (or "tool_name", "parameters", and other members
// such as an id), as far as the text has arrived, so that a call that
// names its function before its arguments streams them.

// The keys of a call object's function name and of its arguments.
var (
	callNameKeys = []string{"name", "tool_name"}
	callArgsKeys = []string{"arguments", "parameters"}
)

// maxKeyLen bounds a call object's member names: longer, it is no call.
const maxKeyLen = 256

// callObject is what the text of a call object says so far.
type callObject struct {
	name string // the function's name, once it is whole
	// args is the arguments' JSON text as far as it has arrived (each read
	// of a longer text gives a longer one that begins with it), "{}" for
	// none once the object is whole.
	args     string
	complete bool // the object is whole and a call; end is the index after it
	end      int
	bad      bool // not a call object
}

// readCallObject reads the call object that begins at s[i] ('{').
func readCallObject(s string, i int) callObject {
	var o callObject
	args, argsSet := "", false
	j := skipSpace(s, i+1)
	if j < len(s) && s[j] == '}' {
		o.bad = true // no name
		return o
	}
	for {
		j = skipSpace(s, j)
		if j == len(s) {
			return o
		}
		if s[j] != '"' {
			o.bad = true
			return o
		}
		ke, whole := stringEnd(s, j)
		if !whole {
			o.bad = ke-j > maxKeyLen
			return o
		}
		var key string
		if ke-j > maxKeyLen || json.Unmarshal([]byte(s[j:ke]), &key) != nil {
			o.bad = true
			return o
		}
		j = skipSpace(s, ke)
		if j == len(s) {
			return o
		}
		if s[j] != ':' {
			o.bad = true
			return o
		}
		j = skipSpace(s, j+1)
		if j == len(s) {
			return o
		}
		ve, whole, ok := jsonValueEnd(s, j)
		if !ok {
			o.bad = true
			return o
		}
		value := s[j:ve]
		switch {
		case contains(callNameKeys, key) && o.name == "":
			if !whole {
				return o
			}
			if json.Unmarshal([]byte(value), &o.name) != nil || o.name == "" {
				o.bad = true
				return o
			}
		case contains(callArgsKeys, key) && !argsSet:
			switch value[0] {
			case '{':
				o.args = value // streamed as it arrives
			case '"':
				// Arguments written as a JSON string: decoded once whole.
				if whole && json.Unmarshal([]byte(value), &args) != nil {
					o.bad = true
					return o
				}
			case 'n':
				args = "{}" // null
			default:
				o.bad = true
				return o
			}
			argsSet = whole
		}
		if !whole {
			return o
		}
		j = skipSpace(s, ve)
		if j == len(s) {
			return o
		}
		switch s[j] {
		case ',':
			j++
			continue
		case '}':
		default:
			o.bad = true
			return o
		}
		// The object is whole.
		if o.name == "" || !json.Valid([]byte(s[i:j+1])) {
			o.bad = true
			return o
		}
		switch {
		case args != "":
			o.args = args
		case o.args == "":
			o.args = "{}"
		}
		o.complete, o.end = true, j+1
		return o
	}
}

// stringEnd finds the end of the JSON string that begins at s[i] ('"'),
// and whether it is whole; an unfinished string runs to the end of s.
func stringEnd(s string, i int) (int, bool) {
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case '"':
			return j + 1, true
		}
	}
	return len(s), false
}

// jsonValueEnd finds the end of the JSON value that begins at s[i], and
// whether it is whole (an unfinished value runs to the end of s); ok is
// false when s[i:] cannot be one.
func jsonValueEnd(s string, i int) (end int, whole, ok bool) {
	switch c := s[i]; {
	case c == '"':
		e, w := stringEnd(s, i)
		return e, w, true
	case c == '{' || c == '[':
		e, w := valueEnd(s, i)
		return e, w, true
	}
	j := i
	for j < len(s) && strings.IndexByte("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.+-", s[j]) >= 0 {
		j++
	}
	if j == len(s) {
		return j, false, j-i <= 64
	}
	return j, true, json.Valid([]byte(s[i:j]))
}

// callObjectScan reads the JSON call object at s[i:] into r: its name
// and arguments as far as they are certain, and r.complete once it is
// whole. It returns the index after the object and whether it is whole;
// until then r says whether it is bad or still arriving.
func callObjectScan(r callScan, s string, i int) (callScan, int, bool) {
	if i == len(s) {
		return r, 0, false
	}
	if s[i] != '{' {
		r.bad = true
		return r, 0, false
	}
	o := readCallObject(s, i)
	if o.bad {
		r.bad = true
		return r, 0, false
	}
	r.name, r.args = o.name, o.args
	if !o.complete {
		return r, 0, false
	}
	r.complete = true
	return r, o.end, true
}

// contains reports whether list has s.
func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// listTail reads what follows an item of a list of calls, at s[j:] (past
// whitespace): a ',' and another item, which opens a region chained to
// this one (marker next); or the list's end, ']', with the marker close
// after it, if any (a stop string may have taken it). It fills in r's
// closed, end and next, or leaves r.closed false until more text decides.
// A list ended by the answer's end is closed there.
func listTail(r callScan, s string, j int, end bool, close, next string) callScan {
	j = skipSpace(s, j)
	if j < len(s) && s[j] == ',' {
		k := skipSpace(s, j+1)
		switch {
		case k == len(s) && !end:
			return r
		case k == len(s):
			r.closed, r.end = true, k
			return r
		case s[k] != ']':
			r.closed, r.end, r.next = true, k, next
			return r
		}
		j = k // a trailing comma
	}
	switch {
	case j == len(s) && !end:
		return r
	case j == len(s) || s[j] != ']':
		// The list went no further: what follows is text.
		r.closed, r.end = true, j
		return r
	}
	return closeTail(r, s, j+1, end, close)
}

// closeTail expects the marker close at s[j:], past whitespace: the end
// of a region. Without it the region ends at j (a stop string took it, or
// the format writes none). At the answer's end, the first characters of
// the marker are the marker cut off (max_tokens), part of the region.
func closeTail(r callScan, s string, j int, end bool, close string) callScan {
	k := skipSpace(s, j)
	switch {
	case close == "":
	case strings.HasPrefix(s[k:], close):
		r.closed, r.end = true, k+len(close)
		return r
	case strings.HasPrefix(close, s[k:]) && !end:
		return r // the marker may be arriving
	case strings.HasPrefix(close, s[k:]) && k < len(s):
		r.closed, r.end = true, len(s)
		return r
	}
	r.closed, r.end = true, j
	return r
}

// listScanner reads calls written as a JSON list of call objects after a
// marker, [{...}, {...}], each call a region (those after the first
// chained to it), then the marker close. The list may be preceded by
// open, or opened by the marker itself (inList); a single object without
// the list is a call too.
type listScanner struct {
	open, close string
	inList      bool
}

// listNext is the marker of a region chained to the one before in a list.
const listNext = ","

func (l listScanner) scan(marker, s string, end, cut bool) callScan {
	var r callScan
	i := skipSpace(s, 0)
	inList := true
	if marker != listNext && !l.inList {
		if l.open != "" {
			switch rest := s[i:]; {
			case strings.HasPrefix(rest, l.open):
				i = skipSpace(s, i+len(l.open))
			case strings.HasPrefix(l.open, rest) && !end:
				return r
			}
		}
		if i == len(s) {
			return r
		}
		switch s[i] {
		case '[':
			i = skipSpace(s, i+1)
		case '{':
			inList = false
		default:
			r.bad = true
			return r
		}
	}
	r, e, ok := callObjectScan(r, s, i)
	if !ok {
		return r
	}
	if !inList {
		return closeTail(r, s, e, end, l.close)
	}
	return listTail(r, s, e, end, l.close, listNext)
}

// listFormat is a format that writes its calls as a JSON list of call
// objects after a marker (see listScanner): Command R7B, Command R+,
// firefunction v2, Apriel.
type listFormat struct {
	name    string
	markers []string // the markup tokens
	start   []string // the markers that open the list
	sc      listScanner
	drop    []string // the framing of the content, taken out
	// The grammar's markup: before the first call object and after the
	// last, between them, and the keys of a call object.
	before, after, sep string
	nameKey, argsKey   string
}

// Name is the format's name.
func (f *listFormat) Name() string { return f.name }

// Markers are the format's markup tokens.
func (f *listFormat) Markers() []string { return f.markers }

// Parser returns the format's parser.
func (f *listFormat) Parser(_ []wire.Tool, max int) Parser {
	var p Parser = newMarkupParser(f.sc, f.start, max)
	if len(f.drop) > 0 {
		p = dropping(p, f.drop, nil)
	}
	return p
}

// Grammar forces a list of calls in the format's markup (one call when
// parallel is off), each call's arguments following its function's
// schema.
func (f *listFormat) Grammar(tools []wire.Tool, parallel bool, lim grammar.SchemaLimits) (string, error) {
	if len(tools) == 0 {
		return "", fmt.Errorf("tool-call grammar: no tools")
	}
	b := grammar.NewBuilder(lim)
	calls, err := schemaCalls(b, tools, func(name string, args grammar.Expr) grammar.Expr {
		head := grammar.Lit(`{"` + f.nameKey + `": ` + quote(name) + `, "` + f.argsKey + `": `)
		return grammar.Seq(head, args, grammar.Lit("}"))
	})
	if err != nil {
		return "", err
	}
	call := b.Rule("call", grammar.Alt(calls...))
	list := call
	if parallel {
		list = grammar.Seq(call, grammar.Repeat(grammar.Seq(grammar.Lit(f.sep), call), 0, -1))
	}
	return b.Grammar(grammar.Seq(grammar.Lit(f.before), list, grammar.Lit(f.after)))
}
