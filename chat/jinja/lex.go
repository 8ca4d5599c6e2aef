package jinja

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The lexer splits a template into text and tags the way Jinja2 does with
// trim_blocks and lstrip_blocks set (as transformers sets them):
//
//   - "\r\n" and "\r" become "\n", and one newline at the end of the
//     template is dropped (keep_trailing_newline is off);
//   - a "-" inside a tag's delimiter ("{%-", "-}}") strips all whitespace
//     on that side; a "+" ("{%+", "+%}") keeps it;
//   - trim_blocks: the first newline after a block tag or comment is
//     dropped;
//   - lstrip_blocks: spaces and tabs from the start of a line to a block
//     tag or comment are dropped (not before "{{").

type tokenKind int

const (
	tokEOF        tokenKind = iota
	tokText                 // template text
	tokVarBegin             // {{
	tokVarEnd               // }}
	tokBlockBegin           // {%
	tokBlockEnd             // %}
	tokName                 // identifier or keyword
	tokString               // string literal (val is its decoded value)
	tokInt                  // integer literal
	tokFloat                // float literal
	tokOp                   // operator or punctuation (val holds it)
)

type token struct {
	kind tokenKind
	val  string
	num  any // int or float64 for tokInt and tokFloat
	line int
}

func (t token) String() string {
	switch t.kind {
	case tokEOF:
		return "end of template"
	case tokText:
		return "template data"
	case tokVarBegin:
		return "begin of print statement"
	case tokVarEnd:
		return "end of print statement"
	case tokBlockBegin:
		return "begin of statement block"
	case tokBlockEnd:
		return "end of statement block"
	case tokString:
		return strconv.Quote(t.val)
	}
	return "'" + t.val + "'"
}

// operators, longest first so that "//" is not read as "/" "/".
var operators = []string{
	"//", "**", "==", "!=", ">=", "<=",
	"+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";",
}

type lexer struct {
	src          string
	pos          int
	line         int
	lineStarting bool // the last thing read ended a line
	toks         []token
}

// lex tokenizes src.
func lex(src string) ([]token, error) {
	src = strings.ReplaceAll(src, "\r\n", "\n")
	src = strings.ReplaceAll(src, "\r", "\n")
	src = strings.TrimSuffix(src, "\n")
	l := &lexer{src: src, line: 1, lineStarting: true}
	if err := l.run(); err != nil {
		return nil, err
	}
	l.toks = append(l.toks, token{kind: tokEOF, line: l.line})
	return l.toks, nil
}

func (l *lexer) errorf(format string, args ...any) error {
	return &Error{Line: l.line, Msg: fmt.Sprintf(format, args...), syntax: true}
}

// advance moves to pos, counting lines.
func (l *lexer) advance(pos int) {
	l.line += strings.Count(l.src[l.pos:pos], "\n")
	l.lineStarting = pos > l.pos && l.src[pos-1] == '\n'
	l.pos = pos
}

func (l *lexer) emitText(text string, line int) {
	if text != "" {
		l.toks = append(l.toks, token{kind: tokText, val: text, line: line})
	}
}

