package toolcall

import (
	"encoding/json"
	"regexp"
	"strings"

	"github.com/corral-llm/corral/wire"
)

// The scanning half of jsonParser: reading call objects out of a region's
// text as far as it has arrived, without a JSON decoder that would need
// the whole text.

// region is one scan of a call region's text.
type region struct {
	objs   []object
	closed bool // the region ended at end: what follows is content
	end    int
	bad    bool // the text is not a call region
}

// complete reports whether every object of the region is complete (so the
// answer's end may close it).
func (r region) complete() bool {
	return len(r.objs) > 0 && r.objs[len(r.objs)-1].complete
}

// scanRegion reads call objects: a list in [...] or objects separated by
// whitespace, ',' or ';'; a region with an end tag (Hermes's
// </tool_call>) ends with it. It is run again over the whole region as
// text arrives.
func scanRegion(s string, endTag string) region {
	var r region
	i := skipSpace(s, 0)
	list := i < len(s) && s[i] == '['
	if list {
		i++
	}
	for {
		i = skipSpace(s, i)
		if i == len(s) {
			return r
		}
		if list && s[i] == ']' {
			r.closed, r.end = true, i+1
			if endTag != "" {
				return closeTag(s, i+1, r, endTag)
			}
			return r
		}
		if s[i] != '{' {
			r.bad = len(r.objs) == 0 || list || endTag != ""
			r.closed, r.end = true, i
			return r
		}
		e, ok := valueEnd(s, i)
		r.objs = append(r.objs, object{text: s[i:e], complete: ok})
		if !ok {
			return r
		}
		i = skipSpace(s, e)
		if i < len(s) && (s[i] == ',' || s[i] == ';') {
			i++
			continue
		}
		if i == len(s) {
			return r
		}
		switch {
		case endTag != "" && !list && s[i] == '{':
			continue // the next object, before the end tag
		case endTag != "" && !list:
			return closeTag(s, i, r, endTag)
		case !list:
			r.closed, r.end = true, i
			return r
		}
	}
}

// closeTag expects the end tag at s[i:].
func closeTag(s string, i int, r region, tag string) region {
	i = skipSpace(s, i)
	switch rest := s[i:]; {
	case strings.HasPrefix(rest, tag):
		r.closed, r.end = true, i+len(tag)
	case strings.HasPrefix(tag, rest):
		r.closed = false // wait for the rest of the tag
	default:
		r.bad = true
	}
	return r
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// valueEnd finds the end of the JSON value at s[i:], and whether it is
// complete; an incomplete value runs to the end of s.
func valueEnd(s string, i int) (int, bool) {
	depth, inStr, esc := 0, false, false
	for j := i; j < len(s); j++ {
		c := s[j]
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
				if depth == 0 {
					return j + 1, true
				}
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth <= 0 {
				return j + 1, true
			}
		case ' ', '\t', '\r', '\n', ',', ';':
			if depth == 0 {
				return j, j > i
			}
		}
	}
	return len(s), false
}

// object is the text of one call object, complete or not yet.
type object struct {
	text     string
	complete bool
}

// callHead matches a call object's start when it names the function
// before its arguments.
var callHead = regexp.MustCompile(`^\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"(?:arguments|parameters)"\s*:\s*`)

// head returns the function's name and the raw arguments written so far,
// with streamable true when the object names the function before
// arguments that are an object or an array (so they can be sent as they
// arrive).
func (o object) head() (name, args string, streamable bool) {
	m := callHead.FindStringSubmatchIndex(o.text)
	if m == nil {
		return "", "", false
	}
	if json.Unmarshal([]byte(o.text[m[2]:m[3]]), &name) != nil {
		return "", "", false
	}
	rest := o.text[m[1]:]
	if rest == "" || (rest[0] != '{' && rest[0] != '[') {
		return "", "", false
	}
	e, _ := valueEnd(rest, 0)
	return name, rest[:e], true
}

// call decodes a complete object into its calls: {"name", "arguments"}
// (or "parameters"), OpenAI's {"function": {"name", "arguments"}}, or
// {"tool_calls": [...]} of either. Arguments keep the model's JSON text;
// arguments written as a string are decoded; absent ones are "{}".
func (o object) call() ([]wire.ToolCall, bool) {
	if !o.complete {
		return nil, false
	}
	var v struct {
		Name       string          `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
		Function   *struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
		ToolCalls []json.RawMessage `json:"tool_calls"`
	}
	if json.Unmarshal([]byte(o.text), &v) != nil {
		return nil, false
	}
	if v.ToolCalls != nil && v.Name == "" && v.Function == nil {
		var calls []wire.ToolCall
		for _, raw := range v.ToolCalls {
			c, ok := object{text: string(raw), complete: true}.call()
			if !ok {
				return nil, false
			}
			calls = append(calls, c...)
		}
		return calls, len(calls) > 0
	}
	name, args := v.Name, v.Arguments
	if args == nil {
		args = v.Parameters
	}
	if v.Function != nil {
		name, args = v.Function.Name, v.Function.Arguments
	}
	if name == "" {
		return nil, false
	}
	text := string(args)
	var s string
	switch {
	case args == nil || string(args) == "null":
		text = "{}"
	case json.Unmarshal(args, &s) == nil:
		text = s
	}
	return []wire.ToolCall{{Type: "function", Function: wire.FunctionCall{Name: name, Arguments: text}}}, true
}

// readArgs reads a call's arguments at s[i:], past whitespace: a JSON
// object, given as far as it has arrived, or a JSON string (its text),
// given once whole. It returns them, the index after them, and readDone
// once they are whole, readMore while they arrive, or readBad when they
// are neither.
func readArgs(s string, i int) (args string, next, state int) {
	i = skipSpace(s, i)
	if i == len(s) {
		return "", 0, readMore
	}
	e, complete := valueEnd(s, i)
	value := s[i:e]
	switch value[0] {
	case '{':
		if !complete {
			return value, 0, readMore // streamed as it is written
		}
		return value, e, readDone
	case '"':
		var text string
		switch {
		case !complete:
			return "", 0, readMore
		case json.Unmarshal([]byte(value), &text) != nil:
			return "", 0, readBad
		}
		return text, e, readDone
	}
	return "", 0, readBad
}
