// Package grammar constrains generation to a grammar by masking the tokens that cannot continue
// a valid output: a JSON Schema (response formats), any JSON object, or Qwen's XML tool calls.
//
// A Grammar is compiled once and shared; a Matcher follows one generation. Before each token the
// sampler asks Mask for the ids that may come next and after it reports the chosen one to
// Accept:
//
//	g, err := cache.JSONSchema(schema)          // or JSONObject(), ToolCalls(...)
//	m, err := g.NewMatcher(vocab, maxTokens)    // error: maxTokens cannot fit any valid output
//	for budget := maxTokens; ; budget-- {
//		m.Mask(bits, budget)                    // budget: tokens left, this one and the EOS included
//		id := sample(logits, bits)
//		if err := m.Accept(id); err != nil { … }
//		if m.Ended() { break }                  // id was an EOS
//	}
//
// # Termination
//
// Every grammar state knows a number of tokens that surely completes it (rem): the sum, over the
// frames of the stack, of the fewest tokens of the vocabulary that complete each frame's piece on
// its own. Leaves (literals, enums, punctuation, free strings, raw values with their end tag
// "\n</parameter>", patterns) and the key texts of objects count the vocabulary's tokens
// exactly, a token counting only where all its bytes stay in the piece; strings whose min/max
// length is counted at run time, numbers, and automata too large to walk count bytes, each byte
// being a token of a byte-level vocabulary (tokens.go). Pieces are tokenized separately, so rem
// bounds the true minimum from above, and from any incomplete state some token lowers it by one
// (the first of the cheapest completion of the piece on top). A token is allowed only if after it
// the completion still fits: rem ≤ budget-2 (rem tokens, then the EOS). So even a model of random
// weights ends with a complete output within max_tokens, without caps on strings, arrays or
// numbers. EOS ids are allowed exactly when the output is complete (rem = 0). A Grammar is
// compiled with byte costs; NewMatcher and MinTokens use a copy whose costs are in the tokens of
// their vocabulary, built once per vocabulary (a wide leaf's token costs once per automaton and
// vocabulary: free strings and raw values share theirs across grammars).
//
// # Output form
//
// JSON is written compactly except that one optional space may follow each ':' and ',': no other
// white space, none before or after the value. Properties come in schema order; optional ones may
// be left out; only declared properties are written (so additionalProperties never matters).
// Strings hold valid UTF-8 (characters may split across tokens) and valid escapes; free strings
// also take \uXXXX escapes and surrogate pairs, strings with a pattern only the escapes they need.
// Integers are written without exponent or fraction, at most 15 digits unless bounds need more;
// numbers have at most 15 fraction digits and a 2-digit exponent (no exponent when bounded).
//
// # JSON Schema subset
//
// type (one or a list), properties, required, additionalProperties (false, true, a schema or
// absent), items, prefixItems, minItems, maxItems, enum, const, anyOf, oneOf, allOf with one
// branch, $ref to "#", "#/$defs/…" or "#/definitions/…" (recursion allowed, nesting bounded by
// maxFrames), minLength/maxLength (characters), pattern (see regex.go: classes, \d \w \s, . ,
// groups, alternation, * + ? {m,n}, anchors at the ends), format (date, time, date-time, uuid,
// email, hostname, ipv4, uri, through built-in patterns), minimum, maximum, exclusiveMinimum,
// exclusiveMaximum (exact for integers; for numbers a fraction is only written where any fraction
// stays in bounds). Annotations are ignored: title, description, default, examples, $schema, $id,
// $comment, deprecated, readOnly, writeOnly, strict, and any "x-" keyword. Any other keyword is
// an error naming it. anyOf takes the branches in order, dropping one whose first byte an earlier
// one already claims (two object branches: only the first is generated), which keeps every
// output valid; oneOf must have branches that start differently (different JSON types),
// otherwise an output might match two of them.
//
// # Tool calls
//
// ToolCalls builds Qwen3.5/3.6's format:
//
//	<tool_call>\n<function=NAME>\n<parameter=K>\nVALUE\n</parameter>\n…</function>\n</tool_call>
//
// with <tool_call> and </tool_call> as their added tokens. String-typed values are raw text
// (no tag that engine/parse would take for an end); other values are JSON by their schema.
// The grammar starts where the calls start: a server that lets the model reason first starts
// the matcher after "</think>".
//
// # Masks
//
// The vocabulary is a depth-first trie: a mask walks it with the matcher's stack, skipping the
// subtree of a rejected prefix. Wide leaves (free strings, raw values, patterns) keep per-state
// masks, built once per vocabulary (~5 ms each, at most maxCached states per automaton), their
// tokens grouped by the leaf's cost after them (tokens, or bytes for counted strings); only
// tokens that leave the leaf are walked each time. A pattern under min/maxLength is compiled
// with a state per character count, so past maxCached states its masks walk the whole allowed
// vocabulary (~1.5 ms). Added tokens are allowed only where the grammar names them, EOS only
// when the output is complete. Under maxLength, a token's characters are bounded by its lead
// bytes, so an escape such as \n may be refused one character early.
package grammar

