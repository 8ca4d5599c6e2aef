package jinja

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Python's string formatting: str.format, format() specs and the %
// operator.

// strFormat is str.format(*args, **kwargs).
func strFormat(f string, args []any, kw kwargs) (string, error) {
	var b strings.Builder
	auto, manual := 0, false
	for i := 0; i < len(f); i++ {
		c := f[i]
		switch {
		case c == '}' && i+1 < len(f) && f[i+1] == '}':
			b.WriteByte('}')
			i++
			continue
		case c == '}':
			return "", valueErrorf("Single '}' encountered in format string")
		case c != '{':
			b.WriteByte(c)
			continue
		case i+1 < len(f) && f[i+1] == '{':
			b.WriteByte('{')
			i++
			continue
		}
		end := strings.IndexByte(f[i:], '}')
		if end < 0 {
			return "", valueErrorf("expected '}' before end of string")
		}
		field := f[i+1 : i+end]
		i += end
		if strings.ContainsRune(field, '{') {
			return "", valueErrorf("nested replacement fields are not supported")
		}
		spec := ""
		if k := strings.IndexByte(field, ':'); k >= 0 {
			field, spec = field[:k], field[k+1:]
		}
		conv := ""
		if k := strings.IndexByte(field, '!'); k >= 0 {
			field, conv = field[:k], field[k+1:]
		}
		name, rest := field, ""
		if k := strings.IndexAny(field, ".["); k >= 0 {
			name, rest = field[:k], field[k:]
		}
		var v any
		switch n, err := strconv.Atoi(name); {
		case name == "":
			if manual {
				return "", valueErrorf("cannot switch from manual field specification to automatic field numbering")
			}
			if auto >= len(args) {
				return "", &runtimeError{kind: "IndexError", msg: "Replacement index " + strconv.Itoa(auto) + " out of range for positional args tuple"}
			}
			v = args[auto]
			auto++
		case err == nil:
			if auto > 0 {
				return "", valueErrorf("cannot switch from automatic field numbering to manual field specification")
			}
			manual = true
			if n >= len(args) {
				return "", &runtimeError{kind: "IndexError", msg: "Replacement index " + name + " out of range for positional args tuple"}
			}
			v = args[n]
		default:
			kv, ok := kw.get(name)
			if !ok {
				return "", &runtimeError{kind: "KeyError", msg: repr(name)}
			}
			v = kv
		}
		for rest != "" {
			var err error
			if rest[0] == '.' {
				k := strings.IndexAny(rest[1:], ".[")
				if k < 0 {
					k = len(rest) - 1
				}
				if v, err = getattr(v, rest[1:1+k], false); err != nil {
					return "", err
				}
				rest = rest[1+k:]
				continue
			}
			k := strings.IndexByte(rest, ']')
			if k < 0 {
				return "", valueErrorf("Missing ']' in format string")
			}
			key := any(rest[1:k])
			if n, err := strconv.Atoi(rest[1:k]); err == nil {
				key = n
			}
			if v, err = getitem(v, key, false); err != nil {
				return "", err
			}
			rest = rest[k+1:]
		}
		switch conv {
		case "":
		case "s":
			v = Str(v)
		case "r", "a":
			v = repr(v)
		default:
			return "", valueErrorf("Unknown conversion specifier %s", conv)
		}
		s, err := formatValue(v, spec)
		if err != nil {
			return "", err
		}
		b.WriteString(s)
		if b.Len() > maxOutput {
			return "", tooLong()
		}
	}
	return b.String(), nil
}

// formatSpec is a parsed format() specification.
type formatSpec struct {
	fill      string
	align     byte
	sign      byte
	alt       bool
	zero      bool
	width     int
	grouping  byte
	precision int // -1: none
	typ       byte
}

