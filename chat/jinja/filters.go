package jinja

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Jinja2's built-in filters and tests, with transformers' tojson.

type filterFunc func(r *renderer, v any, args []any, kw kwargs) (any, error)

type testFunc func(r *renderer, v any, args []any, kw kwargs) (bool, error)

// filters holds every filter name Jinja2 knows; the few nil ones are not
// supported here and fail when used.
var filters map[string]filterFunc

// tests holds Jinja2's tests.
var tests map[string]testFunc

func init() {
	filters = map[string]filterFunc{
		"abs":        filterAbs,
		"attr":       filterAttr,
		"batch":      filterBatch,
		"capitalize": strFilter(capitalize),
		"center": func(_ *renderer, v any, args []any, kw kwargs) (any, error) {
			a, g, err := bind("center", []string{"width"}, 0, args, kw)
			if err != nil {
				return nil, err
			}
			w := 80
			if g[0] {
				if w, err = intArg("center", a[0]); err != nil {
					return nil, err
				}
			}
			if w > maxOutput {
				return nil, tooLong()
			}
			return pad(softStr(v), w, " ", "center"), nil
		},
		"count":    filterLength,
		"d":        filterDefault,
		"default":  filterDefault,
		"dictsort": filterDictsort,
		"e":        filterEscape,
		"escape":   filterEscape,
		"first":    filterFirst,
		"float":    filterFloat,
		"forceescape": func(_ *renderer, v any, args []any, kw kwargs) (any, error) {
			if _, _, err := bind("forceescape", nil, 0, args, kw); err != nil {
				return nil, err
			}
			return markup(escapeHTML(Str(v))), nil
		},
		"format":         filterFormat,
		"groupby":        nil,
		"filesizeformat": nil,
		"indent":         filterIndent,
		"int":            filterInt,
		"items":          filterItems,
		"join":           filterJoin,
		"last":           filterLast,
		"length":         filterLength,
		"list":           filterList,
		"lower":          strFilter(lower),
		"map":            filterMap,
		"max":            minMaxFilter("max", false),
		"min":            minMaxFilter("min", true),
		"pprint":         nil,
		"random":         nil,
		"reject":         selectFilter(false, false),
		"rejectattr":     selectFilter(false, true),
		"replace":        filterReplace,
		"reverse":        filterReverse,
		"round":          filterRound,
		"safe": func(_ *renderer, v any, args []any, kw kwargs) (any, error) {
			if _, _, err := bind("safe", nil, 0, args, kw); err != nil {
				return nil, err
			}
			return markup(Str(v)), nil
		},
		"select":     selectFilter(true, false),
		"selectattr": selectFilter(true, true),
		"slice":      filterSlice,
		"sort":       filterSort,
		"string": func(_ *renderer, v any, args []any, kw kwargs) (any, error) {
			if _, _, err := bind("string", nil, 0, args, kw); err != nil {
				return nil, err
			}
			if m, ok := v.(markup); ok {
				return m, nil
			}
			return softStr(v), nil
		},
		"striptags": filterStriptags,
		"sum":       filterSum,
		"title":     strFilter(jinjaTitle),
		"tojson": func(_ *renderer, v any, args []any, kw kwargs) (any, error) {
			return toJSON(v, args, kw)
		},
		"trim": func(_ *renderer, v any, args []any, kw kwargs) (any, error) {
			a, _, err := bind("trim", []string{"chars"}, 0, args, kw)
			if err != nil {
				return nil, err
			}
			s := softStr(v)
			if a[0] == nil {
				return strings.TrimFunc(s, unicode.IsSpace), nil
			}
			chars, err := strArg("trim", a[0])
			if err != nil {
				return nil, err
			}
			return trimChars(true, true)(s, chars), nil
		},
		"truncate":  filterTruncate,
		"unique":    filterUnique,
		"upper":     strFilter(upper),
		"urlencode": nil,
		"urlize":    nil,
		"wordcount": func(_ *renderer, v any, args []any, kw kwargs) (any, error) {
			if _, _, err := bind("wordcount", nil, 0, args, kw); err != nil {
				return nil, err
			}
			return len(wordRe.FindAllString(softStr(v), -1)), nil
		},
		"wordwrap": nil,
		"xmlattr":  nil,
	}
	tests = map[string]testFunc{
		"odd": func(_ *renderer, v any, args []any, kw kwargs) (bool, error) {
			m, err := binary("%", v, 2)
			return err == nil && equal(m, 1), err
		},
		"even": func(_ *renderer, v any, args []any, kw kwargs) (bool, error) {
			m, err := binary("%", v, 2)
			return err == nil && equal(m, 0), err
		},
		"divisibleby": func(_ *renderer, v any, args []any, kw kwargs) (bool, error) {
			a, _, err := bind("divisibleby", []string{"num"}, 1, args, kw)
			if err != nil {
				return false, err
			}
			m, err := binary("%", v, a[0])
			return err == nil && equal(m, 0), err
		},
		"defined": func(_ *renderer, v any, _ []any, _ kwargs) (bool, error) {
			_, undef := v.(*Undefined)
			return !undef, nil
		},
		"undefined": func(_ *renderer, v any, _ []any, _ kwargs) (bool, error) {
			_, undef := v.(*Undefined)
			return undef, nil
		},
		"filter": func(_ *renderer, v any, _ []any, _ kwargs) (bool, error) {
			name, _ := v.(string)
			_, ok := filters[name]
			return ok, nil
		},
		"test": func(_ *renderer, v any, _ []any, _ kwargs) (bool, error) {
			name, _ := v.(string)
			_, ok := tests[name]
			return ok, nil
		},
		"none":    typeTest(func(v any) bool { return v == nil }),
		"boolean": typeTest(func(v any) bool { _, ok := v.(bool); return ok }),
		"false":   typeTest(func(v any) bool { return v == false }),
		"true":    typeTest(func(v any) bool { return v == true }),
		"integer": typeTest(func(v any) bool { _, ok := v.(int); return ok }),
		"float":   typeTest(func(v any) bool { _, ok := v.(float64); return ok }),
		"number":  typeTest(func(v any) bool { _, ok := toNumber(v); return ok }),
		"string":  typeTest(func(v any) bool { _, ok := asString(v); return ok }),
		"mapping": typeTest(func(v any) bool { _, ok := v.(*Dict); return ok }),
		"lower": typeTest(func(v any) bool {
			s := Str(v)
			return strings.IndexFunc(s, unicode.IsLower) >= 0 && strings.IndexFunc(s, unicode.IsUpper) < 0
		}),
		"upper": typeTest(func(v any) bool {
			s := Str(v)
			return strings.IndexFunc(s, unicode.IsUpper) >= 0 && strings.IndexFunc(s, unicode.IsLower) < 0
		}),
		"sequence": typeTest(func(v any) bool {
			switch v.(type) {
			case string, markup, []any, *listRef, tuple, *Dict:
				return true
			}
			return false
		}),
		"iterable": typeTest(func(v any) bool {
			switch v.(type) {
			case string, markup, []any, *listRef, tuple, *Dict, *dictView, *iterator, *Undefined, *loopContext:
				return true
			}
			return false
		}),
		"callable": typeTest(func(v any) bool {
			switch v.(type) {
			case Func, *builtin, *boundMethod, *macro, *Undefined:
				return true
			}
			return false
		}),
		"escaped": typeTest(func(v any) bool { _, ok := v.(markup); return ok }),
		"sameas": func(_ *renderer, v any, args []any, kw kwargs) (bool, error) {
			a, _, err := bind("sameas", []string{"other"}, 1, args, kw)
			if err != nil {
				return false, err
			}
			return same(v, a[0]), nil
		},
		"in": func(_ *renderer, v any, args []any, kw kwargs) (bool, error) {
			a, _, err := bind("in", []string{"seq"}, 1, args, kw)
			if err != nil {
				return false, err
			}
			return in(v, a[0])
		},
	}
	for op, names := range map[string][]string{
		"==": {"==", "eq", "equalto"}, "!=": {"!=", "ne"},
		">": {">", "gt", "greaterthan"}, ">=": {">=", "ge"},
		"<": {"<", "lt", "lessthan"}, "<=": {"<=", "le"},
	} {
		for _, name := range names {
			tests[name] = func(_ *renderer, v any, args []any, kw kwargs) (bool, error) {
				a, _, err := bind(name, []string{"other"}, 1, args, kw)
				if err != nil {
					return false, err
				}
				return compare(op, v, a[0])
			}
		}
	}
}

