package jinja

import (
	"slices"
	"strings"
)

// Statements.
type (
	stmt      interface{}
	dataNode  struct{ text string }
	printNode struct{ x expr }
	ifNode    struct {
		conds  []expr
		bodies [][]stmt
		els    []stmt
	}
	forNode struct {
		targets []string
		iter    expr
		cond    expr
		body    []stmt
		els     []stmt
	}
	setNode struct {
		targets []string // names, or with attr: the namespace name
		attr    string
		x       expr
		body    []stmt    // block set: {% set x %}...{% endset %}
		filters []*filter // applied to the block body
	}
	macroNode struct {
		name     string
		params   []string
		defaults []expr // nil entries: no default
		body     []stmt
	}
	filterBlock struct {
		filters []*filter
		body    []stmt
	}
	breakNode    struct{}
	continueNode struct{}
)

// Expressions.
type (
	expr      interface{}
	constExpr struct{ v any }
	nameExpr  struct{ name string }
	listExpr  struct {
		items []expr
		tuple bool
	}
	dictExpr struct{ keys, vals []expr }
	attrExpr struct {
		x    expr
		name string
	}
	itemExpr  struct{ x, key expr }
	sliceExpr struct{ x, start, stop, step expr }
	callExpr  struct {
		fn   expr
		args callArgs
	}
	callArgs struct {
		pos     []expr
		kwNames []string
		kwVals  []expr
	}
	filter struct {
		name string
		args callArgs
	}
	filterExpr struct {
		x expr
		f *filter
	}
	testExpr struct {
		x      expr
		name   string
		args   []expr
		negate bool
	}
	unaryExpr struct {
		op string // "-", "+", "not"
		x  expr
	}
	binExpr struct {
		op   string
		l, r expr
	}
	cmpExpr struct {
		first expr
		ops   []string
		rest  []expr
	}
	condExpr struct{ cond, a, b expr } // b nil: undefined
)

type parser struct {
	lx   *lexer
	toks []token
	i    int
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) next() token { t := p.toks[p.i]; p.i++; return t }

func (p *parser) isOp(s string) bool   { t := p.peek(); return t.kind == tkOp && t.s == s }
func (p *parser) isName(s string) bool { t := p.peek(); return t.kind == tkName && t.s == s }

func (p *parser) failf(format string, args ...any) error {
	return p.lx.fail(p.peek().off, format, args...)
}

func (p *parser) expectOp(s string) error {
	if !p.isOp(s) {
		return p.failf("expected '%s', got %s", s, describe(p.peek()))
	}
	p.i++
	return nil
}

func (p *parser) expectName() (string, error) {
	if p.peek().kind != tkName {
		return "", p.failf("expected a name, got %s", describe(p.peek()))
	}
	return p.next().s, nil
}

func (p *parser) expectBlockEnd() error {
	if p.peek().kind != tkBlockEnd {
		return p.failf("expected end of statement block, got %s", describe(p.peek()))
	}
	p.i++
	return nil
}

func describe(t token) string {
	switch t.kind {
	case tkEOF:
		return "end of template"
	case tkBlockEnd:
		return "end of statement block"
	case tkVarEnd:
		return "end of print statement"
	case tkData:
		return "template data"
	}
	return "'" + t.s + "'"
}

func parse(src string) ([]stmt, error) {
	lx, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{lx: lx, toks: lx.toks}
	body, end, err := p.body()
	if err != nil {
		return nil, err
	}
	if end != "" {
		return nil, p.failf("unexpected '%s'", end)
	}
	return body, nil
}

