package jinja

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Template values are Go values standing for Python ones:
//
//	nil            None
//	bool           bool
//	int            int
//	float64        float
//	string         str
//	markup         markupsafe.Markup (the safe and escape filters)
//	[]any          list
//	*listRef       list (a render with Options.Mutable: one a template may change)
//	tuple          tuple
//	*Dict          dict (insertion-ordered, as Python's)
//	*Namespace     namespace()
//	*Undefined     an undefined name or attribute
//	Func, *builtin, *boundMethod, *macro   callables
//	*iterator      a generator (what map, select and friends return)
//	*dictView      dict.keys(), .values() and .items()
//	*loopContext   the loop variable

// Func is a function a template can call, given to Render as a variable
// (transformers' raise_exception and strftime_now are such functions).
// An error it returns stops the render and is wrapped in the *Error
// Render returns.
type Func func(args []any, kwargs map[string]any) (any, error)

type markup string

type tuple []any

// listRef is a list a template may change in place (list.append and the
// others, in a render with Options.Mutable): a reference, as Python's
// list is, so that every name and container holding it sees the change.
// Without Options.Mutable lists are []any, which nothing changes.
type listRef struct{ items []any }

// asList returns the items of a list, plain or changeable.
func asList(v any) ([]any, bool) {
	switch l := v.(type) {
	case []any:
		return l, true
	case *listRef:
		return l.items, true
	}
	return nil, false
}

// Undefined is the value of a missing variable, attribute or item. Like
// Jinja2's default Undefined it prints as "" and is false, but most other
// uses of it are an error.
type Undefined struct {
	name   string
	key    any // the missing attribute or item of obj
	obj    any
	hasObj bool
	hint   string
	unsafe bool // a sandboxed attribute: using it is a security error
}

func undefinedName(name string) *Undefined { return &Undefined{name: name} }

func undefinedAttr(obj any, name string) *Undefined {
	return &Undefined{name: name, obj: obj, hasObj: true}
}

func undefinedItem(obj any, key any) *Undefined {
	if s, ok := key.(string); ok {
		return undefinedAttr(obj, s)
	}
	return &Undefined{key: key, obj: obj, hasObj: true}
}

func missingMessage(obj any, name any) string {
	if s, ok := name.(string); ok {
		return fmt.Sprintf("'%s' has no attribute '%s'", objectTypeRepr(obj), s)
	}
	return fmt.Sprintf("'%s' has no element %s", objectTypeRepr(obj), repr(name))
}

func (u *Undefined) message() string {
	switch {
	case u.hint != "":
		return u.hint
	case u.hasObj && u.key != nil:
		return missingMessage(u.obj, u.key)
	case u.hasObj:
		return missingMessage(u.obj, u.name)
	}
	return fmt.Sprintf("'%s' is undefined", u.name)
}

// err is the error using u raises.
func (u *Undefined) err() error {
	if u.unsafe {
		return &runtimeError{kind: "SecurityError", msg: u.message()}
	}
	return &runtimeError{kind: "UndefinedError", msg: u.message()}
}

// runtimeError is a Python exception raised while rendering.
type runtimeError struct {
	kind string // Python's exception type: TypeError, UndefinedError...
	msg  string
}

func (e *runtimeError) Error() string { return e.kind + ": " + e.msg }

func typeErrorf(format string, args ...any) error {
	return &runtimeError{kind: "TypeError", msg: fmt.Sprintf(format, args...)}
}

func valueErrorf(format string, args ...any) error {
	return &runtimeError{kind: "ValueError", msg: fmt.Sprintf(format, args...)}
}

// Dict is a template dictionary. It keeps insertion order, as Python's
// dict does, so that tojson and iteration write JSON objects in the order
// a client sent them.
type Dict struct {
	keys  []any
	vals  []any
	str   map[string]int // positions of string keys, once there are many
	other map[any]int    // positions of other keys, by hashKey
}

// smallDict is the size up to which a Dict finds string keys by looking
// at each: faster than a map for the few keys of a message.
const smallDict = 8

// NewDict returns an empty Dict.
func NewDict() *Dict { return &Dict{} }

