package jinja

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/language"
)

// Python's methods of str, dict and list, as the immutable sandbox lets a
// template call them: the ones that change a dict or list are refused
// with a SecurityError.

type methodFunc func(r *renderer, self any, args []any, kw kwargs) (any, error)

// boundMethod is a method looked up on a value, ready to be called.
type boundMethod struct {
	self any
	name string
	fn   methodFunc
}

func (m *boundMethod) call(r *renderer, args []any, kw kwargs) (any, error) {
	return m.fn(r, m.self, args, kw)
}

// method looks up the Python method name of obj; mut allows the methods
// that change a list or dict in place (a render with Options.Mutable),
// which are otherwise refused as the immutable sandbox refuses them.
func method(obj any, name string, mut bool) (any, bool) {
	var fn methodFunc
	kind := ""
	switch o := obj.(type) {
	case string, markup:
		fn, kind = strMethods[name], "str"
	case *Dict:
		switch name {
		case "get", "items", "keys", "values", "copy":
			fn = dictMethods[name]
		case "clear", "pop", "popitem", "setdefault", "update":
			kind = "dict"
			if mut {
				fn = dictMutators[name]
			}
		default:
			return nil, false
		}
	case []any, *listRef:
		switch name {
		case "index", "count", "copy":
			fn = listMethods[name]
		case "append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort":
			kind = "list"
			if mut {
				fn = listMutators[name]
				if l, ok := o.([]any); ok {
					// A list no name holds: the change is to a copy.
					obj = &listRef{items: append([]any{}, l...)}
				}
			}
		default:
			return nil, false
		}
	case tuple:
		fn = tupleMethods[name]
	default:
		return nil, false
	}
	if fn == nil {
		if kind == "dict" || kind == "list" {
			return &Undefined{name: name, obj: obj, hasObj: true, unsafe: true,
				hint: fmt.Sprintf("access to attribute '%s' of '%s' object is unsafe.", name, kind)}, true
		}
		return nil, false
	}
	return &boundMethod{self: obj, name: name, fn: fn}, true
}

