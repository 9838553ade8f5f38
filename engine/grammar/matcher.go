package grammar

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
)

// Matcher is one generation's position in a grammar. It is not safe for concurrent use.
type Matcher struct {
	g     *Grammar
	v     *Vocab
	stk   []frame
	ended bool
	spec  []int32   // the vocab id of each added token the grammar names
	bufs  [][]frame // scratch stacks, one per trie depth
	tmp   []frame
}

// BudgetError says that max_tokens cannot fit any valid output.
type BudgetError struct{ Need, Have int }

func (e *BudgetError) Error() string {
	return fmt.Sprintf("max_tokens %d is too small for the requested format: a valid output needs at least %d tokens", e.Have, e.Need)
}

// NewMatcher starts a generation of at most maxTokens tokens (the EOS included); it fails with a
// *BudgetError when maxTokens is below MinTokens(v), or when the vocabulary lacks an added token
// the grammar needs or cannot write any valid output.
func (g *Grammar) NewMatcher(v *Vocab, maxTokens int) (*Matcher, error) {
	g = g.forVocab(v)
	m := &Matcher{g: g, v: v, stk: []frame{{n: g.root}}}
	for _, s := range g.specials {
		id, ok := v.added[s]
		if !ok {
			return nil, fmt.Errorf("grammar: the vocabulary has no added token %q", s)
		}
		m.spec = append(m.spec, int32(id))
	}
	if g.nodes[g.root].minLen >= inf {
		return nil, errors.New("grammar: the vocabulary's tokens cannot write any valid output")
	}
	if need := g.MinTokens(v); maxTokens < need {
		return nil, &BudgetError{Need: need, Have: maxTokens}
	}
	return m, nil
}

// Done reports whether the output so far is complete: an EOS may come now.
func (m *Matcher) Done() bool { return m.g.remStack(m.stk) == 0 }

// Ended reports whether an EOS was accepted.
func (m *Matcher) Ended() bool { return m.ended }

// MinTokens is the number of tokens that surely completes the output from here, the EOS
// included (an upper bound on the fewest, see Termination).
func (m *Matcher) MinTokens() int {
	if m.ended {
		return 0
	}
	return int(m.g.remStack(m.stk)) + 1
}

func (v *Vocab) isEOS(id int) bool {
	for _, e := range v.eos {
		if e == id {
			return true
		}
	}
	return false
}

// Accept advances by the token the sampler chose; it fails, changing nothing, for a token the
// grammar does not allow here (budgets aside).
func (m *Matcher) Accept(id int) error {
	switch {
	case m.ended:
		return errors.New("grammar: the generation has ended")
	case id < 0 || id >= m.v.size || m.v.bytes[id] == nil:
		return fmt.Errorf("grammar: token %d is not in the vocabulary", id)
	case m.v.isEOS(id):
		if !m.Done() {
			return fmt.Errorf("grammar: EOS before the output is complete")
		}
		m.ended = true
		return nil
	}
	tmp := append(m.tmp[:0], m.stk...)
	ok := true
	if m.v.isAdded[id] {
		ok = false
		for k, sid := range m.spec {
			if int(sid) == id {
				tmp, ok = m.g.feed(tmp, symSpecial+k)
			}
		}
	} else {
		for _, b := range m.v.bytes[id] {
			if tmp, ok = m.g.feed(tmp, int(b)); !ok {
				break
			}
		}
	}
	if !ok {
		return fmt.Errorf("grammar: token %d (%q) is not allowed here", id, m.v.bytes[id])
	}
	m.tmp, m.stk = m.stk, tmp
	return nil
}

func setBit(out []uint64, id int32) { out[id>>6] |= 1 << (id & 63) }

// Mask sets in allowed (at least v.MaskWords() words, cleared first) the ids that may come next,
// given budget tokens left including this one and the EOS: only tokens after which the shortest
// completion still fits. It reports whether any id is allowed (false when the budget is spent or
// the generation has ended).
func (m *Matcher) Mask(allowed []uint64, budget int) bool {
	out := allowed[:m.v.MaskWords()]
	clear(out)
	if m.ended || budget <= 0 {
		return false
	}
	if m.Done() {
		for _, id := range m.v.eos {
			setBit(out, int32(id))
		}
	}
	if budget >= 2 && len(m.stk) > 0 {
		limit := int32(budget - 2)
		top := &m.stk[len(m.stk)-1]
		n := &m.g.nodes[top.n]
		var e *leafEntry
		if n.kind == kLeaf && n.dfa.wide {
			e = m.v.nodeEntry(n, top.st)
		}
		if e != nil {
			m.maskLeaf(out, n, e, limit)
		} else {
			m.walk(out, &m.v.trie, 0, int32(len(m.v.trie.b)), m.stk, limit, 0, m.restRem(m.stk))
		}
		for k, id := range m.spec {
			tmp, ok := m.g.feed(append(m.tmp[:0], m.stk...), symSpecial+k)
			if ok && m.g.remStack(tmp) <= limit {
				setBit(out, id)
			}
			m.tmp = tmp[:0]
		}
	}
	for _, w := range out {
		if w != 0 {
			return true
		}
	}
	return false
}

