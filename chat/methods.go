package chat

import (
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/exec"
)

// gonjaDictMethods are the dict methods gonja implements that chat
// templates may use as they are. Like transformers' immutable sandbox,
// templates get no methods that change a dict.
var gonjaDictMethods = []string{"copy"}

// dictMethods returns Python dict methods that keep a JSON object's
// insertion order; gonja's own see every dictionary as an unordered map.
func dictMethods() *exec.MethodSet[map[string]any] {
	m := map[string]exec.Method[map[string]any]{
		"keys":   orderedDictMethod("keys", func(p *exec.Pair) any { return p.Key.Interface() }),
		"values": orderedDictMethod("values", func(p *exec.Pair) any { return p.Value.Interface() }),
		"items":  orderedDictMethod("items", func(p *exec.Pair) any { return list{p.Key.Interface(), p.Value.Interface()} }),
		"get": func(self map[string]any, selfValue *exec.Value, args *exec.VarArgs) (any, error) {
			if len(args.Args) < 1 || len(args.Args) > 2 || len(args.KwArgs) > 0 {
				return nil, errors.New("get() takes 1 or 2 positional arguments")
			}
			if v, ok := selfValue.GetItem(args.Args[0].Interface()); ok {
				return v.Interface(), nil
			}
			if len(args.Args) == 2 {
				return args.Args[1].Interface(), nil
			}
			return nil, nil
		},
	}
	for _, name := range gonjaDictMethods {
		if fn, ok := builtins.Methods.Dict.Get(name); ok {
			m[name] = fn
		}
	}
	return exec.NewMethodSet(m)
}

// orderedDictMethod builds dict.keys, values or items: one element per
// entry, in insertion order for JSON objects, gonja's order for others.
func orderedDictMethod(name string, elem func(*exec.Pair) any) exec.Method[map[string]any] {
	fallback, _ := builtins.Methods.Dict.Get(name)
	return func(self map[string]any, selfValue *exec.Value, args *exec.VarArgs) (any, error) {
		d, ok := selfValue.Interface().(*exec.Dict)
		if !ok {
			return fallback(self, selfValue, args)
		}
		if len(args.Args) > 0 || len(args.KwArgs) > 0 {
			return nil, fmt.Errorf("%s() takes no arguments", name)
		}
		out := make(list, len(d.Pairs))
		for i, p := range d.Pairs {
			out[i] = elem(p)
		}
		return out, nil
	}
}

// gonjaStrMethods are the str methods gonja implements that chat templates
// may use as they are.
var gonjaStrMethods = []string{
	"capitalize", "casefold", "center", "count", "find", "format",
	"isalnum", "isalpha", "isdigit", "islower", "isnumeric", "isspace",
	"isupper", "join", "ljust", "lower", "partition", "removeprefix",
	"removesuffix", "rfind", "rjust", "rpartition", "splitlines",
	"startswith", "swapcase", "title", "upper", "zfill",
}

// strMethods returns Python str methods: gonja's own, and Python-exact
// versions of those whose no-argument forms gonja gets wrong (strip() and
// split() must treat any whitespace as the separator, replace() must not
// require a count, endswith() takes a tuple of suffixes).
func strMethods() *exec.MethodSet[string] {
	m := map[string]exec.Method[string]{
		"strip":    stripMethod(strings.TrimFunc, strings.Trim),
		"lstrip":   stripMethod(strings.TrimLeftFunc, strings.TrimLeft),
		"rstrip":   stripMethod(strings.TrimRightFunc, strings.TrimRight),
		"split":    methodSplit,
		"endswith": methodEndswith,
		"replace": func(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
			if len(args.Args) < 2 || len(args.Args) > 3 || len(args.KwArgs) > 0 {
				return nil, errors.New("replace() takes 2 or 3 positional arguments")
			}
			n := -1
			if len(args.Args) == 3 {
				n = args.Args[2].Integer()
			}
			return strings.Replace(self, args.Args[0].String(), args.Args[1].String(), n), nil
		},
	}
	for _, name := range gonjaStrMethods {
		if fn, ok := builtins.Methods.Str.Get(name); ok {
			m[name] = fn
		}
	}
	return exec.NewMethodSet(m)
}

// stripMethod builds str.strip and its one-sided variants: with no
// argument (or None) they trim whitespace, else the given characters.
func stripMethod(trimSpace func(string, func(rune) bool) string, trimChars func(string, string) string) exec.Method[string] {
	return func(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
		if len(args.Args) > 1 || len(args.KwArgs) > 0 {
			return nil, errors.New("strip() takes at most 1 positional argument")
		}
		if len(args.Args) == 0 || args.Args[0].IsNil() {
			return trimSpace(self, unicode.IsSpace), nil
		}
		return trimChars(self, args.Args[0].String()), nil
	}
}

// methodSplit is str.split(sep=None, maxsplit=-1).
func methodSplit(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
	if len(args.Args) > 2 {
		return nil, errors.New("split() takes at most 2 arguments")
	}
	sep, maxsplit := exec.AsValue(nil), -1
	if len(args.Args) > 0 {
		sep = args.Args[0]
	}
	if len(args.Args) > 1 {
		maxsplit = args.Args[1].Integer()
	}
	for k, v := range args.KwArgs {
		switch k {
		case "sep":
			sep = v
		case "maxsplit":
			maxsplit = v.Integer()
		default:
			return nil, fmt.Errorf("split() got an unexpected keyword argument %q", k)
		}
	}
	var parts []string
	if sep.IsNil() {
		parts = splitSpace(self, maxsplit)
	} else {
		s := sep.String()
		if s == "" {
			return nil, errors.New("split(): empty separator")
		}
		n := -1
		if maxsplit >= 0 {
			n = maxsplit + 1
		}
		parts = strings.SplitN(self, s, n)
	}
	out := make(list, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out, nil
}

// splitSpace splits on runs of whitespace as Python's str.split() does,
// at most maxsplit times when maxsplit >= 0.
func splitSpace(s string, maxsplit int) []string {
	var parts []string
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

// methodEndswith is str.endswith(suffix[, start[, end]]), suffix a string
// or a tuple of strings.
func methodEndswith(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
	if len(args.Args) < 1 || len(args.Args) > 3 || len(args.KwArgs) > 0 {
		return nil, errors.New("endswith() takes 1 to 3 positional arguments")
	}
	r := []rune(self)
	bounds := []int{0, len(r)}
	for i, a := range args.Args[1:] {
		if a.IsNil() {
			continue
		}
		n := a.Integer()
		if n < 0 {
			n += len(r)
		}
		bounds[i] = min(max(n, 0), len(r))
	}
	if bounds[0] > bounds[1] {
		return false, nil
	}
	s := string(r[bounds[0]:bounds[1]])
	suffix := args.Args[0]
	if !suffix.IsList() {
		return strings.HasSuffix(s, suffix.String()), nil
	}
	for i := range suffix.Len() {
		if strings.HasSuffix(s, suffix.Index(i).String()) {
			return true, nil
		}
	}
	return false, nil
}