// bind matches a call's arguments to a Python signature: positional
// parameters, then keyword ones by name. Missing ones are nil with
// given[i] false.
func bind(fname string, params []string, required int, args []any, kw kwargs) (vals []any, given []bool, err error) {
	if len(args) > len(params) {
		return nil, nil, typeErrorf("%s() takes at most %d arguments (%d given)", fname, len(params), len(args))
	}
	vals = make([]any, len(params))
	given = make([]bool, len(params))
	for i, a := range args {
		vals[i], given[i] = a, true
	}
	for _, k := range kw {
		i := indexOf(params, k.name)
		if i < 0 {
			return nil, nil, typeErrorf("%s() got an unexpected keyword argument '%s'", fname, k.name)
		}
		if given[i] {
			return nil, nil, typeErrorf("%s() got multiple values for argument '%s'", fname, k.name)
		}
		vals[i], given[i] = k.v, true
	}
	for i := range required {
		if !given[i] {
			return nil, nil, typeErrorf("%s() missing required argument '%s'", fname, params[i])
		}
	}
	return vals, given, nil
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

func strArg(fname string, v any) (string, error) {
	s, ok := asString(v)
	if !ok {
		return "", typeErrorf("%s() argument must be str, not %s", fname, typeName(v))
	}
	return s, nil
}

func intArg(fname string, v any) (int, error) {
	i, ok := asInt(v)
	if !ok {
		return 0, typeErrorf("%s(): '%s' object cannot be interpreted as an integer", fname, typeName(v))
	}
	return i, nil
}

func self(v any) string { s, _ := asString(v); return s }

// strOf keeps a method's result Markup when its receiver is Markup.
func strOf(recv any, s string) any {
	if _, ok := recv.(markup); ok {
		return markup(s)
	}
	return s
}

var strMethods map[string]methodFunc

func init() {
	strMethods = map[string]methodFunc{
		"strip":  stripMethod("strip", strings.TrimFunc, trimChars(true, true)),
		"lstrip": stripMethod("lstrip", strings.TrimLeftFunc, trimChars(true, false)),
		"rstrip": stripMethod("rstrip", strings.TrimRightFunc, trimChars(false, true)),
		"split":  splitMethod(false),
		"rsplit": splitMethod(true),
		"splitlines": func(_ *renderer, recv any, args []any, kw kwargs) (any, error) {
			a, _, err := bind("splitlines", []string{"keepends"}, 0, args, kw)
			if err != nil {
				return nil, err
			}
			return splitLines(self(recv), truthy(a[0])), nil
		},
		"startswith": affixMethod("startswith", strings.HasPrefix),
		"endswith":   affixMethod("endswith", strings.HasSuffix),
		"replace": func(_ *renderer, recv any, args []any, kw kwargs) (any, error) {
			a, g, err := bind("replace", []string{"old", "new", "count"}, 2, args, kw)
			if err != nil {
				return nil, err
			}
			old, err := strArg("replace", a[0])
			if err != nil {
				return nil, err
			}
			repl, err := strArg("replace", a[1])
			if err != nil {
				return nil, err
			}
			n := -1
			if g[2] {
				if n, err = intArg("replace", a[2]); err != nil {
					return nil, err
				}
			}
			return replace(recv, old, repl, n)
		},
		"upper":      caseMethod(upper),
		"lower":      caseMethod(lower),
		"casefold":   caseMethod(func(s string) string { return cases.Fold().String(s) }),
		"swapcase":   caseMethod(swapCase),
		"title":      caseMethod(pyTitle),
		"capitalize": caseMethod(capitalize),
		"find":       findMethod("find", false, false),
		"rfind":      findMethod("rfind", true, false),
		"index":      findMethod("index", false, true),
		"rindex":     findMethod("rindex", true, true),
		"count": func(_ *renderer, recv any, args []any, kw kwargs) (any, error) {
			a, _, err := bind("count", []string{"sub"}, 1, args, kw)
			if err != nil {
				return nil, err
			}
			sub, err := strArg("count", a[0])
			if err != nil {
				return nil, err
			}
			if sub == "" {
				return utf8.RuneCountInString(self(recv)) + 1, nil
			}
			return strings.Count(self(recv), sub), nil
		},
		"join": func(_ *renderer, recv any, args []any, kw kwargs) (any, error) {
			a, _, err := bind("join", []string{"iterable"}, 1, args, kw)
			if err != nil {
				return nil, err
			}
			items, err := iterate(a[0])
			if err != nil {
				return nil, err
			}
			parts := make([]string, len(items))
			for i, it := range items {
				s, ok := asString(it)
				if !ok {
					return nil, typeErrorf("sequence item %d: expected str instance, %s found", i, typeName(it))
				}
				parts[i] = s
			}
			out := strings.Join(parts, self(recv))
			if len(out) > maxOutput {
				return nil, tooLong()
			}
			return strOf(recv, out), nil
		},
		"format": func(_ *renderer, recv any, args []any, kw kwargs) (any, error) {
			out, err := strFormat(self(recv), args, kw)
			if err != nil {
				return nil, err
			}
			return strOf(recv, out), nil
		},
		"center": padMethod("center"),
		"ljust":  padMethod("ljust"),
		"rjust":  padMethod("rjust"),
		"zfill": func(_ *renderer, recv any, args []any, kw kwargs) (any, error) {
			a, _, err := bind("zfill", []string{"width"}, 1, args, kw)
			if err != nil {
				return nil, err
			}
			w, err := intArg("zfill", a[0])
			if err != nil {
				return nil, err
			}
			s := self(recv)
			n := utf8.RuneCountInString(s)
			if w <= n {
				return s, nil
			}
			if w > maxOutput {
				return nil, tooLong()
			}
			sign := ""
			if s != "" && (s[0] == '+' || s[0] == '-') {
				sign, s = s[:1], s[1:]
			}
			return sign + strings.Repeat("0", w-n) + s, nil
		},
		"partition":    partitionMethod(false),
		"rpartition":   partitionMethod(true),
		"removeprefix": affixRemoveMethod("removeprefix", strings.TrimPrefix),
		"removesuffix": affixRemoveMethod("removesuffix", strings.TrimSuffix),
		"isdigit":      classMethod(func(r rune) bool { return unicode.IsDigit(r) }),
		"isdecimal":    classMethod(func(r rune) bool { return unicode.Is(unicode.Nd, r) }),
		"isnumeric":    classMethod(unicode.IsNumber),
		"isalpha":      classMethod(unicode.IsLetter),
		"isalnum":      classMethod(func(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) }),
		"isspace":      classMethod(unicode.IsSpace),
		"isupper":      caseClassMethod(unicode.IsUpper, unicode.IsLower),
		"islower":      caseClassMethod(unicode.IsLower, unicode.IsUpper),
		"istitle": func(_ *renderer, recv any, args []any, kw kwargs) (any, error) {
			if _, _, err := bind("istitle", nil, 0, args, kw); err != nil {
				return nil, err
			}
			return isTitle(self(recv)), nil
		},
	}
}