func typeTest(is func(any) bool) testFunc {
	return func(_ *renderer, v any, args []any, kw kwargs) (bool, error) {
		if len(args) > 0 || len(kw) > 0 {
			return false, typeErrorf("test takes no arguments")
		}
		return is(v), nil
	}
}

// same is Python's "is" for the values a template can name twice.
func same(a, b any) bool {
	switch x := a.(type) {
	case nil, bool:
		return a == b
	case int:
		y, ok := b.(int)
		return ok && x == y && x >= -5 && x <= 256
	case string:
		y, ok := b.(string)
		return ok && x == y
	case *Dict, *Namespace, *macro, *loopContext, *iterator, *listRef:
		return a == b
	}
	return false
}

func (r *renderer) applyFilter(f *filterExpr, v any, s *scope) (any, error) {
	if !f.known {
		return nil, &runtimeError{kind: "TemplateRuntimeError", msg: fmt.Sprintf("No filter named '%s' found.", f.name)}
	}
	args, kw, err := r.evalArgs(f.args, f.kwargs, s)
	if err != nil {
		return nil, err
	}
	return r.callFilter(f.name, v, args, kw)
}

func (r *renderer) callFilter(name string, v any, args []any, kw kwargs) (any, error) {
	fn, ok := filters[name]
	if !ok {
		return nil, &runtimeError{kind: "TemplateRuntimeError", msg: fmt.Sprintf("No filter named '%s' found.", name)}
	}
	if fn == nil {
		return nil, &runtimeError{kind: "TemplateRuntimeError", msg: fmt.Sprintf("the filter '%s' is not supported", name)}
	}
	return fn(r, v, args, kw)
}

