package toolcall

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Reading calls written as Python: name(key=value, ...), the values
// Python literals (strings in single or double quotes, numbers, True,
// False, None, lists, tuples and dicts; JSON's true, false and null too),
// which become the call's arguments as a JSON object. LFM2 writes a list
// of such calls, Llama 3.2 and 4 can, and Llama 3.1 calls its built-in
// tools so.

// pyState is how far a Python literal has arrived.
type pyState int

const (
	pyWhole pyState = iota // the literal is whole
	pyMore                 // the text ends inside it
	pyBad                  // it is no literal
)

// pyMaxDepth bounds the nesting of lists and dicts in a literal.
const pyMaxDepth = 64

// maxNameLen bounds a function's or a parameter's name: longer, it is not
// markup.
const maxNameLen = 256

// pyValue reads the Python literal at s[i:]: its value as JSON text, and
// the index after it.
func pyValue(s string, i, depth int) (js string, end int, st pyState) {
	if i == len(s) {
		return "", i, pyMore
	}
	if depth > pyMaxDepth {
		return "", i, pyBad
	}
	switch c := s[i]; {
	case c == '\'' || c == '"':
		return pyString(s, i, false)
	case (c == 'r' || c == 'R' || c == 'u' || c == 'U') && i+1 < len(s) && (s[i+1] == '\'' || s[i+1] == '"'):
		return pyString(s, i+1, c == 'r' || c == 'R')
	case c == '[' || c == '(':
		return pyList(s, i, depth)
	case c == '{':
		return pyDict(s, i, depth)
	case c == '-' || c == '+' || c == '.' || c >= '0' && c <= '9':
		return pyNumber(s, i)
	}
	j := i
	for j < len(s) && isNameByte(s[j]) && j-i < 8 {
		j++
	}
	word := s[i:j]
	for _, w := range [][2]string{{"True", "true"}, {"False", "false"}, {"None", "null"}, {"true", "true"}, {"false", "false"}, {"null", "null"}} {
		switch {
		case word == w[0] && j < len(s):
			return w[1], j, pyWhole
		case j == len(s) && strings.HasPrefix(w[0], word):
			return "", j, pyMore
		}
	}
	if j == len(s) && (word == "r" || word == "R" || word == "u" || word == "U") {
		return "", j, pyMore // a string's prefix
	}
	return "", i, pyBad
}

// isNameByte reports whether c may be part of a name.
func isNameByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// pyString reads the string literal whose quote is s[i], raw without
// escapes.
func pyString(s string, i int, raw bool) (string, int, pyState) {
	q := s[i : i+1]
	if strings.HasPrefix(s[i:], q+q+q) {
		q = q + q + q
	} else if len(s)-i < 3 && strings.HasPrefix(q+q+q, s[i:]) && len(s)-i == 2 {
		return "", len(s), pyMore // '' or the start of '''
	}
	var b strings.Builder
	j := i + len(q)
	for j < len(s) {
		switch c := s[j]; {
		case strings.HasPrefix(s[j:], q):
			return quote(b.String()), j + len(q), pyWhole
		case c == '\\' && !raw:
			if j+1 == len(s) {
				return "", len(s), pyMore
			}
			n, st := pyEscape(s, j, &b)
			if st != pyWhole {
				return "", len(s), st
			}
			j = n
		case c == '\\' && raw && j+1 < len(s):
			b.WriteString(s[j : j+2])
			j += 2
		case c == q[0] && len(q) == 3 && len(s)-j < 3:
			return "", len(s), pyMore // may be the closing quotes
		default:
			b.WriteByte(c)
			j++
		}
	}
	return "", len(s), pyMore
}

// pyEscape writes the character of the escape at s[j] ('\\') and returns
// the index after it.
func pyEscape(s string, j int, b *strings.Builder) (int, pyState) {
	c := s[j+1]
	if simple, ok := map[byte]string{'n': "\n", 't': "\t", 'r': "\r", '\\': "\\", '\'': "'", '"': "\"",
		'b': "\b", 'f': "\f", 'v': "\v", 'a': "\a", '0': "\x00", '/': "/", '\n': ""}[c]; ok {
		b.WriteString(simple)
		return j + 2, pyWhole
	}
	digits := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
	if digits == 0 {
		b.WriteString(s[j : j+2]) // not an escape: kept as written
		return j + 2, pyWhole
	}
	if len(s) < j+2+digits {
		return j, pyMore
	}
	v, err := strconv.ParseUint(s[j+2:j+2+digits], 16, 32)
	if err != nil || !utf8.ValidRune(rune(v)) {
		return j, pyBad
	}
	b.WriteRune(rune(v))
	return j + 2 + digits, pyWhole
}

// pyNumber reads the number at s[i:], as JSON.
func pyNumber(s string, i int) (string, int, pyState) {
	j := i
	for j < len(s) && strings.IndexByte("0123456789.eE+-_", s[j]) >= 0 {
		if (s[j] == '+' || s[j] == '-') && j > i && s[j-1] != 'e' && s[j-1] != 'E' {
			break
		}
		j++
	}
	if j == len(s) {
		return "", j, pyMore
	}
	text := strings.ReplaceAll(strings.TrimPrefix(s[i:j], "+"), "_", "")
	if json.Valid([]byte(text)) {
		return text, j, pyWhole
	}
	if n, err := strconv.ParseInt(text, 10, 64); err == nil {
		return strconv.FormatInt(n, 10), j, pyWhole
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return "", i, pyBad
	}
	out := strconv.FormatFloat(f, 'g', -1, 64)
	if !json.Valid([]byte(out)) {
		return "", i, pyBad // inf, nan
	}
	return out, j, pyWhole
}