// body parses statements up to EOF or one of the end tags, whose name it returns after
// consuming it (the rest of that tag is left to the caller).
func (p *parser) body(ends ...string) ([]stmt, string, error) {
	var out []stmt
	for {
		t := p.next()
		switch t.kind {
		case tkEOF:
			if len(ends) > 0 {
				p.i--
				return nil, "", p.failf("unexpected end of template, expected '%s'", strings.Join(ends, "' or '"))
			}
			return out, "", nil
		case tkData:
			out = append(out, &dataNode{t.s})
		case tkVarBegin:
			x, err := p.tuple(true)
			if err != nil {
				return nil, "", err
			}
			if p.peek().kind != tkVarEnd {
				return nil, "", p.failf("expected end of print statement, got %s", describe(p.peek()))
			}
			p.i++
			out = append(out, &printNode{x})
		case tkBlockBegin:
			name, err := p.expectName()
			if err != nil {
				return nil, "", err
			}
			if slices.Contains(ends, name) {
				return out, name, nil
			}
			s, err := p.statement(name)
			if err != nil {
				return nil, "", err
			}
			out = append(out, s)
		default:
			return nil, "", p.failf("unexpected %s", describe(t))
		}
	}
}

func (p *parser) statement(name string) (stmt, error) {
	switch name {
	case "if":
		return p.parseIf()
	case "for":
		return p.parseFor()
	case "set":
		return p.parseSet()
	case "macro":
		return p.parseMacro()
	case "break", "continue":
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		if name == "break" {
			return &breakNode{}, nil
		}
		return &continueNode{}, nil
	case "filter":
		fs, err := p.filterChain(false)
		if err != nil {
			return nil, err
		}
		body, err := p.blockBody("endfilter")
		return &filterBlock{fs, body}, err
	case "generation": // transformers' AssistantTracker tag: renders its body unchanged
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, err := p.blockBody("endgeneration")
		return &filterBlock{nil, body}, err
	}
	p.i--
	return nil, p.failf("encountered unknown tag '%s'", name)
}

// blockBody parses a body closed by end, including the end tag's block end.
func (p *parser) blockBody(end string) ([]stmt, error) {
	body, _, err := p.body(end)
	if err != nil {
		return nil, err
	}
	return body, p.expectBlockEnd()
}