func parseSpec(spec string) (formatSpec, error) {
	fs := formatSpec{fill: " ", precision: -1}
	s := spec
	if r, size := utf8.DecodeRuneInString(s); size > 0 && len(s) > size && strings.IndexByte("<>=^", s[size]) >= 0 {
		fs.fill, fs.align, s = string(r), s[size], s[size+1:]
	} else if s != "" && strings.IndexByte("<>=^", s[0]) >= 0 {
		fs.align, s = s[0], s[1:]
	}
	if s != "" && strings.IndexByte("+- ", s[0]) >= 0 {
		fs.sign, s = s[0], s[1:]
	}
	if s != "" && s[0] == '#' {
		fs.alt, s = true, s[1:]
	}
	if s != "" && s[0] == '0' {
		fs.zero, s = true, s[1:]
	}
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	if n > 0 {
		fs.width, _ = strconv.Atoi(s[:n])
		s = s[n:]
	}
	if s != "" && (s[0] == ',' || s[0] == '_') {
		fs.grouping, s = s[0], s[1:]
	}
	if s != "" && s[0] == '.' {
		n = 1
		for n < len(s) && s[n] >= '0' && s[n] <= '9' {
			n++
		}
		if n == 1 {
			return fs, valueErrorf("Format specifier missing precision")
		}
		fs.precision, _ = strconv.Atoi(s[1:n])
		s = s[n:]
	}
	if len(s) > 1 {
		return fs, valueErrorf("Invalid format specifier '%s'", spec)
	}
	if s != "" {
		fs.typ = s[0]
	}
	if fs.width > maxOutput || fs.precision > maxOutput {
		return fs, tooLong()
	}
	return fs, nil
}

// formatValue is Python's format(v, spec).
func formatValue(v any, spec string) (string, error) {
	if spec == "" {
		return Str(v), nil
	}
	fs, err := parseSpec(spec)
	if err != nil {
		return "", err
	}
	switch x := v.(type) {
	case string, markup:
		s, _ := asString(x)
		if fs.typ != 0 && fs.typ != 's' {
			return "", valueErrorf("Unknown format code '%c' for object of type 'str'", fs.typ)
		}
		if fs.precision >= 0 {
			if r := []rune(s); len(r) > fs.precision {
				s = string(r[:fs.precision])
			}
		}
		return align(s, fs, '<'), nil
	case bool, int:
		i, _ := asInt(x)
		if fs.typ == 0 {
			if b, ok := x.(bool); ok && fs.precision < 0 {
				return align(Str(b), fs, '<'), nil
			}
			fs.typ = 'd'
		}
		if strings.IndexByte("eEfFgG%", fs.typ) >= 0 {
			return formatFloat(float64(i), fs)
		}
		return formatInt(i, fs)
	case float64:
		return formatFloat(x, fs)
	}
	return "", typeErrorf("unsupported format string passed to %s.__format__", typeName(v))
}

func formatInt(i int, fs formatSpec) (string, error) {
	neg := i < 0
	u := uint64(i)
	if neg {
		u = uint64(-i)
	}
	var digits, prefix string
	switch fs.typ {
	case 'd', 'n':
		digits = strconv.FormatUint(u, 10)
	case 'x':
		digits, prefix = strconv.FormatUint(u, 16), "0x"
	case 'X':
		digits, prefix = strings.ToUpper(strconv.FormatUint(u, 16)), "0X"
	case 'o':
		digits, prefix = strconv.FormatUint(u, 8), "0o"
	case 'b':
		digits, prefix = strconv.FormatUint(u, 2), "0b"
	case 'c':
		return align(string(rune(i)), fs, '<'), nil
	default:
		return "", valueErrorf("Unknown format code '%c' for object of type 'int'", fs.typ)
	}
	if fs.grouping != 0 {
		digits = group(digits, fs.grouping)
	}
	if !fs.alt {
		prefix = ""
	}
	return number(digits, prefix, neg, fs), nil
}