func (r *renderer) evalTest(t *testExpr, s *scope) (any, error) {
	v, err := r.eval(t.x, s)
	if err != nil {
		return nil, err
	}
	if !t.known {
		return nil, &runtimeError{kind: "TemplateRuntimeError", msg: fmt.Sprintf("No test named '%s' found.", t.name)}
	}
	args, kw, err := r.evalArgs(t.args, t.kwargs, s)
	if err != nil {
		return nil, err
	}
	return r.callTest(t.name, v, args, kw)
}

func (r *renderer) callTest(name string, v any, args []any, kw kwargs) (bool, error) {
	fn, ok := tests[name]
	if !ok {
		return false, &runtimeError{kind: "TemplateRuntimeError", msg: fmt.Sprintf("No test named '%s' found.", name)}
	}
	return fn(r, v, args, kw)
}

// softStr is Jinja2's soft_str: str(v), keeping Markup.
func softStr(v any) string { return Str(v) }

func strFilter(fn func(string) string) filterFunc {
	return func(_ *renderer, v any, args []any, kw kwargs) (any, error) {
		if _, _, err := bind("filter", nil, 0, args, kw); err != nil {
			return nil, err
		}
		return fn(softStr(v)), nil
	}
}

var (
	wordRe          = regexp.MustCompile(`[\p{L}\p{N}_]+`)
	wordBeginningRe = regexp.MustCompile(`[-\s({\[<]+`)
	tagRe           = regexp.MustCompile(`(?s)<!--.*?-->|<[^>]*>`)
)

// jinjaTitle is the title filter: each word (split at whitespace and
// -({[<) gets an upper-case first letter and lower-case rest.
func jinjaTitle(s string) string {
	var b strings.Builder
	word := func(w string) {
		if w == "" {
			return
		}
		r, size := utf8.DecodeRuneInString(w)
		b.WriteString(upper(string(r)))
		b.WriteString(lower(w[size:]))
	}
	last := 0
	for _, m := range wordBeginningRe.FindAllStringIndex(s, -1) {
		word(s[last:m[0]])
		b.WriteString(s[m[0]:m[1]])
		last = m[1]
	}
	word(s[last:])
	return b.String()
}

func filterAbs(_ *renderer, v any, args []any, kw kwargs) (any, error) {
	if _, _, err := bind("abs", nil, 0, args, kw); err != nil {
		return nil, err
	}
	switch n := v.(type) {
	case int:
		if n < 0 {
			return -n, nil
		}
		return n, nil
	case bool:
		i, _ := asInt(n)
		return i, nil
	case float64:
		return math.Abs(n), nil
	case *Undefined:
		return nil, n.err()
	}
	return nil, typeErrorf("bad operand type for abs(): '%s'", typeName(v))
}

func filterAttr(r *renderer, v any, args []any, kw kwargs) (any, error) {
	a, _, err := bind("attr", []string{"name"}, 1, args, kw)
	if err != nil {
		return nil, err
	}
	name, ok := a[0].(string)
	if !ok {
		return nil, typeErrorf("attribute name must be string, not '%s'", typeName(a[0]))
	}
	switch o := v.(type) {
	case *Undefined:
		return nil, o.err()
	case *Namespace, *loopContext:
		return getattr(v, name, r.mutable)
	}
	if m, ok := method(v, name, r.mutable); ok {
		return m, nil
	}
	return undefinedAttr(v, name), nil
}

