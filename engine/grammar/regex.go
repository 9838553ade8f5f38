package grammar

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A practical subset of ECMA-262 regular expressions, as JSON Schema's "pattern" uses them,
// compiled to an automaton over characters: literals, '.', classes with ranges and negation,
// \d \w \s (and \D \W \S), escapes, groups, alternation, * + ? {m} {m,} {m,n} and ^ $ at the ends
// of the top-level alternatives. Unanchored ends match anything, as JSON Schema patterns search.

// rng is an inclusive range of code points; a cset is sorted, disjoint and not adjacent.
type rng struct{ lo, hi rune }
type cset []rng

const maxChar = 0xFFFF // '.' and negated classes stay in the BMP: ECMA without the u flag counts
// an astral character as two, RE2 as one, so a pattern's meaning is only clear below it

func (c cset) norm() cset {
	slices.SortFunc(c, func(a, b rng) int { return int(a.lo - b.lo) })
	out := c[:0]
	for _, r := range c {
		if n := len(out); n > 0 && r.lo <= out[n-1].hi+1 {
			out[n-1].hi = max(out[n-1].hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

func union(a, b cset) cset { return append(slices.Clone(a), b...).norm() }

// negate is the complement within the BMP.
func (c cset) negate() cset {
	var out cset
	lo := rune(0)
	for _, r := range c {
		if r.lo > lo {
			out = append(out, rng{lo, r.lo - 1})
		}
		lo = r.hi + 1
	}
	if lo <= maxChar {
		out = append(out, rng{lo, maxChar})
	}
	return out
}

func minus(a, b cset) cset { return intersect(a, b.negate()) }

func intersect(a, b cset) cset {
	var out cset
	for _, x := range a {
		for _, y := range b {
			if lo, hi := max(x.lo, y.lo), min(x.hi, y.hi); lo <= hi {
				out = append(out, rng{lo, hi})
			}
		}
	}
	return out.norm()
}

var (
	setDigit = cset{{'0', '9'}}
	setWord  = cset{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}
	// \s: only what both ECMA-262 and RE2 (Go validators) call white space.
	setSpace  = cset{{'\t', '\n'}, {'\f', '\r'}, {' ', ' '}}
	setECMASp = cset{{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
		{0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}}
	setDot = cset{{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}.negate()
	// setAny is every character a string may hold (not lone surrogates).
	setAny = cset{{0, 0xD7FF}, {0xE000, utf8.MaxRune}}
)

// re is a parsed regular expression.
type re struct {
	op       byte // 'c' characters, '.' concatenation, '|' alternation, '*' repetition
	set      cset
	subs     []*re
	min, max int // repetition; max < 0: unbounded
}

type reParser struct {
	s   string
	i   int
	err error
}

func (p *reParser) fail(format string, args ...any) {
	if p.err == nil {
		p.err = fmt.Errorf("pattern %q: %s", p.s, fmt.Sprintf(format, args...))
	}
}

// parseRegex parses a whole pattern; anchors are handled per top-level alternative.
func parseRegex(s string) (*re, error) {
	p := &reParser{s: s}
	var alts []*re
	for {
		anchoredStart := p.eat('^')
		body := p.concat()
		anchoredEnd := false
		if p.i < len(p.s) && p.s[p.i] == '$' {
			anchoredEnd = true
			p.i++
		}
		if !anchoredStart {
			body = &re{op: '.', subs: []*re{anyStar(), body}}
		}
		if !anchoredEnd {
			body = &re{op: '.', subs: []*re{body, anyStar()}}
		}
		alts = append(alts, body)
		if p.err != nil {
			return nil, p.err
		}
		if p.i == len(p.s) {
			break
		}
		if !p.eat('|') {
			p.fail("unexpected %q at %d", p.s[p.i], p.i)
			return nil, p.err
		}
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return &re{op: '|', subs: alts}, nil
}

func anyStar() *re { return &re{op: '*', subs: []*re{{op: 'c', set: setAny}}, max: -1} }

func (p *reParser) eat(c byte) bool {
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *reParser) alt() *re {
	subs := []*re{p.concat()}
	for p.eat('|') {
		subs = append(subs, p.concat())
	}
	if len(subs) == 1 {
		return subs[0]
	}
	return &re{op: '|', subs: subs}
}

func (p *reParser) concat() *re {
	var subs []*re
	for p.i < len(p.s) && p.err == nil {
		switch p.s[p.i] {
		case '|', ')':
			return &re{op: '.', subs: subs}
		case '$':
			if p.i == len(p.s)-1 || p.s[p.i+1] == '|' {
				return &re{op: '.', subs: subs}
			}
			p.fail("'$' is only supported at the end")
		case '^':
			p.fail("'^' is only supported at the start")
		}
		a := p.atom()
		if p.err != nil {
			break
		}
		subs = append(subs, p.quant(a))
	}
	return &re{op: '.', subs: subs}
}

func (p *reParser) quant(a *re) *re {
	for p.i < len(p.s) {
		lo, hi := 0, 0
		switch p.s[p.i] {
		case '*':
			lo, hi = 0, -1
			p.i++
		case '+':
			lo, hi = 1, -1
			p.i++
		case '?':
			lo, hi = 0, 1
			p.i++
		case '{':
			var ok bool
			if lo, hi, ok = p.braces(); !ok {
				return a // a literal '{', read by the next atom
			}
		default:
			return a
		}
		if hi >= 0 && hi < lo {
			p.fail("quantifier {%d,%d} is empty", lo, hi)
		}
		if lo > 1000 || hi > 1000 {
			p.fail("quantifier bounds over 1000 are not supported")
		}
		p.eat('?') // lazy: the same language
		a = &re{op: '*', subs: []*re{a}, min: lo, max: hi}
	}
	return a
}

// braces reads {m}, {m,} or {m,n}; ok is false if the text is not a quantifier.
func (p *reParser) braces() (lo, hi int, ok bool) {
	j := strings.IndexByte(p.s[p.i:], '}')
	if j < 0 {
		return 0, 0, false
	}
	body := p.s[p.i+1 : p.i+j]
	a, b, comma := strings.Cut(body, ",")
	lo, err := strconv.Atoi(a)
	if err != nil {
		return 0, 0, false
	}
	hi = lo
	if comma {
		if b == "" {
			hi = -1
		} else if hi, err = strconv.Atoi(b); err != nil {
			return 0, 0, false
		}
	}
	p.i += j + 1
	return lo, hi, true
}

func (p *reParser) atom() *re {
	c, size := utf8.DecodeRuneInString(p.s[p.i:])
	switch c {
	case '(':
		p.i++
		if p.eat('?') {
			switch {
			case p.eat(':'):
			case p.i < len(p.s) && p.s[p.i] == '<' && !strings.HasPrefix(p.s[p.i:], "<=") && !strings.HasPrefix(p.s[p.i:], "<!"):
				j := strings.IndexByte(p.s[p.i:], '>')
				if j < 0 {
					p.fail("unterminated group name")
					return nil
				}
				p.i += j + 1
			default:
				p.fail("lookaround and group flags (?%s are not supported", p.s[p.i:min(len(p.s), p.i+2)])
				return nil
			}
		}
		r := p.alt()
		if !p.eat(')') {
			p.fail("missing ')'")
		}
		return r
	case '[':
		return &re{op: 'c', set: p.class()}
	case '.':
		p.i++
		return &re{op: 'c', set: setDot}
	case '\\':
		set, ok := p.escape(false)
		if !ok {
			return nil
		}
		return &re{op: 'c', set: set}
	case '*', '+', '?':
		p.fail("nothing to repeat at %d", p.i)
		return nil
	}
	p.i += size
	return &re{op: 'c', set: cset{{c, c}}}
}

// escape reads a backslash escape; in a class, \b is a backspace.
func (p *reParser) escape(inClass bool) (cset, bool) {
	p.i++ // the backslash
	if p.i == len(p.s) {
		p.fail("trailing backslash")
		return nil, false
	}
	c, size := utf8.DecodeRuneInString(p.s[p.i:])
	p.i += size
	one := func(r rune) (cset, bool) { return cset{{r, r}}, true }
	switch c {
	case 'd':
		return setDigit, true
	case 'D':
		return setDigit.negate(), true
	case 'w':
		return setWord, true
	case 'W':
		return setWord.negate(), true
	case 's':
		return setSpace, true
	case 'S':
		return setECMASp.negate(), true
	case 't':
		return one('\t')
	case 'n':
		return one('\n')
	case 'r':
		return one('\r')
	case 'f':
		return one('\f')
	case 'v':
		return one('\v')
	case '0':
		return one(0)
	case 'b':
		if inClass {
			return one('\b')
		}
	case 'x', 'u':
		n := 2
		if c == 'u' {
			n = 4
		}
		if p.i+n <= len(p.s) {
			if v, err := strconv.ParseUint(p.s[p.i:p.i+n], 16, 32); err == nil {
				p.i += n
				return one(rune(v))
			}
		}
		p.fail("bad \\%c escape", c)
		return nil, false
	}
	if c < 0x80 && !isWordRune(c) {
		return one(c) // an escaped punctuation character stands for itself
	}
	p.fail("escape \\%c is not supported", c)
	return nil, false
}

func isWordRune(c rune) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
}

func (p *reParser) class() cset {
	p.i++ // '['
	neg := p.eat('^')
	var set cset
	first := true
	for p.err == nil {
		if p.i >= len(p.s) {
			p.fail("missing ']'")
			return nil
		}
		if p.s[p.i] == ']' && !first {
			p.i++
			break
		}
		first = false
		lo, single := p.classAtom()
		if p.err != nil {
			return nil
		}
		if single && p.i+1 < len(p.s) && p.s[p.i] == '-' && p.s[p.i+1] != ']' {
			p.i++
			hi, single2 := p.classAtom()
			if !single2 || hi[0].lo < lo[0].lo {
				p.fail("bad class range")
				return nil
			}
			set = append(set, rng{lo[0].lo, hi[0].lo})
			continue
		}
		set = append(set, lo...)
	}
	set = slices.Clone(set).norm()
	if neg {
		return set.negate()
	}
	return set
}

// classAtom reads one class member; single reports whether it is one character.
func (p *reParser) classAtom() (cset, bool) {
	if p.s[p.i] == '\\' {
		set, ok := p.escape(true)
		return set, ok && len(set) == 1 && set[0].lo == set[0].hi
	}
	c, size := utf8.DecodeRuneInString(p.s[p.i:])
	p.i += size
	return cset{{c, c}}, true
}

// cnfa is a char-level automaton with ε moves, built from a re by Thompson's construction.
type cnfa struct {
	eps   [][]int32
	edges [][]cedge
}

type cedge struct {
	set cset
	to  int32
}

const maxNFAStates = 20000

func (a *cnfa) add() int32 {
	a.eps = append(a.eps, nil)
	a.edges = append(a.edges, nil)
	return int32(len(a.eps) - 1)
}

// build adds r between two new states.
func (a *cnfa) build(r *re) (in, out int32, err error) {
	if len(a.eps) > maxNFAStates {
		return 0, 0, fmt.Errorf("is too large")
	}
	in, out = a.add(), a.add()
	switch r.op {
	case 'c':
		a.edges[in] = append(a.edges[in], cedge{r.set, out})
	case '.':
		cur := in
		for _, s := range r.subs {
			i, o, err := a.build(s)
			if err != nil {
				return 0, 0, err
			}
			a.eps[cur] = append(a.eps[cur], i)
			cur = o
		}
		a.eps[cur] = append(a.eps[cur], out)
	case '|':
		for _, s := range r.subs {
			i, o, err := a.build(s)
			if err != nil {
				return 0, 0, err
			}
			a.eps[in] = append(a.eps[in], i)
			a.eps[o] = append(a.eps[o], out)
		}
	case '*':
		cur := in
		for k := 0; k < r.min; k++ {
			i, o, err := a.build(r.subs[0])
			if err != nil {
				return 0, 0, err
			}
			a.eps[cur] = append(a.eps[cur], i)
			cur = o
		}
		a.eps[cur] = append(a.eps[cur], out)
		if r.max < 0 {
			i, o, err := a.build(r.subs[0])
			if err != nil {
				return 0, 0, err
			}
			a.eps[cur] = append(a.eps[cur], i)
			a.eps[o] = append(a.eps[o], cur)
		}
		for k := r.min; k < r.max; k++ {
			i, o, err := a.build(r.subs[0])
			if err != nil {
				return 0, 0, err
			}
			a.eps[cur] = append(a.eps[cur], i)
			a.eps[o] = append(a.eps[o], out)
			cur = o
		}
	}
	return in, out, nil
}

// cdfa is a deterministic char-level automaton; state 0 is the start.
type cdfa struct {
	trans [][]ctrans
	final []bool
}

type ctrans struct {
	set cset
	to  int32
}

func (a *cnfa) closure(set []int32) []int32 {
	seen := map[int32]bool{}
	var out []int32
	stack := slices.Clone(set)
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[s] {
			continue
		}
		seen[s] = true
		out = append(out, s)
		stack = append(stack, a.eps[s]...)
	}
	slices.Sort(out)
	return out
}

// determinize runs the subset construction over the elementary intervals of all edge sets.
func (a *cnfa) determinize(start, accept int32) (*cdfa, error) {
	var cuts []rune
	for _, es := range a.edges {
		for _, e := range es {
			for _, r := range e.set {
				cuts = append(cuts, r.lo, r.hi+1)
			}
		}
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	d := &cdfa{}
	ids := map[string]int32{}
	var sets [][]int32
	intern := func(set []int32) (int32, error) {
		k := fmt.Sprint(set)
		if id, ok := ids[k]; ok {
			return id, nil
		}
		if len(sets) >= maxDFAStates {
			return 0, fmt.Errorf("is too complex")
		}
		id := int32(len(sets))
		ids[k] = id
		sets = append(sets, set)
		d.trans = append(d.trans, nil)
		d.final = append(d.final, slices.Contains(set, accept))
		return id, nil
	}
	if _, err := intern(a.closure([]int32{start})); err != nil {
		return nil, err
	}
	for i := 0; i < len(sets); i++ {
		for k := 0; k+1 < len(cuts); k++ {
			lo, hi := cuts[k], cuts[k+1]-1
			var tgt []int32
			for _, s := range sets[i] {
				for _, e := range a.edges[s] {
					if e.set.has(lo) {
						tgt = append(tgt, e.to)
					}
				}
			}
			if len(tgt) == 0 {
				continue
			}
			id, err := intern(a.closure(tgt))
			if err != nil {
				return nil, err
			}
			tr := d.trans[i]
			if n := len(tr); n > 0 && tr[n-1].to == id && tr[n-1].set[len(tr[n-1].set)-1].hi == lo-1 {
				tr[n-1].set[len(tr[n-1].set)-1].hi = hi
			} else {
				tr = append(tr, ctrans{cset{{lo, hi}}, id})
			}
			d.trans[i] = tr
		}
	}
	return d, nil
}

func (c cset) has(r rune) bool {
	i, _ := slices.BinarySearchFunc(c, r, func(x rng, r rune) int {
		switch {
		case x.hi < r:
			return -1
		case x.lo > r:
			return 1
		}
		return 0
	})
	return i < len(c) && c[i].lo <= r && r <= c[i].hi
}

// restrict keeps only the characters in allowed.
func (d *cdfa) restrict(allowed cset) {
	for i, tr := range d.trans {
		out := tr[:0]
		for _, t := range tr {
			if t.set = intersect(t.set, allowed); len(t.set) > 0 {
				out = append(out, t)
			}
		}
		d.trans[i] = out
	}
}

// withLength is the product of d with a character counter: finals need at least lo characters,
// and no path has more than hi (hi < 0: no limit).
func (d *cdfa) withLength(lo, hi int) (*cdfa, error) {
	top := hi
	if hi < 0 {
		top = lo // past lo the count no longer matters
	}
	out := &cdfa{}
	id := map[[2]int32]int32{}
	var states [][2]int32
	get := func(q, c int32) int32 {
		k := [2]int32{q, c}
		if v, ok := id[k]; ok {
			return v
		}
		v := int32(len(states))
		id[k] = v
		states = append(states, k)
		out.trans = append(out.trans, nil)
		out.final = append(out.final, d.final[q] && int(c) >= lo)
		return v
	}
	get(0, 0)
	for i := 0; i < len(states); i++ {
		if len(states) > maxDFAStates {
			return nil, fmt.Errorf("with these length limits is too complex")
		}
		q, c := states[i][0], states[i][1]
		nc := c + 1
		if hi < 0 && int(nc) > top {
			nc = int32(top)
		}
		if hi >= 0 && int(nc) > hi {
			continue
		}
		for _, t := range d.trans[q] {
			out.trans[i] = append(out.trans[i], ctrans{t.set, get(t.to, nc)})
		}
	}
	return out, nil
}

// compileRegex builds the char automaton of a pattern.
func compileRegex(pattern string) (*cdfa, error) {
	r, err := parseRegex(pattern)
	if err != nil {
		return nil, err
	}
	a := &cnfa{}
	in, out, err := a.build(r)
	if err != nil {
		return nil, fmt.Errorf("pattern %q %v", pattern, err)
	}
	d, err := a.determinize(in, out)
	if err != nil {
		return nil, fmt.Errorf("pattern %q %v", pattern, err)
	}
	return d, nil
}

// formats are the "format" values supported, as patterns whose every match is valid: days stop
// at 28 so any month has them, hours and offsets stay in range, no leap seconds.
var formats = map[string]string{
	"date":      `^` + fmtDate + `$`,
	"time":      `^` + fmtTime + `$`,
	"date-time": `^` + fmtDate + `T` + fmtTime + `$`,
	"uuid":      `^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`,
	"email":     `^[a-zA-Z0-9_+-]{1,20}(\.[a-zA-Z0-9_+-]{1,20}){0,2}@[a-z0-9]{1,24}(\.[a-z0-9]{1,24}){0,2}\.[a-z]{2,6}$`,
	"hostname":  `^[a-z0-9]{1,24}(\.[a-z0-9]{1,24}){0,3}$`,
	"ipv4":      `^(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}$`,
	"uri":       `^https?://[a-z0-9]{1,24}(\.[a-z0-9]{1,24}){0,3}(/[A-Za-z0-9._~-]{0,24}){0,8}$`,
}

const (
	fmtDate = `[1-9][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])`
	fmtTime = `([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])`
)