func (l *lexer) run() error {
	for l.pos < len(l.src) {
		start := l.pos
		i := nextTag(l.src, start)
		if i < 0 {
			l.emitText(l.src[start:], l.line)
			l.advance(len(l.src))
			return nil
		}
		kind := l.src[i+1]
		sign := byte(0)
		if i+2 < len(l.src) && (l.src[i+2] == '-' || l.src[i+2] == '+') {
			sign = l.src[i+2]
		}
		text := l.src[start:i]
		switch {
		case sign == '-':
			text = strings.TrimRightFunc(text, unicode.IsSpace)
		case sign != '+' && kind != '{':
			lpos := strings.LastIndexByte(text, '\n') + 1
			if lpos > 0 || l.lineStarting {
				rest := text[lpos:]
				if rest != "" && strings.TrimLeftFunc(rest, unicode.IsSpace) == "" {
					text = text[:lpos]
				}
			}
		}
		l.emitText(text, l.line)
		open := i + 2
		if sign != 0 {
			open++
		}
		if kind == '%' {
			if end, ok := rawBegin(l.src, open); ok {
				l.advance(end)
				if err := l.raw(); err != nil {
					return err
				}
				continue
			}
		}
		l.advance(open)
		var err error
		switch kind {
		case '#':
			err = l.comment()
		case '%':
			l.toks = append(l.toks, token{kind: tokBlockBegin, line: l.line})
			err = l.tag(true)
		default:
			l.toks = append(l.toks, token{kind: tokVarBegin, line: l.line})
			err = l.tag(false)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// nextTag returns the index of the next "{{", "{%" or "{#" at or after
// from, or -1.
func nextTag(s string, from int) int {
	for {
		i := strings.IndexByte(s[from:], '{')
		if i < 0 {
			return -1
		}
		i += from
		if i+1 < len(s) && (s[i+1] == '{' || s[i+1] == '%' || s[i+1] == '#') {
			return i
		}
		from = i + 1
	}
}

// rawBegin reports whether the block tag whose body starts at pos is
// "raw", and returns the end of its closing delimiter (with the
// whitespace a "-%}" strips).
func rawBegin(s string, pos int) (int, bool) {
	p := skipSpace(s, pos)
	if !strings.HasPrefix(s[p:], "raw") {
		return 0, false
	}
	p = skipSpace(s, p+3)
	switch {
	case strings.HasPrefix(s[p:], "-%}"):
		return skipSpace(s, p+3), true
	case strings.HasPrefix(s[p:], "%}"):
		return p + 2, true
	}
	return 0, false
}

func skipSpace(s string, p int) int {
	for p < len(s) {
		r, n := utf8.DecodeRuneInString(s[p:])
		if !unicode.IsSpace(r) {
			break
		}
		p += n
	}
	return p
}

// raw reads the body of {% raw %} up to {% endraw %} as text.
func (l *lexer) raw() error {
	line := l.line
	for from := l.pos; ; {
		i := strings.Index(l.src[from:], "{%")
		if i < 0 {
			return l.errorf("missing end of raw directive")
		}
		i += from
		p := i + 2
		sign := byte(0)
		if p < len(l.src) && (l.src[p] == '-' || l.src[p] == '+') {
			sign = l.src[p]
			p++
		}
		p = skipSpace(l.src, p)
		if !strings.HasPrefix(l.src[p:], "endraw") {
			from = i + 2
			continue
		}
		p = skipSpace(l.src, p+len("endraw"))
		end, ok := l.blockEnd(p)
		if !ok {
			from = i + 2
			continue
		}
		text := l.src[l.pos:i]
		switch {
		case sign == '-':
			text = strings.TrimRightFunc(text, unicode.IsSpace)
		case sign != '+':
			lpos := strings.LastIndexByte(text, '\n') + 1
			if rest := text[lpos:]; rest != "" && strings.TrimLeftFunc(rest, unicode.IsSpace) == "" && (lpos > 0 || l.lineStarting) {
				text = text[:lpos]
			}
		}
		l.emitText(text, line)
		l.advance(end)
		return nil
	}
}

// blockEnd matches the end of a block tag at p: "+%}", "-%}" and the
// whitespace after it, or "%}" and one newline (trim_blocks).
func (l *lexer) blockEnd(p int) (int, bool) {
	s := l.src
	switch {
	case strings.HasPrefix(s[p:], "+%}"):
		return p + 3, true
	case strings.HasPrefix(s[p:], "-%}"):
		return skipSpace(s, p+3), true
	case strings.HasPrefix(s[p:], "%}"):
		if p+2 < len(s) && s[p+2] == '\n' {
			return p + 3, true
		}
		return p + 2, true
	}
	return 0, false
}

// comment skips a comment; its end trims like a block tag's.
func (l *lexer) comment() error {
	start := l.pos
	k := strings.Index(l.src[start:], "#}")
	if k < 0 {
		return l.errorf("missing end of comment tag")
	}
	k += start
	end := k + 2
	switch {
	case k > start && l.src[k-1] == '-':
		end = skipSpace(l.src, end)
	case k > start && l.src[k-1] == '+':
	case end < len(l.src) && l.src[end] == '\n':
		end++
	}
	l.advance(end)
	return nil
}

// tag reads the expression tokens of a {% %} (block) or {{ }} tag up to
// its end delimiter, which counts only outside brackets.
func (l *lexer) tag(block bool) error {
	var stack []byte
	for {
		if l.pos >= len(l.src) {
			if block {
				return l.errorf("unexpected end of template: missing %%}")
			}
			return l.errorf("unexpected end of template: missing }}")
		}
		if len(stack) == 0 {
			if block {
				if end, ok := l.blockEnd(l.pos); ok {
					l.toks = append(l.toks, token{kind: tokBlockEnd, line: l.line})
					l.advance(end)
					return nil
				}
			} else {
				switch {
				case strings.HasPrefix(l.src[l.pos:], "-}}"):
					l.toks = append(l.toks, token{kind: tokVarEnd, line: l.line})
					l.advance(skipSpace(l.src, l.pos+3))
					return nil
				case strings.HasPrefix(l.src[l.pos:], "}}"):
					l.toks = append(l.toks, token{kind: tokVarEnd, line: l.line})
					l.advance(l.pos + 2)
					return nil
				}
			}
		}
		if p := skipSpace(l.src, l.pos); p > l.pos {
			l.advance(p)
			continue
		}
		tok, n, err := l.exprToken()
		if err != nil {
			return err
		}
		if tok.kind == tokOp {
			switch tok.val {
			case "(":
				stack = append(stack, ')')
			case "[":
				stack = append(stack, ']')
			case "{":
				stack = append(stack, '}')
			case ")", "]", "}":
				if len(stack) == 0 {
					return l.errorf("unexpected '%s'", tok.val)
				}
				if want := stack[len(stack)-1]; want != tok.val[0] {
					return l.errorf("unexpected '%s', expected '%c'", tok.val, want)
				}
				stack = stack[:len(stack)-1]
			}
		}
		tok.line = l.line
		l.toks = append(l.toks, tok)
		l.advance(l.pos + n)
	}
}

// exprToken reads one token of an expression at l.pos and returns it
// with its length in bytes.
func (l *lexer) exprToken() (token, int, error) {
	s := l.src[l.pos:]
	c := s[0]
	switch {
	case c >= '0' && c <= '9':
		return l.number(s)
	case c == '\'' || c == '"':
		return l.stringLit(s)
	case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= utf8.RuneSelf:
		n := 0
		for n < len(s) {
			r, size := utf8.DecodeRuneInString(s[n:])
			if r == '_' || unicode.IsLetter(r) || n > 0 && (unicode.IsDigit(r) || unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Mc, r)) {
				n += size
				continue
			}
			break
		}
		if n > 0 {
			return token{kind: tokName, val: s[:n]}, n, nil
		}
	}
	for _, op := range operators {
		if strings.HasPrefix(s, op) {
			return token{kind: tokOp, val: op}, len(op), nil
		}
	}
	r, _ := utf8.DecodeRuneInString(s)
	return token{}, 0, l.errorf("unexpected char %q", r)
}

// number reads an integer (decimal, 0b, 0o, 0x; "_" between digits) or a
// float literal.
func (l *lexer) number(s string) (token, int, error) {
	digits := func(i int, ok func(byte) bool) int {
		for i < len(s) && (ok(s[i]) || s[i] == '_' && i+1 < len(s) && ok(s[i+1]) && i > 0 && ok(s[i-1])) {
			i++
		}
		return i
	}
	isDec := func(b byte) bool { return b >= '0' && b <= '9' }
	if len(s) > 2 && s[0] == '0' {
		var ok func(byte) bool
		base := 0
		switch s[1] {
		case 'b', 'B':
			ok, base = func(b byte) bool { return b == '0' || b == '1' }, 2
		case 'o', 'O':
			ok, base = func(b byte) bool { return b >= '0' && b <= '7' }, 8
		case 'x', 'X':
			ok, base = func(b byte) bool { return isDec(b) || b >= 'a' && b <= 'f' || b >= 'A' && b <= 'F' }, 16
		}
		if ok != nil {
			n := 2
			for n < len(s) && (ok(s[n]) || s[n] == '_' && n+1 < len(s) && ok(s[n+1])) {
				n++
			}
			if n > 2 {
				v, err := strconv.ParseInt(strings.ReplaceAll(s[2:n], "_", ""), base, 64)
				if err != nil {
					return token{}, 0, l.errorf("integer literal %s out of range", s[:n])
				}
				return token{kind: tokInt, val: s[:n], num: int(v)}, n, nil
			}
		}
	}
	n := digits(0, isDec)
	isFloat := false
	if n+1 < len(s) && s[n] == '.' && isDec(s[n+1]) {
		n = digits(n+1, isDec)
		isFloat = true
	}
	if n < len(s) && (s[n] == 'e' || s[n] == 'E') {
		m := n + 1
		if m < len(s) && (s[m] == '+' || s[m] == '-') {
			m++
		}
		if m < len(s) && isDec(s[m]) {
			n = digits(m, isDec)
			isFloat = true
		}
	}
	lit := strings.ReplaceAll(s[:n], "_", "")
	if isFloat {
		f, err := strconv.ParseFloat(lit, 64)
		if err != nil && !isRangeErr(err) {
			return token{}, 0, l.errorf("invalid float literal %s", s[:n])
		}
		return token{kind: tokFloat, val: s[:n], num: f}, n, nil
	}
	if len(lit) > 1 && lit[0] == '0' && strings.Trim(lit, "0") != "" {
		return token{}, 0, l.errorf("invalid integer literal %s", s[:n])
	}
	v, err := strconv.ParseInt(lit, 10, 64)
	if err != nil {
		return token{}, 0, l.errorf("integer literal %s out of range", s[:n])
	}
	return token{kind: tokInt, val: s[:n], num: int(v)}, n, nil
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// stringLit reads a quoted string literal and decodes its backslash
// escapes as Python's "unicode-escape" codec does.
func (l *lexer) stringLit(s string) (token, int, error) {
	q := s[0]
	i := 1
	for i < len(s) && s[i] != q {
		if s[i] == '\\' {
			i++
		}
		i++
	}
	if i >= len(s) {
		return token{}, 0, l.errorf("unexpected char %q", rune(q))
	}
	v, err := unescape(s[1:i])
	if err != nil {
		return token{}, 0, l.errorf("%v", err)
	}
	return token{kind: tokString, val: v}, i + 1, nil
}

// unescape decodes Python string escapes: \\ \' \" \n \t \r \a \b \f \v,
// \ooo, \xhh, \uhhhh, \Uhhhhhhhh and \N{name} (names are not supported);
// a backslash before any other character stays.
func unescape(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		switch e := s[i]; e {
		case '\n':
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'v':
			b.WriteByte('\v')
		case '0', '1', '2', '3', '4', '5', '6', '7':
			j := i
			for j < len(s) && j < i+3 && s[j] >= '0' && s[j] <= '7' {
				j++
			}
			v, _ := strconv.ParseUint(s[i:j], 8, 32)
			b.WriteRune(rune(v))
			i = j - 1
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+1+n > len(s) {
				return "", fmt.Errorf("truncated \\%c escape", e)
			}
			v, err := strconv.ParseUint(s[i+1:i+1+n], 16, 32)
			if err != nil || v > unicode.MaxRune {
				return "", fmt.Errorf("invalid \\%c escape", e)
			}
			b.WriteRune(rune(v))
			i += n
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return b.String(), nil
}
