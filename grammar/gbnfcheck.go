package grammar

import "math"

// This file checks the rules llama.cpp would build for the work its
// recursive functions do on them:
//
//   - llama_grammar_detect_left_recursion recurses into the rules an
//     alternative can start with, without memoization: its work can be
//     exponential in the number of rules, and it misses left recursion
//     through rules that derive only the empty string without having an
//     empty alternative, which then recurses forever later.
//   - llama_grammar_advance_stack recurses, again without memoization,
//     through every way the grammar can go on without consuming a
//     character, down to the next characters it allows. It runs at every
//     generated character from the positions after a terminal, with the
//     runtime stack of enclosing rules below: when a rule nests inside
//     itself followed by optional text, that stack grows with the generated
//     text and so does the work.
//
// Everything here is iterative and linear in the number of elements.

// Saturating arithmetic for counts that can grow exponentially.
const satMax = int64(1) << 62

func satAdd(a, b int64) int64 { return min(a+b, satMax) }

func satMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > satMax/b {
		return satMax
	}
	return a * b
}

// clampInt converts a saturated count for a LimitError.
func clampInt(v int64) int { return int(min(v, math.MaxInt)) }

// ruleLabel names rule id in messages: its own name, or for a group or
// repetition the rule whose definition contains it.
func (p *gbnfParser) ruleLabel(id int32) string {
	return p.names[p.owner[id]]
}

// gbnfCosts is what a grammar costs llama.cpp, in calls of its recursive
// functions.
type gbnfCosts struct {
	leftCalls     int64 // most calls of the left-recursion check for one rule
	leftRule      int32
	leftScans     int64 // elements the left-recursion check scans in all
	initCalls     int64 // calls to build the initial stacks, all alternatives of root
	steps         int64 // most calls of one stack advance
	stepsRule     int32
	unboundedRule int32 // a rule whose nesting makes the advance unbounded, or -1
}

// note records an exploration of the given number of steps in rule r.
func (c *gbnfCosts) note(steps int64, r int32) {
	if steps > c.steps {
		c.steps, c.stepsRule = steps, r
	}
}

// analyze checks the parsed rules against the limits.
func (p *gbnfParser) analyze() error {
	c, err := p.costs()
	if err != nil {
		return err
	}
	lim := p.lim
	switch {
	case c.unboundedRule >= 0:
		return &LimitError{Limit: LimitSteps, Max: lim.MaxSteps, Got: -1, Rule: p.ruleLabel(c.unboundedRule)}
	case c.leftCalls > int64(lim.MaxSteps):
		return &LimitError{Limit: LimitSteps, Max: lim.MaxSteps, Got: clampInt(c.leftCalls), Rule: p.ruleLabel(c.leftRule)}
	case c.steps > int64(lim.MaxSteps):
		return &LimitError{Limit: LimitSteps, Max: lim.MaxSteps, Got: clampInt(c.steps), Rule: p.ruleLabel(c.stepsRule)}
	}
	if setup := satAdd(c.leftScans, c.initCalls); setup > int64(lim.MaxSetupSteps) {
		return &LimitError{Limit: LimitSetupSteps, Max: lim.MaxSetupSteps, Got: clampInt(setup)}
	}
	return nil
}