func filterBatch(r *renderer, v any, args []any, kw kwargs) (any, error) {
	a, g, err := bind("batch", []string{"linecount", "fill_with"}, 1, args, kw)
	if err != nil {
		return nil, err
	}
	n, err := intArg("batch", a[0])
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, valueErrorf("batch size must be positive")
	}
	var out []any
	for i := 0; i < len(items); i += n {
		batch := append([]any{}, items[i:min(i+n, len(items))]...)
		if g[1] && a[1] != nil {
			for len(batch) < n {
				batch = append(batch, a[1])
			}
		}
		out = append(out, batch)
	}
	return &iterator{kind: "generator", items: out}, r.step(len(items))
}

func filterLength(_ *renderer, v any, args []any, kw kwargs) (any, error) {
	if _, _, err := bind("length", nil, 0, args, kw); err != nil {
		return nil, err
	}
	return length(v)
}

// length is Python's len().
func length(v any) (int, error) {
	switch x := v.(type) {
	case string:
		return utf8.RuneCountInString(x), nil
	case markup:
		return utf8.RuneCountInString(string(x)), nil
	case []any:
		return len(x), nil
	case *listRef:
		return len(x.items), nil
	case tuple:
		return len(x), nil
	case *Dict:
		return len(x.keys), nil
	case *dictView:
		return len(x.d.keys), nil
	case *Undefined:
		return 0, nil
	case *loopContext:
		return len(x.items), nil
	}
	return 0, typeErrorf("object of type '%s' has no len()", typeName(v))
}

func filterDefault(_ *renderer, v any, args []any, kw kwargs) (any, error) {
	a, g, err := bind("default", []string{"default_value", "boolean"}, 0, args, kw)
	if err != nil {
		return nil, err
	}
	def := a[0]
	if !g[0] {
		def = ""
	}
	if _, undef := v.(*Undefined); undef || truthy(a[1]) && !truthy(v) {
		return def, nil
	}
	return v, nil
}

func filterDictsort(r *renderer, v any, args []any, kw kwargs) (any, error) {
	a, g, err := bind("dictsort", []string{"case_sensitive", "by", "reverse"}, 0, args, kw)
	if err != nil {
		return nil, err
	}
	d, ok := v.(*Dict)
	if !ok {
		if u, isU := v.(*Undefined); isU {
			return nil, u.err()
		}
		return nil, &runtimeError{kind: "AttributeError", msg: fmt.Sprintf("'%s' object has no attribute 'items'", typeName(v))}
	}
	pos := 0
	if g[1] {
		switch a[1] {
		case "key":
		case "value":
			pos = 1
		default:
			return nil, &runtimeError{kind: "FilterArgumentError", msg: `You can only sort by either "key" or "value"`}
		}
	}
	items := (&dictView{d: d, kind: "items"}).list()
	err = sortValues(items, func(it any) any {
		x := it.(tuple)[pos]
		if !truthy(a[0]) {
			x = ignoreCase(x)
		}
		return x
	}, truthy(a[2]))
	if err != nil {
		return nil, err
	}
	return items, r.step(len(items))
}

func ignoreCase(v any) any {
	if s, ok := v.(string); ok {
		return lower(s)
	}
	return v
}

func filterEscape(_ *renderer, v any, args []any, kw kwargs) (any, error) {
	if _, _, err := bind("escape", nil, 0, args, kw); err != nil {
		return nil, err
	}
	if m, ok := v.(markup); ok {
		return m, nil
	}
	return markup(escapeHTML(Str(v))), nil
}

func filterFirst(_ *renderer, v any, args []any, kw kwargs) (any, error) {
	if _, _, err := bind("first", nil, 0, args, kw); err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return &Undefined{hint: "No first item, sequence was empty."}, nil
	}
	return items[0], nil
}

func filterLast(_ *renderer, v any, args []any, kw kwargs) (any, error) {
	if _, _, err := bind("last", nil, 0, args, kw); err != nil {
		return nil, err
	}
	if it, ok := v.(*iterator); ok {
		return nil, typeErrorf("'%s' object is not reversible", it.kind)
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return &Undefined{hint: "No last item, sequence was empty."}, nil
	}
	return items[len(items)-1], nil
}