func stripMethod(name string, trimSpace func(string, func(rune) bool) string, trim func(string, string) string) methodFunc {
	return func(_ *renderer, recv any, args []any, kw kwargs) (any, error) {
		a, _, err := bind(name, []string{"chars"}, 0, args, kw)
		if err != nil {
			return nil, err
		}
		if a[0] == nil {
			return strOf(recv, trimSpace(self(recv), unicode.IsSpace)), nil
		}
		chars, err := strArg(name, a[0])
		if err != nil {
			return nil, err
		}
		return strOf(recv, trim(self(recv), chars)), nil
	}
}

// trimChars trims any of chars from the chosen ends (Python's strip(chars)
// treats its argument as a set of characters).
func trimChars(left, right bool) func(string, string) string {
	return func(s, chars string) string {
		in := func(r rune) bool { return strings.ContainsRune(chars, r) }
		if left {
			s = strings.TrimLeftFunc(s, in)
		}
		if right {
			s = strings.TrimRightFunc(s, in)
		}
		return s
	}
}

func splitMethod(fromRight bool) methodFunc {
	name := "split"
	if fromRight {
		name = "rsplit"
	}
	return func(_ *renderer, recv any, args []any, kw kwargs) (any, error) {
		a, g, err := bind(name, []string{"sep", "maxsplit"}, 0, args, kw)
		if err != nil {
			return nil, err
		}
		maxsplit := -1
		if g[1] {
			if maxsplit, err = intArg(name, a[1]); err != nil {
				return nil, err
			}
		}
		s := self(recv)
		var parts []string
		if a[0] == nil {
			parts = splitSpace(s, maxsplit, fromRight)
		} else {
			sep, err := strArg(name, a[0])
			if err != nil {
				return nil, err
			}
			if sep == "" {
				return nil, valueErrorf("empty separator")
			}
			parts = splitSep(s, sep, maxsplit, fromRight)
		}
		out := make([]any, len(parts))
		for i, p := range parts {
			out[i] = strOf(recv, p)
		}
		return out, nil
	}
}

func splitSep(s, sep string, maxsplit int, fromRight bool) []string {
	if maxsplit < 0 || !fromRight {
		n := -1
		if maxsplit >= 0 {
			n = maxsplit + 1
		}
		return strings.SplitN(s, sep, n)
	}
	var rev []string
	for len(rev) < maxsplit {
		i := strings.LastIndex(s, sep)
		if i < 0 {
			break
		}
		rev = append(rev, s[i+len(sep):])
		s = s[:i]
	}
	out := []string{s}
	for i := len(rev) - 1; i >= 0; i-- {
		out = append(out, rev[i])
	}
	return out
}

// splitSpace splits on runs of whitespace, dropping empty strings, at
// most maxsplit times when maxsplit >= 0.
func splitSpace(s string, maxsplit int, fromRight bool) []string {
	if fromRight && maxsplit >= 0 {
		var rev []string
		for {
			s = strings.TrimRightFunc(s, unicode.IsSpace)
			if s == "" {
				break
			}
			if len(rev) == maxsplit {
				rev = append(rev, s)
				break
			}
			i := strings.LastIndexFunc(s, unicode.IsSpace)
			if i < 0 {
				rev = append(rev, s)
				break
			}
			_, size := utf8.DecodeRuneInString(s[i:])
			rev = append(rev, s[i+size:])
			s = s[:i]
		}
		out := make([]string, 0, len(rev))
		for i := len(rev) - 1; i >= 0; i-- {
			out = append(out, rev[i])
		}
		return out
	}
	parts := []string{}
	for {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
		if s == "" {
			return parts
		}
		if maxsplit >= 0 && len(parts) == maxsplit {
			return append(parts, s)
		}
		end := strings.IndexFunc(s, unicode.IsSpace)
		if end < 0 {
			return append(parts, s)
		}
		parts = append(parts, s[:end])
		s = s[end:]
	}
}

