package jinja

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"
)

// Template is a parsed template; it is safe for concurrent use.
type Template struct{ body []stmt }

// Parse parses a template.
func Parse(src string) (*Template, error) {
	body, err := parse(src)
	if err != nil {
		return nil, err
	}
	return &Template{body}, nil
}

// RaiseError is what the template's raise_exception(msg) raises.
type RaiseError struct{ Msg string }

func (e *RaiseError) Error() string { return e.Msg }

// Render renders the template with vars as its context (they shadow the globals).
func (t *Template) Render(vars map[string]any) (string, error) {
	root := &frame{vars: vars, parent: &frame{vars: globals}}
	var w strings.Builder
	err := execBody(t.body, &frame{vars: map[string]any{}, parent: root}, &w)
	if errors.Is(err, errBreak) || errors.Is(err, errContinue) {
		err = errors.New("break or continue outside a loop")
	}
	return w.String(), err
}

// frame is one Jinja2 scope: the template, a loop iteration or a macro call. Assignments go to
// the innermost frame, so a set inside a loop body is gone after the iteration.
type frame struct {
	vars   map[string]any
	parent *frame
}

func (f *frame) lookup(name string) (any, bool) {
	for ; f != nil; f = f.parent {
		if v, ok := f.vars[name]; ok {
			return v, true
		}
	}
	return nil, false
}

func (f *frame) child() *frame { return &frame{vars: map[string]any{}, parent: f} }

var (
	errBreak    = errors.New("break")
	errContinue = errors.New("continue")
)

func execBody(body []stmt, f *frame, w *strings.Builder) error {
	for _, s := range body {
		if err := exec(s, f, w); err != nil {
			return err
		}
	}
	return nil
}

func exec(s stmt, f *frame, w *strings.Builder) error {
	switch n := s.(type) {
	case *dataNode:
		w.WriteString(n.text)
	case *printNode:
		v, err := eval(n.x, f)
		if err != nil {
			return err
		}
		w.WriteString(toStr(v))
	case *ifNode:
		for i, c := range n.conds {
			v, err := eval(c, f)
			if err != nil {
				return err
			}
			if truthy(v) {
				return execBody(n.bodies[i], f, w)
			}
		}
		return execBody(n.els, f, w)
	case *forNode:
		return execFor(n, f, w)
	case *setNode:
		return execSet(n, f)
	case *macroNode:
		f.vars[n.name] = makeMacro(n, f)
	case *filterBlock:
		var b strings.Builder
		if err := execBody(n.body, f, &b); err != nil {
			return err
		}
		v, err := applyFilters(n.filters, b.String(), f)
		if err != nil {
			return err
		}
		w.WriteString(toStr(v))
	case *breakNode:
		return errBreak
	case *continueNode:
		return errContinue
	default:
		return fmt.Errorf("unknown statement %T", s)
	}
	return nil
}