// restRem is the min cost of all frames but a leaf on top (which the walk steps in place).
func (m *Matcher) restRem(stk []frame) int32 {
	if len(stk) == 0 || m.g.nodes[stk[len(stk)-1].n].kind != kLeaf {
		return 0
	}
	return m.g.remStack(stk[:len(stk)-1])
}

// walk sets the ids of trie nodes lo … hi-1 (siblings and their subtrees) that stk accepts, a
// subtree at a time: a rejected byte skips all tokens under it. While a leaf is on top its state
// changes in place (rest: the min cost of the frames below it); other steps copy the stack.
func (m *Matcher) walk(out []uint64, t *trie, lo, hi int32, stk []frame, limit int32, depth int, rest int32) {
	if len(m.bufs) <= depth {
		m.bufs = append(m.bufs, nil)
	}
	var leaf *node
	var top *frame
	if len(stk) > 0 {
		top = &stk[len(stk)-1]
		if n := &m.g.nodes[top.n]; n.kind == kLeaf {
			leaf = n
		}
	}
	for i := lo; i < hi; i = t.end[i] {
		b := t.b[i]
		if leaf != nil {
			st, a := top.st, top.a
			if ns := leaf.dfa.step(st, b); ns >= 0 && !leaf.dfa.term[ns] {
				if leaf.stepLeaf(top, int(b)) == aEat {
					if ids := t.idsAt(i); len(ids) > 0 && satAdd(rest, leaf.remLeaf(top)) <= limit {
						for _, id := range ids {
							setBit(out, id)
						}
					}
					if t.end[i] > i+1 {
						m.walk(out, t, i+1, t.end[i], stk, limit, depth+1, rest)
					}
				}
				top.st, top.a = st, a
				continue
			}
		}
		buf, ok := m.g.feed(append(m.bufs[depth][:0], stk...), int(b))
		m.bufs[depth] = buf[:0]
		if !ok {
			continue
		}
		if ids := t.idsAt(i); len(ids) > 0 && m.g.remStack(buf) <= limit {
			for _, id := range ids {
				setBit(out, id)
			}
		}
		if t.end[i] > i+1 {
			m.walk(out, t, i+1, t.end[i], buf, limit, depth+1, m.restRem(buf))
		}
	}
}

// Wide leaves (free strings, patterns) allow most of the vocabulary: their masks are computed once
// per dfa state and vocabulary. A state's tokens fall in two sets: inside (the leaf takes all
// their bytes and goes on) and exits (the leaf completes within them, so the rest depends on the
// stack below: walked every time, in a trie of their own).

// maxCached bounds the states cached per dfa and vocabulary (each holds a few bitsets of the
// vocabulary's size): a pattern under a maxLength has a state per character count, each visited
// once per generation, which the walk serves well enough.
const maxCached = 128

type leafCache struct {
	mu      sync.Mutex
	n       int
	entries []atomic.Pointer[leafEntry]
}

type leafEntry struct {
	byDist []distSet // the inside tokens, by the leaf's cost after them (remLeaf: bytes or tokens)
	exits  trie
}

type distSet struct {
	dist int32
	ids  []uint64
}

// nodeEntry returns the cached masks of wide leaf n in state st, grouped by n's costs.
func (v *Vocab) nodeEntry(n *node, st int32) *leafEntry { return v.leafEntry(n.dfa, st, n.tdist) }

// leafEntry returns the cached masks of d in state st, computing them the first time; nil once
// d has maxCached states cached. tdist is the leaf's token distances (v.wideTokenDist(d)), nil
// where it counts bytes (counted leaves): the inside tokens are grouped by the cost the leaf's
// remLeaf gives, so a dfa shared by counted and uncounted leaves has a cache of each kind.
func (v *Vocab) leafEntry(d *dfa, st int32, tdist []int32) *leafEntry {
	lc := v.leafCacheOf(d, tdist != nil)
	if e := lc.entries[st].Load(); e != nil {
		return e
	}
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if e := lc.entries[st].Load(); e != nil || lc.n >= maxCached {
		return e
	}
	dist := d.dist
	if tdist != nil {
		dist = tdist
	}
	e := v.buildLeafEntry(d, st, dist)
	lc.entries[st].Store(e)
	lc.n++
	return e
}

func (v *Vocab) leafCacheOf(d *dfa, tokens bool) *leafCache {
	m := &d.cache
	if tokens {
		m = &d.tcache
	}
	c, _ := m.Load(v)
	if c == nil {
		c, _ = m.LoadOrStore(v, &leafCache{entries: make([]atomic.Pointer[leafEntry], d.states())})
	}
	return c.(*leafCache)
}