// costs computes the costs of the parsed rules, or fails on left recursion.
func (p *gbnfParser) costs() (*gbnfCosts, error) {
	n := len(p.rules)
	cost := &gbnfCosts{unboundedRule: -1}

	// Nullable rules, by a worklist over alternatives: need counts the
	// references of an alternative not yet known to be nullable; -1 marks
	// an alternative with a terminal.
	alts, refs := 0, 0
	for _, rule := range p.rules {
		for _, el := range rule {
			if el == elAlt || el == elEnd {
				alts++
			} else if el >= 0 {
				refs++
			}
		}
	}
	need := make([]int32, 0, alts)    // by alternative
	altRule := make([]int32, 0, alts) // by alternative
	occCount := make([]int32, n+1)
	for r, rule := range p.rules {
		cnt, term := int32(0), false
		for _, el := range rule {
			switch {
			case el >= 0:
				cnt++
			case el == elTerm || el == elMore:
				term = true
			default: // end of an alternative
				if term {
					cnt = -1
				}
				need = append(need, cnt)
				altRule = append(altRule, int32(r))
				cnt, term = 0, false
			}
		}
	}
	// occ[occStart[s]:occStart[s+1]] lists, for each reference to s in a
	// terminal-free alternative, that alternative.
	{
		a := 0
		for _, rule := range p.rules {
			for _, el := range rule {
				if el >= 0 && need[a] >= 0 {
					occCount[el+1]++
				}
				if el == elAlt || el == elEnd {
					a++
				}
			}
		}
	}
	occStart := occCount // prefix sums in place
	for s := 1; s <= n; s++ {
		occStart[s] += occStart[s-1]
	}
	occ := make([]int32, occStart[n])
	fill := append([]int32(nil), occStart[:n]...)
	{
		a := int32(0)
		for _, rule := range p.rules {
			for _, el := range rule {
				if el >= 0 && need[a] >= 0 {
					occ[fill[el]] = a
					fill[el]++
				}
				if el == elAlt || el == elEnd {
					a++
				}
			}
		}
	}
	nullable := make([]bool, n)
	var queue []int32
	for a, c := range need {
		if c == 0 && !nullable[altRule[a]] {
			nullable[altRule[a]] = true
			queue = append(queue, altRule[a])
		}
	}
	for len(queue) > 0 {
		s := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		for _, a := range occ[occStart[s]:occStart[s+1]] {
			if need[a]--; need[a] == 0 && !nullable[altRule[a]] {
				nullable[altRule[a]] = true
				queue = append(queue, altRule[a])
			}
		}
	}

	// Left edges: r → s where s can come first in r.
	left := newGraph(n, refs, func(r int, edge func(s int32)) {
		startOfAlt := true
		for _, el := range p.rules[r] {
			switch {
			case el == elAlt || el == elEnd:
				startOfAlt = true
			case !startOfAlt:
			case el >= 0:
				edge(el)
				startOfAlt = nullable[el]
			default:
				startOfAlt = false
			}
		}
	})
	order, cyclic := left.topoOrder()
	if cyclic >= 0 {
		return nil, syntaxError(p.src, -1, "rule %q is left-recursive: it can refer to itself before matching any text", p.ruleLabel(cyclic))
	}

	// llama_grammar_detect_left_recursion: calls(r) = 1 + calls of the
	// references it recurses into (leading ones, while the previous one has
	// an empty alternative); it also scans every element of r.
	empty := make([]bool, n) // has an alternative without elements
	for r, rule := range p.rules {
		startOfAlt := true
		for _, el := range rule {
			if el == elAlt || el == elEnd {
				if startOfAlt {
					empty[r] = true
					break
				}
				startOfAlt = true
			} else {
				startOfAlt = false
			}
		}
	}
	llamaLeft := newGraph(n, refs, func(r int, edge func(s int32)) {
		recurse := true
		for _, el := range p.rules[r] {
			switch {
			case el >= 0 && recurse:
				edge(el)
				recurse = empty[el]
			case el == elAlt || el == elEnd:
				recurse = true
			default:
				recurse = false
			}
		}
	})
	calls := make([]int64, n)
	scans := make([]int64, n)
	for k := n - 1; k >= 0; k-- { // callees first: llamaLeft ⊆ left
		r := order[k]
		c, w := int64(1), int64(len(p.rules[r]))
		for _, s := range llamaLeft.edges(int(r)) {
			c = satAdd(c, calls[s])
			w = satAdd(w, scans[s])
		}
		calls[r], scans[r] = c, w
		if c > cost.leftCalls {
			cost.leftCalls, cost.leftRule = c, r
		}
	}
	// The check runs from each rule in id order not yet visited by an
	// earlier run; a run visits every rule it recurses into.
	visited := make([]bool, n)
	var stack []int32
	for r := range n {
		if visited[r] {
			continue
		}
		cost.leftScans = satAdd(cost.leftScans, scans[r])
		visited[r] = true
		stack = append(stack[:0], int32(r))
		for len(stack) > 0 {
			s := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, t := range llamaLeft.edges(int(s)) {
				if !visited[t] {
					visited[t] = true
					stack = append(stack, t)
				}
			}
		}
	}

	// llama_grammar_advance_stack from a position: each call handles the
	// element on top of the stack; a reference calls once per alternative
	// of the rule. For a rule r, stop[r] counts the calls of the
	// exploration inside r that end in r, and pass[r] the ways through r
	// without consuming a character; walking a suffix of an alternative
	// then takes stop + pass × (calls after it).
	stop := make([]int64, n)
	pass := make([]int64, n)
	for k := n - 1; k >= 0; k-- {
		r := order[k]
		a, w := int64(0), int64(1) // this alternative: calls, ways on
		sa, sw := int64(0), int64(0)
		for _, el := range p.rules[r] {
			switch {
			case el == elAlt || el == elEnd:
				sa, sw = satAdd(sa, a), satAdd(sw, w)
				a, w = 0, 1
			case w == 0 || el == elMore:
			case el >= 0:
				a = satAdd(a, satMul(w, satAdd(1, stop[el])))
				w = satMul(w, pass[el])
			default: // a terminal
				a = satAdd(a, w)
				w = 0
			}
		}
		stop[r], pass[r] = sa, sw
	}

	// Rules llama.cpp can reach from root.
	root := p.ids["root"]
	reach := make([]bool, n)
	reach[root] = true
	stack = append(stack[:0], root)
	for len(stack) > 0 {
		r := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, el := range p.rules[r] {
			if el >= 0 && !reach[el] {
				reach[el] = true
				stack = append(stack, el)
			}
		}
	}

	// suffixes walks rule from the right. For each element i it calls
	// visit(i, a, w) with the walk of the elements after i up to the end of
	// its alternative: a calls, and w ways through them without consuming
	// a character, each going on below the rule. It ends with
	// visit(-1, a, w) for the walk of the whole first alternative.
	suffixes := func(rule []int32, visit func(i int, a, w int64)) {
		a, w := int64(0), int64(1)
		for i := len(rule) - 1; i >= 0; i-- {
			visit(i, a, w)
			switch el := rule[i]; {
			case el == elAlt || el == elEnd:
				a, w = 0, 1
			case el >= 0:
				a = satAdd(satAdd(1, stop[el]), satMul(pass[el], a))
				w = satMul(pass[el], w)
			case el == elTerm:
				a, w = 1, 0
			}
		}
		visit(-1, a, w)
	}

	// after[r] bounds the calls once r is done: the walk on in the rules
	// below it on the stack, maximized over every way r can be reached. A
	// reference to r followed by a nullable rest of its alternative feeds
	// the rule it is in into after[r] ("through" edges); a cycle of those
	// with a nonempty rest makes the runtime stack, and the walk, grow
	// without bound.
	after := make([]int64, n)
	after[root] = 1 // the empty stack at the end of root
	through := newGraph(n, refs, func(q int, edge func(s int32)) {
		if !reach[q] {
			return
		}
		rule := p.rules[q]
		suffixes(rule, func(i int, a, w int64) {
			switch {
			case i < 0 || rule[i] < 0:
			case w == 0:
				after[rule[i]] = max(after[rule[i]], a)
			default:
				edge(rule[i])
			}
		})
	})
	comp, allMembers, compStart := through.sccs()
	// sccs lists components callees first; walk them callers first.
	for c := len(compStart) - 2; c >= 0; c-- {
		members := allMembers[compStart[c]:compStart[c+1]]
		v := int64(0)
		for _, m := range members {
			v = max(v, after[m])
		}
		for _, m := range members {
			after[m] = v
		}
		for _, q := range members {
			rule := p.rules[q]
			suffixes(rule, func(i int, a, w int64) {
				if i < 0 || rule[i] < 0 || w == 0 {
					return
				}
				el := rule[i]
				if comp[el] != int32(c) {
					after[el] = max(after[el], satAdd(a, satMul(w, v)))
				} else if rule[i+1] != elAlt && rule[i+1] != elEnd {
					cost.unboundedRule = q
				} // else a tail reference: after[el] = after[q]
			})
			if cost.unboundedRule >= 0 {
				return cost, nil
			}
		}
	}

	// The explorations themselves: from the start of root when the grammar
	// is loaded, and from every position after a terminal (after its class
	// elements, which do not change the walk).
	for r := range n {
		if !reach[r] {
			continue
		}
		rule := p.rules[r]
		suffixes(rule, func(i int, a, w int64) {
			switch {
			case i < 0 || rule[i] == elAlt: // the start of an alternative
				if r == int(root) {
					steps := satAdd(a, w) // below: the empty stack
					cost.initCalls = satAdd(cost.initCalls, steps)
					cost.note(steps, int32(r))
				}
			case rule[i] == elTerm:
				cost.note(satAdd(a, satMul(w, after[r])), int32(r))
			}
		})
	}
	return cost, nil
}