import (
	"errors"
	"fmt"
	"sync"
)

type kind uint8

const (
	kLeaf    kind = iota // a dfa: strings, literals, enums
	kNum                 // a JSON number
	kSeq                 // children in order
	kChoice              // one of its branches, picked by the first symbol; never on the stack
	kList                // open (item (sep item)*)? close, with counts: arrays, maps, call lists
	kObject              // open (entry)* close: properties in order, keys and close in one dfa
	kSpecial             // one added token, by its text
)

// A symbol is a byte (0-255) or 256+k for the grammar's k-th added token.
const symSpecial = 256

// maxFrames bounds the stack: a push that could not complete within it is refused.
const maxFrames = 128

// frame is a node's position on the matcher's stack.
type frame struct {
	n  int32 // node
	st int32 // kind-specific state: dfa state, phase
	a  int32 // characters, items, last property
	v  int64 // number magnitude, key dfa state
}

type act uint8

const (
	aReject  act = iota
	aEat         // consumed; the frame stays
	aEatDone     // consumed; the frame is complete and can take nothing more: pop it
	aPush        // push the child and give it the symbol; the frame already points past it
	aPop         // the frame is complete; give the symbol to the parent
)

type symset struct {
	b  [4]uint64
	sp uint64
}

func (s *symset) add(c int) {
	if c < symSpecial {
		s.b[c>>6] |= 1 << (c & 63)
	} else {
		s.sp |= 1 << (c - symSpecial)
	}
}

func (s *symset) has(c int) bool {
	if c < symSpecial {
		return s.b[c>>6]>>(c&63)&1 != 0
	}
	return s.sp>>(c-symSpecial)&1 != 0
}

func (s *symset) overlaps(t *symset) bool {
	return s.b[0]&t.b[0]|s.b[1]&t.b[1]|s.b[2]&t.b[2]|s.b[3]&t.b[3]|s.sp&t.sp != 0
}

func (s *symset) union(t *symset) {
	for i := range s.b {
		s.b[i] |= t.b[i]
	}
	s.sp |= t.sp
}

type prop struct {
	name     string
	val      int32
	suffix   int32 // a literal after the value, -1 for none
	required bool
}

