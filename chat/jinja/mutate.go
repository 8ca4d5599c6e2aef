package jinja

import (
	"fmt"
	"slices"
)

// Changing lists and dicts in place, which a render allows only with
// Options.Mutable (Jinja2's SandboxedEnvironment; transformers' immutable
// one refuses it). Lists are then listRefs wherever a name or a container
// holds them, so that a change shows through every holder, as in Python;
// a list a template never stores (a filter's result) is still []any, and
// changing it changes a copy nobody else sees, as it would in Python.

// maxGrowth bounds the items that a render's changes add to lists and
// dicts (append, extend, insert, update, setdefault), all together: with
// the steps they cost, it keeps a template that appends in a loop from
// holding memory without bound. A variable so that tests can lower it.
var maxGrowth = 16 << 20

// grow counts n items a change adds against maxGrowth and the steps.
func (r *renderer) grow(n int) error {
	r.grown += n
	if r.grown > maxGrowth {
		return &runtimeError{kind: "LimitError", msg: fmt.Sprintf("the template added more than %d items to lists and dicts", maxGrowth)}
	}
	return r.step(n)
}

// hold is v as a name or container keeps it: in a render with
// Options.Mutable a list becomes one the template may change (a
// listRef), and so do the lists in it or in a tuple; otherwise, and for
// other values, v as it is.
func (r *renderer) hold(v any) any {
	if !r.mutable {
		return v
	}
	return withListRefs(v, false, 0)
}

// withListRefs is v with its lists, at any depth (in tuples too), made
// new listRefs of their items; with dicts, its dicts are copied too, the
// values in them likewise. Past maxNesting v stays as it is.
func withListRefs(v any, dicts bool, depth int) any {
	if depth > maxNesting {
		return v
	}
	switch x := v.(type) {
	case []any:
		items := make([]any, len(x))
		for i, it := range x {
			items[i] = withListRefs(it, dicts, depth+1)
		}
		return &listRef{items: items}
	case tuple:
		out := make(tuple, len(x))
		for i, it := range x {
			out[i] = withListRefs(it, dicts, depth+1)
		}
		return out
	case *Dict:
		if !dicts {
			return v
		}
		d := &Dict{keys: slices.Clone(x.keys), vals: make([]any, len(x.vals))}
		for i, it := range x.vals {
			d.vals[i] = withListRefs(it, dicts, depth+1)
		}
		d.reindex()
		return d
	}
	return v
}

// mutableCopy copies a variable given to a render with Options.Mutable:
// its lists, at any depth, become listRefs and its dicts new Dicts, so
// that the template may change them without changing the caller's.
func mutableCopy(v any) any { return withListRefs(v, true, 0) }

// plainList is v with a changeable list made a plain copy, for a Func,
// which knows only []any.
func plainList(v any) any {
	if l, ok := v.(*listRef); ok {
		return slices.Clone(l.items)
	}
	return v
}

// reindex rebuilds the positions of d's keys after keys were removed.
func (d *Dict) reindex() {
	d.str, d.other = nil, nil
	for i, k := range d.keys {
		if s, ok := k.(string); ok {
			if len(d.keys) > smallDict {
				if d.str == nil {
					d.str = map[string]int{}
				}
				d.str[s] = i
			}
			continue
		}
		h, err := hashKey(k)
		if err != nil {
			continue // never: only hashable keys get in
		}
		if d.other == nil {
			d.other = map[any]int{}
		}
		d.other[h] = i
	}
}

// index is the position of key in d, or -1.
func (d *Dict) index(key any) int {
	switch k := key.(type) {
	case string:
		return d.strIndex(k)
	case markup:
		return d.strIndex(string(k))
	}
	h, err := hashKey(key)
	if err != nil || d.other == nil {
		return -1
	}
	if i, ok := d.other[h]; ok {
		return i
	}
	return -1
}