// A graph is a directed graph on rules in compressed form.
type graph struct {
	start []int32 // edges of r: to[start[r]:start[r+1]]
	to    []int32
}

// newGraph builds the graph whose edges from r are those each(r) reports,
// at most maxEdges in all.
func newGraph(n, maxEdges int, each func(r int, edge func(s int32))) *graph {
	g := &graph{start: make([]int32, n+1), to: make([]int32, 0, maxEdges)}
	for r := range n {
		each(r, func(s int32) { g.to = append(g.to, s) })
		g.start[r+1] = int32(len(g.to))
	}
	return g
}

func (g *graph) edges(r int) []int32 { return g.to[g.start[r]:g.start[r+1]] }

func (g *graph) n() int { return len(g.start) - 1 }

// topoOrder returns the nodes so that every edge goes forward, or -1 and a
// node on a cycle if there is one.
func (g *graph) topoOrder() (order []int32, cyclic int32) {
	n := g.n()
	indeg := make([]int32, n)
	for _, s := range g.to {
		indeg[s]++
	}
	for r := range n {
		if indeg[r] == 0 {
			order = append(order, int32(r))
		}
	}
	for k := 0; k < len(order); k++ {
		for _, s := range g.edges(int(order[k])) {
			if indeg[s]--; indeg[s] == 0 {
				order = append(order, s)
			}
		}
	}
	if len(order) == n {
		return order, -1
	}
	// Every node left has a predecessor left: walking back from one must
	// come round to a node on a cycle.
	pred := make([]int32, n)
	for i := range pred {
		pred[i] = -1
	}
	for r := range n {
		if indeg[r] == 0 {
			continue
		}
		for _, s := range g.edges(r) {
			if indeg[s] > 0 {
				pred[s] = int32(r)
			}
		}
	}
	seen := make([]bool, n)
	r := int32(-1)
	for i := range n {
		if indeg[i] > 0 {
			r = int32(i)
			break
		}
	}
	for !seen[r] {
		seen[r] = true
		r = pred[r]
	}
	return nil, r
}

