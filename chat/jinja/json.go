package jinja

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// pyJSON encodes template values as Python's json.dumps does, which is
// what transformers' tojson filter calls: ", " and ": " separators (","
// between items once there is an indent), objects in insertion order,
// non-ASCII text kept unless ensureASCII.
type pyJSON struct {
	indent      *string // nil: one line
	itemSep     string
	keySep      string
	sortKeys    bool
	ensureASCII bool
	b           strings.Builder
}

// toJSON is transformers' tojson: json.dumps(x, ensure_ascii=False,
// indent=None, separators=None, sort_keys=False).
func toJSON(v any, args []any, kw kwargs) (any, error) {
	a, g, err := bind("tojson", []string{"ensure_ascii", "indent", "separators", "sort_keys"}, 0, args, kw)
	if err != nil {
		return nil, err
	}
	p := &pyJSON{itemSep: ", ", keySep: ": ", ensureASCII: truthy(a[0]), sortKeys: truthy(a[3])}
	switch ind := a[1].(type) {
	case nil:
	case int, bool:
		n, _ := asInt(ind)
		if n > 1<<10 {
			return nil, tooLong()
		}
		s := strings.Repeat(" ", max(n, 0))
		p.indent = &s
	case string, markup:
		s, _ := asString(ind)
		p.indent = &s
	default:
		if g[1] {
			return nil, typeErrorf("can't multiply sequence by non-int of type '%s'", typeName(ind))
		}
	}
	if p.indent != nil {
		p.itemSep = ","
	}
	if a[2] != nil {
		seps, err := iterate(a[2])
		if err != nil || len(seps) != 2 {
			return nil, valueErrorf("separators must be a pair of strings")
		}
		item, ok1 := asString(seps[0])
		key, ok2 := asString(seps[1])
		if !ok1 || !ok2 {
			return nil, typeErrorf("separators must be strings")
		}
		p.itemSep, p.keySep = item, key
	}
	if err := p.value(v, 0); err != nil {
		return nil, err
	}
	return p.b.String(), nil
}

// ToJSON is v (a template value) as JSON text, as Python's
// json.dumps(v, ensure_ascii=False, indent=indent) writes it (indent 0:
// one line): what a template's tojson filter would write.
func ToJSON(v any, indent int) (string, error) {
	var kw kwargs
	if indent > 0 {
		kw = kwargs{{name: "indent", v: indent}}
	}
	out, err := toJSON(v, nil, kw)
	if err != nil {
		return "", err
	}
	return out.(string), nil
}

func (p *pyJSON) newline(depth int) {
	if p.indent == nil {
		return
	}
	p.b.WriteByte('\n')
	for range depth {
		p.b.WriteString(*p.indent)
	}
}

func (p *pyJSON) value(v any, depth int) error {
	if depth > maxNesting {
		return &runtimeError{kind: "RecursionError", msg: "maximum recursion depth exceeded while encoding a JSON object"}
	}
	if p.b.Len() > maxOutput {
		return tooLong()
	}
	switch v := v.(type) {
	case nil:
		p.b.WriteString("null")
	case bool:
		if v {
			p.b.WriteString("true")
		} else {
			p.b.WriteString("false")
		}
	case int:
		p.b.WriteString(strconv.Itoa(v))
	case float64:
		p.b.WriteString(jsonFloat(v))
	case string:
		p.str(v)
	case markup:
		p.str(string(v))
	case []any:
		return p.array(v, depth)
	case *listRef:
		return p.array(v.items, depth)
	case tuple:
		return p.array(v, depth)
	case *Dict:
		return p.object(v, depth)
	default:
		return typeErrorf("Object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

func jsonFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return floatRepr(f)
}

func (p *pyJSON) array(items []any, depth int) error {
	if len(items) == 0 {
		p.b.WriteString("[]")
		return nil
	}
	p.b.WriteByte('[')
	for i, it := range items {
		if i > 0 {
			p.b.WriteString(p.itemSep)
		}
		p.newline(depth + 1)
		if err := p.value(it, depth+1); err != nil {
			return err
		}
	}
	p.newline(depth)
	p.b.WriteByte(']')
	return nil
}

func (p *pyJSON) object(d *Dict, depth int) error {
	if len(d.keys) == 0 {
		p.b.WriteString("{}")
		return nil
	}
	order := make([]int, len(d.keys))
	for i := range order {
		order[i] = i
	}
	if p.sortKeys {
		idx := make([]any, len(order))
		for i := range order {
			idx[i] = i
		}
		if err := sortValues(idx, func(i any) any { return d.keys[i.(int)] }, false); err != nil {
			return err
		}
		for i := range idx {
			order[i] = idx[i].(int)
		}
	}
	p.b.WriteByte('{')
	for n, i := range order {
		if n > 0 {
			p.b.WriteString(p.itemSep)
		}
		p.newline(depth + 1)
		key, err := jsonKey(d.keys[i])
		if err != nil {
			return err
		}
		p.str(key)
		p.b.WriteString(p.keySep)
		if err := p.value(d.vals[i], depth+1); err != nil {
			return err
		}
	}
	p.newline(depth)
	p.b.WriteByte('}')
	return nil
}

// jsonKey is the object key json.dumps writes for a dict key.
func jsonKey(k any) (string, error) {
	switch k := k.(type) {
	case string:
		return k, nil
	case markup:
		return string(k), nil
	case bool:
		return strconv.FormatBool(k), nil
	case nil:
		return "null", nil
	case int:
		return strconv.Itoa(k), nil
	case float64:
		return jsonFloat(k), nil
	}
	return "", typeErrorf("keys must be str, int, float, bool or None, not %s", typeName(k))
}

func (p *pyJSON) str(s string) {
	b := &p.b
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				fmt.Fprintf(b, `\u%04x`, r)
			case p.ensureASCII && r > 0x7e:
				if r > 0xffff {
					r -= 0x10000
					fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10)&0x3ff, 0xdc00+r&0x3ff)
				} else {
					fmt.Fprintf(b, `\u%04x`, r)
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}
