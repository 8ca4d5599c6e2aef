package jinja

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Limits on one render. A template is trusted less than code: these keep
// a looping or recursive one (or a huge conversation fed to a quadratic
// one) from holding a CPU or memory without bound.
const (
	// maxOutput bounds the text a render writes, output and captured
	// (macro calls, {% set %} blocks) together, and any one string.
	maxOutput = 64 << 20
	// maxCallDepth bounds nested macro calls (Python stops Jinja2's
	// recursion at about this depth too).
	maxCallDepth = 150
	// maxRange is the sandbox's limit on range() (Jinja2's MAX_RANGE).
	maxRange = 100_000
)

// maxSteps bounds the statements, expressions and list items a render
// evaluates: some seconds of CPU. The templates of testdata take up to 48
// million for a conversation of 4000 messages with tool calls (some are
// quadratic in the messages). A variable so that tests can lower it.
var maxSteps = 100_000_000

var (
	errBreak    = errors.New("break")
	errContinue = errors.New("continue")
)

// scope holds the variables one level of the template sets: the
// template's own (the root), a loop iteration's, a macro call's. Most
// hold a handful, which a slice finds faster than a map.
type scope struct {
	names  []string
	vals   []any
	index  map[string]int // for big scopes
	parent *scope
	// captured is set once a macro closes over the scope: a loop then
	// gives its next iteration a new scope instead of reusing this one.
	captured bool
	// Room for the first variables (a loop's target and loop), so that
	// most scopes take one allocation.
	names0 [2]string
	vals0  [2]any
}

func newScope(parent *scope) *scope {
	s := &scope{parent: parent}
	s.names, s.vals = s.names0[:0], s.vals0[:0]
	return s
}

// reset empties s for reuse.
func (s *scope) reset() {
	clear(s.vals)
	s.names, s.vals, s.index = s.names[:0], s.vals[:0], nil
}

func (s *scope) find(name string) int {
	if s.index != nil {
		if i, ok := s.index[name]; ok {
			return i
		}
		return -1
	}
	for i, n := range s.names {
		if n == name {
			return i
		}
	}
	return -1
}

func (s *scope) set(name string, v any) {
	if i := s.find(name); i >= 0 {
		s.vals[i] = v
		return
	}
	s.names = append(s.names, name)
	s.vals = append(s.vals, v)
	if s.index != nil {
		s.index[name] = len(s.names) - 1
	} else if len(s.names) > 8 {
		s.index = make(map[string]int, 2*len(s.names))
		for i, n := range s.names {
			s.index[n] = i
		}
	}
}

// local returns the variable name set in s itself.
func (s *scope) local(name string) (any, bool) {
	if i := s.find(name); i >= 0 {
		return s.vals[i], true
	}
	return nil, false
}

func (s *scope) lookup(name string) (any, bool) {
	for ; s != nil; s = s.parent {
		if i := s.find(name); i >= 0 {
			return s.vals[i], true
		}
	}
	return nil, false
}

type renderer struct {
	out     *strings.Builder
	root    *strings.Builder // the render's output (out, unless capturing)
	limit   int              // bound on root's length; 0: none
	written int
	steps   int
	depth   int
	// mutable lets the template change lists and dicts in place
	// (Options.Mutable); grown counts the items its changes added.
	mutable bool
	grown   int
}

// step counts n units of work against maxSteps.
func (r *renderer) step(n int) error {
	r.steps += n
	if r.steps > maxSteps {
		return &runtimeError{kind: "LimitError", msg: fmt.Sprintf("the template did more than %d steps of work", maxSteps)}
	}
	return nil
}

func (r *renderer) write(s string) error {
	r.written += len(s)
	if r.written > maxOutput {
		return &runtimeError{kind: "LimitError", msg: fmt.Sprintf("the template wrote more than %d bytes", maxOutput)}
	}
	if r.limit > 0 && r.out == r.root && r.out.Len()+len(s) > r.limit {
		return fmt.Errorf("%w: more than %d bytes", ErrOutputLimit, r.limit)
	}
	r.out.WriteString(s)
	return nil
}

// capture runs fn with output going to a buffer, and returns the buffer.
func (r *renderer) capture(fn func() error) (string, error) {
	saved := r.out
	var b strings.Builder
	r.out = &b
	err := fn()
	r.out = saved
	return b.String(), err
}