// buildLeafEntry sorts the tokens of d in state st into exits and inside tokens, these grouped
// by dist of the state they leave (a token to a state of infinite cost is in no group).
func (v *Vocab) buildLeafEntry(d *dfa, st int32, dist []int32) *leafEntry {
	e := &leafEntry{}
	t := &v.trie
	var exits []int32
	subtree := func(i int32) {
		exits = append(exits, t.ids[t.off[i]:t.off[t.end[i]]]...)
	}
	var rec func(lo, hi, s int32)
	rec = func(lo, hi, s int32) {
		for i := lo; i < hi; i = t.end[i] {
			ns := d.step(s, t.b[i])
			switch {
			case ns < 0:
				if d.final[s] && !d.sealed {
					subtree(i)
				}
			case d.term[ns]:
				subtree(i)
			default:
				if ids := t.idsAt(i); len(ids) > 0 && dist[ns] < inf {
					set := e.distSet(dist[ns], v.MaskWords())
					for _, id := range ids {
						setBit(set, id)
					}
				}
				rec(i+1, t.end[i], ns)
			}
		}
	}
	rec(0, int32(len(t.b)), st)
	e.exits = buildTrie(v.bytes, exits)
	return e
}

func (e *leafEntry) distSet(d int32, words int) []uint64 {
	for _, s := range e.byDist {
		if s.dist == d {
			return s.ids
		}
	}
	e.byDist = append(e.byDist, distSet{d, make([]uint64, words)})
	return e.byDist[len(e.byDist)-1].ids
}

// maskLeaf masks for a wide leaf on top of the stack.
func (m *Matcher) maskLeaf(out []uint64, n *node, e *leafEntry, limit int32) {
	top := &m.stk[len(m.stk)-1]
	rest := m.g.remStack(m.stk[:len(m.stk)-1])
	worst := int32(0) // the most any inside token can leave the leaf needing
	for s := range n.dfa.states() {
		f := frame{st: int32(s), a: top.a}
		if r := n.remLeaf(&f); r < inf {
			worst = max(worst, r)
		}
	}
	left := int32(-1) // characters left under maxLength
	if n.maxCh >= 0 {
		left = n.maxCh - top.a
	}
	var from [][]uint64
	tight := satAdd(rest, worst) > limit
	switch {
	case tight && n.minCh > 0: // what a token leaves depends on its characters too
		m.insideExact(out, e, n, rest, limit)
	case left >= 0 && left < leadCap && midEscape(n.dfa, top.st):
		// The lead bytes of a token that ends an escape ("n" after "\") start no character:
		// bounding its characters by them could refuse every way on.
		m.insideExact(out, e, n, rest, limit)
	default:
		for _, s := range e.byDist {
			if !tight || satAdd(rest, s.dist) <= limit {
				from = append(from, s.ids)
			}
		}
	}
	for _, ids := range from {
		switch {
		case left >= 0 && left < leadCap:
			// lead bytes bound a token's characters from above: a sufficient test
			for i, w := range ids {
				out[i] |= w & m.v.leadLE[left][i]
			}
		default:
			for i, w := range ids {
				out[i] |= w
			}
		}
	}
	if left >= leadCap {
		for _, id := range m.v.long {
			if int32(m.v.lead[id]) > left { // only inside tokens are set so far
				out[id>>6] &^= 1 << (id & 63)
			}
		}
	}
	m.walk(out, &e.exits, 0, int32(len(e.exits.b)), m.stk, limit, 0, rest)
}

// midEscape reports whether state st of a JSON string's dfa is inside an escape: not at a
// character boundary and taking ASCII bytes (inside a UTF-8 character only continuation bytes
// come, which are no lead bytes).
func midEscape(d *dfa, st int32) bool {
	if d.bound[st] {
		return false
	}
	for b := range 0x80 {
		if d.step(st, byte(b)) >= 0 {
			return true
		}
	}
	return false
}

// insideExact steps each inside token through the leaf: near the end of the budget, where the
// state it leaves decides whether the output can still complete.
func (m *Matcher) insideExact(out []uint64, e *leafEntry, n *node, rest, limit int32) {
	top := m.stk[len(m.stk)-1]
	for _, s := range e.byDist {
		m.insideExactSet(out, s.ids, n, top, rest, limit)
	}
}

func (m *Matcher) insideExactSet(out, ids []uint64, n *node, top frame, rest, limit int32) {
	for i, w := range ids {
		for w != 0 {
			id := int32(i<<6 | bits.TrailingZeros64(w))
			w &= w - 1
			f := top
			ok := true
			for _, b := range m.v.bytes[id] {
				if n.stepLeaf(&f, int(b)) != aEat {
					ok = false
					break
				}
			}
			if ok && satAdd(rest, n.remLeaf(&f)) <= limit {
				setBit(out, id)
			}
		}
	}
}
