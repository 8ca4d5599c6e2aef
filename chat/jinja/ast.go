package jinja

// Statements.
type (
	stmt interface{ stmtLine() int }

	textStmt struct {
		line int
		text string
	}
	outputStmt struct {
		line int
		x    expr
	}
	ifStmt struct {
		line  int
		conds []expr
		then  [][]stmt
		els   []stmt
	}
	forStmt struct {
		line   int
		target target
		iter   expr
		filter expr // nil: every item
		body   []stmt
		els    []stmt
	}
	setStmt struct {
		line   int
		target target
		x      expr
	}
	// setBlockStmt is {% set name %}body{% endset %}, the body's output
	// passed through filters.
	setBlockStmt struct {
		line    int
		target  target
		filters []*filterExpr
		body    []stmt
	}
	macroStmt struct {
		line int
		m    *macroDef
	}
	// callStmt is {% call macro(args) %}body{% endcall %}: the macro
	// gets the body as caller().
	callStmt struct {
		line   int
		caller *macroDef
		call   *callExpr
	}
	filterStmt struct {
		line    int
		filters []*filterExpr
		body    []stmt
	}
	withStmt struct {
		line    int
		targets []target
		values  []expr
		body    []stmt
	}
	// blockStmt is a scope-less group of statements: {% block %} (there is
	// no inheritance, so a block renders in place) and transformers'
	// {% generation %}.
	blockStmt struct {
		line int
		body []stmt
	}
	loopControlStmt struct {
		line int
		brk  bool // break, else continue
	}
	// unsupportedStmt parses but fails when rendered, as in Jinja2 without
	// a loader ({% include %}, {% import %}, {% extends %}).
	unsupportedStmt struct {
		line int
		msg  string
	}
)

func (s *textStmt) stmtLine() int        { return s.line }
func (s *outputStmt) stmtLine() int      { return s.line }
func (s *ifStmt) stmtLine() int          { return s.line }
func (s *forStmt) stmtLine() int         { return s.line }
func (s *setStmt) stmtLine() int         { return s.line }
func (s *setBlockStmt) stmtLine() int    { return s.line }
func (s *macroStmt) stmtLine() int       { return s.line }
func (s *callStmt) stmtLine() int        { return s.line }
func (s *filterStmt) stmtLine() int      { return s.line }
func (s *withStmt) stmtLine() int        { return s.line }
func (s *blockStmt) stmtLine() int       { return s.line }
func (s *loopControlStmt) stmtLine() int { return s.line }
func (s *unsupportedStmt) stmtLine() int { return s.line }

// macroDef is a macro's signature and body.
type macroDef struct {
	name     string
	params   []string
	defaults []expr // for the last len(defaults) params
	body     []stmt
	// The body reads varargs, kwargs or caller: without them, extra
	// arguments are an error.
	varargs, kwargs, caller bool
}

// target is the left side of an assignment: a name, a namespace
// attribute (ns.attr) or a tuple of names.
type target struct {
	name  string   // a name, or the namespace for attr
	attr  string   // set for ns.attr
	names []target // tuple unpacking
}

// Expressions.
type (
	expr interface{ exprLine() int }

	constExpr struct {
		line int
		v    any
	}
	nameExpr struct {
		line int
		name string
	}
	listExpr struct {
		line  int
		items []expr
		tuple bool
	}
	dictExpr struct {
		line       int
		keys, vals []expr
	}
	getattrExpr struct {
		line int
		x    expr
		name string
	}
	getitemExpr struct {
		line  int
		x     expr
		index expr
	}
	sliceExpr struct {
		line              int
		x                 expr
		start, stop, step expr // nil when left out
	}
	callExpr struct {
		line      int
		fn        expr
		args      []expr
		kwargs    []kwarg
		dynArgs   expr // *args
		dynKwargs expr // **kwargs
	}
	// filterExpr applies a filter; x is nil inside {% filter %} and
	// {% set %} blocks, where the input is the body's output.
	filterExpr struct {
		line   int
		x      expr
		name   string
		args   []expr
		kwargs []kwarg
		known  bool // false: unknown filter, an error when evaluated
	}
	testExpr struct {
		line   int
		x      expr
		name   string
		args   []expr
		kwargs []kwarg
		known  bool
	}
	unaryExpr struct {
		line int
		op   string // "not", "-", "+"
		x    expr
	}
	binaryExpr struct {
		line int
		op   string // + - * / // % ** ~ and or
		a, b expr
	}
	compareExpr struct {
		line int
		x    expr
		ops  []compareOp
	}
	condExpr struct {
		line int
		test expr
		a, b expr // b nil: undefined when test is false
	}
)

type kwarg struct {
	name string
	x    expr
}

type compareOp struct {
	op string // == != < <= > >= in notin
	x  expr
}

func (e *constExpr) exprLine() int   { return e.line }
func (e *nameExpr) exprLine() int    { return e.line }
func (e *listExpr) exprLine() int    { return e.line }
func (e *dictExpr) exprLine() int    { return e.line }
func (e *getattrExpr) exprLine() int { return e.line }
func (e *getitemExpr) exprLine() int { return e.line }
func (e *sliceExpr) exprLine() int   { return e.line }
func (e *callExpr) exprLine() int    { return e.line }
func (e *filterExpr) exprLine() int  { return e.line }
func (e *testExpr) exprLine() int    { return e.line }
func (e *unaryExpr) exprLine() int   { return e.line }
func (e *binaryExpr) exprLine() int  { return e.line }
func (e *compareExpr) exprLine() int { return e.line }
func (e *condExpr) exprLine() int    { return e.line }
