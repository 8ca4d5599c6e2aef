package jinja

import (
	"fmt"
	"strings"
)

// maxNesting bounds how deeply expressions and blocks may nest, so that a
// hostile template cannot exhaust the stack while it is parsed.
const maxNesting = 200

type parser struct {
	toks      []token
	pos       int
	depth     int // expression and block nesting
	loopDepth int // enclosing {% for %} loops in the current macro
	names     map[string]bool
	// mutates is the first method named that changes a list or dict in
	// place, mutatesLine its line.
	mutates     string
	mutatesLine int
	body        []stmt
}

// parse parses a token stream into statements: the parser's body, with
// the names the template reads and the first method it names that
// changes a list or dict.
func parse(toks []token) (*parser, error) {
	p := &parser{toks: toks, names: map[string]bool{}}
	body, _, err := p.subparse()
	if err != nil {
		return nil, err
	}
	if err := checkNames(body, false); err != nil {
		return nil, err
	}
	p.body = body
	return p, nil
}

// mutators are the methods of Python's list and dict that change them in
// place, which only a render with Options.Mutable lets a template call.
var mutators = map[string]bool{
	"append": true, "extend": true, "insert": true, "pop": true, "remove": true, "clear": true,
	"reverse": true, "sort": true, "update": true, "setdefault": true, "popitem": true,
}

func (p *parser) cur() token  { return p.toks[p.pos] }
func (p *parser) peek() token { return p.toks[min(p.pos+1, len(p.toks)-1)] }
func (p *parser) next() token {
	t := p.toks[p.pos]
	if p.pos < len(p.toks)-1 {
		p.pos++
	}
	return t
}

func (p *parser) failf(line int, format string, args ...any) error {
	return &Error{Line: line, Msg: fmt.Sprintf(format, args...), syntax: true}
}

func (p *parser) unexpected(t token) error {
	return p.failf(t.line, "unexpected %s", t)
}

// isOp reports whether the current token is operator op.
func (p *parser) isOp(op string) bool {
	t := p.cur()
	return t.kind == tokOp && t.val == op
}

// isName reports whether the current token is the name (keyword) n.
func (p *parser) isName(n string) bool {
	t := p.cur()
	return t.kind == tokName && t.val == n
}

func (p *parser) skipOp(op string) bool {
	if p.isOp(op) {
		p.next()
		return true
	}
	return false
}

func (p *parser) skipName(n string) bool {
	if p.isName(n) {
		p.next()
		return true
	}
	return false
}

func (p *parser) expectOp(op string) error {
	if !p.skipOp(op) {
		t := p.cur()
		return p.failf(t.line, "expected '%s', got %s", op, t)
	}
	return nil
}

func (p *parser) expectName(n string) error {
	if !p.skipName(n) {
		t := p.cur()
		return p.failf(t.line, "expected '%s', got %s", n, t)
	}
	return nil
}

func (p *parser) expectKind(k tokenKind, what string) (token, error) {
	t := p.cur()
	if t.kind != k {
		return t, p.failf(t.line, "expected %s, got %s", what, t)
	}
	return p.next(), nil
}

