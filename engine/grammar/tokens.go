package grammar

import "slices"

// Token costs. A compiled grammar counts bytes: the fewest bytes that complete each piece. The
// termination guarantee (see the package doc) only needs a cost f of the stack, summed over its
// frames, such that f = 0 exactly when the output is complete and from any other state some token
// lowers f by at least one. Bytes satisfy that in a byte-level vocabulary (every byte is a token),
// but overstate the need several times: "<parameter=" is 11 bytes and 3 Qwen tokens. forVocab
// counts in a vocabulary's tokens where a piece's texts are few, keeping the structure:
//
//   - narrow leaves (literals, enums, punctuation, formats of few bytes per state): tdist[s], the
//     fewest tokens from state s to a final one, a token stepping s to s' when the dfa takes all
//     its bytes and passes no term state before its last (a term state pops the leaf, so the rest
//     of the token would go to the frames below);
//   - object entries (JSON keys, tool and parameter tags): the fewest tokens that write the rest
//     of the entry's text;
//   - derived costs (sequences, lists, objects, choices) are recomputed from those.
//
// Wide leaves (free strings, raw values, patterns) and counted leaves keep their byte distances:
// their masks are cached per state grouped by those (buildLeafEntry), and each byte is a token of
// a byte-level vocabulary. Numbers count bytes (Qwen writes digits one per token), added tokens 1.
// Each piece is counted on its own, so a token spanning two pieces ("\"," or ">\n<") is not
// credited: the cost bounds the shortest output from above and is exact within a piece.

// maxTokenWalk bounds the trie nodes a view visits to count its leaves' tokens (~25 ms): past it
// (narrow dfas of thousands of states, such as bounded repetitions) the leaves left count bytes,
// as wide ones do.
const maxTokenWalk = 1 << 22

// forVocab returns g with its costs in tokens of v, built once per vocabulary and kept in g.
func (g *Grammar) forVocab(v *Vocab) *Grammar {
	if g.vocab == v {
		return g
	}
	if g.base != nil {
		return g.base.forVocab(v)
	}
	if w, ok := g.views.Load(v); ok {
		return w.(*Grammar)
	}
	w := &Grammar{nodes: slices.Clone(g.nodes), root: g.root, specials: g.specials, base: g, vocab: v}
	dists := map[*dfa][]int32{} // leaves may share a dfa
	work := maxTokenWalk
	for i := range w.nodes {
		n := &w.nodes[i]
		switch {
		case n.kind == kLeaf && !n.dfa.wide && !n.counted():
			d, ok := dists[n.dfa]
			if !ok {
				d = v.tokenDist(n.dfa, &work)
				dists[n.dfa] = d
			}
			n.tdist = d // nil past maxTokenWalk: bytes
		case n.kind == kObject:
			n.entryTok = make([][]int32, len(n.texts))
			for e, s := range n.texts {
				n.entryTok[e] = v.textCost(s)
			}
		}
	}
	w.minLengths() // allocates the copy's own after slices
	got, _ := g.views.LoadOrStore(v, w)
	return got.(*Grammar)
}

// tokenDist returns the fewest tokens of v from each state of d to a final one (inf where none),
// or nil when that takes more than *work trie steps (taken off *work).
func (v *Vocab) tokenDist(d *dfa, work *int) []int32 {
	if *work < 0 {
		return nil
	}
	n := d.states()
	t := &v.trie
	rev := make([][]int32, n) // rev[s']: the states with a token to s'
	seen := make([]int32, n)  // seen[s'] = s+1 once s → s' is in rev
	var from int32
	var walk func(lo, hi, s int32)
	walk = func(lo, hi, s int32) {
		for i := lo; i < hi; i = t.end[i] {
			to := d.step(s, t.b[i])
			if to < 0 {
				continue
			}
			*work--
			if t.off[i+1] > t.off[i] && seen[to] != from+1 {
				seen[to] = from + 1
				rev[to] = append(rev[to], from)
			}
			if !d.term[to] && t.end[i] > i+1 {
				walk(i+1, t.end[i], to)
			}
		}
	}
	dist := make([]int32, n)
	var q []int32
	for s := range n {
		if d.final[s] { // 0 whatever follows
			q = append(q, int32(s))
			continue
		}
		dist[s] = inf
		from = int32(s)
		walk(0, int32(len(t.b)), from)
		if *work < 0 {
			return nil
		}
	}
	for len(q) > 0 { // breadth first from the finals, backwards along tokens
		s := q[0]
		q = q[1:]
		for _, p := range rev[s] {
			if dist[p] == inf {
				dist[p] = dist[s] + 1
				q = append(q, p)
			}
		}
	}
	return dist
}

// textCost returns c[k], the fewest tokens of v that write w[k:] (inf where none), for
// k = 0 … len(w).
func (v *Vocab) textCost(w string) []int32 {
	c := make([]int32, len(w)+1)
	t := &v.trie
	for k := len(w) - 1; k >= 0; k-- {
		c[k] = inf
		lo, hi := int32(0), int32(len(t.b))
		for j := k; j < len(w); j++ { // the tokens that are prefixes of w[k:]
			i := lo
			for i < hi && t.b[i] != w[j] {
				i = t.end[i]
			}
			if i >= hi {
				break
			}
			if t.off[i+1] > t.off[i] {
				c[k] = min(c[k], satAdd(1, c[j+1]))
			}
			lo, hi = i+1, t.end[i]
		}
	}
	return c
}
