// Package jinja renders Jinja2 templates the way Hugging Face transformers
// renders chat templates: Jinja2 3.x semantics and Python's values (str,
// repr, dict order, truthiness, arithmetic), in the environment
// apply_chat_template sets up: an immutable sandbox (methods that change a
// list or dict are refused, unless Options.Mutable allows them, as
// Jinja2's mutable sandbox does), trim_blocks and lstrip_blocks, the
// loopcontrols extension ({% break %}, {% continue %}), the
// {% generation %} block tag and a tojson filter that calls Python's
// json.dumps with ensure_ascii off.
//
// The caller gives the variables, among them the functions transformers
// adds as globals (raise_exception, strftime_now) as Funcs.
//
// There is no loader: {% include %}, {% import %} and {% extends %} parse
// but fail when rendered. Recursive loops and *args/**kwargs in calls
// are not supported. Renders are bounded in work, output and call depth.
package jinja

import (
	"errors"
	"fmt"
	"strings"
)

// Template is a parsed template. It is safe for concurrent use.
type Template struct {
	body  []stmt
	names map[string]bool
	// mutates is the first method that changes a list or dict in place
	// the template names, and its line ("" when none).
	mutates     string
	mutatesLine int
}

// Error is an error in a template: a syntax error from Parse, or a failure
// while rendering (an undefined variable used, a type error, a Func's
// error...). Line is the template line it happened on, counting from 1.
type Error struct {
	Line   int
	Msg    string
	syntax bool
	err    error
}

// Error says where and what went wrong.
func (e *Error) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

// Unwrap returns the error a Func returned, if it caused this one.
func (e *Error) Unwrap() error {
	var re *runtimeError
	if errors.As(e.err, &re) {
		return nil
	}
	return e.err
}

// Parse parses a template.
func Parse(src string) (*Template, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p, err := parse(toks)
	if err != nil {
		return nil, err
	}
	return &Template{body: p.body, names: p.names, mutates: p.mutates, mutatesLine: p.mutatesLine}, nil
}

// Reads reports whether the template reads a variable called name
// anywhere (it may also set it).
func (t *Template) Reads(name string) bool { return t.names[name] }

// Render renders the template with vars as its variables. Values are
// nil, bool, int, float64, string, []any, *Dict, Func and what FromJSON
// returns.
func (t *Template) Render(vars map[string]any) (out string, err error) {
	return t.RenderLimit(vars, 0)
}

// ErrOutputLimit is wrapped by the error RenderLimit returns when the
// output would pass its limit.
var ErrOutputLimit = errors.New("template output over the limit")

// RenderLimit is Render with the output bounded to limit bytes (0: no
// bound beyond the package's own): the render stops as soon as it would
// write more, with an error wrapping ErrOutputLimit.
func (t *Template) RenderLimit(vars map[string]any, limit int) (out string, err error) {
	return t.RenderOptions(vars, Options{Limit: limit})
}

// Options control a render.
type Options struct {
	// Limit bounds the output to so many bytes (0: no bound beyond the
	// package's own): the render stops as soon as it would write more,
	// with an error wrapping ErrOutputLimit.
	Limit int
	// Mutable lets the template change lists and dicts in place
	// (list.append, extend, insert, pop, remove, clear, reverse, sort;
	// dict.update, setdefault, pop, popitem, clear), as Jinja2's
	// SandboxedEnvironment does; without it they are refused, as
	// transformers' ImmutableSandboxedEnvironment refuses them. A list
	// is then a reference, as in Python: a change shows through every
	// name and container holding it. The items a render's changes add
	// count against a bound (16 Mi), as well as against its steps of
	// work. The variables are copied first: the caller's values are
	// never changed.
	Mutable bool
}

// RenderOptions is Render with opt.
func (t *Template) RenderOptions(vars map[string]any, opt Options) (out string, err error) {
	var b strings.Builder
	r := &renderer{out: &b, root: &b, limit: opt.Limit, mutable: opt.Mutable}
	root := newScope(nil)
	for k, v := range vars {
		if r.mutable {
			v = mutableCopy(v)
		}
		root.set(k, v)
	}
	if err := r.execBody(t.body, root); err != nil {
		if errors.Is(err, errBreak) || errors.Is(err, errContinue) {
			return "", &Error{Line: 1, Msg: "break or continue outside a loop"}
		}
		return "", err
	}
	return b.String(), nil
}

// Mutates reports where the template changes a list or dict in place,
// which a render refuses unless Options.Mutable allows it: the first
// such method it names (append, pop, update...) and its line; "" when
// it names none. It is judged from the source: the method may sit in a
// branch that a conversation never takes.
func (t *Template) Mutates() (method string, line int) { return t.mutates, t.mutatesLine }