// pyList reads a list or a tuple at s[i:] as a JSON array; a parenthesized
// single value without a comma is that value.
func pyList(s string, i, depth int) (string, int, pyState) {
	closing := byte(']')
	if s[i] == '(' {
		closing = ')'
	}
	var items []string
	comma := false
	j := i + 1
	for {
		j = skipSpace(s, j)
		if j == len(s) {
			return "", j, pyMore
		}
		if s[j] == closing {
			if closing == ')' && len(items) == 1 && !comma {
				return items[0], j + 1, pyWhole
			}
			return "[" + strings.Join(items, ", ") + "]", j + 1, pyWhole
		}
		v, e, st := pyValue(s, j, depth+1)
		if st != pyWhole {
			return "", e, st
		}
		items = append(items, v)
		j = skipSpace(s, e)
		if j == len(s) {
			return "", j, pyMore
		}
		switch s[j] {
		case ',':
			comma = true
			j++
		case closing:
		default:
			return "", j, pyBad
		}
	}
}

// pyDict reads a dict at s[i:] as a JSON object; a key that is not a
// string is written as one.
func pyDict(s string, i, depth int) (string, int, pyState) {
	var members []string
	j := i + 1
	for {
		j = skipSpace(s, j)
		if j == len(s) {
			return "", j, pyMore
		}
		if s[j] == '}' {
			return "{" + strings.Join(members, ", ") + "}", j + 1, pyWhole
		}
		k, e, st := pyValue(s, j, depth+1)
		if st != pyWhole {
			return "", e, st
		}
		if k == "" || k[0] == '[' || k[0] == '{' {
			return "", j, pyBad
		}
		if k[0] != '"' {
			k = quote(k)
		}
		j = skipSpace(s, e)
		if j == len(s) {
			return "", j, pyMore
		}
		if s[j] != ':' {
			return "", j, pyBad
		}
		v, e, st := pyValue(s, skipSpace(s, j+1), depth+1)
		if st != pyWhole {
			return "", e, st
		}
		members = append(members, k+": "+v)
		j = skipSpace(s, e)
		if j == len(s) {
			return "", j, pyMore
		}
		switch s[j] {
		case ',':
			j++
		case '}':
		default:
			return "", j, pyBad
		}
	}
}

// pyCall is what the text of a call written as Python says so far.
type pyCall struct {
	name string // once it is whole
	// args is the arguments as far as their values are whole: "{" and the
	// members, then "}" once the call is.
	args     string
	complete bool // the call is whole; end is the index after it
	end      int
	bad      bool
}

// readPyCall reads the call name(key=value, ...) at s[i:]. A name may
// have dots (a built-in tool's brave_search.call) and dashes.
func readPyCall(s string, i int) pyCall {
	var c pyCall
	j := i
	for j < len(s) && (isNameByte(s[j]) || s[j] == '-' || s[j] == '.') {
		j++
	}
	switch {
	case j-i > maxNameLen:
		c.bad = true
		return c
	case j == len(s):
		return c
	case j == i || s[j] != '(':
		c.bad = true
		return c
	}
	c.name = s[i:j]
	var args strings.Builder
	args.WriteByte('{')
	c.args = args.String()
	j++
	for n := 0; ; n++ {
		j = skipSpace(s, j)
		if j == len(s) {
			return c
		}
		if s[j] == ')' {
			c.args, c.complete, c.end = args.String()+"}", true, j+1
			return c
		}
		k := j
		for k < len(s) && (isNameByte(s[k]) || s[k] == '-') {
			k++
		}
		key := s[j:k]
		switch {
		case k-j > maxNameLen || k == j: // k == j: not a keyword argument
			c.bad = true
			return c
		case k == len(s):
			return c
		}
		k = skipSpace(s, k)
		if k == len(s) {
			return c
		}
		if s[k] != '=' || k+1 < len(s) && s[k+1] == '=' {
			c.bad = true
			return c
		}
		v, e, st := pyValue(s, skipSpace(s, k+1), 0)
		switch st {
		case pyMore:
			return c
		case pyBad:
			c.bad = true
			return c
		}
		if n > 0 {
			args.WriteString(", ")
		}
		args.WriteString(quote(key) + ": " + v)
		c.args = args.String()
		j = skipSpace(s, e)
		if j == len(s) {
			return c
		}
		switch s[j] {
		case ',':
			j++
		case ')':
		default:
			c.bad = true
			return c
		}
	}
}

// pyListScanner reads a Python list of calls, [f(a=1), g()], each call a
// region (those after the first chained to it), then the marker close:
// LFM2 (after <|tool_call_start|>), Llama 3.2 and 4 (bare, at the
// answer's start).
type pyListScanner struct {
	close string
}

// pyNext is the marker of a region chained to the one before in a Python
// list of calls.
const pyNext = "("

func (l pyListScanner) scan(marker, s string, end, cut bool) callScan {
	return leadEnd(l.read(marker, s, end), marker, end)
}

func (l pyListScanner) read(marker, s string, end bool) callScan {
	var r callScan
	i := skipSpace(s, 0)
	if marker != pyNext {
		switch {
		case i == len(s):
			return r
		case s[i] != '[':
			r.bad = true
			return r
		}
		i = skipSpace(s, i+1)
	}
	return readPyItem(r, s, i, end, l.close)
}

// readPyItem reads a call of a Python list at s[i:] and what follows it
// (see listTail).
func readPyItem(r callScan, s string, i int, end bool, close string) callScan {
	if i == len(s) {
		return r
	}
	c := readPyCall(s, i)
	if c.bad {
		r.bad = true
		return r
	}
	r.name, r.args = c.name, c.args
	if !c.complete {
		return r
	}
	r.complete = true
	return listTail(r, s, c.end, end, close, pyNext)
}