func filterFloat(_ *renderer, v any, args []any, kw kwargs) (any, error) {
	a, g, err := bind("float", []string{"default"}, 0, args, kw)
	if err != nil {
		return nil, err
	}
	def := a[0]
	if !g[0] {
		def = 0.0
	}
	if f, ok := pyFloat(v); ok {
		return f, nil
	}
	return def, nil
}

// pyFloat is Python's float(v), reporting whether it converts.
func pyFloat(v any) (float64, bool) {
	if f, ok := toNumber(v); ok {
		return f, true
	}
	s, ok := asString(v)
	if !ok {
		return 0, false
	}
	s = strings.TrimFunc(s, unicode.IsSpace)
	switch strings.ToLower(strings.TrimLeft(s, "+-")) {
	case "inf", "infinity":
		if strings.HasPrefix(s, "-") {
			return math.Inf(-1), true
		}
		return math.Inf(1), true
	case "nan":
		return math.NaN(), true
	}
	if strings.Contains(s, "__") || strings.HasPrefix(s, "_") || strings.HasSuffix(s, "_") || strings.ContainsAny(s, "xXpP") {
		return 0, false
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
	if err != nil && !isRangeErr(err) {
		return 0, false
	}
	return f, true
}

func filterFormat(_ *renderer, v any, args []any, kw kwargs) (any, error) {
	if len(args) > 0 && len(kw) > 0 {
		return nil, &runtimeError{kind: "FilterArgumentError", msg: "can't handle positional and keyword arguments at the same time"}
	}
	var fmtArgs any = tuple(args)
	if len(kw) > 0 {
		d := NewDict()
		for _, k := range kw {
			d.Set(k.name, k.v)
		}
		fmtArgs = d
	}
	return percentFormat(softStr(v), fmtArgs)
}

func filterIndent(_ *renderer, v any, args []any, kw kwargs) (any, error) {
	a, g, err := bind("indent", []string{"width", "first", "blank"}, 0, args, kw)
	if err != nil {
		return nil, err
	}
	indention := "    "
	if g[0] {
		if s, ok := asString(a[0]); ok {
			indention = s
		} else {
			n, err := intArg("indent", a[0])
			if err != nil {
				return nil, err
			}
			indention = strings.Repeat(" ", max(n, 0))
		}
	}
	s := softStr(v) + "\n"
	lines := splitLines(s, false)
	if len(indention) > 0 && len(lines) > maxOutput/len(indention) {
		return nil, tooLong()
	}
	var b strings.Builder
	if truthy(a[2]) {
		for i, l := range lines {
			if i > 0 {
				b.WriteString("\n" + indention)
			}
			b.WriteString(l.(string))
		}
	} else {
		b.WriteString(lines[0].(string))
		for _, l := range lines[1:] {
			b.WriteString("\n")
			if l.(string) != "" {
				b.WriteString(indention)
			}
			b.WriteString(l.(string))
		}
	}
	out := b.String()
	if truthy(a[1]) {
		out = indention + out
	}
	if len(out) > maxOutput {
		return nil, tooLong()
	}
	if _, ok := v.(markup); ok {
		return markup(out), nil
	}
	return out, nil
}

func filterInt(_ *renderer, v any, args []any, kw kwargs) (any, error) {
	a, g, err := bind("int", []string{"default", "base"}, 0, args, kw)
	if err != nil {
		return nil, err
	}
	def := a[0]
	if !g[0] {
		def = 0
	}
	base := 10
	if g[1] {
		if base, err = intArg("int", a[1]); err != nil {
			return nil, err
		}
	}
	switch x := v.(type) {
	case int:
		return x, nil
	case bool:
		i, _ := asInt(x)
		return i, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return def, nil
		}
		return int(x), nil
	case string, markup:
		s := strings.TrimFunc(Str(x), unicode.IsSpace)
		clean := strings.ReplaceAll(s, "_", "")
		if i, err := strconv.ParseInt(clean, base, 64); err == nil && !strings.Contains(s, "__") {
			return int(i), nil
		}
		if base == 0 || base == 16 || base == 8 || base == 2 {
			if i, err := strconv.ParseInt(clean, 0, 64); err == nil {
				return int(i), nil
			}
		}
		if f, ok := pyFloat(s); ok && !math.IsNaN(f) && !math.IsInf(f, 0) {
			return int(f), nil
		}
	}
	return def, nil
}