// deleteAt removes the entry at position i.
func (d *Dict) deleteAt(i int) {
	d.keys = slices.Delete(d.keys, i, i+1)
	d.vals = slices.Delete(d.vals, i, i+1)
	d.reindex()
}

// positional binds the positional arguments of a method that takes no
// keyword arguments, between min and max of them.
func positional(name string, min, max int, args []any, kw kwargs) error {
	if len(kw) > 0 {
		return typeErrorf("%s() takes no keyword arguments", name)
	}
	if len(args) < min || len(args) > max {
		if min == max {
			return typeErrorf("%s() takes exactly %d argument(s) (%d given)", name, min, len(args))
		}
		return typeErrorf("%s expected at most %d argument(s), got %d", name, max, len(args))
	}
	return nil
}

// listMutators are the methods that change a list in place, for a render
// with Options.Mutable. recv is a *listRef.
var listMutators = map[string]methodFunc{
	"append": func(r *renderer, recv any, args []any, kw kwargs) (any, error) {
		if err := positional("list.append", 1, 1, args, kw); err != nil {
			return nil, err
		}
		if err := r.grow(1); err != nil {
			return nil, err
		}
		l := recv.(*listRef)
		l.items = append(l.items, r.hold(args[0]))
		return nil, nil
	},
	"extend": func(r *renderer, recv any, args []any, kw kwargs) (any, error) {
		if err := positional("list.extend", 1, 1, args, kw); err != nil {
			return nil, err
		}
		items, err := iterate(args[0])
		if err != nil {
			return nil, err
		}
		if err := r.grow(len(items)); err != nil {
			return nil, err
		}
		l := recv.(*listRef)
		add := make([]any, len(items))
		for i, it := range items {
			add[i] = r.hold(it)
		}
		l.items = append(l.items, add...)
		return nil, nil
	},
	"insert": func(r *renderer, recv any, args []any, kw kwargs) (any, error) {
		if err := positional("insert", 2, 2, args, kw); err != nil {
			return nil, err
		}
		i, ok := asInt(args[0])
		if !ok {
			return nil, typeErrorf("'%s' object cannot be interpreted as an integer", typeName(args[0]))
		}
		if err := r.grow(1); err != nil {
			return nil, err
		}
		l := recv.(*listRef)
		n := len(l.items)
		if i < 0 {
			i = max(i+n, 0)
		}
		l.items = slices.Insert(l.items, min(i, n), r.hold(args[1]))
		return nil, nil
	},
	"pop": func(r *renderer, recv any, args []any, kw kwargs) (any, error) {
		if err := positional("pop", 0, 1, args, kw); err != nil {
			return nil, err
		}
		l := recv.(*listRef)
		n := len(l.items)
		if n == 0 {
			return nil, &runtimeError{kind: "IndexError", msg: "pop from empty list"}
		}
		i := n - 1
		if len(args) == 1 {
			var ok bool
			if i, ok = asInt(args[0]); !ok {
				return nil, typeErrorf("'%s' object cannot be interpreted as an integer", typeName(args[0]))
			}
			if i < 0 {
				i += n
			}
			if i < 0 || i >= n {
				return nil, &runtimeError{kind: "IndexError", msg: "pop index out of range"}
			}
		}
		v := l.items[i]
		l.items = slices.Delete(l.items, i, i+1)
		return v, r.step(n - i)
	},
	"remove": func(r *renderer, recv any, args []any, kw kwargs) (any, error) {
		if err := positional("list.remove", 1, 1, args, kw); err != nil {
			return nil, err
		}
		l := recv.(*listRef)
		if err := r.step(len(l.items)); err != nil {
			return nil, err
		}
		for i, x := range l.items {
			if equal(x, args[0]) {
				l.items = slices.Delete(l.items, i, i+1)
				return nil, nil
			}
		}
		return nil, valueErrorf("list.remove(x): x not in list")
	},
	"clear": func(_ *renderer, recv any, args []any, kw kwargs) (any, error) {
		if err := positional("list.clear", 0, 0, args, kw); err != nil {
			return nil, err
		}
		recv.(*listRef).items = []any{}
		return nil, nil
	},
	"reverse": func(r *renderer, recv any, args []any, kw kwargs) (any, error) {
		if err := positional("list.reverse", 0, 0, args, kw); err != nil {
			return nil, err
		}
		l := recv.(*listRef)
		slices.Reverse(l.items)
		return nil, r.step(len(l.items))
	},
	"sort": func(r *renderer, recv any, args []any, kw kwargs) (any, error) {
		if len(args) > 0 {
			return nil, typeErrorf("sort() takes no positional arguments")
		}
		a, _, err := bind("sort", []string{"key", "reverse"}, 0, nil, kw)
		if err != nil {
			return nil, err
		}
		if a[0] != nil {
			return nil, typeErrorf("sort() with a key function is not supported")
		}
		l := recv.(*listRef)
		if err := r.step(len(l.items)); err != nil {
			return nil, err
		}
		return nil, sortValues(l.items, func(v any) any { return v }, truthy(a[1]))
	},
}

