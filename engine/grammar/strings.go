package grammar

import (
	"sync"
	"unicode/utf8"

	"github.com/lilyformac/lily/engine/parse"
)

// String leaves: a char-level automaton spelled in bytes, either as a JSON string (quotes,
// escapes) or as a raw tool-call parameter value ending in "\n</parameter>".

const paramEnd = "\n" + parse.ParamEnd

// rawForbidden may not appear in a raw parameter value: engine/parse could take them for the end
// of the value or of the call.
var rawForbidden = []string{parse.ParamEnd, parse.FuncEnd, parse.CallEnd, parse.CallOpen, parse.ParamOpen, parse.FuncOpen}

// rawChars is what a constrained raw value may hold: no '\n' or '<', so the value ends
// unambiguously at "\n</parameter>" and cannot contain a tag. Control characters other than
// tab and CR are left out too.
var rawChars = minus(setAny, cset{{0, 8}, {'\n', '\n'}, {0x0B, 0x1F}, {'<', '<'}, {0x7F, 0x7F}})

// jsonEscape is the short escape of c, if JSON has one.
func jsonEscape(c rune) byte {
	switch c {
	case '"':
		return '"'
	case '\\':
		return '\\'
	case '\b':
		return 'b'
	case '\f':
		return 'f'
	case '\n':
		return 'n'
	case '\r':
		return 'r'
	case '\t':
		return 't'
	}
	return 0
}

const hexDigits = "0123456789abcdef"

// spellChars adds to a, from state from to state to, every spelling of the characters in set:
// raw UTF-8, or in JSON mode the escapes that characters '"', '\\' and controls need.
func spellChars(a *bnfa, from int32, set cset, to int32, json bool) {
	for _, r := range set {
		lo, hi := r.lo, r.hi
		if json {
			for c := lo; c <= min(hi, 0x1F); c++ {
				spellEscape(a, from, c, to)
			}
			lo = max(lo, 0x20)
			for _, c := range []rune{'"', '\\'} {
				if lo <= c && c <= hi {
					spellEscape(a, from, c, to)
				}
			}
		}
		for _, seq := range utf8Ranges(lo, hi) {
			if json && (seq[0][0] <= '"' && '"' <= seq[0][1] || seq[0][0] <= '\\' && '\\' <= seq[0][1]) && len(seq) == 1 {
				// split around the characters that must be escaped
				for _, part := range (cset{{rune(seq[0][0]), rune(seq[0][1])}}).minusRunes('"', '\\') {
					a.path(from, [][2]byte{{byte(part.lo), byte(part.hi)}}, to, tagInside)
				}
				continue
			}
			a.path(from, seq, to, tagInside)
		}
	}
}

func (c cset) minusRunes(rs ...rune) cset {
	var drop cset
	for _, r := range rs {
		drop = append(drop, rng{r, r})
	}
	return intersect(c, drop.norm().negate())
}

// spellEscape adds the escapes of c: its short form if any, and \u00XX for a control.
func spellEscape(a *bnfa, from int32, c rune, to int32) {
	if e := jsonEscape(c); e != 0 {
		a.path(from, [][2]byte{{'\\', '\\'}, {e, e}}, to, tagInside)
	}
	if c < 0x20 {
		h, l := hexDigits[c>>4], hexDigits[c&15]
		seq := [][2]byte{{'\\', '\\'}, {'u', 'u'}, {'0', '0'}, {'0', '0'}, {h, h}}
		if l >= 'a' {
			// both cases of the last hex digit, through one shared state
			mid := a.add(tagInside)
			a.path(from, seq, mid, tagInside)
			a.edge(mid, l, l, to)
			a.edge(mid, l-'a'+'A', l-'a'+'A', to)
			return
		}
		a.path(from, append(seq, [2]byte{l, l}), to, tagInside)
	}
}

// spellUnicodeEscapes adds \uXXXX for any BMP character that is not a surrogate, and surrogate
// pairs for the others, as free JSON strings allow them (models trained on ensure_ascii JSON
// write them).
func spellUnicodeEscapes(a *bnfa, from, to int32) {
	u := a.add(tagInside)
	a.path(from, [][2]byte{{'\\', '\\'}, {'u', 'u'}}, u, tagInside)
	hex := func(s, t int32) {
		a.edge(s, '0', '9', t)
		a.edge(s, 'a', 'f', t)
		a.edge(s, 'A', 'F', t)
	}
	h2, h3 := a.add(tagInside), a.add(tagInside)
	hex(h2, h3)
	hex(h3, to)
	h1 := a.add(tagInside)
	hex(h1, h2)
	for _, r := range [][2]byte{{'0', '9'}, {'a', 'c'}, {'A', 'C'}, {'e', 'f'}, {'E', 'F'}} {
		a.edge(u, r[0], r[1], h1)
	}
	d := a.add(tagInside)
	a.edge(u, 'd', 'd', d)
	a.edge(u, 'D', 'D', d)
	a.edge(d, '0', '7', h2)
	// \uD800-\uDBFF then \uDC00-\uDFFF: the second escape belongs to the same character.
	hs := a.add(tagInside)
	for _, r := range [][2]byte{{'8', '9'}, {'a', 'b'}, {'A', 'B'}} {
		a.edge(d, r[0], r[1], hs)
	}
	hs2, hs3 := a.add(tagInside), a.add(tagInside)
	hex(hs, hs2)
	ls := a.add(tagInside)
	hex(hs2, hs3)
	a.path(hs3, [][2]byte{{'\\', '\\'}, {'u', 'u'}}, ls, tagInside)
	ld := a.add(tagInside)
	a.edge(ls, 'd', 'd', ld)
	a.edge(ls, 'D', 'D', ld)
	l2 := a.add(tagInside)
	for _, r := range [][2]byte{{'c', 'f'}, {'C', 'F'}} {
		a.edge(ld, r[0], r[1], l2)
	}
	hex(l2, h3)
}

