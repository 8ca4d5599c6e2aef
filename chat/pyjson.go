package chat

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// pyJSON encodes template values the way Python's json.dumps does, which
// is what Hugging Face's tojson filter calls: ", " and ": " separators,
// insertion-ordered objects, non-ASCII text kept unless ensureASCII.
type pyJSON struct {
	indent      *string // nil: one line
	itemSep     string
	keySep      string
	sortKeys    bool
	ensureASCII bool
}

func (p *pyJSON) encode(v any) (string, error) {
	var b strings.Builder
	if err := p.value(&b, v, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

func (p *pyJSON) newline(b *strings.Builder, depth int) {
	if p.indent == nil {
		return
	}
	b.WriteByte('\n')
	for range depth {
		b.WriteString(*p.indent)
	}
}

func (p *pyJSON) value(b *strings.Builder, v any, depth int) error {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
		return nil
	case *exec.Value:
		if v == nil {
			b.WriteString("null")
			return nil
		}
		return p.value(b, v.Interface(), depth)
	case *exec.Dict:
		return p.object(b, v.Pairs, depth)
	case exec.Dict:
		return p.object(b, v.Pairs, depth)
	case string:
		p.str(b, v)
		return nil
	case bool:
		if v {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
		return nil
	case error:
		return v
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		b.WriteString(strconv.FormatInt(rv.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		b.WriteString(strconv.FormatUint(rv.Uint(), 10))
	case reflect.Float32, reflect.Float64:
		b.WriteString(pyFloat(rv.Float()))
	case reflect.String:
		p.str(b, rv.String())
	case reflect.Slice, reflect.Array:
		return p.array(b, rv, depth)
	case reflect.Map:
		pairs := make([]*exec.Pair, 0, rv.Len())
		for it := rv.MapRange(); it.Next(); {
			pairs = append(pairs, &exec.Pair{Key: exec.AsValue(it.Key().Interface()), Value: exec.AsValue(it.Value().Interface())})
		}
		sort.Slice(pairs, func(i, j int) bool { return keyString(pairs[i].Key) < keyString(pairs[j].Key) })
		return p.object(b, pairs, depth)
	case reflect.Pointer:
		if rv.IsNil() {
			b.WriteString("null")
			return nil
		}
		return p.value(b, rv.Elem().Interface(), depth)
	default:
		return fmt.Errorf("tojson: cannot encode %T", v)
	}
	return nil
}

func (p *pyJSON) array(b *strings.Builder, rv reflect.Value, depth int) error {
	if rv.Len() == 0 {
		b.WriteString("[]")
		return nil
	}
	b.WriteByte('[')
	for i := range rv.Len() {
		if i > 0 {
			b.WriteString(p.itemSep)
		}
		p.newline(b, depth+1)
		if err := p.value(b, rv.Index(i).Interface(), depth+1); err != nil {
			return err
		}
	}
	p.newline(b, depth)
	b.WriteByte(']')
	return nil
}

func (p *pyJSON) object(b *strings.Builder, pairs []*exec.Pair, depth int) error {
	if len(pairs) == 0 {
		b.WriteString("{}")
		return nil
	}
	if p.sortKeys {
		pairs = append([]*exec.Pair(nil), pairs...)
		sort.SliceStable(pairs, func(i, j int) bool { return keyString(pairs[i].Key) < keyString(pairs[j].Key) })
	}
	b.WriteByte('{')
	for i, pair := range pairs {
		if i > 0 {
			b.WriteString(p.itemSep)
		}
		p.newline(b, depth+1)
		p.str(b, keyString(pair.Key))
		b.WriteString(p.keySep)
		if err := p.value(b, pair.Value, depth+1); err != nil {
			return err
		}
	}
	p.newline(b, depth)
	b.WriteByte('}')
	return nil
}

// keyString is the JSON object key Python would write for a dict key.
func keyString(k *exec.Value) string {
	switch v := k.Interface().(type) {
	case string:
		return v
	case bool:
		return strconv.FormatBool(v)
	case nil:
		return "null"
	case float64:
		return pyFloat(v)
	default:
		return k.String()
	}
}

func (p *pyJSON) str(b *strings.Builder, s string) {
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
					r1, r2 := utf16Surrogates(r)
					fmt.Fprintf(b, `\u%04x\u%04x`, r1, r2)
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

func utf16Surrogates(r rune) (rune, rune) {
	r -= 0x10000
	return 0xd800 + (r>>10)&0x3ff, 0xdc00 + r&0x3ff
}

// pyFloat formats f like Python's repr: shortest round-trip digits, ".0"
// on integral values, exponent form outside [1e-4, 1e16).
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	if a := math.Abs(f); a != 0 && (a < 1e-4 || a >= 1e16) {
		return strconv.FormatFloat(f, 'e', -1, 64)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsRune(s, '.') {
		s += ".0"
	}
	return s
}