type node struct {
	kind kind
	// kLeaf: characters are counted at run time when minCh > 0 or maxCh ≥ 0.
	dfa          *dfa
	minCh, maxCh int32
	dist         [][]int32 // dist[j][s], j ≤ minCh
	tdist        []int32   // in a vocabulary's copy, uncounted leaves: fewest tokens from each state to a final one (nil: bytes)
	// kNum
	num *numSpec
	// kSeq, kChoice
	kids  []int32
	oneOf bool    // kChoice: branches must not overlap
	kept  []int32 // kChoice: the branches in use
	// kList, kObject
	open, sep, close int32 // -1 for none
	items            []int32
	rest             int32
	min, max         int32
	// kObject: entries 0…len(props)-1 are keys, len(props) is the close (if hasClose).
	keys          *dfa
	props         []prop
	one, hasClose bool
	reach         []uint64 // per key state: the entries it can still lead to, words each
	words         int
	entryLen      []int32   // bytes of each entry's text (without the optional space)
	texts         []string  // each entry's text
	entryTok      [][]int32 // in a vocabulary's copy: entryTok[e][k], fewest tokens that write texts[e][k:]
	reqFrom       []int32   // reqFrom[i]: first required property ≥ i, len(props) if none
	after         []int32   // kObject: after[i+1] min cost to finish once property i is done; kSeq: after[i] from child i on
	// kSpecial
	special int32
	// derived
	first    symset
	minLen   int32
	minDepth int32
	where    string // schema path, for errors
}

// Grammar is a compiled constraint: immutable and shared by any number of matchers.
type Grammar struct {
	nodes    []node
	root     int32
	specials []string // added tokens the grammar names, by text
	// A compiled grammar counts bytes; forVocab makes copies that count a vocabulary's tokens.
	base  *Grammar // of a copy: the compiled grammar
	vocab *Vocab   // of a copy: its vocabulary
	views sync.Map // of a compiled grammar: *Vocab → *Grammar
}

// MinTokens is the number of tokens of v that surely fits a complete output, the EOS included:
// the least max_tokens NewMatcher accepts. It bounds the shortest output from above (see
// Termination).
func (g *Grammar) MinTokens(v *Vocab) int {
	w := g.forVocab(v)
	return int(w.nodes[w.root].minLen) + 1
}

func (g *Grammar) add(n node) int32 {
	g.nodes = append(g.nodes, n)
	return int32(len(g.nodes) - 1)
}

func (g *Grammar) leaf(d *dfa) int32 {
	return g.add(node{kind: kLeaf, dfa: d, maxCh: -1, open: -1, sep: -1, close: -1, rest: -1})
}

func (g *Grammar) lit(s string) int32 { return g.leaf(litDFA(s)) }

func (g *Grammar) seq(kids ...int32) int32 {
	return g.add(node{kind: kSeq, kids: kids, open: -1, sep: -1, close: -1, rest: -1})
}

func (g *Grammar) choice(oneOf bool, kids ...int32) int32 {
	return g.add(node{kind: kChoice, kids: kids, oneOf: oneOf, open: -1, sep: -1, close: -1, rest: -1})
}

func (g *Grammar) special(text string) int32 {
	k := -1
	for i, s := range g.specials {
		if s == text {
			k = i
		}
	}
	if k < 0 {
		k = len(g.specials)
		g.specials = append(g.specials, text)
	}
	return g.add(node{kind: kSpecial, special: int32(k), open: -1, sep: -1, close: -1, rest: -1})
}

func (g *Grammar) list(open, item, sep, close int32, lo, hi int32) int32 {
	return g.add(node{kind: kList, open: open, rest: item, sep: sep, close: close, min: lo, max: hi})
}

func (g *Grammar) minOf(n int32) int32 {
	if n < 0 {
		return 0
	}
	return g.nodes[n].minLen
}

// step gives symbol s to frame f.
func (g *Grammar) step(f *frame, s int) (act, int32) {
	n := &g.nodes[f.n]
	switch n.kind {
	case kLeaf:
		return n.stepLeaf(f, s), 0
	case kNum:
		if s >= symSpecial {
			return popIf(n.num.rem(f) == 0), 0
		}
		return n.num.step(f, byte(s)), 0
	case kSeq:
		if int(f.st) == len(n.kids) {
			return aPop, 0
		}
		f.st++
		return aPush, n.kids[f.st-1]
	case kList:
		return g.stepList(n, f, s)
	case kObject:
		return g.stepObject(n, f, s)
	case kSpecial:
		if s == symSpecial+int(n.special) {
			return aEatDone, 0
		}
	}
	return aReject, 0
}