func (p *parser) enter(line int) error {
	p.depth++
	if p.depth > maxNesting {
		return p.failf(line, "template nests more than %d levels deep", maxNesting)
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

// subparse parses statements up to the end of the template or, when
// endTags are given, up to a block tag "{% endTag", which it consumes up
// to the tag name and returns.
func (p *parser) subparse(endTags ...string) ([]stmt, string, error) {
	var body []stmt
	for {
		t := p.cur()
		switch t.kind {
		case tokEOF:
			if len(endTags) > 0 {
				return nil, "", p.failf(t.line, "unexpected end of template: expected %s", quoteTags(endTags))
			}
			return body, "", nil
		case tokText:
			p.next()
			body = append(body, &textStmt{line: t.line, text: t.val})
		case tokVarBegin:
			p.next()
			x, err := p.parseTuple(true, false)
			if err != nil {
				return nil, "", err
			}
			if _, err := p.expectKind(tokVarEnd, "end of print statement"); err != nil {
				return nil, "", err
			}
			body = append(body, &outputStmt{line: t.line, x: x})
		case tokBlockBegin:
			p.next()
			name := p.cur()
			if name.kind != tokName {
				return nil, "", p.failf(name.line, "tag name expected")
			}
			for _, end := range endTags {
				if name.val == end {
					p.next()
					return body, end, nil
				}
			}
			s, err := p.statement()
			if err != nil {
				return nil, "", err
			}
			if s != nil {
				body = append(body, s)
			}
			if _, err := p.expectKind(tokBlockEnd, "end of statement block"); err != nil {
				return nil, "", err
			}
		default:
			return nil, "", p.unexpected(t)
		}
	}
}

func quoteTags(tags []string) string {
	q := make([]string, len(tags))
	for i, t := range tags {
		q[i] = "'" + t + "'"
	}
	return strings.Join(q, " or ")
}

// block parses the rest of an opening tag's end and the body up to one of
// endTags, returning which one ended it.
func (p *parser) block(endTags ...string) ([]stmt, string, error) {
	if _, err := p.expectKind(tokBlockEnd, "end of statement block"); err != nil {
		return nil, "", err
	}
	if err := p.enter(p.cur().line); err != nil {
		return nil, "", err
	}
	defer p.leave()
	return p.subparse(endTags...)
}

// statement parses the statement whose tag name is the current token,
// leaving the closing "%}" of its last tag.
func (p *parser) statement() (stmt, error) {
	t := p.cur()
	switch t.val {
	case "for":
		return p.parseFor()
	case "if":
		return p.parseIf()
	case "set":
		return p.parseSet()
	case "macro":
		return p.parseMacro()
	case "call":
		return p.parseCallBlock()
	case "filter":
		return p.parseFilterBlock()
	case "with":
		return p.parseWith()
	case "block":
		p.next()
		name, err := p.expectKind(tokName, "block name")
		if err != nil {
			return nil, err
		}
		p.skipName("scoped")
		p.skipName("required")
		body, _, err := p.block("endblock")
		if err != nil {
			return nil, err
		}
		p.skipName(name.val)
		return &blockStmt{line: t.line, body: body}, nil
	case "generation": // transformers' tag marking the assistant's text
		p.next()
		body, _, err := p.block("endgeneration")
		if err != nil {
			return nil, err
		}
		return &blockStmt{line: t.line, body: body}, nil
	case "break", "continue":
		p.next()
		if p.loopDepth == 0 {
			return nil, p.failf(t.line, "'%s' outside loop", t.val)
		}
		return &loopControlStmt{line: t.line, brk: t.val == "break"}, nil
	case "print":
		p.next()
		var items []expr
		for p.cur().kind != tokBlockEnd {
			if len(items) > 0 {
				if err := p.expectOp(","); err != nil {
					return nil, err
				}
			}
			x, err := p.parseExpression(true)
			if err != nil {
				return nil, err
			}
			items = append(items, x)
		}
		x := expr(&listExpr{line: t.line, items: items, tuple: true})
		if len(items) == 1 {
			x = items[0]
		}
		return &outputStmt{line: t.line, x: x}, nil
	case "include", "import", "from", "extends":
		// Parsed, as Jinja2 does, but there is nothing to load: rendering
		// them fails.
		p.next()
		for p.cur().kind != tokBlockEnd && p.cur().kind != tokEOF {
			p.next()
		}
		return &unsupportedStmt{line: t.line, msg: fmt.Sprintf("{%% %s %%} needs a template loader, and chat templates have none", t.val)}, nil
	}
	return nil, p.failf(t.line, "encountered unknown tag '%s'", t.val)
}

func (p *parser) parseFor() (stmt, error) {
	line := p.next().line
	tgt, err := p.parseAssignTarget(true, "in")
	if err != nil {
		return nil, err
	}
	if err := p.expectName("in"); err != nil {
		return nil, err
	}
	iter, err := p.parseTupleUntil(false, "recursive")
	if err != nil {
		return nil, err
	}
	s := &forStmt{line: line, target: tgt, iter: iter}
	if p.skipName("if") {
		if s.filter, err = p.parseExpression(true); err != nil {
			return nil, err
		}
	}
	if p.isName("recursive") {
		return nil, p.failf(p.cur().line, "recursive loops are not supported")
	}
	p.loopDepth++
	body, end, err := p.block("endfor", "else")
	p.loopDepth--
	if err != nil {
		return nil, err
	}
	s.body = body
	if end == "else" {
		if s.els, _, err = p.block("endfor"); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (p *parser) parseIf() (stmt, error) {
	s := &ifStmt{line: p.next().line}
	for {
		test, err := p.parseTuple(false, false)
		if err != nil {
			return nil, err
		}
		body, end, err := p.block("elif", "else", "endif")
		if err != nil {
			return nil, err
		}
		s.conds = append(s.conds, test)
		s.then = append(s.then, body)
		switch end {
		case "elif":
			continue
		case "else":
			if s.els, _, err = p.block("endif"); err != nil {
				return nil, err
			}
		}
		return s, nil
	}
}

func (p *parser) parseSet() (stmt, error) {
	line := p.next().line
	var tgt target
	if p.cur().kind == tokName && p.peek().kind == tokOp && p.peek().val == "." {
		ns := p.next()
		p.next()
		attr, err := p.expectKind(tokName, "attribute name")
		if err != nil {
			return nil, err
		}
		tgt = target{name: ns.val, attr: attr.val}
	} else {
		var err error
		if tgt, err = p.parseAssignTarget(true); err != nil {
			return nil, err
		}
	}
	if p.skipOp("=") {
		x, err := p.parseTuple(true, false)
		if err != nil {
			return nil, err
		}
		return &setStmt{line: line, target: tgt, x: x}, nil
	}
	var filters []*filterExpr
	if p.isOp("|") {
		var err error
		if filters, err = p.parseFilterChain(false); err != nil {
			return nil, err
		}
	}
	body, _, err := p.block("endset")
	if err != nil {
		return nil, err
	}
	return &setBlockStmt{line: line, target: tgt, filters: filters, body: body}, nil
}

func (p *parser) parseMacro() (stmt, error) {
	line := p.next().line
	name, err := p.expectKind(tokName, "macro name")
	if err != nil {
		return nil, err
	}
	m := &macroDef{name: name.val}
	if err := p.parseSignature(m); err != nil {
		return nil, err
	}
	if err := p.macroBody(m, "endmacro"); err != nil {
		return nil, err
	}
	return &macroStmt{line: line, m: m}, nil
}

// macroBody parses the body of a macro (or call block) up to endTag,
// noting which of varargs, kwargs and caller it reads.
func (p *parser) macroBody(m *macroDef, endTag string) error {
	loops, names := p.loopDepth, p.names
	p.loopDepth, p.names = 0, map[string]bool{}
	var err error
	m.body, _, err = p.block(endTag)
	m.varargs, m.kwargs, m.caller = p.names["varargs"], p.names["kwargs"], p.names["caller"]
	for n := range p.names {
		names[n] = true
	}
	p.loopDepth, p.names = loops, names
	return err
}

func (p *parser) parseSignature(m *macroDef) error {
	if err := p.expectOp("("); err != nil {
		return err
	}
	for !p.isOp(")") {
		if len(m.params) > 0 {
			if err := p.expectOp(","); err != nil {
				return err
			}
		}
		arg, err := p.expectKind(tokName, "argument name")
		if err != nil {
			return err
		}
		if p.skipOp("=") {
			d, err := p.parseExpression(true)
			if err != nil {
				return err
			}
			m.defaults = append(m.defaults, d)
		} else if len(m.defaults) > 0 {
			return p.failf(arg.line, "non-default argument follows default argument")
		}
		m.params = append(m.params, arg.val)
	}
	p.next()
	return nil
}

func (p *parser) parseCallBlock() (stmt, error) {
	line := p.next().line
	caller := &macroDef{name: "caller"}
	if p.isOp("(") {
		if err := p.parseSignature(caller); err != nil {
			return nil, err
		}
	}
	x, err := p.parseExpression(true)
	if err != nil {
		return nil, err
	}
	call, ok := x.(*callExpr)
	if !ok {
		return nil, p.failf(line, "expected call")
	}
	if err := p.macroBody(caller, "endcall"); err != nil {
		return nil, err
	}
	return &callStmt{line: line, caller: caller, call: call}, nil
}

func (p *parser) parseFilterBlock() (stmt, error) {
	line := p.next().line
	filters, err := p.parseFilterChain(true)
	if err != nil {
		return nil, err
	}
	body, _, err := p.block("endfilter")
	if err != nil {
		return nil, err
	}
	return &filterStmt{line: line, filters: filters, body: body}, nil
}

func (p *parser) parseWith() (stmt, error) {
	s := &withStmt{line: p.next().line}
	for p.cur().kind != tokBlockEnd {
		if len(s.targets) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		tgt, err := p.parseAssignTarget(true)
		if err != nil {
			return nil, err
		}
		if err := p.expectOp("="); err != nil {
			return nil, err
		}
		x, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		s.targets = append(s.targets, tgt)
		s.values = append(s.values, x)
	}
	body, _, err := p.block("endwith")
	if err != nil {
		return nil, err
	}
	s.body = body
	return s, nil
}

// parseAssignTarget parses a name or a tuple of names (possibly in
// parentheses), stopping before any of endNames.
func (p *parser) parseAssignTarget(withTuple bool, endNames ...string) (target, error) {
	var items []target
	isTuple := false
	for {
		if len(items) > 0 {
			if err := p.expectOp(","); err != nil {
				return target{}, err
			}
		}
		if t := p.cur(); t.kind == tokBlockEnd || t.kind == tokOp && (t.val == ")" || t.val == "=") || t.kind == tokName && contains(endNames, t.val) {
			break
		}
		t := p.cur()
		var item target
		switch {
		case t.kind == tokName:
			if t.val == "true" || t.val == "false" || t.val == "none" || t.val == "True" || t.val == "False" || t.val == "None" {
				return target{}, p.failf(t.line, "can't assign to const")
			}
			p.next()
			item = target{name: t.val}
		case t.kind == tokOp && t.val == "(":
			p.next()
			inner, err := p.parseAssignTarget(true)
			if err != nil {
				return target{}, err
			}
			if err := p.expectOp(")"); err != nil {
				return target{}, err
			}
			item = inner
		default:
			return target{}, p.failf(t.line, "can't assign to %s", t)
		}
		items = append(items, item)
		if !withTuple || !p.isOp(",") {
			break
		}
		isTuple = true
	}
	switch {
	case len(items) == 0:
		return target{}, p.failf(p.cur().line, "expected an assignment target, got %s", p.cur())
	case !isTuple:
		return items[0], nil
	}
	return target{names: items}, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// parseTuple parses comma-separated expressions: one expression, or a
// tuple when there is a comma.
func (p *parser) parseTuple(withCondExpr, explicitParens bool) (expr, error) {
	return p.parseTupleFull(withCondExpr, explicitParens)
}

func (p *parser) parseTupleUntil(withCondExpr bool, endNames ...string) (expr, error) {
	return p.parseTupleFull(withCondExpr, false, endNames...)
}

func (p *parser) parseTupleFull(withCondExpr, explicitParens bool, endNames ...string) (expr, error) {
	line := p.cur().line
	var items []expr
	isTuple := false
	for {
		if len(items) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		if t := p.cur(); t.kind == tokVarEnd || t.kind == tokBlockEnd || t.kind == tokOp && t.val == ")" || t.kind == tokName && contains(endNames, t.val) {
			break
		}
		x, err := p.parseExpression(withCondExpr)
		if err != nil {
			return nil, err
		}
		items = append(items, x)
		if !p.isOp(",") {
			break
		}
		isTuple = true
	}
	if !isTuple {
		if len(items) > 0 {
			return items[0], nil
		}
		if !explicitParens {
			return nil, p.failf(p.cur().line, "expected an expression, got %s", p.cur())
		}
	}
	return &listExpr{line: line, items: items, tuple: true}, nil
}

func (p *parser) parseExpression(withCondExpr bool) (expr, error) {
	if err := p.enter(p.cur().line); err != nil {
		return nil, err
	}
	defer p.leave()
	if withCondExpr {
		return p.parseCondExpr()
	}
	return p.parseOr()
}

func (p *parser) parseCondExpr() (expr, error) {
	line := p.cur().line
	x, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.skipName("if") {
		test, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		c := &condExpr{line: line, test: test, a: x}
		if p.skipName("else") {
			if c.b, err = p.parseCondExpr(); err != nil {
				return nil, err
			}
		}
		x = c
	}
	return x, nil
}

func (p *parser) parseOr() (expr, error) {
	x, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	for p.isName("or") {
		line := p.next().line
		y, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		x = &binaryExpr{line: line, op: "or", a: x, b: y}
	}
	return x, nil
}

func (p *parser) parseAnd() (expr, error) {
	x, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	for p.isName("and") {
		line := p.next().line
		y, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		x = &binaryExpr{line: line, op: "and", a: x, b: y}
	}
	return x, nil
}

func (p *parser) parseNot() (expr, error) {
	if p.isName("not") {
		line := p.next().line
		if err := p.enter(line); err != nil {
			return nil, err
		}
		defer p.leave()
		x, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &unaryExpr{line: line, op: "not", x: x}, nil
	}
	return p.parseCompare()
}

var compareOps = map[string]bool{"==": true, "!=": true, "<": true, "<=": true, ">": true, ">=": true}

func (p *parser) parseCompare() (expr, error) {
	line := p.cur().line
	x, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	var ops []compareOp
	for {
		t := p.cur()
		var op string
		switch {
		case t.kind == tokOp && compareOps[t.val]:
			p.next()
			op = t.val
		case t.kind == tokName && t.val == "in":
			p.next()
			op = "in"
		case t.kind == tokName && t.val == "not" && p.peek().kind == tokName && p.peek().val == "in":
			p.next()
			p.next()
			op = "notin"
		}
		if op == "" {
			break
		}
		y, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		ops = append(ops, compareOp{op: op, x: y})
	}
	if len(ops) == 0 {
		return x, nil
	}
	return &compareExpr{line: line, x: x, ops: ops}, nil
}

func (p *parser) parseMath1() (expr, error) {
	x, err := p.parseConcat()
	if err != nil {
		return nil, err
	}
	for p.isOp("+") || p.isOp("-") {
		t := p.next()
		y, err := p.parseConcat()
		if err != nil {
			return nil, err
		}
		x = &binaryExpr{line: t.line, op: t.val, a: x, b: y}
	}
	return x, nil
}

func (p *parser) parseConcat() (expr, error) {
	x, err := p.parseMath2()
	if err != nil {
		return nil, err
	}
	for p.isOp("~") {
		t := p.next()
		y, err := p.parseMath2()
		if err != nil {
			return nil, err
		}
		x = &binaryExpr{line: t.line, op: "~", a: x, b: y}
	}
	return x, nil
}

func (p *parser) parseMath2() (expr, error) {
	x, err := p.parsePow()
	if err != nil {
		return nil, err
	}
	for p.isOp("*") || p.isOp("/") || p.isOp("//") || p.isOp("%") {
		t := p.next()
		y, err := p.parsePow()
		if err != nil {
			return nil, err
		}
		x = &binaryExpr{line: t.line, op: t.val, a: x, b: y}
	}
	return x, nil
}

func (p *parser) parsePow() (expr, error) {
	x, err := p.parseUnary(true)
	if err != nil {
		return nil, err
	}
	for p.isOp("**") {
		t := p.next()
		y, err := p.parseUnary(true)
		if err != nil {
			return nil, err
		}
		x = &binaryExpr{line: t.line, op: "**", a: x, b: y}
	}
	return x, nil
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	t := p.cur()
	var x expr
	var err error
	if t.kind == tokOp && (t.val == "-" || t.val == "+") {
		p.next()
		if err := p.enter(t.line); err != nil {
			return nil, err
		}
		y, err := p.parseUnary(false)
		p.leave()
		if err != nil {
			return nil, err
		}
		x = &unaryExpr{line: t.line, op: t.val, x: y}
	} else if x, err = p.parsePrimary(); err != nil {
		return nil, err
	}
	if x, err = p.parsePostfix(x); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterExpr(x)
	}
	return x, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.cur()
	switch t.kind {
	case tokName:
		p.next()
		switch t.val {
		case "true", "True":
			return &constExpr{line: t.line, v: true}, nil
		case "false", "False":
			return &constExpr{line: t.line, v: false}, nil
		case "none", "None":
			return &constExpr{line: t.line, v: nil}, nil
		}
		p.names[t.val] = true
		return &nameExpr{line: t.line, name: t.val}, nil
	case tokString:
		p.next()
		s := t.val
		for p.cur().kind == tokString { // adjacent literals concatenate
			s += p.next().val
		}
		return &constExpr{line: t.line, v: s}, nil
	case tokInt, tokFloat:
		p.next()
		return &constExpr{line: t.line, v: t.num}, nil
	case tokOp:
		switch t.val {
		case "(":
			p.next()
			if err := p.enter(t.line); err != nil {
				return nil, err
			}
			defer p.leave()
			x, err := p.parseTuple(true, true)
			if err != nil {
				return nil, err
			}
			if err := p.expectOp(")"); err != nil {
				return nil, err
			}
			return x, nil
		case "[":
			return p.parseList()
		case "{":
			return p.parseDict()
		}
	}
	return nil, p.unexpected(t)
}

func (p *parser) parseList() (expr, error) {
	line := p.next().line
	if err := p.enter(line); err != nil {
		return nil, err
	}
	defer p.leave()
	l := &listExpr{line: line}
	for !p.isOp("]") {
		if len(l.items) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.isOp("]") {
				break
			}
		}
		x, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		l.items = append(l.items, x)
	}
	p.next()
	return l, nil
}

func (p *parser) parseDict() (expr, error) {
	line := p.next().line
	if err := p.enter(line); err != nil {
		return nil, err
	}
	defer p.leave()
	d := &dictExpr{line: line}
	for !p.isOp("}") {
		if len(d.keys) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.isOp("}") {
				break
			}
		}
		k, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		if err := p.expectOp(":"); err != nil {
			return nil, err
		}
		v, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		d.keys = append(d.keys, k)
		d.vals = append(d.vals, v)
	}
	p.next()
	return d, nil
}

func (p *parser) parsePostfix(x expr) (expr, error) {
	for {
		var err error
		switch {
		case p.isOp(".") || p.isOp("["):
			x, err = p.parseSubscript(x)
		case p.isOp("("):
			x, err = p.parseCall(x)
		default:
			return x, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (p *parser) parseFilterExpr(x expr) (expr, error) {
	for {
		var err error
		switch {
		case p.isOp("|"):
			var chain []*filterExpr
			if chain, err = p.parseFilterChain(false); err == nil {
				for _, f := range chain {
					f.x = x
					x = f
				}
			}
		case p.isName("is"):
			x, err = p.parseTest(x)
		case p.isOp("("):
			x, err = p.parseCall(x)
		default:
			return x, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (p *parser) parseSubscript(x expr) (expr, error) {
	t := p.next()
	if t.val == "." {
		a := p.next()
		switch a.kind {
		case tokName:
			if mutators[a.val] && p.mutates == "" {
				p.mutates, p.mutatesLine = a.val, t.line
			}
			return &getattrExpr{line: t.line, x: x, name: a.val}, nil
		case tokInt:
			return &getitemExpr{line: t.line, x: x, index: &constExpr{line: a.line, v: a.num}}, nil
		}
		return nil, p.failf(a.line, "expected name or number")
	}
	if err := p.enter(t.line); err != nil {
		return nil, err
	}
	defer p.leave()
	var args []expr
	for !p.isOp("]") {
		if len(args) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		a, err := p.parseSubscribed(x)
		if err != nil {
			return nil, err
		}
		args = append(args, a)
	}
	p.next()
	switch {
	case len(args) == 0:
		return nil, p.failf(t.line, "expected subscript expression")
	case len(args) > 1:
		return &getitemExpr{line: t.line, x: x, index: &listExpr{line: t.line, items: args, tuple: true}}, nil
	}
	if c, ok := args[0].(*constExpr); ok {
		if name, ok := c.v.(string); ok && mutators[name] && p.mutates == "" {
			p.mutates, p.mutatesLine = name, t.line
		}
	}
	if s, ok := args[0].(*sliceExpr); ok {
		return s, nil
	}
	return &getitemExpr{line: t.line, x: x, index: args[0]}, nil
}

// parseSubscribed parses one subscript: an expression or a slice
// start:stop:step of x.
func (p *parser) parseSubscribed(x expr) (expr, error) {
	line := p.cur().line
	var parts [3]expr
	if !p.isOp(":") {
		a, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		if !p.isOp(":") {
			return a, nil
		}
		parts[0] = a
	}
	p.next() // the first ':'
	end := func() bool { return p.isOp("]") || p.isOp(",") }
	if !p.isOp(":") && !end() {
		b, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		parts[1] = b
	}
	if p.skipOp(":") && !end() {
		c, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		parts[2] = c
	}
	return &sliceExpr{line: line, x: x, start: parts[0], stop: parts[1], step: parts[2]}, nil
}

func (p *parser) parseCall(fn expr) (expr, error) {
	line := p.cur().line
	args, kwargs, dynArgs, dynKwargs, err := p.parseCallArgs()
	if err != nil {
		return nil, err
	}
	return &callExpr{line: line, fn: fn, args: args, kwargs: kwargs, dynArgs: dynArgs, dynKwargs: dynKwargs}, nil
}

func (p *parser) parseCallArgs() (args []expr, kwargs []kwarg, dynArgs, dynKwargs expr, err error) {
	open := p.next()
	if err := p.enter(open.line); err != nil {
		return nil, nil, nil, nil, err
	}
	defer p.leave()
	invalid := func() error { return p.failf(open.line, "invalid syntax for function call expression") }
	for first := true; !p.isOp(")"); first = false {
		if !first {
			if err := p.expectOp(","); err != nil {
				return nil, nil, nil, nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		switch {
		case p.isOp("*"):
			if dynArgs != nil || dynKwargs != nil {
				return nil, nil, nil, nil, invalid()
			}
			p.next()
			if dynArgs, err = p.parseExpression(true); err != nil {
				return nil, nil, nil, nil, err
			}
		case p.isOp("**"):
			if dynKwargs != nil {
				return nil, nil, nil, nil, invalid()
			}
			p.next()
			if dynKwargs, err = p.parseExpression(true); err != nil {
				return nil, nil, nil, nil, err
			}
		case p.cur().kind == tokName && p.peek().kind == tokOp && p.peek().val == "=":
			if dynKwargs != nil {
				return nil, nil, nil, nil, invalid()
			}
			name := p.next().val
			p.next()
			x, err := p.parseExpression(true)
			if err != nil {
				return nil, nil, nil, nil, err
			}
			kwargs = append(kwargs, kwarg{name: name, x: x})
		default:
			if dynArgs != nil || dynKwargs != nil || len(kwargs) > 0 {
				return nil, nil, nil, nil, invalid()
			}
			x, err := p.parseExpression(true)
			if err != nil {
				return nil, nil, nil, nil, err
			}
			args = append(args, x)
		}
	}
	p.next()
	if dynArgs != nil || dynKwargs != nil {
		return nil, nil, nil, nil, p.failf(open.line, "*args and **kwargs in calls are not supported")
	}
	return args, kwargs, nil, nil, nil
}

// parseFilterChain parses "| f(args) | g ..."; inline means the first
// filter has no leading "|" ({% filter f %}).
func (p *parser) parseFilterChain(inline bool) ([]*filterExpr, error) {
	var chain []*filterExpr
	for inline || p.isOp("|") {
		if !inline {
			p.next()
		}
		inline = false
		t, err := p.expectKind(tokName, "filter name")
		if err != nil {
			return nil, err
		}
		name := t.val
		for p.isOp(".") {
			p.next()
			n, err := p.expectKind(tokName, "filter name")
			if err != nil {
				return nil, err
			}
			name += "." + n.val
		}
		f := &filterExpr{line: t.line, name: name}
		_, f.known = filters[name]
		if p.isOp("(") {
			if f.args, f.kwargs, _, _, err = p.parseCallArgs(); err != nil {
				return nil, err
			}
		}
		chain = append(chain, f)
	}
	return chain, nil
}

func (p *parser) parseTest(x expr) (expr, error) {
	is := p.next()
	negated := p.skipName("not")
	t, err := p.expectKind(tokName, "test name")
	if err != nil {
		return nil, err
	}
	name := t.val
	for p.isOp(".") {
		p.next()
		n, err := p.expectKind(tokName, "test name")
		if err != nil {
			return nil, err
		}
		name += "." + n.val
	}
	te := &testExpr{line: is.line, x: x, name: name}
	_, te.known = tests[name]
	c := p.cur()
	switch {
	case c.kind == tokOp && c.val == "(":
		if te.args, te.kwargs, _, _, err = p.parseCallArgs(); err != nil {
			return nil, err
		}
	case (c.kind == tokName || c.kind == tokString || c.kind == tokInt || c.kind == tokFloat || c.kind == tokOp && (c.val == "[" || c.val == "{")) &&
		!(c.kind == tokName && (c.val == "else" || c.val == "or" || c.val == "and")):
		if c.kind == tokName && c.val == "is" {
			return nil, p.failf(c.line, "you cannot chain multiple tests with is")
		}
		a, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		if a, err = p.parsePostfix(a); err != nil {
			return nil, err
		}
		te.args = []expr{a}
	}
	if negated {
		return &unaryExpr{line: is.line, op: "not", x: te}, nil
	}
	return te, nil
}

// checkNames reports the first unknown filter or test outside an if
// statement or conditional expression: Jinja2 rejects those when it
// compiles a template, but lets ones inside a condition fail only when
// they are evaluated.
func checkNames(body []stmt, soft bool) error {
	for _, s := range body {
		if err := checkStmt(s, soft); err != nil {
			return err
		}
	}
	return nil
}

func checkStmt(s stmt, soft bool) error {
	switch s := s.(type) {
	case *outputStmt:
		return checkExpr(s.x, soft)
	case *ifStmt:
		for i, c := range s.conds {
			if err := checkExpr(c, true); err != nil {
				return err
			}
			if err := checkNames(s.then[i], true); err != nil {
				return err
			}
		}
		return checkNames(s.els, true)
	case *forStmt:
		if err := checkExpr(s.iter, soft); err != nil {
			return err
		}
		if s.filter != nil {
			if err := checkExpr(s.filter, false); err != nil {
				return err
			}
		}
		if err := checkNames(s.body, false); err != nil {
			return err
		}
		return checkNames(s.els, soft)
	case *setStmt:
		return checkExpr(s.x, soft)
	case *setBlockStmt:
		for _, f := range s.filters {
			if err := checkExpr(f, soft); err != nil {
				return err
			}
		}
		return checkNames(s.body, false)
	case *macroStmt:
		for _, d := range s.m.defaults {
			if err := checkExpr(d, soft); err != nil {
				return err
			}
		}
		return checkNames(s.m.body, false)
	case *callStmt:
		if err := checkExpr(s.call, soft); err != nil {
			return err
		}
		return checkNames(s.caller.body, false)
	case *filterStmt:
		for _, f := range s.filters {
			if err := checkExpr(f, soft); err != nil {
				return err
			}
		}
		return checkNames(s.body, false)
	case *withStmt:
		for _, v := range s.values {
			if err := checkExpr(v, soft); err != nil {
				return err
			}
		}
		return checkNames(s.body, false)
	case *blockStmt:
		return checkNames(s.body, false)
	}
	return nil
}

func checkExpr(x expr, soft bool) error {
	if x == nil {
		return nil
	}
	var errs error
	check := func(xs ...expr) {
		for _, y := range xs {
			if errs == nil {
				errs = checkExpr(y, soft)
			}
		}
	}
	checkKw := func(kws []kwarg) {
		for _, k := range kws {
			check(k.x)
		}
	}
	switch x := x.(type) {
	case *listExpr:
		check(x.items...)
	case *dictExpr:
		check(x.keys...)
		check(x.vals...)
	case *getattrExpr:
		check(x.x)
	case *getitemExpr:
		check(x.x, x.index)
	case *sliceExpr:
		check(x.x, x.start, x.stop, x.step)
	case *callExpr:
		check(x.fn)
		check(x.args...)
		checkKw(x.kwargs)
	case *filterExpr:
		if !x.known && !soft {
			return &Error{Line: x.line, Msg: fmt.Sprintf("no filter named '%s'", x.name), syntax: true}
		}
		check(x.x)
		check(x.args...)
		checkKw(x.kwargs)
	case *testExpr:
		if !x.known && !soft {
			return &Error{Line: x.line, Msg: fmt.Sprintf("no test named '%s'", x.name), syntax: true}
		}
		check(x.x)
		check(x.args...)
		checkKw(x.kwargs)
	case *unaryExpr:
		check(x.x)
	case *binaryExpr:
		check(x.a, x.b)
	case *compareExpr:
		check(x.x)
		for _, op := range x.ops {
			check(op.x)
		}
	case *condExpr:
		errs = checkExpr(x.test, true)
		if errs == nil {
			errs = checkExpr(x.a, true)
		}
		if errs == nil {
			errs = checkExpr(x.b, true)
		}
	}
	return errs
}