func formatFloat(f float64, fs formatSpec) (string, error) {
	neg := math.Signbit(f) && !math.IsNaN(f)
	a := math.Abs(f)
	prec := fs.precision
	var digits string
	switch fs.typ {
	case 'f', 'F':
		digits = strconv.FormatFloat(a, 'f', orDefault(prec, 6), 64)
	case 'e', 'E':
		digits = strconv.FormatFloat(a, 'e', orDefault(prec, 6), 64)
	case '%':
		digits = strconv.FormatFloat(a*100, 'f', orDefault(prec, 6), 64) + "%"
	case 'g', 'G':
		digits = pyGeneral(a, orDefault(prec, 6), fs.alt)
	case 0:
		if prec < 0 {
			digits = floatRepr(a)
		} else {
			digits = pyGeneral(a, max(prec, 1), fs.alt)
			if !strings.ContainsAny(digits, ".e") && !math.IsInf(a, 0) && !math.IsNaN(a) {
				digits += ".0"
			}
		}
	default:
		return "", valueErrorf("Unknown format code '%c' for object of type 'float'", fs.typ)
	}
	switch {
	case math.IsInf(a, 0):
		digits = "inf"
	case math.IsNaN(a):
		digits = "nan"
	}
	if fs.typ == 'E' || fs.typ == 'G' || fs.typ == 'F' {
		digits = strings.ToUpper(digits)
	}
	if fs.grouping != 0 {
		intPart, frac := digits, ""
		if k := strings.IndexAny(digits, ".e%"); k >= 0 {
			intPart, frac = digits[:k], digits[k:]
		}
		digits = group(intPart, fs.grouping) + frac
	}
	return number(digits, "", neg, fs), nil
}

func orDefault(p, d int) int {
	if p < 0 {
		return d
	}
	return p
}