// sccs returns the strongly connected components of g (Tarjan's algorithm,
// without recursion): comp[r] numbers the component of r, and members
// lists the nodes component by component, members[start[c]:start[c+1]]
// being component c. Each component comes after every component it has
// edges to.
func (g *graph) sccs() (comp, members, start []int32) {
	n := g.n()
	index := make([]int32, n) // 0: unvisited; else visit order + 1
	low := make([]int32, n)
	onStack := make([]bool, n)
	comp = make([]int32, n)
	members = make([]int32, 0, n)
	start = []int32{0}
	var stack []int32
	type visit struct{ r, next int32 }
	var calls []visit
	counter := int32(0)
	for root := range n {
		if index[root] != 0 {
			continue
		}
		calls = append(calls[:0], visit{int32(root), g.start[root]})
		counter++
		index[root], low[root] = counter, counter
		stack = append(stack, int32(root))
		onStack[root] = true
		for len(calls) > 0 {
			top := &calls[len(calls)-1]
			r := top.r
			if top.next < g.start[r+1] {
				s := g.to[top.next]
				top.next++
				switch {
				case index[s] == 0:
					counter++
					index[s], low[s] = counter, counter
					stack = append(stack, s)
					onStack[s] = true
					calls = append(calls, visit{s, g.start[s]})
				case onStack[s]:
					low[r] = min(low[r], index[s])
				}
				continue
			}
			calls = calls[:len(calls)-1]
			if len(calls) > 0 {
				parent := calls[len(calls)-1].r
				low[parent] = min(low[parent], low[r])
			}
			if low[r] == index[r] {
				c := int32(len(start) - 1)
				for {
					s := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					onStack[s] = false
					comp[s] = c
					members = append(members, s)
					if s == r {
						break
					}
				}
				start = append(start, int32(len(members)))
			}
		}
	}
	return comp, members, start
}
