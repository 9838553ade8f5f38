package draft

import "math/bits"

// sep ends one output in the shared store, so that no match and no draft runs into the next.
const sep = -1

// Chain keys: every position is indexed by the hash of the shortKey-gram (the shortest match
// that drafts) and of the longKey-gram ending there. The long chain finds long matches in a
// long text even when the short n-gram is common (a probe limit on the short chain alone would
// see only its newest occurrences); the short chain serves the matches shorter than longKey.
const longKey = 8

// index is a window of a token stream with hash chains over its n-grams, as an LZ77 matcher
// keeps them: a chain's head[h] is the newest position whose n-gram hashes to h, and prev[slot]
// the next older one in that bucket. Collisions only add candidates: every match is confirmed
// against the tokens, so the chains are hints and keep no keys. Everything is bounded by the
// window: the token ring and prev arrays hold at most cap positions, each head at most cap
// buckets, 20 bytes a position in all.
//
// Nothing is ever rebuilt or copied, since a stall of milliseconds would hold up the engine
// loop: the ring fills page by page, and the heads are sized once. A text that outgrows its
// heads gets chains with more unrelated positions, which the probe limit keeps cheap and the
// confirmation harmless.
type index struct {
	tok    [][]int32 // the ring in pages: position p at slot p&mask, allocated as it fills
	mask   int64     // cap-1; cap is a power of two
	shift  uint      // log2 of a page's length
	n      int64     // tokens added over the stream's life
	chains [2]chain
}

type chain struct {
	k    int        // n-gram length
	bits int        // log2 len(head)
	head []uint32   // bucket → newest position+1, low 32 bits (0: none)
	prev [][]uint32 // slot → the bucket's previous position+1, paged as tok
}

// pageLen is the ring's allocation unit (48 kB with the chains' links).
const pageLen = 4096

// newIndex returns an index keeping the last capTokens tokens (rounded up to a power of two)
// with buckets hash buckets a chain (rounded up to a power of two, at most the window).
func newIndex(capTokens, shortKey, buckets int) *index {
	c := pow2(max(capTokens, 256))
	page := min(c, pageLen)
	x := &index{mask: int64(c - 1), shift: uint(bits.Len(uint(page)) - 1)}
	x.tok = make([][]int32, c/page)
	size := min(pow2(max(buckets, 256)), c)
	for i, k := range [2]int{longKey, shortKey} {
		x.chains[i] = chain{k: k, bits: bits.Len(uint(size)) - 1,
			head: make([]uint32, size), prev: make([][]uint32, len(x.tok))}
	}
	return x
}

func pow2(v int) int { return 1 << bits.Len(uint(v-1)) }

// lo is the oldest position still in the window.
func (x *index) lo() int64 { return max(0, x.n-x.mask-1) }

// slot returns the page and offset of position p.
func (x *index) slot(p int64) (int64, int64) {
	s := p & x.mask
	return s >> x.shift, s & (1<<x.shift - 1)
}

func (x *index) at(p int64) int32 {
	pg, o := x.slot(p)
	return x.tok[pg][o]
}

// add appends t in O(1).
func (x *index) add(t int32) {
	p := x.n
	pg, o := x.slot(p)
	if x.tok[pg] == nil { // the ring is still filling
		page := 1 << x.shift
		x.tok[pg] = make([]int32, page)
		for i := range x.chains {
			x.chains[i].prev[pg] = make([]uint32, page)
		}
	}
	x.tok[pg][o] = t
	x.n++
	for i := range x.chains {
		x.insert(&x.chains[i], p)
	}
}

// insert links position p into c if its n-gram lies inside the window.
func (x *index) insert(c *chain, p int64) {
	if p-int64(c.k)+1 < x.lo() {
		return
	}
	b := x.hash(c.k, p) >> (64 - c.bits)
	pg, o := x.slot(p)
	c.prev[pg][o] = c.head[b]
	c.head[b] = uint32(p + 1)
}

// next is the link from position p in c.
func (x *index) next(c *chain, p int64) uint32 {
	pg, o := x.slot(p)
	return c.prev[pg][o]
}

// hash mixes the k tokens ending at p (all inside the window).
func (x *index) hash(k int, p int64) uint64 {
	var h uint64
	for q := p - int64(k) + 1; q <= p; q++ {
		h = (h ^ uint64(uint32(x.at(q)))) * 0x9e3779b97f4a7c15
	}
	return h
}