func filterItems(r *renderer, v any, args []any, kw kwargs) (any, error) {
	if _, _, err := bind("items", nil, 0, args, kw); err != nil {
		return nil, err
	}
	switch d := v.(type) {
	case *Undefined:
		return &iterator{kind: "generator"}, nil
	case *Dict:
		return &iterator{kind: "generator", items: (&dictView{d: d, kind: "items"}).list()}, r.step(len(d.keys))
	}
	return nil, typeErrorf("Can only get item pairs from a mapping.")
}

func filterJoin(r *renderer, v any, args []any, kw kwargs) (any, error) {
	a, g, err := bind("join", []string{"d", "attribute"}, 0, args, kw)
	if err != nil {
		return nil, err
	}
	sep := ""
	if g[0] {
		sep = Str(a[0])
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if err := r.step(len(items)); err != nil {
		return nil, err
	}
	parts := make([]string, len(items))
	for i, it := range items {
		if g[1] && a[1] != nil {
			if it, err = attrGet(it, a[1], nil); err != nil {
				return nil, err
			}
		}
		parts[i] = Str(it)
	}
	out := strings.Join(parts, sep)
	if len(out) > maxOutput {
		return nil, tooLong()
	}
	return out, nil
}

func filterList(r *renderer, v any, args []any, kw kwargs) (any, error) {
	if _, _, err := bind("list", nil, 0, args, kw); err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	return append([]any{}, items...), r.step(len(items))
}

// attrGet is make_attrgetter: item looked up along a dotted path
// ("a.b.0"), with def replacing undefined results when given.
func attrGet(item, attribute, def any) (any, error) {
	var parts []any
	if s, ok := attribute.(string); ok {
		for _, p := range strings.Split(s, ".") {
			if n, err := strconv.Atoi(p); err == nil && p != "" && strings.Trim(p, "0123456789") == "" {
				parts = append(parts, n)
			} else {
				parts = append(parts, p)
			}
		}
	} else if attribute != nil {
		parts = []any{attribute}
	}
	for _, p := range parts {
		var err error
		if item, err = getitem(item, p, false); err != nil {
			return nil, err
		}
		if _, undef := item.(*Undefined); undef && def != nil {
			item = def
		}
	}
	return item, nil
}

func filterMap(r *renderer, v any, args []any, kw kwargs) (any, error) {
	if !truthy(v) {
		return &iterator{kind: "generator"}, nil
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if err := r.step(len(items)); err != nil {
		return nil, err
	}
	out := make([]any, len(items))
	if attr, ok := kw.get("attribute"); ok && len(args) == 0 {
		def, _ := kw.get("default")
		for _, k := range kw {
			if k.name != "attribute" && k.name != "default" {
				return nil, &runtimeError{kind: "FilterArgumentError", msg: fmt.Sprintf("Unexpected keyword argument '%s'", k.name)}
			}
		}
		for i, it := range items {
			if out[i], err = attrGet(it, attr, def); err != nil {
				return nil, err
			}
		}
		return &iterator{kind: "generator", items: out}, nil
	}
	if len(args) == 0 {
		return nil, &runtimeError{kind: "FilterArgumentError", msg: "map requires a filter argument"}
	}
	name, ok := args[0].(string)
	if !ok {
		return nil, &runtimeError{kind: "TemplateRuntimeError", msg: fmt.Sprintf("No filter named %s.", repr(args[0]))}
	}
	for i, it := range items {
		if out[i], err = r.callFilter(name, it, args[1:], kw); err != nil {
			return nil, err
		}
	}
	return &iterator{kind: "generator", items: out}, nil
}

func minMaxFilter(name string, isMin bool) filterFunc {
	return func(r *renderer, v any, args []any, kw kwargs) (any, error) {
		a, _, err := bind(name, []string{"case_sensitive", "attribute"}, 0, args, kw)
		if err != nil {
			return nil, err
		}
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return &Undefined{hint: "No aggregated item, sequence was empty."}, nil
		}
		key := func(it any) (any, error) {
			k, err := attrGet(it, a[1], nil)
			if err != nil {
				return nil, err
			}
			if !truthy(a[0]) {
				k = ignoreCase(k)
			}
			return k, nil
		}
		best := items[0]
		bestKey, err := key(best)
		if err != nil {
			return nil, err
		}
		for _, it := range items[1:] {
			k, err := key(it)
			if err != nil {
				return nil, err
			}
			var better bool
			if isMin {
				better, err = less(k, bestKey)
			} else {
				better, err = less(bestKey, k)
			}
			if err != nil {
				return nil, err
			}
			if better {
				best, bestKey = it, k
			}
		}
		return best, r.step(len(items))
	}
}

// selectFilter is select, reject, selectattr and rejectattr.
func selectFilter(keep, byAttr bool) filterFunc {
	return func(r *renderer, v any, args []any, kw kwargs) (any, error) {
		if !truthy(v) {
			return &iterator{kind: "generator"}, nil
		}
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		if err := r.step(len(items)); err != nil {
			return nil, err
		}
		var attr any
		if byAttr {
			if len(args) == 0 {
				return nil, &runtimeError{kind: "FilterArgumentError", msg: "Missing parameter for attribute name"}
			}
			attr, args = args[0], args[1:]
		}
		var test string
		if len(args) > 0 {
			name, ok := args[0].(string)
			if !ok {
				return nil, &runtimeError{kind: "TemplateRuntimeError", msg: fmt.Sprintf("No test named %s.", repr(args[0]))}
			}
			test, args = name, args[1:]
		}
		out := []any{}
		for _, it := range items {
			x := it
			if byAttr {
				if x, err = attrGet(it, attr, nil); err != nil {
					return nil, err
				}
			}
			ok := truthy(x)
			if test != "" {
				if ok, err = r.callTest(test, x, args, kw); err != nil {
					return nil, err
				}
			}
			if ok == keep {
				out = append(out, it)
			}
		}
		return &iterator{kind: "generator", items: out}, nil
	}
}

func filterReplace(_ *renderer, v any, args []any, kw kwargs) (any, error) {
	a, g, err := bind("replace", []string{"old", "new", "count"}, 2, args, kw)
	if err != nil {
		return nil, err
	}
	n := -1
	if g[2] && a[2] != nil {
		if n, err = intArg("replace", a[2]); err != nil {
			return nil, err
		}
	}
	return replace(Str(v), Str(a[0]), Str(a[1]), n)
}

func filterReverse(_ *renderer, v any, args []any, kw kwargs) (any, error) {
	if _, _, err := bind("reverse", nil, 0, args, kw); err != nil {
		return nil, err
	}
	if s, ok := asString(v); ok {
		r := []rune(s)
		for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
			r[i], r[j] = r[j], r[i]
		}
		return strOf(v, string(r)), nil
	}
	items, err := iterate(v)
	if err != nil {
		return nil, &runtimeError{kind: "FilterArgumentError", msg: "argument must be iterable"}
	}
	out := make([]any, len(items))
	for i, it := range items {
		out[len(items)-1-i] = it
	}
	if _, ok := v.(*iterator); ok {
		return out, nil
	}
	return &iterator{kind: "reversed", items: out}, nil
}