// dictMutators are the methods that change a dict in place, for a render
// with Options.Mutable.
var dictMutators = map[string]methodFunc{
	"update": func(r *renderer, recv any, args []any, kw kwargs) (any, error) {
		if len(args) > 1 {
			return nil, typeErrorf("update expected at most 1 argument, got %d", len(args))
		}
		d := recv.(*Dict)
		n := d.Len()
		if len(args) == 1 {
			if err := updateDict(d, r.hold(args[0])); err != nil {
				return nil, err
			}
		}
		for _, k := range kw {
			d.Set(k.name, r.hold(k.v))
		}
		return nil, r.grow(d.Len() - n)
	},
	"setdefault": func(r *renderer, recv any, args []any, kw kwargs) (any, error) {
		if err := positional("setdefault", 1, 2, args, kw); err != nil {
			return nil, err
		}
		d := recv.(*Dict)
		if _, err := hashKey(args[0]); err != nil {
			return nil, err
		}
		if v, ok := d.get(args[0]); ok {
			return v, nil
		}
		var v any
		if len(args) == 2 {
			v = r.hold(args[1])
		}
		if err := r.grow(1); err != nil {
			return nil, err
		}
		return v, d.set(args[0], v)
	},
	"pop": func(r *renderer, recv any, args []any, kw kwargs) (any, error) {
		if err := positional("pop", 1, 2, args, kw); err != nil {
			return nil, err
		}
		d := recv.(*Dict)
		if _, err := hashKey(args[0]); err != nil {
			return nil, err
		}
		i := d.index(args[0])
		if i < 0 {
			if len(args) == 2 {
				return args[1], nil
			}
			return nil, &runtimeError{kind: "KeyError", msg: repr(args[0])}
		}
		v := d.vals[i]
		d.deleteAt(i)
		return v, r.step(d.Len())
	},
	"popitem": func(r *renderer, recv any, args []any, kw kwargs) (any, error) {
		if err := positional("popitem", 0, 0, args, kw); err != nil {
			return nil, err
		}
		d := recv.(*Dict)
		if d.Len() == 0 {
			return nil, &runtimeError{kind: "KeyError", msg: "'popitem(): dictionary is empty'"}
		}
		i := d.Len() - 1
		item := tuple{d.keys[i], d.vals[i]}
		d.deleteAt(i)
		return item, r.step(d.Len())
	},
	"clear": func(_ *renderer, recv any, args []any, kw kwargs) (any, error) {
		if err := positional("clear", 0, 0, args, kw); err != nil {
			return nil, err
		}
		d := recv.(*Dict)
		d.keys, d.vals, d.str, d.other = nil, nil, nil, nil
		return nil, nil
	},
}