func popIf(ok bool) act {
	if ok {
		return aPop
	}
	return aReject
}

func (n *node) counted() bool { return n.minCh > 0 || n.maxCh >= 0 }

func (n *node) stepLeaf(f *frame, s int) act {
	d := n.dfa
	if s >= symSpecial {
		return popIf(n.remLeaf(f) == 0)
	}
	t := d.step(f.st, byte(s))
	if t < 0 {
		return popIf(!d.sealed && n.remLeaf(f) == 0)
	}
	if n.counted() {
		if d.bound[f.st] && d.content[t] {
			if n.maxCh >= 0 && f.a >= n.maxCh {
				return aReject
			}
			f.a++
		} else if d.final[t] && f.a < n.minCh {
			return aReject
		}
	}
	f.st = t
	if d.term[t] {
		return aEatDone
	}
	return aEat
}

func (n *node) remLeaf(f *frame) int32 {
	switch {
	case n.tdist != nil:
		return n.tdist[f.st]
	case n.dist == nil:
		return n.dfa.dist[f.st]
	}
	return n.dist[max(0, n.minCh-f.a)][f.st]
}

// List phases.
const (
	lStart = iota
	lOpen  // after open: an item or the close
	lItem  // after an item: sep or close
	lSep   // after sep: an item
	lDone
)

func (n *node) itemAt(i int32) int32 {
	switch {
	case n.max >= 0 && i >= n.max:
		return -1
	case int(i) < len(n.items):
		return n.items[i]
	}
	return n.rest
}

func (g *Grammar) stepList(n *node, f *frame, s int) (act, int32) {
	switch f.st {
	case lStart:
		f.st = lOpen
		if n.open >= 0 {
			return aPush, n.open
		}
		fallthrough
	case lOpen:
		if it := n.itemAt(f.a); it >= 0 && g.nodes[it].first.has(s) {
			f.a++
			f.st = lItem
			return aPush, it
		}
	case lItem:
		if it := n.itemAt(f.a); it >= 0 {
			if n.sep >= 0 && g.nodes[n.sep].first.has(s) {
				f.st = lSep
				return aPush, n.sep
			}
			if n.sep < 0 && g.nodes[it].first.has(s) {
				f.a++
				return aPush, it
			}
		}
	case lSep:
		f.a++
		f.st = lItem
		return aPush, n.itemAt(f.a - 1)
	case lDone:
		return aPop, 0
	}
	// Nothing but the end is left.
	switch {
	case f.a < n.min:
		return aReject, 0
	case n.close < 0:
		return aPop, 0
	case g.nodes[n.close].first.has(s):
		f.st = lDone
		return aPush, n.close
	}
	return aReject, 0
}

// itemsCost is the min cost of items i … i+k-1.
func (g *Grammar) itemsCost(n *node, i, k int32) int32 {
	var c int32
	for j := i; j < i+k; j++ {
		if int(j) >= len(n.items) {
			c = sat(c + (i+k-j)*g.minOf(n.rest))
			break
		}
		c = sat(c + g.minOf(n.items[j]))
	}
	return c
}

func sat(v int32) int32 { return min(v, inf) }

func satAdd(vs ...int32) int32 {
	var s int32
	for _, v := range vs {
		if v >= inf || s+v >= inf {
			return inf
		}
		s += v
	}
	return s
}

func (g *Grammar) remList(n *node, f *frame) int32 {
	closeLen, sepLen := g.minOf(n.close), g.minOf(n.sep)
	need := max(0, n.min-f.a)
	switch f.st {
	case lStart:
		return n.minLen
	case lOpen:
		if need == 0 {
			return closeLen
		}
		return satAdd(g.itemsCost(n, f.a, need), sat((need-1)*sepLen), closeLen)
	case lItem:
		if need == 0 {
			return closeLen
		}
		return satAdd(sat(need*sepLen), g.itemsCost(n, f.a, need), closeLen)
	case lSep:
		k := max(need, 1)
		return satAdd(g.itemsCost(n, f.a, k), sat((k-1)*sepLen), closeLen)
	}
	return 0
}