func filterRound(_ *renderer, v any, args []any, kw kwargs) (any, error) {
	a, g, err := bind("round", []string{"precision", "method"}, 0, args, kw)
	if err != nil {
		return nil, err
	}
	prec := 0
	if g[0] {
		if prec, err = intArg("round", a[0]); err != nil {
			return nil, err
		}
	}
	method := "common"
	if g[1] {
		method = Str(a[1])
	}
	if method != "common" && method != "ceil" && method != "floor" {
		return nil, &runtimeError{kind: "FilterArgumentError", msg: "method must be common, ceil or floor"}
	}
	if i, ok := v.(int); ok && method == "common" {
		if prec >= 0 {
			return i, nil
		}
		p := math.Pow(10, float64(-prec))
		return int(math.RoundToEven(float64(i)/p) * p), nil
	}
	f, ok := toNumber(v)
	if !ok {
		if u, isU := v.(*Undefined); isU {
			return nil, u.err()
		}
		return nil, typeErrorf("type %s doesn't define __round__ method", typeName(v))
	}
	p := math.Pow(10, float64(prec))
	switch method {
	case "ceil":
		return math.Ceil(f*p) / p, nil
	case "floor":
		return math.Floor(f*p) / p, nil
	}
	if prec < 0 {
		return math.RoundToEven(f/math.Pow(10, float64(-prec))) * math.Pow(10, float64(-prec)), nil
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(f, 'f', prec, 64), 64)
	return r, nil
}

