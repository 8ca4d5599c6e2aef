package grammar

// Repeating an expression that matches the empty string, x* with x
// nullable, makes llama.cpp build a rule S ::= x S | "" that refers to
// itself after an empty match: left recursion its own check misses, on
// which it recurses until the C stack overflows. x{m,n} matches the same
// strings as (x without the empty string){0,n}, so patterns repeat that.

// maxNonEmptySize bounds the expression nonEmpty builds, which can grow
// with the square of a sequence of nullable items.
const maxNonEmptySize = 10000

// nullableExpr reports whether e matches the empty string. References are
// taken to match only nonempty text (patterns have none).
func nullableExpr(e *expr) bool {
	switch e.op {
	case opLit:
		return e.text == ""
	case opClass, opRef:
		return false
	case opAlt:
		for _, k := range e.kids {
			if nullableExpr(k) {
				return true
			}
		}
		return false
	case opRep:
		return e.min == 0 || nullableExpr(e.kids[0])
	}
	for _, k := range e.kids { // opSeq
		if !nullableExpr(k) {
			return false
		}
	}
	return true
}

// nonEmpty returns an expression for the nonempty strings e matches, or
// nil if e matches only the empty string. size counts the expression nodes
// built so far; nonEmpty reports false once it exceeds maxNonEmptySize.
func nonEmpty(e *expr, size *int) (*expr, bool) {
	if !nullableExpr(e) {
		return e, true
	}
	switch e.op {
	case opAlt:
		var alts []*expr
		for _, k := range e.kids {
			ne, ok := nonEmpty(k, size)
			if !ok {
				return nil, false
			}
			if ne != nil {
				alts = append(alts, ne)
			}
		}
		if alts == nil {
			return nil, true
		}
		return alt(alts...), true
	case opRep: // x{0,n}, or x{m,n} with x nullable: (nonempty x){1,n}
		ne, ok := nonEmpty(e.kids[0], size)
		if ne == nil || !ok {
			return nil, ok
		}
		*size++
		return rep(ne, 1, e.max), *size <= maxNonEmptySize
	case opSeq: // every item nullable: a nonempty first item, then the rest
		var alts []*expr
		for i, k := range e.kids {
			ne, ok := nonEmpty(k, size)
			if !ok {
				return nil, false
			}
			if ne == nil {
				continue
			}
			*size += len(e.kids) - i
			if *size > maxNonEmptySize {
				return nil, false
			}
			alts = append(alts, seq(append([]*expr{ne}, e.kids[i+1:]...)...))
		}
		if alts == nil {
			return nil, true
		}
		return alt(alts...), true
	}
	return nil, true // the empty literal
}
