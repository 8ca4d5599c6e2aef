package chat

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/exec"
)

// environment is the Jinja environment every template runs in: gonja's
// built-ins, with the filters and string and dict methods chat templates
// rely on made to behave as in Python. It is only read after package
// initialization.
var environment = &exec.Environment{
	Context: exec.EmptyContext().Update(builtins.GlobalFunctions),
	Filters: exec.NewFilterSet(map[string]exec.FilterFunction{}).
		Update(builtins.Filters).
		Update(exec.NewFilterSet(map[string]exec.FilterFunction{
			"tojson": filterToJSON,
			"items":  filterItems,
			"list":   filterList,
		})),
	Tests:             builtins.Tests,
	ControlStructures: builtins.ControlStructures,
	Methods: exec.Methods{
		Bool:  builtins.Methods.Bool,
		Int:   builtins.Methods.Int,
		Float: builtins.Methods.Float,
		Str:   strMethods(),
		Dict:  dictMethods(),
		List:  builtins.Methods.List,
	},
}

// filterToJSON is Hugging Face's tojson: json.dumps(x, ensure_ascii=False,
// indent=None, separators=None, sort_keys=False).
func filterToJSON(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	p := pyJSON{itemSep: ", ", keySep: ": "}
	for name, arg := range params.KwArgs {
		switch name {
		case "indent":
			switch {
			case arg.IsNil():
			case arg.IsInteger():
				s := strings.Repeat(" ", max(arg.Integer(), 0))
				p.indent = &s
			case arg.IsString():
				s := arg.String()
				p.indent = &s
			default:
				return exec.AsValue(fmt.Errorf("tojson: indent must be an integer or a string, not %s", arg))
			}
		case "separators":
			if arg.IsNil() {
				continue
			}
			if !arg.IsList() || arg.Len() != 2 {
				return exec.AsValue(fmt.Errorf("tojson: separators must be a pair of strings, not %s", arg))
			}
			p.itemSep, p.keySep = arg.Index(0).String(), arg.Index(1).String()
		case "sort_keys":
			p.sortKeys = arg.IsTrue()
		case "ensure_ascii":
			p.ensureASCII = arg.IsTrue()
		default:
			return exec.AsValue(fmt.Errorf("tojson: unexpected keyword argument %q", name))
		}
	}
	if len(params.Args) > 0 {
		return exec.AsValue(errors.New("tojson: takes keyword arguments only"))
	}
	if p.indent != nil {
		if _, ok := params.KwArgs["separators"]; !ok {
			p.itemSep = ","
		}
	}
	out, err := p.encode(in.Interface())
	if err != nil {
		return exec.AsValue(err)
	}
	return exec.AsSafeValue(out)
}

// filterItems is Jinja's items filter: (key, value) pairs of a mapping,
// in insertion order for JSON objects and key order for other maps.
func filterItems(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	if len(params.Args) > 0 || len(params.KwArgs) > 0 {
		return exec.AsValue(errors.New("items: takes no arguments"))
	}
	if in.IsNil() {
		return exec.AsValue(list{})
	}
	pairs := list{}
	switch d := in.Interface().(type) {
	case *exec.Dict:
		for _, p := range d.Pairs {
			pairs = append(pairs, list{p.Key.Interface(), p.Value.Interface()})
		}
	default:
		if !in.IsDict() {
			return exec.AsValue(fmt.Errorf("items: %s is not a mapping", in))
		}
		keys := in.Keys()
		sort.Sort(keys)
		for _, k := range keys {
			v, _ := in.GetItem(k.Interface())
			pairs = append(pairs, list{k.Interface(), v.Interface()})
		}
	}
	return exec.AsValue(pairs)
}

// filterList is Jinja's list filter, giving a list that indexes like
// Python's.
func filterList(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	if len(params.Args) > 0 || len(params.KwArgs) > 0 {
		return exec.AsValue(errors.New("list: takes no arguments"))
	}
	out := list{}
	if in.IsString() {
		for _, r := range in.String() {
			out = append(out, string(r))
		}
		return exec.AsValue(out)
	}
	in.Iterate(func(_, _ int, key, _ *exec.Value) bool {
		out = append(out, key.Interface())
		return true
	}, func() {})
	return exec.AsValue(out)
}