// splitLines is str.splitlines: it splits at every line boundary Python
// knows.
func splitLines(s string, keepends bool) []any {
	out := []any{}
	start := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		end := i + size
		switch r {
		case '\n', '\v', '\f', '\x1c', '\x1d', '\x1e', '\u0085', '\u2028', '\u2029':
		case '\r':
			if end < len(s) && s[end] == '\n' {
				end++
			}
		default:
			i = end
			continue
		}
		if keepends {
			out = append(out, s[start:end])
		} else {
			out = append(out, s[start:i])
		}
		start, i = end, end
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

func affixMethod(name string, has func(string, string) bool) methodFunc {
	return func(_ *renderer, recv any, args []any, kw kwargs) (any, error) {
		a, g, err := bind(name, []string{"affix", "start", "end"}, 1, args, kw)
		if err != nil {
			return nil, err
		}
		r := []rune(self(recv))
		lo, hi := 0, len(r)
		for i, bound := range []*int{&lo, &hi} {
			if !g[i+1] || a[i+1] == nil {
				continue
			}
			n, err := intArg(name, a[i+1])
			if err != nil {
				return nil, err
			}
			if n < 0 {
				n += len(r)
			}
			*bound = max(0, min(n, len(r)))
		}
		if lo > hi {
			return false, nil
		}
		s := string(r[lo:hi])
		var affixes []any
		switch x := a[0].(type) {
		case tuple:
			affixes = x
		case string, markup:
			affixes = []any{x}
		default:
			return nil, typeErrorf("%s first arg must be str or a tuple of str, not %s", name, typeName(a[0]))
		}
		for _, x := range affixes {
			t, ok := asString(x)
			if !ok {
				return nil, typeErrorf("tuple for %s must only contain str, not %s", name, typeName(x))
			}
			if has(s, t) {
				return true, nil
			}
		}
		return false, nil
	}
}

func affixRemoveMethod(name string, trim func(string, string) string) methodFunc {
	return func(_ *renderer, recv any, args []any, kw kwargs) (any, error) {
		a, _, err := bind(name, []string{"affix"}, 1, args, kw)
		if err != nil {
			return nil, err
		}
		t, err := strArg(name, a[0])
		if err != nil {
			return nil, err
		}
		return strOf(recv, trim(self(recv), t)), nil
	}
}

func caseMethod(fn func(string) string) methodFunc {
	return func(_ *renderer, recv any, args []any, kw kwargs) (any, error) {
		if _, _, err := bind("method", nil, 0, args, kw); err != nil {
			return nil, err
		}
		return strOf(recv, fn(self(recv))), nil
	}
}

// upper and lower map case as Python's str.upper and str.lower do, with
// Unicode's full mappings ("ß" upper is "SS"). Casers keep state, so
// each call makes its own.
func upper(s string) string { return cases.Upper(language.Und).String(s) }

func lower(s string) string { return cases.Lower(language.Und).String(s) }

func title(s string) string { return cases.Title(language.Und, cases.NoLower).String(s) }

// isCased reports whether r has case (Python's "cased" characters).
func isCased(r rune) bool { return unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) }