// pyGeneral is the 'g' presentation: precision significant digits, fixed
// or exponent notation by the exponent, trailing zeros removed unless alt.
func pyGeneral(a float64, prec int, alt bool) string {
	if prec == 0 {
		prec = 1
	}
	if a == 0 {
		if alt {
			return "0." + strings.Repeat("0", prec-1)
		}
		return "0"
	}
	exp := int(math.Floor(math.Log10(a)))
	// Rounding may carry into the next power of ten.
	if r, _ := strconv.ParseFloat(strconv.FormatFloat(a, 'e', prec-1, 64), 64); r >= math.Pow(10, float64(exp+1)) {
		exp++
	}
	var s string
	if exp < -4 || exp >= prec {
		s = strconv.FormatFloat(a, 'e', prec-1, 64)
		if !alt {
			mant, e, _ := strings.Cut(s, "e")
			if strings.Contains(mant, ".") {
				mant = strings.TrimRight(strings.TrimRight(mant, "0"), ".")
			}
			s = mant + "e" + e
		}
		return s
	}
	s = strconv.FormatFloat(a, 'f', max(prec-1-exp, 0), 64)
	if !alt && strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

func group(digits string, sep byte) string {
	if len(digits) <= 3 {
		return digits
	}
	var b strings.Builder
	first := len(digits) % 3
	if first > 0 {
		b.WriteString(digits[:first])
	}
	for i := first; i < len(digits); i += 3 {
		if b.Len() > 0 {
			b.WriteByte(sep)
		}
		b.WriteString(digits[i : i+3])
	}
	return b.String()
}

// number lays out a formatted number: sign, prefix, zero or fill padding.
func number(digits, prefix string, neg bool, fs formatSpec) string {
	sign := ""
	switch {
	case neg:
		sign = "-"
	case fs.sign == '+':
		sign = "+"
	case fs.sign == ' ':
		sign = " "
	}
	if fs.zero && fs.align == 0 {
		fs.fill, fs.align = "0", '='
	}
	if fs.align == '=' {
		n := fs.width - len(sign) - len(prefix) - utf8.RuneCountInString(digits)
		if n > 0 {
			digits = strings.Repeat(fs.fill, n) + digits
		}
		return sign + prefix + digits
	}
	return align(sign+prefix+digits, fs, '>')
}

func align(s string, fs formatSpec, def byte) string {
	a := fs.align
	if a == 0 || a == '=' {
		a = def
	}
	switch a {
	case '<':
		return pad(s, fs.width, fs.fill, "ljust")
	case '>':
		return pad(s, fs.width, fs.fill, "rjust")
	}
	n := fs.width - utf8.RuneCountInString(s)
	if n <= 0 {
		return s
	}
	return strings.Repeat(fs.fill, n/2) + s + strings.Repeat(fs.fill, n-n/2)
}

// percentFormat is Python's format % args.
func percentFormat(f string, args any) (string, error) {
	var list []any
	mapping, isMap := args.(*Dict)
	switch a := args.(type) {
	case tuple:
		list = a
	default:
		list = []any{args}
	}
	next := 0
	var b strings.Builder
	usedMap := false
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			b.WriteByte(f[i])
			continue
		}
		i++
		if i >= len(f) {
			return "", valueErrorf("incomplete format")
		}
		var v any
		haveV := false
		if f[i] == '(' {
			end := strings.IndexByte(f[i:], ')')
			if end < 0 {
				return "", valueErrorf("incomplete format key")
			}
			if !isMap {
				return "", typeErrorf("format requires a mapping")
			}
			key := f[i+1 : i+end]
			mv, ok := mapping.get(key)
			if !ok {
				return "", &runtimeError{kind: "KeyError", msg: repr(key)}
			}
			v, haveV, usedMap = mv, true, true
			i += end + 1
		}
		fs := formatSpec{fill: " ", precision: -1}
		for ; i < len(f) && strings.IndexByte("-+ #0", f[i]) >= 0; i++ {
			switch f[i] {
			case '-':
				fs.align = '<'
			case '+':
				fs.sign = '+'
			case ' ':
				if fs.sign == 0 {
					fs.sign = ' '
				}
			case '#':
				fs.alt = true
			case '0':
				fs.zero = true
			}
		}
		n := i
		for n < len(f) && f[n] >= '0' && f[n] <= '9' {
			n++
		}
		fs.width, _ = strconv.Atoi(f[i:n])
		i = n
		if i < len(f) && f[i] == '.' {
			n = i + 1
			for n < len(f) && f[n] >= '0' && f[n] <= '9' {
				n++
			}
			fs.precision, _ = strconv.Atoi(f[i+1 : n])
			i = n
		}
		if fs.width > maxOutput || fs.precision > maxOutput {
			return "", tooLong()
		}
		if i >= len(f) {
			return "", valueErrorf("incomplete format")
		}
		c := f[i]
		if c == '%' {
			b.WriteByte('%')
			continue
		}
		if !haveV {
			if next >= len(list) {
				return "", typeErrorf("not enough arguments for format string")
			}
			v = list[next]
			next++
		}
		if fs.align == '<' {
			fs.zero = false
		}
		var s string
		var err error
		switch c {
		case 's':
			s = Str(v)
			if fs.precision >= 0 {
				if r := []rune(s); len(r) > fs.precision {
					s = string(r[:fs.precision])
				}
			}
			s = align(s, fs, '>')
		case 'r', 'a':
			s = align(repr(v), fs, '>')
		case 'd', 'i', 'u', 'x', 'X', 'o':
			iv, ok := asInt(v)
			if !ok {
				fv, isNum := toNumber(v)
				if !isNum {
					return "", typeErrorf("%%%c format: a real number is required, not %s", c, typeName(v))
				}
				iv = int(fv)
			}
			fs.typ = map[byte]byte{'d': 'd', 'i': 'd', 'u': 'd', 'x': 'x', 'X': 'X', 'o': 'o'}[c]
			if fs.zero {
				fs.fill, fs.align = "0", '='
			}
			s, err = formatInt(iv, fs)
		case 'e', 'E', 'f', 'F', 'g', 'G':
			fv, ok := toNumber(v)
			if !ok {
				return "", typeErrorf("must be real number, not %s", typeName(v))
			}
			fs.typ = c
			if fs.zero {
				fs.fill, fs.align = "0", '='
			}
			s, err = formatFloat(fv, fs)
		case 'c':
			if iv, ok := asInt(v); ok {
				s = string(rune(iv))
			} else {
				s = Str(v)
			}
			s = align(s, fs, '>')
		default:
			return "", valueErrorf("unsupported format character '%c'", c)
		}
		if err != nil {
			return "", err
		}
		b.WriteString(s)
		if b.Len() > maxOutput {
			return "", tooLong()
		}
	}
	if !usedMap && !isMap && next < len(list) {
		if _, isTuple := args.(tuple); isTuple {
			return "", typeErrorf("not all arguments converted during string formatting")
		}
	}
	return b.String(), nil
}

// escapeHTML is markupsafe's escape: & < > ' " as entities.
func escapeHTML(s string) string {
	if !strings.ContainsAny(s, "&<>'\"") {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '&':
			b.WriteString("&amp;")
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '\'':
			b.WriteString("&#39;")
		case '"':
			b.WriteString("&#34;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