// Object phases; obKey* are inside the entry dfa (f.v its state).
const (
	obStart     = iota
	obKeyAny    // keys after f.a and the close
	obKeyOnly   // keys after f.a (after a separator)
	obCloseOnly // the close (after a property, where a key needs a separator first)
	obValue     // the value of property f.a is pushed
	obSuffix    // its suffix is pushed
	obProp      // property f.a is done
	obDone
)

func (g *Grammar) stepObject(n *node, f *frame, s int) (act, int32) {
	switch f.st {
	case obStart:
		f.st, f.v, f.a = obKeyAny, 0, -1
		if n.open >= 0 {
			return aPush, n.open
		}
	case obValue:
		if sfx := n.props[f.a].suffix; sfx >= 0 {
			f.st = obSuffix
			return aPush, sfx
		}
		f.st = obProp
	case obSuffix:
		f.st = obProp
	case obDone:
		return aPop, 0
	}
	if f.st == obProp {
		if n.one {
			return aPop, 0
		}
		f.v = 0
		f.st = obKeyAny
		if n.sep >= 0 {
			f.st = obCloseOnly
			if n.keysFrom(f.a+1) && g.nodes[n.sep].first.has(s) {
				f.st = obKeyOnly
				return aPush, n.sep
			}
		}
	}
	return n.stepEntry(f, s)
}

func (n *node) stepEntry(f *frame, s int) (act, int32) {
	d, v := n.keys, int32(f.v)
	if s < symSpecial {
		if t := d.step(v, byte(s)); t >= 0 && n.leadsTo(f, t) {
			f.v = int64(t)
			if d.term[t] && int(d.mark[t]) == len(n.props) {
				f.st = obDone
				return aEatDone, 0
			}
			return aEat, 0
		}
	}
	if e := d.mark[v]; d.final[v] && int(e) < len(n.props) && n.allows(f, int(e)) {
		f.a, f.st = e, obValue
		return aPush, n.props[e].val
	}
	return aReject, 0
}

// entries returns the keys [lo, hi] and whether the close may come next in frame f.
func (n *node) entries(f *frame) (lo, hi int, close bool) {
	if f.st == obCloseOnly {
		lo, hi = 1, 0
	} else {
		lo, hi = int(f.a)+1, min(int(n.reqFrom[f.a+1]), len(n.props)-1)
	}
	close = n.hasClose && f.st != obKeyOnly && int(n.reqFrom[f.a+1]) == len(n.props)
	return
}

func (n *node) allows(f *frame, e int) bool {
	lo, hi, close := n.entries(f)
	return lo <= e && e <= hi || close && e == len(n.props)
}

func (n *node) keysFrom(i int32) bool { return int(i) < len(n.props) }

// leadsTo reports whether key state t can still end in an entry frame f allows.
func (n *node) leadsTo(f *frame, t int32) bool {
	lo, hi, close := n.entries(f)
	r := n.reach[int(t)*n.words : int(t+1)*n.words]
	if close && r[len(n.props)>>6]>>(len(n.props)&63)&1 != 0 {
		return true
	}
	for w := lo >> 6; lo <= hi && w <= hi>>6; w++ {
		m := r[w]
		if w == lo>>6 {
			m &= ^uint64(0) << (lo & 63)
		}
		if w == hi>>6 && hi&63 != 63 {
			m &= 1<<(hi&63+1) - 1
		}
		if m != 0 {
			return true
		}
	}
	return false
}

func (g *Grammar) remObject(n *node, f *frame) int32 {
	switch f.st {
	case obStart:
		return n.minLen
	case obValue:
		return satAdd(g.minOf(n.props[f.a].suffix), n.after[f.a+1])
	case obSuffix, obProp:
		return n.after[f.a+1]
	case obDone:
		return 0
	}
	best := inf
	v := int32(f.v)
	for e := range n.entryLen {
		if !n.allows(f, e) || n.reach[int(v)*n.words+e>>6]>>(e&63)&1 == 0 {
			continue
		}
		best = min(best, satAdd(n.textRem(e, n.keys.depth[v]), g.entryCont(n, e)))
	}
	return best
}