// globals are the functions every template sees (Jinja2's default
// namespace).
var globals = map[string]any{
	"range": &builtin{name: "range", fn: func(_ *renderer, args []any, kw kwargs) (any, error) {
		if len(kw) > 0 {
			return nil, typeErrorf("range() takes no keyword arguments")
		}
		var bounds []int
		for _, a := range args {
			i, ok := asInt(a)
			if !ok {
				return nil, typeErrorf("'%s' object cannot be interpreted as an integer", typeName(a))
			}
			bounds = append(bounds, i)
		}
		start, stop, step := 0, 0, 1
		switch len(bounds) {
		case 1:
			stop = bounds[0]
		case 2:
			start, stop = bounds[0], bounds[1]
		case 3:
			start, stop, step = bounds[0], bounds[1], bounds[2]
		default:
			return nil, typeErrorf("range expected 1 to 3 arguments, got %d", len(bounds))
		}
		if step == 0 {
			return nil, valueErrorf("range() arg 3 must not be zero")
		}
		n := 0
		if step > 0 && stop > start {
			n = (stop - start + step - 1) / step
		} else if step < 0 && stop < start {
			n = (start - stop - step - 1) / -step
		}
		if n > maxRange {
			return nil, &runtimeError{kind: "OverflowError", msg: fmt.Sprintf("Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", maxRange)}
		}
		out := make([]any, n)
		for i := range out {
			out[i] = start + i*step
		}
		return out, nil
	}},
	"dict": &builtin{name: "dict", fn: func(_ *renderer, args []any, kw kwargs) (any, error) {
		d := NewDict()
		if len(args) > 1 {
			return nil, typeErrorf("dict expected at most 1 argument, got %d", len(args))
		}
		if len(args) == 1 {
			if err := updateDict(d, args[0]); err != nil {
				return nil, err
			}
		}
		for _, k := range kw {
			d.Set(k.name, k.v)
		}
		return d, nil
	}},
	"namespace": &builtin{name: "namespace", fn: func(_ *renderer, args []any, kw kwargs) (any, error) {
		ns := &Namespace{attrs: NewDict()}
		if len(args) > 1 {
			return nil, typeErrorf("dict expected at most 1 argument, got %d", len(args))
		}
		if len(args) == 1 {
			if err := updateDict(ns.attrs, args[0]); err != nil {
				return nil, err
			}
		}
		for _, k := range kw {
			ns.attrs.Set(k.name, k.v)
		}
		return ns, nil
	}},
	"joiner": &builtin{name: "joiner", fn: func(_ *renderer, args []any, _ kwargs) (any, error) {
		sep := ", "
		if len(args) > 0 {
			sep = Str(args[0])
		}
		used := false
		return &builtin{name: "joiner", fn: func(*renderer, []any, kwargs) (any, error) {
			if !used {
				used = true
				return "", nil
			}
			return sep, nil
		}}, nil
	}},
	"cycler": &builtin{name: "cycler", fn: func(_ *renderer, args []any, _ kwargs) (any, error) {
		if len(args) == 0 {
			return nil, typeErrorf("cycler() needs at least one item")
		}
		c := &Namespace{attrs: NewDict()}
		pos := 0
		c.attrs.Set("next", &builtin{name: "next", fn: func(*renderer, []any, kwargs) (any, error) {
			v := args[pos]
			pos = (pos + 1) % len(args)
			c.attrs.Set("current", args[pos])
			return v, nil
		}})
		c.attrs.Set("reset", &builtin{name: "reset", fn: func(*renderer, []any, kwargs) (any, error) {
			pos = 0
			c.attrs.Set("current", args[0])
			return nil, nil
		}})
		c.attrs.Set("current", args[0])
		return c, nil
	}},
}

// updateDict adds the entries of a mapping, or of a list of pairs, to d.
func updateDict(d *Dict, src any) error {
	switch s := src.(type) {
	case *Dict:
		for i, k := range s.keys {
			if err := d.set(k, s.vals[i]); err != nil {
				return err
			}
		}
		return nil
	case *Undefined:
		return s.err()
	}
	items, err := iterate(src)
	if err != nil {
		return err
	}
	for _, it := range items {
		pair, err := iterate(it)
		if err != nil || len(pair) != 2 {
			return valueErrorf("dictionary update sequence element has wrong length")
		}
		if err := d.set(pair[0], pair[1]); err != nil {
			return err
		}
	}
	return nil
}