// utf8Ranges splits [lo, hi] into sequences of byte ranges whose products are exactly the UTF-8
// encodings of the range (the algorithm of RE2 and Rust's utf8-ranges). Surrogates are skipped.
func utf8Ranges(lo, hi rune) [][][2]byte {
	var out [][][2]byte
	var split func(lo, hi rune)
	split = func(lo, hi rune) {
		if lo > hi {
			return
		}
		if lo <= 0xDFFF && hi >= 0xD800 {
			split(lo, 0xD7FF)
			split(0xE000, hi)
			return
		}
		for _, m := range []rune{0x7F, 0x7FF, 0xFFFF} {
			if lo <= m && m < hi {
				split(lo, m)
				split(m+1, hi)
				return
			}
		}
		if hi <= 0x7F {
			out = append(out, [][2]byte{{byte(lo), byte(hi)}})
			return
		}
		n := utf8.RuneLen(lo)
		for i := 1; i < n; i++ {
			mask := rune(1)<<(6*i) - 1
			if lo&^mask != hi&^mask {
				if lo&mask != 0 {
					split(lo, lo|mask)
					split((lo|mask)+1, hi)
					return
				}
				if hi&mask != mask {
					split(lo, (hi&^mask)-1)
					split(hi&^mask, hi)
					return
				}
			}
		}
		var a, b [4]byte
		utf8.EncodeRune(a[:], lo)
		utf8.EncodeRune(b[:], hi)
		seq := make([][2]byte, n)
		for i := range n {
			seq[i] = [2]byte{a[i], b[i]}
		}
		out = append(out, seq)
	}
	split(lo, hi)
	return out
}

// spellJSON turns a char automaton into the bytes of a JSON string holding its language.
func spellJSON(d *cdfa, unicodeEscapes bool) (*dfa, error) {
	a := &bnfa{}
	open := a.add(tagOther)
	q := make([]int32, len(d.final))
	for i := range q {
		q[i] = a.add(tagBound)
	}
	closed := a.add(tagOther)
	a.final[closed] = true
	a.edge(open, '"', '"', q[0])
	for i, tr := range d.trans {
		for _, t := range tr {
			spellChars(a, q[i], t.set, q[t.to], true)
		}
		if d.final[i] {
			a.edge(q[i], '"', '"', closed)
		}
		if unicodeEscapes {
			spellUnicodeEscapes(a, q[i], q[i])
		}
	}
	return a.determinize(open)
}

// spellRaw turns a char automaton (over rawChars) into a raw parameter value and its end tag.
func spellRaw(d *cdfa) (*dfa, error) {
	a := &bnfa{}
	q := make([]int32, len(d.final))
	for i := range q {
		q[i] = a.add(tagBound)
	}
	end := a.add(tagOther)
	cur := end
	for i := 1; i < len(paramEnd); i++ { // the tag after the first '\n', shared by all finals
		next := a.add(tagOther)
		a.edge(cur, paramEnd[i], paramEnd[i], next)
		cur = next
	}
	a.final[cur] = true
	for i, tr := range d.trans {
		for _, t := range tr {
			spellChars(a, q[i], intersect(t.set, rawChars), q[t.to], false)
		}
		if d.final[i] {
			a.edge(q[i], '\n', '\n', end)
		}
	}
	return a.determinize(q[0])
}

// anyChars is the char automaton of every string.
func anyChars() *cdfa {
	return &cdfa{trans: [][]ctrans{{{setAny, 0}}}, final: []bool{true}}
}

var (
	freeOnce             sync.Once
	freeJSON, freeRaw    *dfa
	freeText             *dfa
	errFree              error
	freeJSONDist, rawDst []int32
)

// free returns the shared leaves of unconstrained text: a JSON string, a raw parameter value, and
// the free text of tool_choice auto (which ends only before an added token).
func free() (jsonStr, rawVal, text *dfa) {
	freeOnce.Do(func() {
		if freeJSON, errFree = spellJSON(anyChars(), true); errFree != nil {
			panic(errFree)
		}
		freeRaw = avoidDFA(rawForbidden, paramEnd)
		freeText = avoidDFA([]string{parse.CallOpen, parse.FuncOpen}, "")
		freeText.sealed = true
		freeJSON.shared, freeRaw.shared, freeText.shared = true, true, true
	})
	return freeJSON, freeRaw, freeText
}