// Set sets key to v, appending key if it is new.
func (d *Dict) Set(key string, v any) {
	if i := d.strIndex(key); i >= 0 {
		d.vals[i] = v
		return
	}
	d.keys = append(d.keys, key)
	d.vals = append(d.vals, v)
	switch {
	case d.str != nil:
		d.str[key] = len(d.keys) - 1
	case len(d.keys) > smallDict:
		d.str = map[string]int{}
		for i, k := range d.keys {
			if s, ok := k.(string); ok {
				d.str[s] = i
			}
		}
	}
}

// strIndex is the position of string key k, or -1.
func (d *Dict) strIndex(k string) int {
	if d.str != nil {
		if i, ok := d.str[k]; ok {
			return i
		}
		return -1
	}
	for i, key := range d.keys {
		if s, ok := key.(string); ok && s == k {
			return i
		}
	}
	return -1
}

// Len is the number of entries.
func (d *Dict) Len() int { return len(d.keys) }

func (d *Dict) set(key, v any) error {
	switch k := key.(type) {
	case string:
		d.Set(k, v)
		return nil
	case markup:
		d.Set(string(k), v)
		return nil
	}
	h, err := hashKey(key)
	if err != nil {
		return err
	}
	if i, ok := d.other[h]; ok {
		d.vals[i] = v
		return nil
	}
	if d.other == nil {
		d.other = map[any]int{}
	}
	d.other[h] = len(d.keys)
	d.keys = append(d.keys, key)
	d.vals = append(d.vals, v)
	return nil
}

func (d *Dict) get(key any) (any, bool) {
	switch k := key.(type) {
	case string:
		return d.getStr(k)
	case markup:
		return d.getStr(string(k))
	}
	if d.other == nil {
		return nil, false
	}
	h, err := hashKey(key)
	if err != nil {
		return nil, false
	}
	i, ok := d.other[h]
	if !ok {
		return nil, false
	}
	return d.vals[i], true
}

func (d *Dict) getStr(k string) (any, bool) {
	i := d.strIndex(k)
	if i < 0 {
		return nil, false
	}
	return d.vals[i], true
}

func (d *Dict) copy() *Dict {
	c := NewDict()
	for i, k := range d.keys {
		_ = c.set(k, d.vals[i])
	}
	return c
}

// hashKey maps a dictionary key to a comparable Go value, equal for keys
// Python considers equal (1, 1.0 and True are one key).
func hashKey(k any) (any, error) {
	switch k := k.(type) {
	case nil, string, int:
		return k, nil
	case markup:
		return string(k), nil
	case bool:
		if k {
			return 1, nil
		}
		return 0, nil
	case float64:
		if k == math.Trunc(k) && math.Abs(k) < 1<<62 {
			return int(k), nil
		}
		return k, nil
	case tuple:
		return "\x00tuple" + repr(k), nil
	}
	return nil, typeErrorf("unhashable type: '%s'", typeName(k))
}

// Namespace is the object namespace() returns: attributes a template
// may set from inside loops.
type Namespace struct{ attrs *Dict }

// iterator is a Python generator or iterator: iterable once, always
// true, with no length.
type iterator struct {
	kind  string // Python's type name, for messages
	items []any
	used  bool
}

func (it *iterator) take() []any {
	if it.used {
		return nil
	}
	it.used = true
	return it.items
}

// dictView is dict.keys(), dict.values() or dict.items().
type dictView struct {
	d    *Dict
	kind string // keys, values or items
}

func (v *dictView) list() []any {
	out := make([]any, len(v.d.keys))
	for i := range v.d.keys {
		switch v.kind {
		case "keys":
			out[i] = v.d.keys[i]
		case "values":
			out[i] = v.d.vals[i]
		default:
			out[i] = tuple{v.d.keys[i], v.d.vals[i]}
		}
	}
	return out
}

// FromJSON decodes JSON text into template values: objects become Dicts
// in the order of their keys, integers int, other numbers float64.
func FromJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeJSONValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after JSON value")
	}
	return v, nil
}

func decodeJSONValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok := tok.(type) {
	case json.Delim:
		switch tok {
		case '{':
			d := NewDict()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := decodeJSONValue(dec)
				if err != nil {
					return nil, err
				}
				d.Set(k.(string), v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return d, nil
		case '[':
			l := []any{}
			for dec.More() {
				v, err := decodeJSONValue(dec)
				if err != nil {
					return nil, err
				}
				l = append(l, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return l, nil
		}
		return nil, fmt.Errorf("unexpected %v", tok)
	case json.Number:
		s := tok.String()
		if !strings.ContainsAny(s, ".eE") {
			if i, err := strconv.ParseInt(s, 10, 64); err == nil {
				return int(i), nil
			}
		}
		return tok.Float64()
	default: // string, bool, nil
		return tok, nil
	}
}

// typeName is Python's type name of v.
func typeName(v any) string {
	switch x := v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case markup:
		return "Markup"
	case []any, *listRef:
		return "list"
	case tuple:
		return "tuple"
	case *Dict:
		return "dict"
	case *Namespace:
		return "Namespace"
	case *Undefined:
		return "Undefined"
	case *iterator:
		return x.kind
	case *dictView:
		return "dict_" + x.kind
	case *loopContext:
		return "LoopContext"
	case *macro:
		return "Macro"
	case Func, *builtin, *boundMethod:
		return "builtin_function_or_method"
	}
	return fmt.Sprintf("%T", v)
}

// objectTypeRepr is how Jinja2 names a value's type in messages.
func objectTypeRepr(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	}
	return typeName(v) + " object"
}

// Str is Python's str() of a template value, which is how {{ }} prints
// it.
func Str(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case markup:
		return string(v)
	case *Undefined:
		return ""
	}
	return repr(v)
}

// repr is Python's repr().
func repr(v any) string {
	var b strings.Builder
	writeRepr(&b, v, 0)
	return b.String()
}

func writeRepr(b *strings.Builder, v any, depth int) {
	if depth > maxNesting {
		b.WriteString("...")
		return
	}
	switch v := v.(type) {
	case nil:
		b.WriteString("None")
	case bool:
		if v {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case int:
		b.WriteString(strconv.Itoa(v))
	case float64:
		b.WriteString(floatRepr(v))
	case string:
		writeStrRepr(b, v)
	case markup:
		b.WriteString("Markup(")
		writeStrRepr(b, string(v))
		b.WriteString(")")
	case []any:
		writeSeqRepr(b, "[", "]", v, depth)
	case *listRef:
		writeSeqRepr(b, "[", "]", v.items, depth)
	case tuple:
		if len(v) == 1 {
			b.WriteString("(")
			writeRepr(b, v[0], depth+1)
			b.WriteString(",)")
			return
		}
		writeSeqRepr(b, "(", ")", v, depth)
	case *Dict:
		b.WriteString("{")
		for i := range v.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, v.keys[i], depth+1)
			b.WriteString(": ")
			writeRepr(b, v.vals[i], depth+1)
		}
		b.WriteString("}")
	case *dictView:
		b.WriteString("dict_" + v.kind + "(")
		writeSeqRepr(b, "[", "]", v.list(), depth)
		b.WriteString(")")
	case *Namespace:
		b.WriteString("<Namespace ")
		writeRepr(b, v.attrs, depth+1)
		b.WriteString(">")
	case *Undefined:
		b.WriteString("Undefined")
	case *loopContext:
		fmt.Fprintf(b, "<LoopContext %d/%d>", v.index0+1, len(v.items))
	case *macro:
		fmt.Fprintf(b, "<Macro '%s'>", v.def.name)
	case *iterator:
		fmt.Fprintf(b, "<%s object>", v.kind)
	default:
		fmt.Fprintf(b, "<%s>", typeName(v))
	}
}

func writeSeqRepr(b *strings.Builder, open, close string, items []any, depth int) {
	b.WriteString(open)
	for i, x := range items {
		if i > 0 {
			b.WriteString(", ")
		}
		writeRepr(b, x, depth+1)
	}
	b.WriteString(close)
}

// writeStrRepr writes s quoted as Python's repr does: single quotes
// unless s has a single quote and no double quote.
func writeStrRepr(b *strings.Builder, s string) {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == utf8.RuneError:
			b.WriteString(`\ufffd`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(b, `\x%02x`, r)
		case r < 0x7f || unicode.IsPrint(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			fmt.Fprintf(b, `\U%08x`, r)
		}
	}
	b.WriteByte(q)
}