func swapCase(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case unicode.IsUpper(r):
			b.WriteString(lower(string(r)))
		case unicode.IsLower(r):
			b.WriteString(upper(string(r)))
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// pyTitle is str.title: a cased character after an uncased one is title
// case, other cased characters lower case.
func pyTitle(s string) string {
	var b strings.Builder
	prevCased := false
	for _, r := range s {
		switch {
		case !isCased(r):
			b.WriteRune(r)
		case prevCased:
			b.WriteString(lower(string(r)))
		default:
			b.WriteString(title(string(r)))
		}
		prevCased = isCased(r)
	}
	return b.String()
}

// isTitle is str.istitle: upper case only after uncased characters,
// lower case only after cased ones, and at least one cased character.
func isTitle(s string) bool {
	cased, prevCased := false, false
	for _, r := range s {
		switch {
		case unicode.IsUpper(r) || unicode.IsTitle(r):
			if prevCased {
				return false
			}
			prevCased, cased = true, true
		case unicode.IsLower(r):
			if !prevCased {
				return false
			}
			prevCased, cased = true, true
		default:
			prevCased = false
		}
	}
	return cased
}

func capitalize(s string) string {
	r, size := utf8.DecodeRuneInString(s)
	if size == 0 {
		return s
	}
	return title(string(r)) + lower(s[size:])
}

func findMethod(name string, last, raise bool) methodFunc {
	return func(_ *renderer, recv any, args []any, kw kwargs) (any, error) {
		a, _, err := bind(name, []string{"sub", "start", "end"}, 1, args, kw)
		if err != nil {
			return nil, err
		}
		sub, err := strArg(name, a[0])
		if err != nil {
			return nil, err
		}
		r := []rune(self(recv))
		lo, hi := 0, len(r)
		for i, bound := range []*int{&lo, &hi} {
			if a[i+1] == nil {
				continue
			}
			n, err := intArg(name, a[i+1])
			if err != nil {
				return nil, err
			}
			if n < 0 {
				n += len(r)
			}
			*bound = max(0, min(n, len(r)))
		}
		at := -1
		if lo <= hi {
			s := string(r[lo:hi])
			var i int
			if last {
				i = strings.LastIndex(s, sub)
			} else {
				i = strings.Index(s, sub)
			}
			if i >= 0 {
				at = lo + utf8.RuneCountInString(s[:i])
			}
		}
		if at < 0 && raise {
			return nil, valueErrorf("substring not found")
		}
		return at, nil
	}
}

func padMethod(name string) methodFunc {
	return func(_ *renderer, recv any, args []any, kw kwargs) (any, error) {
		a, g, err := bind(name, []string{"width", "fillchar"}, 1, args, kw)
		if err != nil {
			return nil, err
		}
		w, err := intArg(name, a[0])
		if err != nil {
			return nil, err
		}
		fill := " "
		if g[1] {
			if fill, err = strArg(name, a[1]); err != nil {
				return nil, err
			}
			if utf8.RuneCountInString(fill) != 1 {
				return nil, typeErrorf("The fill character must be exactly one character long")
			}
		}
		if w > maxOutput {
			return nil, tooLong()
		}
		return strOf(recv, pad(self(recv), w, fill, name)), nil
	}
}

// pad pads s to width runes: ljust, rjust, or center (Python puts the odd
// extra character on the left when the padding and the width are odd).
func pad(s string, width int, fill, how string) string {
	n := width - utf8.RuneCountInString(s)
	if n <= 0 {
		return s
	}
	switch how {
	case "ljust":
		return s + strings.Repeat(fill, n)
	case "rjust":
		return strings.Repeat(fill, n) + s
	}
	left := n / 2
	if n%2 == 1 && width%2 == 1 {
		left++
	}
	return strings.Repeat(fill, left) + s + strings.Repeat(fill, n-left)
}

func partitionMethod(last bool) methodFunc {
	return func(_ *renderer, recv any, args []any, kw kwargs) (any, error) {
		a, _, err := bind("partition", []string{"sep"}, 1, args, kw)
		if err != nil {
			return nil, err
		}
		sep, err := strArg("partition", a[0])
		if err != nil {
			return nil, err
		}
		if sep == "" {
			return nil, valueErrorf("empty separator")
		}
		s := self(recv)
		var i int
		if last {
			i = strings.LastIndex(s, sep)
		} else {
			i = strings.Index(s, sep)
		}
		if i < 0 {
			if last {
				return tuple{strOf(recv, ""), strOf(recv, ""), strOf(recv, s)}, nil
			}
			return tuple{strOf(recv, s), strOf(recv, ""), strOf(recv, "")}, nil
		}
		return tuple{strOf(recv, s[:i]), strOf(recv, sep), strOf(recv, s[i+len(sep):])}, nil
	}
}

func classMethod(is func(rune) bool) methodFunc {
	return func(_ *renderer, recv any, args []any, kw kwargs) (any, error) {
		if _, _, err := bind("method", nil, 0, args, kw); err != nil {
			return nil, err
		}
		s := self(recv)
		return s != "" && strings.IndexFunc(s, func(r rune) bool { return !is(r) }) < 0, nil
	}
}

// caseClassMethod is isupper or islower: some cased character, and none
// of the other case.
func caseClassMethod(is, isNot func(rune) bool) methodFunc {
	return func(_ *renderer, recv any, args []any, kw kwargs) (any, error) {
		if _, _, err := bind("method", nil, 0, args, kw); err != nil {
			return nil, err
		}
		s := self(recv)
		return strings.IndexFunc(s, is) >= 0 && strings.IndexFunc(s, isNot) < 0, nil
	}
}

func replace(recv any, old, repl string, n int) (any, error) {
	s := self(recv)
	if old != "" && len(repl) > len(old) {
		if c := strings.Count(s, old); len(s)+c*(len(repl)-len(old)) > maxOutput {
			return nil, tooLong()
		}
	}
	if old == "" && len(s)*(len(repl)+1) > maxOutput {
		return nil, tooLong()
	}
	return strOf(recv, strings.Replace(s, old, repl, n)), nil
}

var dictMethods = map[string]methodFunc{
	"get": func(_ *renderer, recv any, args []any, kw kwargs) (any, error) {
		if len(kw) > 0 {
			return nil, typeErrorf("dict.get() takes no keyword arguments")
		}
		if len(args) < 1 || len(args) > 2 {
			return nil, typeErrorf("get expected 1 or 2 arguments, got %d", len(args))
		}
		if _, err := hashKey(args[0]); err != nil {
			if _, ok := args[0].(*Undefined); !ok {
				return nil, err
			}
		}
		if v, ok := recv.(*Dict).get(args[0]); ok {
			return v, nil
		}
		if len(args) == 2 {
			return args[1], nil
		}
		return nil, nil
	},
	"items":  dictViewMethod("items"),
	"keys":   dictViewMethod("keys"),
	"values": dictViewMethod("values"),
	"copy": func(_ *renderer, recv any, args []any, kw kwargs) (any, error) {
		if _, _, err := bind("copy", nil, 0, args, kw); err != nil {
			return nil, err
		}
		return recv.(*Dict).copy(), nil
	},
}

func dictViewMethod(kind string) methodFunc {
	return func(_ *renderer, recv any, args []any, kw kwargs) (any, error) {
		if _, _, err := bind(kind, nil, 0, args, kw); err != nil {
			return nil, err
		}
		return &dictView{d: recv.(*Dict), kind: kind}, nil
	}
}

var listMethods = map[string]methodFunc{
	"index": seqIndex,
	"count": seqCount,
	"copy": func(_ *renderer, recv any, args []any, kw kwargs) (any, error) {
		if _, _, err := bind("copy", nil, 0, args, kw); err != nil {
			return nil, err
		}
		items, _ := asList(recv)
		return append([]any{}, items...), nil
	},
}

var tupleMethods = map[string]methodFunc{"index": seqIndex, "count": seqCount}

func seqIndex(_ *renderer, recv any, args []any, kw kwargs) (any, error) {
	a, _, err := bind("index", []string{"value"}, 1, args, kw)
	if err != nil {
		return nil, err
	}
	items, _ := iterate(recv)
	for i, x := range items {
		if equal(x, a[0]) {
			return i, nil
		}
	}
	return nil, valueErrorf("%s is not in list", repr(a[0]))
}

func seqCount(_ *renderer, recv any, args []any, kw kwargs) (any, error) {
	a, _, err := bind("count", []string{"value"}, 1, args, kw)
	if err != nil {
		return nil, err
	}
	items, _ := iterate(recv)
	n := 0
	for _, x := range items {
		if equal(x, a[0]) {
			n++
		}
	}
	return n, nil
}