// textRem is the min cost of entry e's text from byte k on (k may count the optional space).
func (n *node) textRem(e int, k int32) int32 {
	if n.entryTok != nil {
		t := n.entryTok[e]
		return t[min(int(k), len(t)-1)]
	}
	return max(0, n.entryLen[e]-k)
}

// entryCont is the min cost after entry e's text: its value, suffix and the rest.
func (g *Grammar) entryCont(n *node, e int) int32 {
	if e == len(n.props) {
		return 0
	}
	p := &n.props[e]
	after := n.after[e+1]
	if n.one {
		after = 0
	}
	return satAdd(g.minOf(p.val), g.minOf(p.suffix), after)
}

// rem is the min cost (bytes in a compiled grammar, tokens in a vocabulary's copy) that completes
// frame f, given that the frames above it complete.
func (g *Grammar) rem(f *frame) int32 {
	n := &g.nodes[f.n]
	switch n.kind {
	case kLeaf:
		return n.remLeaf(f)
	case kNum:
		return n.num.rem(f)
	case kSeq:
		return n.after[f.st]
	case kList:
		return g.remList(n, f)
	case kObject:
		return g.remObject(n, f)
	case kSpecial:
		return 1
	}
	return inf
}

// closed reports whether frame f is complete and can take nothing more.
func (g *Grammar) closed(f *frame) bool {
	n := &g.nodes[f.n]
	switch n.kind {
	case kSeq:
		return int(f.st) == len(n.kids)
	case kList:
		return f.st == lDone
	case kObject:
		return f.st == obDone || n.one && (f.st == obSuffix || f.st == obProp || f.st == obValue && n.props[f.a].suffix < 0)
	}
	return false
}

// resolve picks the branch of choices that s starts.
func (g *Grammar) resolve(c int32, s int) int32 {
	for g.nodes[c].kind == kChoice {
		next := int32(-1)
		for _, b := range g.nodes[c].kept {
			if g.nodes[b].first.has(s) {
				next = b
				break
			}
		}
		if next < 0 {
			return -1
		}
		c = next
	}
	return c
}

// feed gives symbol s to the stack, in place; false if the grammar rejects it (stk is then
// garbage).
func (g *Grammar) feed(stk []frame, s int) ([]frame, bool) {
	for len(stk) > 0 {
		a, c := g.step(&stk[len(stk)-1], s)
		switch a {
		case aEat:
			return stk, true
		case aEatDone:
			stk = stk[:len(stk)-1]
			for len(stk) > 0 && g.closed(&stk[len(stk)-1]) {
				stk = stk[:len(stk)-1]
			}
			return stk, true
		case aPop:
			stk = stk[:len(stk)-1]
		case aPush:
			if c = g.resolve(c, s); c < 0 || len(stk)+int(g.nodes[c].minDepth) > maxFrames {
				return stk, false
			}
			stk = append(stk, frame{n: c})
		default:
			return stk, false
		}
	}
	return stk, false
}

func (g *Grammar) remStack(stk []frame) int32 {
	var r int32
	for i := range stk {
		r = satAdd(r, g.rem(&stk[i]))
	}
	return r
}

// finalize computes what the matcher needs from the finished node graph: first sets (settling
// the branches of choices), min lengths and min depths.
func (g *Grammar) finalize() error {
	for i := range g.nodes {
		if n := &g.nodes[i]; n.kind == kChoice {
			n.kept = n.kids
		}
	}
	for round := 0; ; round++ {
		g.firstSets()
		changed, err := g.settleChoices()
		if err != nil {
			return err
		}
		if !changed {
			break
		}
		if round > 20 {
			return errors.New("grammar: choices do not settle")
		}
	}
	g.minLengths()
	g.minDepths()
	if g.nodes[g.root].minLen >= inf {
		return errors.New("the schema admits no finite value")
	}
	return nil
}