func applyFilters(fs []*filter, v any, f *frame) (any, error) {
	for _, fl := range fs {
		var err error
		if v, err = callFilter(fl, v, f); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func assign(f *frame, names []string, v any) error {
	if len(names) == 1 {
		f.vars[names[0]] = v
		return nil
	}
	items, err := iterate(v)
	if err != nil {
		return err
	}
	if len(items) != len(names) {
		return fmt.Errorf("ValueError: cannot unpack %d values into %d names", len(items), len(names))
	}
	for i, name := range names {
		f.vars[name] = items[i]
	}
	return nil
}

func execSet(n *setNode, f *frame) error {
	var v any
	var err error
	if n.x != nil {
		v, err = eval(n.x, f)
	} else {
		var b strings.Builder
		if err = execBody(n.body, f, &b); err == nil {
			v, err = applyFilters(n.filters, b.String(), f)
		}
	}
	if err != nil {
		return err
	}
	if n.attr == "" {
		return assign(f, n.targets, v)
	}
	obj, _ := f.lookup(n.targets[0])
	ns, ok := obj.(*Namespace)
	if !ok {
		return errors.New("TemplateRuntimeError: cannot assign attribute on non-namespace object")
	}
	ns.attrs.Set(n.attr, v)
	return nil
}

func execFor(n *forNode, f *frame, w *strings.Builder) error {
	seq, err := eval(n.iter, f)
	if err != nil {
		return err
	}
	items, err := iterate(seq)
	if err != nil {
		return err
	}
	if n.cond != nil { // the loop filter sees the target but no loop variable
		var kept []any
		for _, it := range items {
			g := f.child()
			if err := assign(g, n.targets, it); err != nil {
				return err
			}
			v, err := eval(n.cond, g)
			if err != nil {
				return err
			}
			if truthy(v) {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		return execBody(n.els, f, w)
	}
	for i, it := range items {
		g := f.child()
		if err := assign(g, n.targets, it); err != nil {
			return err
		}
		g.vars["loop"] = &loopCtx{items: items, i: i}
		err := execBody(n.body, g, w)
		if errors.Is(err, errBreak) {
			break
		}
		if err != nil && !errors.Is(err, errContinue) {
			return err
		}
	}
	return nil
}

// loopCtx is the loop variable.
type loopCtx struct {
	items []any
	i     int
}

func (l *loopCtx) attr(name string) any {
	n := len(l.items)
	switch name {
	case "index":
		return int64(l.i + 1)
	case "index0":
		return int64(l.i)
	case "revindex":
		return int64(n - l.i)
	case "revindex0":
		return int64(n - l.i - 1)
	case "first":
		return l.i == 0
	case "last":
		return l.i == n-1
	case "length":
		return int64(n)
	case "depth": // only recursive loops, which are not supported, go deeper
		return int64(1)
	case "depth0":
		return int64(0)
	case "previtem":
		if l.i == 0 {
			return Undefined{"there is no previous item"}
		}
		return l.items[l.i-1]
	case "nextitem":
		if l.i == n-1 {
			return Undefined{"there is no next item"}
		}
		return l.items[l.i+1]
	case "cycle":
		return Func(func(args []any, _ *Dict) (any, error) {
			if len(args) == 0 {
				return nil, errors.New("TypeError: no items for cycling given")
			}
			return args[l.i%len(args)], nil
		})
	}
	return Undefined{fmt.Sprintf("'LoopContext' object has no attribute '%s'", name)}
}

func makeMacro(n *macroNode, closure *frame) Func {
	return func(args []any, kw *Dict) (any, error) {
		g := closure.child()
		extra := Tuple{}
		for i, a := range args {
			if i < len(n.params) {
				g.vars[n.params[i]] = a
			} else {
				extra = append(extra, a)
			}
		}
		kwargs := NewDict()
		if kw != nil {
			for _, k := range kw.keys {
				if _, set := g.vars[k]; set {
					return nil, fmt.Errorf("TypeError: macro '%s' got multiple values for argument '%s'", n.name, k)
				}
				if slices.Index(n.params, k) >= 0 {
					g.vars[k] = kw.m[k]
				} else {
					kwargs.Set(k, kw.m[k])
				}
			}
		}
		for i, p := range n.params {
			if _, set := g.vars[p]; set {
				continue
			}
			if n.defaults[i] == nil {
				g.vars[p] = Undefined{fmt.Sprintf("parameter '%s' was not provided", p)}
				continue
			}
			v, err := eval(n.defaults[i], g)
			if err != nil {
				return nil, err
			}
			g.vars[p] = v
		}
		g.vars["varargs"], g.vars["kwargs"] = extra, kwargs
		var b strings.Builder
		if err := execBody(n.body, g, &b); err != nil {
			return nil, err
		}
		return b.String(), nil
	}
}

func eval(x expr, f *frame) (any, error) {
	switch n := x.(type) {
	case *constExpr:
		return n.v, nil
	case *nameExpr:
		if v, ok := f.lookup(n.name); ok {
			return v, nil
		}
		return Undefined{fmt.Sprintf("'%s' is undefined", n.name)}, nil
	case *listExpr:
		items := make([]any, len(n.items))
		for i, e := range n.items {
			v, err := eval(e, f)
			if err != nil {
				return nil, err
			}
			items[i] = v
		}
		if n.tuple {
			return Tuple(items), nil
		}
		return items, nil
	case *dictExpr:
		d := NewDict()
		for i := range n.keys {
			k, err := eval(n.keys[i], f)
			if err != nil {
				return nil, err
			}
			ks, ok := isString(k)
			if !ok {
				return nil, fmt.Errorf("unsupported dict key type %s", typeName(k))
			}
			v, err := eval(n.vals[i], f)
			if err != nil {
				return nil, err
			}
			d.Set(ks, v)
		}
		return d, nil
	case *attrExpr:
		v, err := eval(n.x, f)
		if err != nil {
			return nil, err
		}
		return getattr(v, n.name)
	case *itemExpr:
		v, err := eval(n.x, f)
		if err != nil {
			return nil, err
		}
		k, err := eval(n.key, f)
		if err != nil {
			return nil, err
		}
		return getitem(v, k)
	case *sliceExpr:
		return evalSlice(n, f)
	case *callExpr:
		fn, err := eval(n.fn, f)
		if err != nil {
			return nil, err
		}
		args, kw, err := evalArgs(n.args, f)
		if err != nil {
			return nil, err
		}
		return call(fn, args, kw)
	case *filterExpr:
		v, err := eval(n.x, f)
		if err != nil {
			return nil, err
		}
		return callFilter(n.f, v, f)
	case *testExpr:
		v, err := eval(n.x, f)
		if err != nil {
			return nil, err
		}
		args := make([]any, len(n.args))
		for i, a := range n.args {
			if args[i], err = eval(a, f); err != nil {
				return nil, err
			}
		}
		ok, err := tests[n.name](v, args)
		return ok != n.negate, err
	case *unaryExpr:
		v, err := eval(n.x, f)
		if err != nil {
			return nil, err
		}
		if n.op == "not" {
			return !truthy(v), nil
		}
		return unary(n.op, v)
	case *binExpr:
		l, err := eval(n.l, f)
		if err != nil {
			return nil, err
		}
		switch n.op { // and/or short-circuit and return an operand, as in Python
		case "and":
			if !truthy(l) {
				return l, nil
			}
			return eval(n.r, f)
		case "or":
			if truthy(l) {
				return l, nil
			}
			return eval(n.r, f)
		}
		r, err := eval(n.r, f)
		if err != nil {
			return nil, err
		}
		return binop(n.op, l, r)
	case *cmpExpr:
		l, err := eval(n.first, f)
		if err != nil {
			return nil, err
		}
		for i, op := range n.ops {
			r, err := eval(n.rest[i], f)
			if err != nil {
				return nil, err
			}
			ok, err := cmpop(op, l, r)
			if err != nil || !ok {
				return false, err
			}
			l = r
		}
		return true, nil
	case *condExpr:
		c, err := eval(n.cond, f)
		if err != nil {
			return nil, err
		}
		if truthy(c) {
			return eval(n.a, f)
		}
		if n.b == nil {
			return Undefined{"the inline if-expression evaluated to false and no else section was defined"}, nil
		}
		return eval(n.b, f)
	}
	return nil, fmt.Errorf("unknown expression %T", x)
}

func evalArgs(a callArgs, f *frame) ([]any, *Dict, error) {
	args := make([]any, len(a.pos))
	for i, e := range a.pos {
		v, err := eval(e, f)
		if err != nil {
			return nil, nil, err
		}
		args[i] = v
	}
	var kw *Dict
	if len(a.kwNames) > 0 {
		kw = NewDict()
		for i, name := range a.kwNames {
			v, err := eval(a.kwVals[i], f)
			if err != nil {
				return nil, nil, err
			}
			kw.Set(name, v)
		}
	}
	return args, kw, nil
}

func call(fn any, args []any, kw *Dict) (any, error) {
	switch c := fn.(type) {
	case Func:
		return c(args, kw)
	case Undefined:
		return nil, undefinedErr(c)
	}
	return nil, fmt.Errorf("TypeError: '%s' object is not callable", typeName(fn))
}

func callFilter(fl *filter, v any, f *frame) (any, error) {
	args, kw, err := evalArgs(fl.args, f)
	if err != nil {
		return nil, err
	}
	return filters[fl.name](v, args, kw)
}

// getattr follows the sandboxed environment: a Python attribute (a method) first, then the
// item; a missing one is Undefined, an attribute of an undefined value is an error.
func getattr(v any, name string) (any, error) {
	switch x := v.(type) {
	case Undefined:
		return nil, undefinedErr(x)
	case *loopCtx:
		return x.attr(name), nil
	case *Namespace:
		if a, ok := x.attrs.Get(name); ok {
			return a, nil
		}
	case *Dict:
		if m := method(x, name); m != nil {
			return m, nil
		}
		if a, ok := x.Get(name); ok {
			return a, nil
		}
	default:
		if m := method(x, name); m != nil {
			return m, nil
		}
	}
	return Undefined{fmt.Sprintf("'%s' has no attribute '%s'", objDesc(v), name)}, nil
}

// objDesc names an object the way Jinja2's undefined hints do.
func objDesc(v any) string {
	if v == nil {
		return "None"
	}
	return typeName(v) + " object"
}

// getitem is obj[key] with Jinja2's fallback to the attribute for string keys.
func getitem(v any, key any) (any, error) {
	switch x := v.(type) {
	case Undefined:
		return nil, undefinedErr(x)
	case *Dict:
		if k, ok := isString(key); ok {
			if a, ok := x.Get(k); ok {
				return a, nil
			}
		}
	case []any, Tuple, string, Markup:
		if i, ok := bigOf(key); ok && i.IsInt64() {
			if s, ok := isString(x); ok {
				r := []rune(s)
				if j, ok := index(i.Int64(), len(r)); ok {
					return string(r[j]), nil
				}
			} else {
				items, _ := seqOf(x)
				if j, ok := index(i.Int64(), len(items)); ok {
					return items[j], nil
				}
			}
		}
	case *loopCtx, *Namespace:
	}
	if k, ok := key.(string); ok {
		return getattr(v, k)
	}
	return Undefined{fmt.Sprintf("'%s' has no attribute '%s'", objDesc(v), toStr(key))}, nil
}

func index(i int64, n int) (int, bool) {
	if i < 0 {
		i += int64(n)
	}
	return int(i), i >= 0 && i < int64(n)
}

func evalSlice(n *sliceExpr, f *frame) (any, error) {
	v, err := eval(n.x, f)
	if err != nil {
		return nil, err
	}
	var bounds [3]*int64
	for i, e := range []expr{n.start, n.stop, n.step} {
		if e == nil {
			continue
		}
		b, err := eval(e, f)
		if err != nil {
			return nil, err
		}
		if b == nil {
			continue
		}
		z, ok := bigOf(b)
		if !ok || !z.IsInt64() {
			return nil, errors.New("TypeError: slice indices must be integers or None")
		}
		k := z.Int64()
		bounds[i] = &k
	}
	var items []any
	s, isStr := isString(v)
	var runes []rune
	switch x := v.(type) {
	case []any:
		items = x
	case Tuple:
		items = x
	case string, Markup:
		runes = []rune(s)
	case Undefined:
		return nil, undefinedErr(x)
	default:
		return nil, fmt.Errorf("TypeError: '%s' object is not subscriptable", typeName(v))
	}
	n0 := len(items)
	if isStr {
		n0 = len(runes)
	}
	idx, err := sliceIndices(n0, bounds)
	if err != nil {
		return nil, err
	}
	if isStr {
		var b strings.Builder
		for _, i := range idx {
			b.WriteRune(runes[i])
		}
		if _, ok := v.(Markup); ok {
			return Markup(b.String()), nil
		}
		return b.String(), nil
	}
	out := make([]any, len(idx))
	for j, i := range idx {
		out[j] = items[i]
	}
	if _, ok := v.(Tuple); ok {
		return Tuple(out), nil
	}
	return out, nil
}

// sliceIndices lists the positions of seq[start:stop:step] (Python's slice.indices).
func sliceIndices(n int, b [3]*int64) ([]int, error) {
	step := int64(1)
	if b[2] != nil {
		step = *b[2]
	}
	if step == 0 {
		return nil, errors.New("ValueError: slice step cannot be zero")
	}
	clamp := func(p *int64, def int64) int64 {
		if p == nil {
			return def
		}
		i := *p
		if i < 0 {
			i += int64(n)
		}
		lo, hi := int64(0), int64(n)
		if step < 0 {
			lo, hi = -1, int64(n)-1
		}
		return max(lo, min(hi, i))
	}
	var out []int
	if step > 0 {
		for i := clamp(b[0], 0); i < clamp(b[1], int64(n)); i += step {
			out = append(out, int(i))
		}
	} else {
		for i := clamp(b[0], int64(n)-1); i > clamp(b[1], -1); i += step {
			out = append(out, int(i))
		}
	}
	return out, nil
}

func unary(op string, v any) (any, error) {
	switch x := v.(type) {
	case float64:
		if op == "-" {
			return -x, nil
		}
		return x, nil
	case int64, *big.Int, bool:
		z, _ := bigOf(x)
		if op == "-" {
			return normInt(new(big.Int).Neg(z)), nil
		}
		return normInt(z), nil
	case Undefined:
		return nil, undefinedErr(x)
	}
	return nil, fmt.Errorf("TypeError: bad operand type for unary %s: '%s'", op, typeName(v))
}

func binop(op string, l, r any) (any, error) {
	if op == "~" {
		return toStr(l) + toStr(r), nil
	}
	for _, v := range []any{l, r} {
		if u, ok := v.(Undefined); ok {
			return nil, undefinedErr(u)
		}
	}
	if isNumber(l) && isNumber(r) {
		return arith(op, l, r)
	}
	ls, lok := isString(l)
	rs, rok := isString(r)
	switch {
	case op == "+" && lok && rok:
		// markupsafe: Markup + str escapes the plain operand.
		_, lm := l.(Markup)
		_, rm := r.(Markup)
		if lm && !rm {
			return Markup(ls + htmlEscape(rs)), nil
		}
		if rm && !lm {
			return Markup(htmlEscape(ls) + rs), nil
		}
		if lm {
			return Markup(ls + rs), nil
		}
		return ls + rs, nil
	case op == "+" && typeName(l) == typeName(r):
		if a, ok := seqOf(l); ok {
			b, _ := seqOf(r)
			out := append(append([]any{}, a...), b...)
			if _, ok := l.(Tuple); ok {
				return Tuple(out), nil
			}
			return out, nil
		}
	case op == "*":
		seq, num := l, r
		if isNumber(l) {
			seq, num = r, l
		}
		k, ok := bigOf(num)
		if _, isF := num.(float64); ok && !isF && k.IsInt64() {
			n := max(int(k.Int64()), 0)
			if s, ok := isString(seq); ok {
				if _, m := seq.(Markup); m {
					return Markup(strings.Repeat(s, n)), nil
				}
				return strings.Repeat(s, n), nil
			}
			if items, ok := seqOf(seq); ok {
				var out []any
				for range n {
					out = append(out, items...)
				}
				if _, ok := seq.(Tuple); ok {
					return Tuple(out), nil
				}
				return out, nil
			}
		}
	case op == "%" && lok:
		return pyFormat(ls, r)
	}
	if op == "+" && lok {
		return nil, fmt.Errorf(`TypeError: can only concatenate str (not "%s") to str`, typeName(r))
	}
	return nil, fmt.Errorf("TypeError: unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(l), typeName(r))
}

// arith is Python arithmetic: exact ints, true division to float, floor division and modulo
// rounding toward negative infinity.
func arith(op string, l, r any) (any, error) {
	_, lf := l.(float64)
	_, rf := r.(float64)
	if !lf && !rf && !(op == "/") {
		a, _ := bigOf(l)
		b, _ := bigOf(r)
		z := new(big.Int)
		switch op {
		case "+":
			z.Add(a, b)
		case "-":
			z.Sub(a, b)
		case "*":
			z.Mul(a, b)
		case "//", "%":
			if b.Sign() == 0 {
				return nil, errors.New("ZeroDivisionError: integer division or modulo by zero")
			}
			q, m := new(big.Int).DivMod(a, b, new(big.Int)) // Euclidean: 0 <= m < |b|
			if b.Sign() < 0 && m.Sign() != 0 {
				q.Sub(q, big.NewInt(1))
				m.Add(m, b)
			}
			if op == "//" {
				return normInt(q), nil
			}
			return normInt(m), nil
		case "**":
			if b.Sign() >= 0 {
				if b.BitLen() > 20 {
					return nil, errors.New("OverflowError: exponent too large")
				}
				return normInt(z.Exp(a, b, nil)), nil
			}
			x, _ := floatOf(a)
			y, _ := floatOf(b)
			return math.Pow(x, y), nil
		}
		return normInt(z), nil
	}
	x, _ := floatOf(l)
	y, _ := floatOf(r)
	switch op {
	case "+":
		return x + y, nil
	case "-":
		return x - y, nil
	case "*":
		return x * y, nil
	case "**":
		return math.Pow(x, y), nil
	}
	if y == 0 {
		return nil, errors.New("ZeroDivisionError: division by zero")
	}
	switch op {
	case "/":
		return x / y, nil
	case "//":
		return math.Floor(x / y), nil
	}
	m := math.Mod(x, y)
	if m != 0 && (m < 0) != (y < 0) {
		m += y
	}
	return m, nil
}

func cmpop(op string, l, r any) (bool, error) {
	switch op {
	case "==":
		return equal(l, r), nil
	case "!=":
		return !equal(l, r), nil
	case "in", "not in":
		ok, err := contains(r, l)
		return ok == (op == "in"), err
	}
	for _, v := range []any{l, r} {
		if u, ok := v.(Undefined); ok {
			return false, undefinedErr(u)
		}
		if f, ok := v.(float64); ok && math.IsNaN(f) {
			return false, nil
		}
	}
	c, err := compare(l, r)
	if err != nil {
		return false, fmt.Errorf("TypeError: '%s' not supported between instances of '%s' and '%s'", op, typeName(l), typeName(r))
	}
	switch op {
	case "<":
		return c < 0, nil
	case ">":
		return c > 0, nil
	case "<=":
		return c <= 0, nil
	}
	return c >= 0, nil
}