func filterSlice(r *renderer, v any, args []any, kw kwargs) (any, error) {
	a, g, err := bind("slice", []string{"slices", "fill_with"}, 1, args, kw)
	if err != nil {
		return nil, err
	}
	n, err := intArg("slice", a[0])
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, &runtimeError{kind: "ZeroDivisionError", msg: "integer division or modulo by zero"}
	}
	if err := r.step(n + len(items)); err != nil {
		return nil, err
	}
	per, extra := len(items)/n, len(items)%n
	var out []any
	offset := 0
	for i := range n {
		start := offset + i*per
		if i < extra {
			offset++
		}
		end := offset + (i+1)*per
		part := append([]any{}, items[start:end]...)
		if g[1] && a[1] != nil && i >= extra {
			part = append(part, a[1])
		}
		out = append(out, part)
	}
	return &iterator{kind: "generator", items: out}, nil
}

func filterSort(r *renderer, v any, args []any, kw kwargs) (any, error) {
	a, _, err := bind("sort", []string{"reverse", "case_sensitive", "attribute"}, 0, args, kw)
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	items = append([]any{}, items...)
	var attrs []any
	if s, ok := a[2].(string); ok {
		for _, p := range strings.Split(s, ",") {
			attrs = append(attrs, p)
		}
	} else {
		attrs = []any{a[2]}
	}
	var keyErr error
	err = sortValues(items, func(it any) any {
		key := make([]any, len(attrs))
		for i, at := range attrs {
			k, err := attrGet(it, at, nil)
			if err != nil && keyErr == nil {
				keyErr = err
			}
			if !truthy(a[1]) {
				k = ignoreCase(k)
			}
			key[i] = k
		}
		return key
	}, truthy(a[0]))
	if keyErr != nil {
		return nil, keyErr
	}
	if err != nil {
		return nil, err
	}
	return items, r.step(len(items))
}

func filterStriptags(_ *renderer, v any, args []any, kw kwargs) (any, error) {
	if _, _, err := bind("striptags", nil, 0, args, kw); err != nil {
		return nil, err
	}
	s := tagRe.ReplaceAllString(Str(v), "")
	s = strings.Join(strings.Fields(s), " ")
	s = strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&", "&#34;", `"`, "&#39;", "'", "&quot;", `"`).Replace(s)
	return s, nil
}

func filterSum(r *renderer, v any, args []any, kw kwargs) (any, error) {
	a, g, err := bind("sum", []string{"attribute", "start"}, 0, args, kw)
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	var total any = 0
	if g[1] {
		total = a[1]
	}
	for _, it := range items {
		if a[0] != nil {
			if it, err = attrGet(it, a[0], nil); err != nil {
				return nil, err
			}
		}
		if total, err = binary("+", total, it); err != nil {
			return nil, err
		}
	}
	return total, r.step(len(items))
}

func filterTruncate(_ *renderer, v any, args []any, kw kwargs) (any, error) {
	a, g, err := bind("truncate", []string{"length", "killwords", "end", "leeway"}, 0, args, kw)
	if err != nil {
		return nil, err
	}
	n := 255
	if g[0] {
		if n, err = intArg("truncate", a[0]); err != nil {
			return nil, err
		}
	}
	end := "..."
	if g[2] {
		end = Str(a[2])
	}
	leeway := 5
	if g[3] && a[3] != nil {
		if leeway, err = intArg("truncate", a[3]); err != nil {
			return nil, err
		}
	}
	r := []rune(Str(v))
	endLen := utf8.RuneCountInString(end)
	if n < endLen || leeway < 0 {
		return nil, &runtimeError{kind: "AssertionError", msg: fmt.Sprintf("expected length >= %d, got %d", endLen, n)}
	}
	if len(r) <= n+leeway {
		return string(r), nil
	}
	cut := string(r[:n-endLen])
	if truthy(a[1]) {
		return cut + end, nil
	}
	if i := strings.LastIndex(cut, " "); i >= 0 {
		cut = cut[:i]
	}
	return cut + end, nil
}

func filterUnique(r *renderer, v any, args []any, kw kwargs) (any, error) {
	a, _, err := bind("unique", []string{"case_sensitive", "attribute"}, 0, args, kw)
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	seen := map[any]bool{}
	out := []any{}
	for _, it := range items {
		k, err := attrGet(it, a[1], nil)
		if err != nil {
			return nil, err
		}
		if !truthy(a[0]) {
			k = ignoreCase(k)
		}
		h, err := hashKey(k)
		if err != nil {
			return nil, err
		}
		if !seen[h] {
			seen[h] = true
			out = append(out, it)
		}
	}
	return &iterator{kind: "generator", items: out}, r.step(len(items))
}