func (g *Grammar) firstSets() {
	for i := range g.nodes {
		n := &g.nodes[i]
		n.first = symset{}
		switch n.kind {
		case kLeaf:
			for b := range 256 {
				if n.dfa.step(0, byte(b)) >= 0 {
					n.first.add(b)
				}
			}
		case kNum:
			n.first = n.num.first()
		case kSpecial:
			n.first.add(symSpecial + int(n.special))
		case kObject:
			if n.open < 0 {
				f := frame{st: obKeyAny, a: -1}
				for b := range 256 {
					if t := n.keys.step(0, byte(b)); t >= 0 && n.leadsTo(&f, t) {
						n.first.add(b)
					}
				}
			}
		}
	}
	for changed := true; changed; {
		changed = false
		for i := range g.nodes {
			n := &g.nodes[i]
			old := n.first
			switch n.kind {
			case kSeq:
				n.first.union(&g.nodes[n.kids[0]].first)
			case kChoice:
				for _, k := range n.kept {
					n.first.union(&g.nodes[k].first)
				}
			case kList, kObject:
				if n.open >= 0 {
					n.first.union(&g.nodes[n.open].first)
				} else if n.kind == kList {
					if it := n.itemAt(0); it >= 0 {
						n.first.union(&g.nodes[it].first)
					}
					if n.min == 0 && n.close >= 0 {
						n.first.union(&g.nodes[n.close].first)
					}
				}
			}
			changed = changed || n.first != old
		}
	}
}

// settleChoices keeps the branches of each choice that start differently from the ones before:
// for anyOf that is sound (an output of one branch is valid), for oneOf an overlap is an error.
func (g *Grammar) settleChoices() (bool, error) {
	changed := false
	for i := range g.nodes {
		n := &g.nodes[i]
		if n.kind != kChoice {
			continue
		}
		var kept []int32
		var seen symset
		for _, k := range n.kids {
			f := &g.nodes[k].first
			if f.overlaps(&seen) {
				if n.oneOf {
					return false, fmt.Errorf("%s: oneOf branches are not provably disjoint (they start alike, e.g. two objects or strings); use anyOf", n.where)
				}
				continue
			}
			seen.union(f)
			kept = append(kept, k)
		}
		if len(kept) != len(n.kept) {
			n.kept, changed = kept, true
		}
	}
	return changed, nil
}

func (g *Grammar) minLengths() {
	for i := range g.nodes {
		g.nodes[i].minLen = inf
		if n := &g.nodes[i]; n.kind == kObject {
			n.after = make([]int32, len(n.props)+1)
		}
	}
	for changed := true; changed; {
		changed = false
		for i := range g.nodes {
			n := &g.nodes[i]
			old := n.minLen
			n.minLen = g.minLen(n)
			changed = changed || n.minLen != old
		}
	}
}

func (g *Grammar) minLen(n *node) int32 {
	switch n.kind {
	case kLeaf:
		f := frame{}
		return n.remLeaf(&f)
	case kNum:
		return n.num.minLen()
	case kSpecial:
		return 1
	case kSeq:
		n.after = make([]int32, len(n.kids)+1)
		for i := len(n.kids) - 1; i >= 0; i-- {
			n.after[i] = satAdd(g.minOf(n.kids[i]), n.after[i+1])
		}
		return n.after[0]
	case kChoice:
		m := inf
		for _, k := range n.kept {
			m = min(m, g.minOf(k))
		}
		return m
	case kList:
		if n.min == 0 {
			return satAdd(g.minOf(n.open), g.minOf(n.close))
		}
		return satAdd(g.minOf(n.open), g.itemsCost(n, 0, n.min), sat((n.min-1)*g.minOf(n.sep)), g.minOf(n.close))
	case kObject:
		g.objectAfter(n)
		f := frame{st: obKeyAny, a: -1}
		return satAdd(g.minOf(n.open), g.remObject(n, &f))
	}
	return inf
}