// avoidDFA accepts valid UTF-8 without C0 controls (but tab, LF, CR) in which no word of avoid
// occurs; with end set, the text ends at the first occurrence of end (which may overlap a word
// of avoid, as "\n</parameter>" does "</parameter>"), otherwise at any character boundary. It is
// the product of an Aho-Corasick automaton with a UTF-8 checker.
func avoidDFA(avoid []string, end string) *dfa {
	words := append([]string{}, avoid...)
	if end != "" {
		words = append(words, end)
	}
	ac := newAhoCorasick(words)
	t := &dtable{}
	id := map[[2]int32]int32{}
	var states [][2]int32 // (utf8 state, ac state)
	get := func(u, s int32) int32 {
		k := [2]int32{u, s}
		if v, ok := id[k]; ok {
			return v
		}
		tag := tagBound
		if u != 0 {
			tag = tagInside
		}
		done := end != "" && ac.out[s]&(1<<(len(words)-1)) != 0
		if done {
			tag = tagOther
		}
		v := t.add(done || end == "" && u == 0, tag, -1)
		id[k] = v
		states = append(states, k)
		return v
	}
	get(0, 0)
	for i := 0; i < len(states); i++ {
		u, s := states[i][0], states[i][1]
		if t.final[i] && end != "" {
			continue // the end tag is complete: nothing follows
		}
		for b := range 256 {
			nu, ok := utf8Step(u, byte(b))
			if !ok {
				continue
			}
			ns := ac.step(s, byte(b))
			out := ac.out[ns]
			if end != "" && out&(1<<(len(words)-1)) != 0 {
				// the end tag wins over an avoided word ending at the same byte
			} else if out != 0 {
				continue
			}
			t.next[i][b] = get(nu, ns)
		}
	}
	d, err := t.build()
	if err != nil {
		panic(err)
	}
	return d
}

// utf8Step advances a UTF-8 checker: state 0 is a character boundary, others count (and bound)
// the continuation bytes still due. Controls other than tab, LF and CR are refused.
func utf8Step(u int32, b byte) (int32, bool) {
	need, lo, hi := u&7, byte(0x80), byte(0xBF)
	switch u >> 3 { // a restricted second byte
	case 1:
		lo = 0xA0 // after E0: no overlong forms
	case 2:
		hi = 0x9F // after ED: no surrogates
	case 3:
		lo = 0x90 // after F0
	case 4:
		hi = 0x8F // after F4: nothing above U+10FFFF
	}
	if need > 0 {
		if b < lo || b > hi {
			return 0, false
		}
		return need - 1, true
	}
	switch {
	case b < 0x20:
		return 0, b == '\t' || b == '\n' || b == '\r'
	case b < 0x7F:
		return 0, true
	case b < 0xC2:
		return 0, false
	case b < 0xE0:
		return 1, true
	case b == 0xE0:
		return 1<<3 | 2, true
	case b == 0xED:
		return 2<<3 | 2, true
	case b < 0xF0:
		return 2, true
	case b == 0xF0:
		return 3<<3 | 3, true
	case b == 0xF4:
		return 4<<3 | 3, true
	case b < 0xF4:
		return 3, true
	}
	return 0, false
}

// ahoCorasick finds occurrences of up to 64 words; out[s] has bit i set when word i ends at s.
type ahoCorasick struct {
	next [][256]int32
	out  []uint64
}

func newAhoCorasick(words []string) *ahoCorasick {
	ac := &ahoCorasick{next: [][256]int32{{}}, out: []uint64{0}}
	for i, w := range words {
		s := int32(0)
		for j := 0; j < len(w); j++ {
			if ac.next[s][w[j]] == 0 {
				ac.next = append(ac.next, [256]int32{})
				ac.out = append(ac.out, 0)
				ac.next[s][w[j]] = int32(len(ac.next) - 1)
			}
			s = ac.next[s][w[j]]
		}
		ac.out[s] |= 1 << i
	}
	// Breadth first: fill the goto function with failure transitions.
	fail := make([]int32, len(ac.next))
	var q []int32
	for b := range 256 {
		if s := ac.next[0][b]; s != 0 {
			q = append(q, s)
		}
	}
	for len(q) > 0 {
		s := q[0]
		q = q[1:]
		ac.out[s] |= ac.out[fail[s]]
		for b := range 256 {
			t := ac.next[s][b]
			if t != 0 {
				fail[t] = ac.next[fail[s]][b]
				q = append(q, t)
			} else {
				ac.next[s][b] = ac.next[fail[s]][b]
			}
		}
	}
	return ac
}

func (ac *ahoCorasick) step(s int32, b byte) int32 { return ac.next[s][b] }