// bytes is the memory the index holds: pages, heads, the page tables and the structure.
func (x *index) bytes() int64 {
	pages := 0
	for _, t := range x.tok {
		if t != nil {
			pages++
		}
	}
	n := int64(pages<<x.shift)*12 + int64(len(x.tok))*3*24 + 160
	for _, c := range x.chains {
		n += int64(len(c.head)) * 4
	}
	return n
}

// maxMatch is the longest match compared: beyond it a longer match adds little evidence, and
// the comparison bounds a draft's cost.
const maxMatch = 32

// maxProbes is how many positions a lookup examines per chain, which bounds its cost on
// repetitive text (newest first, so the recent occurrences are the ones seen).
const maxProbes = 32

// match is a candidate: the position of its last token and how many tokens it shares with the
// query's end.
type match struct {
	pos int64
	n   int
}

// longest finds the newest of the longest matches in c (up to maxMatch tokens, at least
// minLen) of the tokens ending at q's position qp: at a position before `before` and followed
// by a token of its own. pos is -1 if none.
func longest(q *index, qp int64, c *index, before int64, minLen int) match {
	best := match{pos: -1}
	for i := range c.chains { // long chain first: a match it finds beats any of the short one's
		ch := &c.chains[i]
		if best.n >= ch.k || qp-int64(ch.k)+1 < q.lo() || (i > 0 && minLen > longKey) {
			continue // (a match longer than longKey is on the long chain)
		}
		b := q.hash(ch.k, qp) >> (64 - ch.bits)
		best = c.walk(ch, b, q, qp, before, max(minLen, ch.k), best)
	}
	return best
}

// walk examines bucket b of ch newest first, keeping matches of at least need tokens longer
// than best.
func (c *index) walk(ch *chain, b uint64, q *index, qp, before int64, need int, best match) match {
	c.candidates(ch, b, before, func(p int64) bool {
		if n := matchLen(q, qp, c, p); n >= need && n > best.n {
			best = match{p, n}
		}
		return best.n < maxMatch
	})
	return best
}

// candidates calls f with the positions of bucket b of ch, newest first, that are before
// `before` and followed by a token of their own, until f returns false or the probes run out. A
// position outside the window or not older than the last one ends the walk: the link came from
// a slot the ring has since reused.
func (c *index) candidates(ch *chain, b uint64, before int64, f func(p int64) bool) {
	last, lo, newer := c.n-1, c.lo(), c.n
	for v, probes := ch.head[b], 0; v != 0 && probes < maxProbes; probes++ {
		p := last - int64(uint32(last+1)-v)
		if p < lo || p >= newer {
			return
		}
		newer, v = p, c.next(ch, p)
		if p < before && c.at(p+1) != sep && !f(p) {
			return
		}
	}
}

// matchLen counts the tokens equal going back from q's qp and c's cp, inside both windows.
func matchLen(q *index, qp int64, c *index, cp int64) int {
	qlo, clo := q.lo(), c.lo()
	n := 0
	for n < maxMatch && qp-int64(n) >= qlo && cp-int64(n) >= clo {
		t := c.at(cp - int64(n))
		if t == sep || t != q.at(qp-int64(n)) {
			break
		}
		n++
	}
	return n
}

// follow returns up to k tokens after position p, stopping at the end of the stream or of an
// output.
func (c *index) follow(p int64, k int) []int {
	out := make([]int, 0, k)
	for q := p + 1; q < c.n && len(out) < k; q++ {
		t := c.at(q)
		if t == sep {
			break
		}
		out = append(out, int(t))
	}
	return out
}

// agreement counts the occurrences of the context m matched — the positions before `before`
// whose tokens match q's end at qp for min(m.n, longKey) tokens, as far as a chain's probes
// reach — and how many of them go on with the token m goes on with (at least 1 of 1: m's own).
func agreement(q *index, qp int64, c *index, before int64, m match) (seen, same int) {
	need := min(m.n, longKey)
	ch := &c.chains[1]
	if need == longKey {
		ch = &c.chains[0]
	}
	if need < ch.k || qp-int64(ch.k)+1 < q.lo() {
		return 1, 1
	}
	next := c.at(m.pos + 1)
	c.candidates(ch, q.hash(ch.k, qp)>>(64-ch.bits), before, func(p int64) bool {
		if matchLen(q, qp, c, p) >= need {
			seen++
			if c.at(p+1) == next {
				same++
			}
		}
		return true
	})
	return max(seen, 1), max(same, 1)
}