// objectAfter fills after[i+1]: the min cost to finish once property i is done.
func (g *Grammar) objectAfter(n *node) {
	np := len(n.props)
	for i := np - 1; i >= -1; i-- {
		best := inf
		if n.hasClose && int(n.reqFrom[i+1]) == np {
			best = n.textRem(np, 0)
		}
		if n.one && i >= 0 {
			best = 0
		}
		sep := int32(0)
		if i >= 0 && n.sep >= 0 {
			sep = g.minOf(n.sep)
		}
		if !n.one || i < 0 {
			for j := i + 1; j < np && j <= int(n.reqFrom[i+1]); j++ {
				best = min(best, satAdd(sep, n.textRem(j, 0), g.entryCont(n, j)))
			}
		}
		n.after[i+1] = best
	}
}

func (g *Grammar) minDepths() {
	for i := range g.nodes {
		g.nodes[i].minDepth = inf
	}
	depth := func(n int32) int32 {
		if n < 0 {
			return 0
		}
		return g.nodes[n].minDepth
	}
	for changed := true; changed; {
		changed = false
		for i := range g.nodes {
			n := &g.nodes[i]
			old := n.minDepth
			d := int32(0)
			switch n.kind {
			case kSeq:
				for _, k := range n.kids {
					d = max(d, depth(k))
				}
			case kChoice:
				d = inf
				for _, k := range n.kept {
					d = min(d, depth(k)-1)
				}
			case kList:
				d = max(depth(n.open), depth(n.close))
				for j := int32(0); j < n.min; j++ {
					d = max(d, depth(n.itemAt(j)), depth(n.sep))
				}
			case kObject:
				d = depth(n.open)
				for _, p := range n.props {
					if p.required || n.one {
						d = max(d, depth(p.val), depth(p.suffix), depth(n.sep))
					}
				}
			}
			n.minDepth = min(inf, d+1)
			changed = changed || n.minDepth != old
		}
	}
}

// object builds an object node from its properties: keys are written as key(name) and the
// close as closeText (none if empty); entries are told apart by the one dfa.
func (g *Grammar) object(props []prop, key func(string) string, space bool, closeText string, open, sep int32, one bool) (int32, error) {
	n := node{kind: kObject, props: props, open: open, sep: sep, close: -1, rest: -1, one: one, hasClose: closeText != ""}
	words := make([]string, 0, len(props)+1)
	spaces := make([]bool, 0, len(props)+1)
	for _, p := range props {
		words = append(words, key(p.name))
		spaces = append(spaces, space)
	}
	if n.hasClose {
		words = append(words, closeText)
		spaces = append(spaces, false)
	}
	d, err := wordsDFA(words, spaces)
	if err != nil {
		return 0, err
	}
	n.keys, n.texts = d, words
	n.entryLen = make([]int32, len(props)+1)
	for i, w := range words {
		n.entryLen[i] = int32(len(w))
	}
	n.reqFrom = make([]int32, len(props)+1)
	n.reqFrom[len(props)] = int32(len(props))
	for i := len(props) - 1; i >= 0; i-- {
		n.reqFrom[i] = n.reqFrom[i+1]
		if props[i].required {
			n.reqFrom[i] = int32(i)
		}
	}
	// reach: the entries below each trie state (a state's marks and its subtree's).
	n.words = (len(props) + 1 + 63) / 64
	n.reach = make([]uint64, d.states()*n.words)
	for i, w := range words {
		s := int32(0)
		mark := func(s int32) { n.reach[int(s)*n.words+i>>6] |= 1 << (i & 63) }
		mark(s)
		for j := 0; j < len(w); j++ {
			s = d.step(s, w[j])
			mark(s)
		}
		if sp := d.step(s, ' '); spaces[i] && sp >= 0 {
			mark(sp)
		}
	}
	return g.add(n), nil
}