// lineError attaches line to err unless it already has one.
func lineError(line int, err error) error {
	if err == nil || errors.Is(err, errBreak) || errors.Is(err, errContinue) {
		return err
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return &Error{Line: line, Msg: err.Error(), err: err}
}

func (r *renderer) execBody(body []stmt, s *scope) error {
	for _, st := range body {
		if err := r.exec(st, s); err != nil {
			return err
		}
	}
	return nil
}

func (r *renderer) exec(st stmt, s *scope) error {
	if err := r.step(1); err != nil {
		return lineError(st.stmtLine(), err)
	}
	switch st := st.(type) {
	case *textStmt:
		return lineError(st.line, r.write(st.text))
	case *outputStmt:
		v, err := r.eval(st.x, s)
		if err != nil {
			return err
		}
		return lineError(st.line, r.write(Str(v)))
	case *ifStmt:
		for i, c := range st.conds {
			v, err := r.eval(c, s)
			if err != nil {
				return err
			}
			if truthy(v) {
				return r.execBody(st.then[i], s)
			}
		}
		return r.execBody(st.els, s)
	case *forStmt:
		return r.execFor(st, s)
	case *setStmt:
		v, err := r.eval(st.x, s)
		if err != nil {
			return err
		}
		return lineError(st.line, r.assign(st.target, v, s))
	case *setBlockStmt:
		text, err := r.capture(func() error { return r.execBody(st.body, newScope(s)) })
		if err != nil {
			return err
		}
		v, err := r.applyFilters(st.filters, text, s)
		if err != nil {
			return err
		}
		return lineError(st.line, r.assign(st.target, v, s))
	case *macroStmt:
		s.captured = true
		s.set(st.m.name, &macro{def: st.m, closure: s})
		return nil
	case *callStmt:
		s.captured = true
		caller := &macro{def: st.caller, closure: s}
		v, err := r.evalCall(st.call, s, caller)
		if err != nil {
			return err
		}
		return lineError(st.line, r.write(Str(v)))
	case *filterStmt:
		text, err := r.capture(func() error { return r.execBody(st.body, newScope(s)) })
		if err != nil {
			return err
		}
		v, err := r.applyFilters(st.filters, text, s)
		if err != nil {
			return err
		}
		return lineError(st.line, r.write(Str(v)))
	case *withStmt:
		inner := newScope(s)
		for i, t := range st.targets {
			v, err := r.eval(st.values[i], s)
			if err != nil {
				return err
			}
			if err := r.assign(t, v, inner); err != nil {
				return lineError(st.line, err)
			}
		}
		return r.execBody(st.body, inner)
	case *blockStmt:
		return r.execBody(st.body, newScope(s))
	case *loopControlStmt:
		if st.brk {
			return errBreak
		}
		return errContinue
	case *unsupportedStmt:
		return &Error{Line: st.line, Msg: st.msg}
	}
	return fmt.Errorf("unknown statement %T", st)
}

// applyFilters applies a {% set %} or {% filter %} block's filters to its
// output.
func (r *renderer) applyFilters(chain []*filterExpr, v any, s *scope) (any, error) {
	for _, f := range chain {
		var err error
		if v, err = r.applyFilter(f, v, s); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func (r *renderer) execFor(st *forStmt, s *scope) error {
	iv, err := r.eval(st.iter, s)
	if err != nil {
		return err
	}
	items, err := iterate(iv)
	if err != nil {
		return lineError(st.line, err)
	}
	if err := r.step(len(items)); err != nil {
		return lineError(st.line, err)
	}
	if st.filter != nil {
		var kept []any
		for _, it := range items {
			fs := newScope(s)
			if err := r.assign(st.target, it, fs); err != nil {
				return lineError(st.line, err)
			}
			ok, err := r.eval(st.filter, fs)
			if err != nil {
				return err
			}
			if truthy(ok) {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		return r.execBody(st.els, s)
	}
	loop := &loopContext{items: items}
	is := newScope(s)
	for i, it := range items {
		loop.index0 = i
		if is.captured {
			is = newScope(s)
		} else {
			is.reset()
		}
		if err := r.assign(st.target, it, is); err != nil {
			return lineError(st.line, err)
		}
		is.set("loop", loop)
		err := r.execBody(st.body, is)
		if errors.Is(err, errBreak) {
			break
		}
		if err != nil && !errors.Is(err, errContinue) {
			return err
		}
	}
	return nil
}

// assign binds a value to a {% set %}, {% for %} or {% with %} target.
func (r *renderer) assign(t target, v any, s *scope) error {
	switch {
	case t.attr != "":
		obj, _ := s.lookup(t.name)
		ns, ok := obj.(*Namespace)
		if !ok {
			return &runtimeError{kind: "TemplateRuntimeError", msg: "cannot assign attribute on non-namespace object"}
		}
		ns.attrs.Set(t.attr, r.hold(v))
		return nil
	case t.names != nil:
		items, err := iterate(v)
		if err != nil {
			return err
		}
		if len(items) != len(t.names) {
			if len(items) < len(t.names) {
				return valueErrorf("not enough values to unpack (expected %d, got %d)", len(t.names), len(items))
			}
			return valueErrorf("too many values to unpack (expected %d)", len(t.names))
		}
		for i, n := range t.names {
			if err := r.assign(n, items[i], s); err != nil {
				return err
			}
		}
		return nil
	}
	s.set(t.name, r.hold(v))
	return nil
}

// iterate lists what a for loop over v visits.
func iterate(v any) ([]any, error) {
	switch v := v.(type) {
	case []any:
		return v, nil
	case *listRef:
		return v.items, nil
	case tuple:
		return v, nil
	case string:
		return chars(v), nil
	case markup:
		return chars(string(v)), nil
	case *Dict:
		return append([]any(nil), v.keys...), nil
	case *dictView:
		return v.list(), nil
	case *iterator:
		return v.take(), nil
	case *Undefined:
		return nil, nil
	case *loopContext:
		return v.items, nil
	}
	return nil, typeErrorf("'%s' object is not iterable", typeName(v))
}

func chars(s string) []any {
	out := make([]any, 0, len(s))
	for _, c := range s {
		out = append(out, string(c))
	}
	return out
}

// loopContext is the loop variable of a {% for %}.
type loopContext struct {
	items      []any
	index0     int
	lastChange []any
	changed    bool // lastChange is set
}

func (l *loopContext) attr(name string) (any, bool) {
	n := len(l.items)
	switch name {
	case "index":
		return l.index0 + 1, true
	case "index0":
		return l.index0, true
	case "revindex":
		return n - l.index0, true
	case "revindex0":
		return n - l.index0 - 1, true
	case "first":
		return l.index0 == 0, true
	case "last":
		return l.index0 == n-1, true
	case "length":
		return n, true
	case "depth":
		return 1, true
	case "depth0":
		return 0, true
	case "previtem":
		if l.index0 == 0 {
			return &Undefined{name: "previtem", hint: "there is no previous item"}, true
		}
		return l.items[l.index0-1], true
	case "nextitem":
		if l.index0 >= n-1 {
			return &Undefined{name: "nextitem", hint: "there is no next item"}, true
		}
		return l.items[l.index0+1], true
	case "cycle":
		return &builtin{name: "loop.cycle", fn: func(_ *renderer, args []any, _ kwargs) (any, error) {
			if len(args) == 0 {
				return nil, typeErrorf("no items for cycling given")
			}
			return args[l.index0%len(args)], nil
		}}, true
	case "changed":
		return &builtin{name: "loop.changed", fn: func(_ *renderer, args []any, _ kwargs) (any, error) {
			if l.changed && seqEqual(l.lastChange, args, 0) {
				return false, nil
			}
			l.lastChange, l.changed = args, true
			return true, nil
		}}, true
	}
	return nil, false
}

// macro is a {% macro %} (or a {% call %} block's caller) bound to the
// scope it was defined in.
type macro struct {
	def     *macroDef
	closure *scope
}

func (r *renderer) callMacro(m *macro, args []any, kw kwargs, caller *macro) (any, error) {
	r.depth++
	defer func() { r.depth-- }()
	if r.depth > maxCallDepth {
		return nil, &runtimeError{kind: "RecursionError", msg: "maximum recursion depth exceeded"}
	}
	d := m.def
	if len(args) > len(d.params) && !d.varargs {
		return nil, typeErrorf("macro '%s' takes not more than %d argument(s)", d.name, len(d.params))
	}
	s := newScope(m.closure)
	var varargs []any
	for i, a := range args {
		if i < len(d.params) {
			s.set(d.params[i], a)
		} else {
			varargs = append(varargs, a)
		}
	}
	extra := NewDict()
	for _, k := range kw {
		switch {
		case contains(d.params, k.name):
			if _, dup := s.local(k.name); dup {
				return nil, typeErrorf("macro '%s' got multiple values for argument '%s'", d.name, k.name)
			}
			s.set(k.name, k.v)
		case k.name == "caller" && d.caller:
			if c, ok := k.v.(*macro); ok {
				caller = c
				continue
			}
			s.set("caller", k.v)
		case !d.kwargs:
			return nil, typeErrorf("macro '%s' takes no keyword argument '%s'", d.name, k.name)
		default:
			_ = extra.set(k.name, k.v)
		}
	}
	firstDefault := len(d.params) - len(d.defaults)
	for i, p := range d.params {
		if _, ok := s.local(p); ok {
			continue
		}
		if i >= firstDefault {
			v, err := r.eval(d.defaults[i-firstDefault], s)
			if err != nil {
				return nil, err
			}
			s.set(p, r.hold(v))
			continue
		}
		s.set(p, &Undefined{name: p, hint: fmt.Sprintf("parameter '%s' was not provided", p)})
	}
	if varargs == nil {
		varargs = []any{}
	}
	s.set("varargs", tuple(varargs))
	s.set("kwargs", extra)
	if caller != nil {
		s.set("caller", caller)
	}
	out, err := r.capture(func() error { return r.execBody(d.body, s) })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// kwargs are the keyword arguments of a call, in order.
type kwargs []kwval

type kwval struct {
	name string
	v    any
}

func (k kwargs) get(name string) (any, bool) {
	for _, kv := range k {
		if kv.name == name {
			return kv.v, true
		}
	}
	return nil, false
}

// builtin is a function implemented here: a global, a loop method or a
// filter passed by name.
type builtin struct {
	name string
	fn   func(r *renderer, args []any, kw kwargs) (any, error)
}

func (r *renderer) call(fn any, args []any, kw kwargs) (any, error) {
	switch f := fn.(type) {
	case *macro:
		return r.callMacro(f, args, kw, nil)
	case *builtin:
		return f.fn(r, args, kw)
	case *boundMethod:
		return f.call(r, args, kw)
	case Func:
		m := make(map[string]any, len(kw))
		for _, k := range kw {
			m[k.name] = plainList(k.v)
		}
		if r.mutable {
			plain := make([]any, len(args))
			for i, a := range args {
				plain[i] = plainList(a)
			}
			args = plain
		}
		return f(args, m)
	case *Undefined:
		return nil, f.err()
	}
	return nil, typeErrorf("'%s' object is not callable", typeName(fn))
}

// eval evaluates an expression; errors carry the expression's line.
func (r *renderer) eval(x expr, s *scope) (any, error) {
	v, err := r.evalExpr(x, s)
	if err != nil {
		return nil, lineError(x.exprLine(), err)
	}
	return v, nil
}

func (r *renderer) evalExpr(x expr, s *scope) (any, error) {
	if err := r.step(1); err != nil {
		return nil, err
	}
	switch x := x.(type) {
	case *constExpr:
		return x.v, nil
	case *nameExpr:
		if v, ok := s.lookup(x.name); ok {
			return v, nil
		}
		if g, ok := globals[x.name]; ok {
			return g, nil
		}
		return undefinedName(x.name), nil
	case *listExpr:
		items := make([]any, len(x.items))
		for i, it := range x.items {
			v, err := r.eval(it, s)
			if err != nil {
				return nil, err
			}
			items[i] = r.hold(v)
		}
		if x.tuple {
			return tuple(items), nil
		}
		if r.mutable {
			return &listRef{items: items}, nil
		}
		return items, nil
	case *dictExpr:
		d := NewDict()
		for i := range x.keys {
			k, err := r.eval(x.keys[i], s)
			if err != nil {
				return nil, err
			}
			v, err := r.eval(x.vals[i], s)
			if err != nil {
				return nil, err
			}
			if err := d.set(k, r.hold(v)); err != nil {
				return nil, err
			}
		}
		return d, nil
	case *getattrExpr:
		obj, err := r.eval(x.x, s)
		if err != nil {
			return nil, err
		}
		return getattr(obj, x.name, r.mutable)
	case *getitemExpr:
		obj, err := r.eval(x.x, s)
		if err != nil {
			return nil, err
		}
		key, err := r.eval(x.index, s)
		if err != nil {
			return nil, err
		}
		return getitem(obj, key, r.mutable)
	case *sliceExpr:
		return r.evalSlice(x, s)
	case *callExpr:
		return r.evalCall(x, s, nil)
	case *filterExpr:
		v, err := r.eval(x.x, s)
		if err != nil {
			return nil, err
		}
		return r.applyFilter(x, v, s)
	case *testExpr:
		return r.evalTest(x, s)
	case *unaryExpr:
		v, err := r.eval(x.x, s)
		if err != nil {
			return nil, err
		}
		return unary(x.op, v)
	case *binaryExpr:
		a, err := r.eval(x.a, s)
		if err != nil {
			return nil, err
		}
		switch x.op {
		case "and":
			if !truthy(a) {
				return a, nil
			}
			return r.eval(x.b, s)
		case "or":
			if truthy(a) {
				return a, nil
			}
			return r.eval(x.b, s)
		}
		b, err := r.eval(x.b, s)
		if err != nil {
			return nil, err
		}
		return binary(x.op, a, b)
	case *compareExpr:
		a, err := r.eval(x.x, s)
		if err != nil {
			return nil, err
		}
		for _, op := range x.ops {
			b, err := r.eval(op.x, s)
			if err != nil {
				return nil, err
			}
			ok, err := compare(op.op, a, b)
			if err != nil || !ok {
				return false, err
			}
			a = b
		}
		return true, nil
	case *condExpr:
		t, err := r.eval(x.test, s)
		if err != nil {
			return nil, err
		}
		if truthy(t) {
			return r.eval(x.a, s)
		}
		if x.b == nil {
			return &Undefined{hint: "the inline if-expression evaluated to false and no else section was defined."}, nil
		}
		return r.eval(x.b, s)
	}
	return nil, fmt.Errorf("unknown expression %T", x)
}

func (r *renderer) evalArgs(args []expr, kws []kwarg, s *scope) ([]any, kwargs, error) {
	vals := make([]any, len(args))
	for i, a := range args {
		v, err := r.eval(a, s)
		if err != nil {
			return nil, nil, err
		}
		vals[i] = r.hold(v)
	}
	var kw kwargs
	for _, k := range kws {
		v, err := r.eval(k.x, s)
		if err != nil {
			return nil, nil, err
		}
		kw = append(kw, kwval{name: k.name, v: r.hold(v)})
	}
	return vals, kw, nil
}

func (r *renderer) evalCall(x *callExpr, s *scope, caller *macro) (any, error) {
	fn, err := r.eval(x.fn, s)
	if err != nil {
		return nil, err
	}
	args, kw, err := r.evalArgs(x.args, x.kwargs, s)
	if err != nil {
		return nil, err
	}
	if caller != nil {
		m, ok := fn.(*macro)
		if !ok {
			return nil, typeErrorf("{%% call %%} needs a macro, not %s", typeName(fn))
		}
		return r.callMacro(m, args, kw, caller)
	}
	return r.call(fn, args, kw)
}

func (r *renderer) evalSlice(x *sliceExpr, s *scope) (any, error) {
	obj, err := r.eval(x.x, s)
	if err != nil {
		return nil, err
	}
	var bounds [3]any
	for i, b := range []expr{x.start, x.stop, x.step} {
		if b == nil {
			continue
		}
		if bounds[i], err = r.eval(b, s); err != nil {
			return nil, err
		}
	}
	return slice(obj, bounds[0], bounds[1], bounds[2])
}

// slice is Python's obj[start:stop:step].
func slice(obj, start, stop, step any) (any, error) {
	var items []any
	switch o := obj.(type) {
	case []any:
		items = o
	case *listRef:
		items = o.items
	case tuple:
		items = o
	case string:
		items = chars(o)
	case markup:
		items = chars(string(o))
	case *Undefined:
		return nil, o.err()
	default:
		return &Undefined{hint: fmt.Sprintf("'%s' object is not subscriptable", typeName(obj))}, nil
	}
	idx := func(v any, def int) (int, error) {
		if v == nil {
			return def, nil
		}
		if i, ok := asInt(v); ok {
			return i, nil
		}
		return 0, typeErrorf("slice indices must be integers or None")
	}
	st, err := idx(step, 1)
	if err != nil {
		return nil, err
	}
	if st == 0 {
		return nil, valueErrorf("slice step cannot be zero")
	}
	n := len(items)
	clamp := func(i, lo, hi int) int { return max(lo, min(i, hi)) }
	var lo, hi int
	if st > 0 {
		if lo, err = idx(start, 0); err != nil {
			return nil, err
		}
		if hi, err = idx(stop, n); err != nil {
			return nil, err
		}
		if lo < 0 {
			lo += n
		}
		if hi < 0 {
			hi += n
		}
		lo, hi = clamp(lo, 0, n), clamp(hi, 0, n)
	} else {
		if lo, err = idx(start, n-1); err != nil {
			return nil, err
		}
		if hi, err = idx(stop, -n-1); err != nil {
			return nil, err
		}
		if lo < 0 {
			lo += n
		}
		if hi < 0 {
			hi += n
		}
		lo, hi = clamp(lo, -1, n-1), clamp(hi, -1, n-1)
	}
	var out []any
	for i := lo; st > 0 && i < hi || st < 0 && i > hi; i += st {
		out = append(out, items[i])
	}
	switch obj.(type) {
	case string, markup:
		var b strings.Builder
		for _, c := range out {
			b.WriteString(c.(string))
		}
		if _, ok := obj.(markup); ok {
			return markup(b.String()), nil
		}
		return b.String(), nil
	case tuple:
		return tuple(out), nil
	}
	if out == nil {
		out = []any{}
	}
	return out, nil
}

// getattr is the sandbox's obj.name: a Python attribute (a method of a
// str, dict or list) first, else the item called name. mut allows the
// methods that change a list or dict (see method).
func getattr(obj any, name string, mut bool) (any, error) {
	switch o := obj.(type) {
	case *Undefined:
		return nil, o.err()
	case *Namespace:
		if v, ok := o.attrs.get(name); ok {
			return v, nil
		}
		return undefinedAttr(obj, name), nil
	case *loopContext:
		if v, ok := o.attr(name); ok {
			return v, nil
		}
		return undefinedAttr(obj, name), nil
	}
	if m, ok := method(obj, name, mut); ok {
		return m, nil
	}
	if d, ok := obj.(*Dict); ok {
		if v, ok := d.getStr(name); ok {
			return v, nil
		}
	}
	return undefinedAttr(obj, name), nil
}

// getitem is the sandbox's obj[key]: the item, else the attribute named
// key (mut as getattr's).
func getitem(obj, key any, mut bool) (any, error) {
	switch o := obj.(type) {
	case *Undefined:
		return nil, o.err()
	case *Dict:
		if v, ok := o.get(key); ok {
			return v, nil
		}
	case []any, *listRef, tuple, string, markup:
		var items []any
		switch o := obj.(type) {
		case []any:
			items = o
		case *listRef:
			items = o.items
		case tuple:
			items = o
		}
		if i, ok := asInt(key); ok {
			if s, isStr := asString(obj); isStr {
				items = chars(s)
			}
			if i < 0 {
				i += len(items)
			}
			if i >= 0 && i < len(items) {
				return items[i], nil
			}
			return undefinedItem(obj, key), nil
		}
	case *Namespace, *loopContext:
		if name, ok := key.(string); ok {
			return getattr(obj, name, mut)
		}
	}
	if name, ok := key.(string); ok {
		if m, ok := method(obj, name, mut); ok {
			return m, nil
		}
	}
	return undefinedItem(obj, key), nil
}

func unary(op string, v any) (any, error) {
	if op == "not" {
		return !truthy(v), nil
	}
	if u, ok := v.(*Undefined); ok {
		return nil, u.err()
	}
	switch n := v.(type) {
	case int:
		if op == "-" {
			return -n, nil
		}
		return n, nil
	case bool:
		i, _ := asInt(n)
		if op == "-" {
			return -i, nil
		}
		return i, nil
	case float64:
		if op == "-" {
			return -n, nil
		}
		return n, nil
	}
	return nil, typeErrorf("bad operand type for unary %s: '%s'", op, typeName(v))
}

func binary(op string, a, b any) (any, error) {
	if op == "~" {
		s := Str(a) + Str(b)
		if len(s) > maxOutput {
			return nil, tooLong()
		}
		return s, nil
	}
	if u, ok := a.(*Undefined); ok {
		return nil, u.err()
	}
	if u, ok := b.(*Undefined); ok {
		return nil, u.err()
	}
	if x, ok := toNumber(a); ok {
		if y, ok := toNumber(b); ok {
			i, aInt := asInt(a)
			j, bInt := asInt(b)
			return arith(op, x, y, i, j, aInt && bInt)
		}
	}
	switch op {
	case "+":
		return add(a, b)
	case "*":
		return multiply(a, b)
	case "%":
		if s, ok := asString(a); ok {
			out, err := percentFormat(s, b)
			if err != nil {
				return nil, err
			}
			if _, isMarkup := a.(markup); isMarkup {
				return markup(out), nil
			}
			return out, nil
		}
	}
	return nil, typeErrorf("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(a), typeName(b))
}

func tooLong() error {
	return &runtimeError{kind: "LimitError", msg: fmt.Sprintf("a string or list grew past %d bytes", maxOutput)}
}

func add(a, b any) (any, error) {
	as, aStr := asString(a)
	bs, bStr := asString(b)
	switch {
	case aStr && bStr:
		if len(as)+len(bs) > maxOutput {
			return nil, tooLong()
		}
		_, am := a.(markup)
		_, bm := b.(markup)
		switch {
		case am && !bm:
			return markup(as + escapeHTML(bs)), nil
		case bm && !am:
			return markup(escapeHTML(as) + bs), nil
		case am && bm:
			return markup(as + bs), nil
		}
		return as + bs, nil
	case aStr:
		return nil, typeErrorf("can only concatenate str (not \"%s\") to str", typeName(b))
	}
	switch x := a.(type) {
	case []any, *listRef:
		l, _ := asList(x)
		y, ok := asList(b)
		if !ok {
			return nil, typeErrorf("can only concatenate list (not \"%s\") to list", typeName(b))
		}
		if len(l)+len(y) > maxOutput {
			return nil, tooLong()
		}
		return append(append(make([]any, 0, len(l)+len(y)), l...), y...), nil
	case tuple:
		y, ok := b.(tuple)
		if !ok {
			return nil, typeErrorf("can only concatenate tuple (not \"%s\") to tuple", typeName(b))
		}
		return tuple(append(append(make([]any, 0, len(x)+len(y)), x...), y...)), nil
	}
	return nil, typeErrorf("unsupported operand type(s) for +: '%s' and '%s'", typeName(a), typeName(b))
}

func multiply(a, b any) (any, error) {
	seq, n := a, b
	if _, ok := asInt(a); ok {
		seq, n = b, a
	}
	times, ok := asInt(n)
	if !ok {
		return nil, typeErrorf("can't multiply sequence by non-int of type '%s'", typeName(n))
	}
	times = max(times, 0)
	switch s := seq.(type) {
	case string, markup:
		str, _ := asString(s)
		if times > 0 && len(str) > maxOutput/times {
			return nil, tooLong()
		}
		out := strings.Repeat(str, times)
		if _, ok := s.(markup); ok {
			return markup(out), nil
		}
		return out, nil
	case []any, *listRef, tuple:
		items, _ := iterate(s)
		if times > 0 && len(items) > maxOutput/times {
			return nil, tooLong()
		}
		out := make([]any, 0, len(items)*times)
		for range times {
			out = append(out, items...)
		}
		if _, ok := s.(tuple); ok {
			return tuple(out), nil
		}
		return out, nil
	}
	return nil, typeErrorf("unsupported operand type(s) for *: '%s' and '%s'", typeName(a), typeName(b))
}

// arith does arithmetic on numbers: on ints when both are (ints is set),
// else on floats.
func arith(op string, x, y float64, i, j int, ints bool) (any, error) {
	zero := func(msg string) error { return &runtimeError{kind: "ZeroDivisionError", msg: msg} }
	if ints {
		switch op {
		case "+":
			if s := i + j; (s > i) == (j > 0) {
				return s, nil
			}
		case "-":
			if s := i - j; (s < i) == (j > 0) {
				return s, nil
			}
		case "*":
			if i == 0 || j == 0 {
				return 0, nil
			}
			if p := i * j; p/j == i && !(i == -1 && j == math.MinInt) && !(j == -1 && i == math.MinInt) {
				return p, nil
			}
		case "/":
			if j == 0 {
				return nil, zero("division by zero")
			}
			return x / y, nil
		case "//":
			if j == 0 {
				return nil, zero("integer division or modulo by zero")
			}
			q := i / j
			if (i%j != 0) && ((i < 0) != (j < 0)) {
				q--
			}
			return q, nil
		case "%":
			if j == 0 {
				return nil, zero("integer division or modulo by zero")
			}
			m := i % j
			if m != 0 && (m < 0) != (j < 0) {
				m += j
			}
			return m, nil
		case "**":
			if j < 0 {
				if i == 0 {
					return nil, zero("0.0 cannot be raised to a negative power")
				}
				return math.Pow(x, y), nil
			}
			if math.Abs(math.Pow(x, y)) >= 1<<62 {
				break
			}
			p, base := 1, i
			for e := j; e > 0; e >>= 1 {
				if e&1 == 1 {
					p *= base
				}
				base *= base
			}
			return p, nil
		}
		return nil, &runtimeError{kind: "OverflowError", msg: "integer too large"}
	}
	switch op {
	case "+":
		return x + y, nil
	case "-":
		return x - y, nil
	case "*":
		return x * y, nil
	case "/":
		if y == 0 {
			return nil, zero("float division by zero")
		}
		return x / y, nil
	case "//":
		if y == 0 {
			return nil, zero("float floor division by zero")
		}
		return math.Floor(x / y), nil
	case "%":
		if y == 0 {
			return nil, zero("float modulo")
		}
		m := math.Mod(x, y)
		if m != 0 && (m < 0) != (y < 0) {
			m += y
		}
		return m, nil
	case "**":
		if x == 0 && y < 0 {
			return nil, zero("0.0 cannot be raised to a negative power")
		}
		return math.Pow(x, y), nil
	}
	return nil, fmt.Errorf("unknown operator %s", op)
}

func compare(op string, a, b any) (bool, error) {
	switch op {
	case "==":
		return equal(a, b), nil
	case "!=":
		return !equal(a, b), nil
	case "in":
		return in(a, b)
	case "notin":
		ok, err := in(a, b)
		return !ok, err
	}
	if u, ok := a.(*Undefined); ok {
		return false, u.err()
	}
	if u, ok := b.(*Undefined); ok {
		return false, u.err()
	}
	switch op {
	case "<":
		return less(a, b)
	case ">":
		return less(b, a)
	case "<=":
		l, err := less(a, b)
		return l || err == nil && equal(a, b), err
	case ">=":
		l, err := less(b, a)
		return l || err == nil && equal(a, b), err
	}
	return false, fmt.Errorf("unknown comparison %s", op)
}

// in is Python's "item in container".
func in(item, container any) (bool, error) {
	switch c := container.(type) {
	case string, markup:
		s, _ := asString(c)
		sub, ok := asString(item)
		if !ok {
			if u, isU := item.(*Undefined); isU {
				return false, u.err()
			}
			return false, typeErrorf("'in <string>' requires string as left operand, not %s", typeName(item))
		}
		return strings.Contains(s, sub), nil
	case *Dict:
		if _, err := hashKey(item); err != nil {
			if _, isU := item.(*Undefined); isU {
				return false, nil
			}
			return false, err
		}
		_, ok := c.get(item)
		return ok, nil
	case *Undefined:
		return false, nil
	case nil, int, float64, bool:
		return false, typeErrorf("argument of type '%s' is not iterable", typeName(container))
	}
	items, err := iterate(container)
	if err != nil {
		return false, err
	}
	for _, x := range items {
		if equal(item, x) {
			return true, nil
		}
	}
	return false, nil
}