// floatRepr formats f as Python's repr(float): the shortest digits that
// read back as f, ".0" on integral values, an exponent below 1e-4 and
// from 1e16 on.
func floatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	if a := math.Abs(f); a != 0 && (a < 1e-4 || a >= 1e16) {
		s := strconv.FormatFloat(f, 'e', -1, 64)
		// Go writes e+16 and e-05 as Python does; only the mantissa of a
		// power of ten differs ("1e+16" both ways).
		return s
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

// truthy is Python's bool().
func truthy(v any) bool {
	switch v := v.(type) {
	case nil:
		return false
	case bool:
		return v
	case int:
		return v != 0
	case float64:
		return v != 0
	case string:
		return v != ""
	case markup:
		return v != ""
	case []any:
		return len(v) > 0
	case *listRef:
		return len(v.items) > 0
	case tuple:
		return len(v) > 0
	case *Dict:
		return len(v.keys) > 0
	case *dictView:
		return len(v.d.keys) > 0
	case *Undefined:
		return false
	}
	return true
}

// toNumber returns v as a float64 and whether it is a number (bool counts,
// as in Python).
func toNumber(v any) (float64, bool) {
	switch v := v.(type) {
	case int:
		return float64(v), true
	case float64:
		return v, true
	case bool:
		if v {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

// asInt returns v as an int when it is an int or a bool.
func asInt(v any) (int, bool) {
	switch v := v.(type) {
	case int:
		return v, true
	case bool:
		if v {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

func asString(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case markup:
		return string(v), true
	}
	return "", false
}

// equal is Python's ==.
func equal(a, b any) bool {
	return equalDepth(a, b, 0)
}

func equalDepth(a, b any, depth int) bool {
	if depth > maxNesting {
		return false
	}
	if x, ok := toNumber(a); ok {
		if y, ok := toNumber(b); ok {
			if i, ok := asInt(a); ok {
				if j, ok := asInt(b); ok {
					return i == j
				}
			}
			return x == y
		}
		return false
	}
	switch a := a.(type) {
	case nil:
		return b == nil
	case string, markup:
		s, _ := asString(a)
		t, ok := asString(b)
		return ok && s == t
	case []any, *listRef:
		x, _ := asList(a)
		c, ok := asList(b)
		return ok && seqEqual(x, c, depth)
	case tuple:
		c, ok := b.(tuple)
		return ok && seqEqual(a, c, depth)
	case *Dict:
		c, ok := b.(*Dict)
		if !ok || len(a.keys) != len(c.keys) {
			return false
		}
		for i, k := range a.keys {
			w, ok := c.get(k)
			if !ok || !equalDepth(a.vals[i], w, depth+1) {
				return false
			}
		}
		return true
	case *Undefined:
		_, ok := b.(*Undefined)
		return ok
	}
	return a == b
}

func seqEqual(a, b []any, depth int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !equalDepth(a[i], b[i], depth+1) {
			return false
		}
	}
	return true
}

// less is Python's <, an error for values Python cannot order.
func less(a, b any) (bool, error) {
	if x, ok := toNumber(a); ok {
		if y, ok := toNumber(b); ok {
			if i, ok := asInt(a); ok {
				if j, ok := asInt(b); ok {
					return i < j, nil
				}
			}
			return x < y, nil
		}
	}
	if s, ok := asString(a); ok {
		if t, ok := asString(b); ok {
			return s < t, nil
		}
	}
	seq := func(v any) ([]any, bool) {
		switch v := v.(type) {
		case []any:
			return v, true
		case *listRef:
			return v.items, true
		case tuple:
			return v, true
		}
		return nil, false
	}
	if x, ok := seq(a); ok {
		if y, ok := seq(b); ok && typeName(a) == typeName(b) {
			for i := 0; i < len(x) && i < len(y); i++ {
				if equal(x[i], y[i]) {
					continue
				}
				return less(x[i], y[i])
			}
			return len(x) < len(y), nil
		}
	}
	return false, typeErrorf("'<' not supported between instances of '%s' and '%s'", typeName(a), typeName(b))
}

// sortValues sorts items stably by key(item) with Python's ordering.
func sortValues(items []any, key func(any) any, reverse bool) error {
	var err error
	keys := make([]any, len(items))
	for i, it := range items {
		keys[i] = key(it)
	}
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(i, j int) bool {
		a, b := keys[idx[i]], keys[idx[j]]
		if reverse {
			a, b = b, a
		}
		l, e := less(a, b)
		if e != nil && err == nil {
			err = e
		}
		return l
	})
	if err != nil {
		return err
	}
	sorted := make([]any, len(items))
	for i, j := range idx {
		sorted[i] = items[j]
	}
	copy(items, sorted)
	return nil
}