func (p *parser) parseIf() (stmt, error) {
	n := &ifNode{}
	for {
		cond, err := p.tuple(false)
		if err != nil {
			return nil, err
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, end, err := p.body("elif", "else", "endif")
		if err != nil {
			return nil, err
		}
		n.conds, n.bodies = append(n.conds, cond), append(n.bodies, body)
		switch end {
		case "else":
			if err := p.expectBlockEnd(); err != nil {
				return nil, err
			}
			n.els, err = p.blockBody("endif")
			return n, err
		case "endif":
			return n, p.expectBlockEnd()
		}
	}
}

func (p *parser) targets() ([]string, error) {
	var names []string
	for {
		name, err := p.expectName()
		if err != nil {
			return nil, err
		}
		names = append(names, name)
		if !p.isOp(",") {
			return names, nil
		}
		p.i++
	}
}

func (p *parser) parseFor() (stmt, error) {
	n := &forNode{}
	var err error
	if n.targets, err = p.targets(); err != nil {
		return nil, err
	}
	if !p.isName("in") {
		return nil, p.failf("expected 'in', got %s", describe(p.peek()))
	}
	p.i++
	if n.iter, err = p.tuple(false); err != nil {
		return nil, err
	}
	if p.isName("if") {
		p.i++
		if n.cond, err = p.expression(true); err != nil {
			return nil, err
		}
	}
	if p.isName("recursive") {
		return nil, p.failf("recursive loops are not supported")
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	body, end, err := p.body("else", "endfor")
	if err != nil {
		return nil, err
	}
	n.body = body
	if end == "else" {
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		n.els, err = p.blockBody("endfor")
		return n, err
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseSet() (stmt, error) {
	n := &setNode{}
	var err error
	if n.targets, err = p.targets(); err != nil {
		return nil, err
	}
	if len(n.targets) == 1 && p.isOp(".") {
		p.i++
		if n.attr, err = p.expectName(); err != nil {
			return nil, err
		}
	}
	if p.isOp("=") {
		p.i++
		if n.x, err = p.tuple(true); err != nil {
			return nil, err
		}
		return n, p.expectBlockEnd()
	}
	if len(n.targets) != 1 || n.attr != "" {
		return nil, p.failf("expected '='")
	}
	if p.isOp("|") {
		if n.filters, err = p.filterChain(true); err != nil {
			return nil, err
		}
	} else if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	n.body, err = p.blockBody("endset")
	return n, err
}

// filterChain parses "a(args) | b" (with a leading "|" when lead) up to the block end.
func (p *parser) filterChain(lead bool) ([]*filter, error) {
	var fs []*filter
	for first := true; first || p.isOp("|"); first = false {
		if lead || !first {
			p.i++
		}
		f, err := p.filterCall()
		if err != nil {
			return nil, err
		}
		fs = append(fs, f)
	}
	return fs, p.expectBlockEnd()
}

func (p *parser) parseMacro() (stmt, error) {
	n := &macroNode{}
	var err error
	if n.name, err = p.expectName(); err != nil {
		return nil, err
	}
	if err := p.expectOp("("); err != nil {
		return nil, err
	}
	for !p.isOp(")") {
		if len(n.params) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		name, err := p.expectName()
		if err != nil {
			return nil, err
		}
		var def expr
		if p.isOp("=") {
			p.i++
			if def, err = p.expression(true); err != nil {
				return nil, err
			}
		} else if len(n.defaults) > 0 && n.defaults[len(n.defaults)-1] != nil {
			return nil, p.failf("non-default argument follows default argument")
		}
		n.params, n.defaults = append(n.params, name), append(n.defaults, def)
	}
	p.i++
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	n.body, err = p.blockBody("endmacro")
	return n, err
}

// tuple parses an expression or an unparenthesized tuple "a, b".
func (p *parser) tuple(condexpr bool) (expr, error) {
	x, err := p.expression(condexpr)
	if err != nil || !p.isOp(",") {
		return x, err
	}
	items := []expr{x}
	for p.isOp(",") {
		p.i++
		if t := p.peek(); t.kind == tkBlockEnd || t.kind == tkVarEnd || p.isOp(")") || p.isOp("=") {
			break
		}
		x, err := p.expression(condexpr)
		if err != nil {
			return nil, err
		}
		items = append(items, x)
	}
	return &listExpr{items, true}, nil
}

func (p *parser) expression(condexpr bool) (expr, error) {
	if !condexpr {
		return p.or()
	}
	x, err := p.or()
	for err == nil && p.isName("if") {
		p.i++
		n := &condExpr{a: x}
		if n.cond, err = p.or(); err != nil {
			return nil, err
		}
		if p.isName("else") {
			p.i++
			if n.b, err = p.expression(true); err != nil {
				return nil, err
			}
		}
		x = n
	}
	return x, err
}

func (p *parser) or() (expr, error) {
	x, err := p.and()
	for err == nil && p.isName("or") {
		p.i++
		var r expr
		r, err = p.and()
		x = &binExpr{"or", x, r}
	}
	return x, err
}

func (p *parser) and() (expr, error) {
	x, err := p.not()
	for err == nil && p.isName("and") {
		p.i++
		var r expr
		r, err = p.not()
		x = &binExpr{"and", x, r}
	}
	return x, err
}

func (p *parser) not() (expr, error) {
	if p.isName("not") {
		p.i++
		x, err := p.not()
		return &unaryExpr{"not", x}, err
	}
	return p.compare()
}

func (p *parser) compare() (expr, error) {
	x, err := p.math1()
	if err != nil {
		return nil, err
	}
	n := &cmpExpr{first: x}
	for {
		var op string
		switch t := p.peek(); {
		case t.kind == tkOp && (t.s == "==" || t.s == "!=" || t.s == "<" || t.s == ">" || t.s == "<=" || t.s == ">="):
			op = t.s
			p.i++
		case p.isName("in"):
			op = "in"
			p.i++
		case p.isName("not") && p.toks[p.i+1].kind == tkName && p.toks[p.i+1].s == "in":
			op = "not in"
			p.i += 2
		}
		if op == "" {
			break
		}
		r, err := p.math1()
		if err != nil {
			return nil, err
		}
		n.ops, n.rest = append(n.ops, op), append(n.rest, r)
	}
	if len(n.ops) == 0 {
		return x, nil
	}
	return n, nil
}

// binary parses a left-associative chain of ops over operands from sub.
func (p *parser) binary(sub func() (expr, error), ops ...string) (expr, error) {
	x, err := sub()
	for err == nil && p.peek().kind == tkOp && slices.Contains(ops, p.peek().s) {
		op := p.next().s
		var r expr
		r, err = sub()
		x = &binExpr{op, x, r}
	}
	return x, err
}

// Jinja2's precedence, loosest first: + -, ~, * / // %, **, unary.
func (p *parser) math1() (expr, error)  { return p.binary(p.concat, "+", "-") }
func (p *parser) concat() (expr, error) { return p.binary(p.math2, "~") }
func (p *parser) math2() (expr, error)  { return p.binary(p.pow, "*", "/", "//", "%") }
func (p *parser) pow() (expr, error) {
	return p.binary(func() (expr, error) { return p.unary(true) }, "**")
}

func (p *parser) unary(withFilter bool) (expr, error) {
	var x expr
	var err error
	if p.isOp("-") || p.isOp("+") {
		op := p.next().s
		var y expr
		if y, err = p.unary(false); err != nil {
			return nil, err
		}
		x = &unaryExpr{op, y}
	} else if x, err = p.primary(); err != nil {
		return nil, err
	}
	if x, err = p.postfix(x); err != nil || !withFilter {
		return x, err
	}
	return p.filterExpr(x)
}

func (p *parser) primary() (expr, error) {
	t := p.next()
	switch t.kind {
	case tkName:
		switch t.s {
		case "true", "True":
			return &constExpr{true}, nil
		case "false", "False":
			return &constExpr{false}, nil
		case "none", "None":
			return &constExpr{nil}, nil
		}
		return &nameExpr{t.s}, nil
	case tkString:
		s := t.s
		for p.peek().kind == tkString { // adjacent literals concatenate
			s += p.next().s
		}
		return &constExpr{s}, nil
	case tkInt:
		return &constExpr{parseNumber(t.s)}, nil
	case tkFloat:
		return &constExpr{parseNumber(t.s)}, nil
	case tkOp:
		switch t.s {
		case "(":
			if p.isOp(")") {
				p.i++
				return &listExpr{nil, true}, nil
			}
			x, err := p.expression(true)
			if err != nil {
				return nil, err
			}
			if p.isOp(",") {
				items := []expr{x}
				for p.isOp(",") {
					p.i++
					if p.isOp(")") {
						break
					}
					if x, err = p.expression(true); err != nil {
						return nil, err
					}
					items = append(items, x)
				}
				x = &listExpr{items, true}
			}
			return x, p.expectOp(")")
		case "[":
			items, err := p.list("]")
			return &listExpr{items: items}, err
		case "{":
			n := &dictExpr{}
			for !p.isOp("}") {
				if len(n.keys) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("}") {
						break
					}
				}
				k, err := p.expression(true)
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.expression(true)
				if err != nil {
					return nil, err
				}
				n.keys, n.vals = append(n.keys, k), append(n.vals, v)
			}
			p.i++
			return n, nil
		}
	}
	p.i--
	return nil, p.failf("unexpected %s", describe(t))
}

// list parses comma-separated expressions up to close (consumed); a trailing comma is allowed.
func (p *parser) list(close string) ([]expr, error) {
	var items []expr
	for !p.isOp(close) {
		if len(items) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.isOp(close) {
				break
			}
		}
		x, err := p.expression(true)
		if err != nil {
			return nil, err
		}
		items = append(items, x)
	}
	p.i++
	return items, nil
}

func (p *parser) postfix(x expr) (expr, error) {
	for {
		switch {
		case p.isOp("."):
			p.i++
			t := p.next()
			switch t.kind {
			case tkName:
				x = &attrExpr{x, t.s}
			case tkInt:
				x = &itemExpr{x, &constExpr{parseNumber(t.s)}}
			default:
				p.i--
				return nil, p.failf("expected a name after '.'")
			}
		case p.isOp("["):
			p.i++
			var err error
			if x, err = p.subscript(x); err != nil {
				return nil, err
			}
		case p.isOp("("):
			args, err := p.callArgs()
			if err != nil {
				return nil, err
			}
			x = &callExpr{x, args}
		default:
			return x, nil
		}
	}
}

func (p *parser) subscript(x expr) (expr, error) {
	var parts [3]expr
	n, sliced := 0, false
	for {
		if p.isOp(":") {
			p.i++
			sliced = true
			if n++; n > 2 {
				return nil, p.failf("invalid slice")
			}
			continue
		}
		if p.isOp("]") {
			p.i++
			break
		}
		e, err := p.expression(true)
		if err != nil {
			return nil, err
		}
		parts[n] = e
		if !sliced && p.isOp("]") {
			p.i++
			return &itemExpr{x, e}, nil
		}
	}
	if !sliced {
		return nil, p.failf("expected subscript expression")
	}
	return &sliceExpr{x, parts[0], parts[1], parts[2]}, nil
}

func (p *parser) callArgs() (callArgs, error) {
	var a callArgs
	if err := p.expectOp("("); err != nil {
		return a, err
	}
	for !p.isOp(")") {
		if len(a.pos)+len(a.kwNames) > 0 {
			if err := p.expectOp(","); err != nil {
				return a, err
			}
			if p.isOp(")") {
				break
			}
		}
		if p.peek().kind == tkName && p.toks[p.i+1].kind == tkOp && p.toks[p.i+1].s == "=" {
			name := p.next().s
			p.i++
			v, err := p.expression(true)
			if err != nil {
				return a, err
			}
			a.kwNames, a.kwVals = append(a.kwNames, name), append(a.kwVals, v)
			continue
		}
		if len(a.kwNames) > 0 {
			return a, p.failf("positional argument follows keyword argument")
		}
		v, err := p.expression(true)
		if err != nil {
			return a, err
		}
		a.pos = append(a.pos, v)
	}
	p.i++
	return a, nil
}

func (p *parser) dottedName() (string, error) {
	name, err := p.expectName()
	for err == nil && p.isOp(".") {
		p.i++
		var part string
		part, err = p.expectName()
		name += "." + part
	}
	return name, err
}

func (p *parser) filterCall() (*filter, error) {
	name, err := p.dottedName()
	if err != nil {
		return nil, err
	}
	if _, ok := filters[name]; !ok {
		return nil, p.failf("no filter named '%s'", name)
	}
	f := &filter{name: name}
	if p.isOp("(") {
		f.args, err = p.callArgs()
	}
	return f, err
}

func (p *parser) filterExpr(x expr) (expr, error) {
	for {
		switch {
		case p.isOp("|"):
			p.i++
			f, err := p.filterCall()
			if err != nil {
				return nil, err
			}
			x = &filterExpr{x, f}
		case p.isName("is"):
			p.i++
			n := &testExpr{x: x}
			if p.isName("not") {
				p.i++
				n.negate = true
			}
			var err error
			if n.name, err = p.dottedName(); err != nil {
				return nil, err
			}
			if _, ok := tests[n.name]; !ok {
				return nil, p.failf("no test named '%s'", n.name)
			}
			t := p.peek()
			switch {
			case p.isOp("("):
				args, err := p.callArgs()
				if err != nil {
					return nil, err
				}
				n.args = args.pos
			case (t.kind == tkName && t.s != "else" && t.s != "or" && t.s != "and") || t.kind == tkString ||
				t.kind == tkInt || t.kind == tkFloat || p.isOp("[") || p.isOp("{"):
				if t.kind == tkName && t.s == "is" {
					return nil, p.failf("you cannot chain multiple tests with is")
				}
				arg, err := p.primary()
				if err != nil {
					return nil, err
				}
				if arg, err = p.postfix(arg); err != nil {
					return nil, err
				}
				n.args = []expr{arg}
			}
			x = n
		case p.isOp("("):
			args, err := p.callArgs()
			if err != nil {
				return nil, err
			}
			x = &callExpr{x, args}
		default:
			return x, nil
		}
	}
}
