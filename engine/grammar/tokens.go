package grammar

import (
	"slices"
	"sync"
)

// Token costs. A compiled grammar counts bytes: the fewest bytes that complete each piece. The
// termination guarantee (see the package doc) only needs a cost f of the stack, summed over its
// frames, such that f = 0 exactly when the output is complete and from any other state some token
// lowers f by at least one. Bytes satisfy that in a byte-level vocabulary (every byte is a token),
// but overstate the need several times: "<parameter=" is 11 bytes and 3 Qwen tokens. forVocab
// counts in a vocabulary's tokens, keeping the structure:
//
//   - uncounted leaves: tdist[s], the fewest tokens from dfa state s to a final one, a token
//     stepping s to s' when the dfa takes all its bytes and passes no term state before its last
//     (a term state pops the leaf, so the rest of the token would go to the frames below). Narrow
//     leaves (literals, enums, punctuation, formats of few bytes per state) are walked per view;
//     wide ones (free strings, raw values and their end tag "\n</parameter>", patterns) once per
//     dfa and vocabulary (wideTokenDist), since free strings and raw values share their dfa
//     across grammars. Their masks are cached per state grouped by those distances
//     (buildLeafEntry), so the tight masks compare the costs remLeaf gives;
//   - object entries (JSON keys, tool and parameter tags): the fewest tokens that write the rest
//     of the entry's text;
//   - derived costs (sequences, lists, objects, choices) are recomputed from those.
//
// Counted leaves (free strings under min/maxLength, whose characters are counted at run time)
// keep their byte distances, dist[j][s], and masks grouped by bytes: a dfa shared by counted and
// uncounted leaves has a mask cache of each kind. Numbers count bytes (Qwen writes digits one
// per token), added tokens 1; so do leaves past maxTokenWalk or maxWideWalk. Each piece is
// counted on its own, so a token spanning two pieces ("\"," or ">\n<") is not credited: the cost
// bounds the shortest output from above and is exact within a piece.

// maxTokenWalk bounds the trie nodes a view visits to count its leaves' tokens (~25 ms): past it
// (narrow dfas of thousands of states, such as bounded repetitions) the leaves left count bytes,
// as wide ones do.
const maxTokenWalk = 1 << 22

// maxWideWalk bounds the trie steps of the token distances of a view's own wide dfas (patterns,
// ~100 ms) and, apart, those of each shared one (free strings, raw values, ~5 ms each): past it
// (such as a pattern under a maxLength, with a wide state per character count) a dfa counts
// bytes in that vocabulary.
const maxWideWalk = 1 << 23

type wideDist struct {
	once sync.Once
	dist []int32
}

// wideTokenDist returns the token distances of wide dfa d in v (tokenDist), computed once per
// dfa and vocabulary, taking the steps off *work (a shared dfa has its own maxWideWalk): wide
// dfas are shared by grammars, or leaves of one grammar (patterns), and their walks cover much
// of the vocabulary. Nil past the bound.
func (v *Vocab) wideTokenDist(d *dfa, work *int) []int32 {
	x, ok := d.tdists.Load(v)
	if !ok {
		x, _ = d.tdists.LoadOrStore(v, &wideDist{})
	}
	w := x.(*wideDist)
	w.once.Do(func() {
		if d.shared {
			own := maxWideWalk
			work = &own
		}
		w.dist = v.tokenDist(d, work)
	})
	return w.dist
}

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
	work, wide := maxTokenWalk, maxWideWalk
	for i := range w.nodes {
		n := &w.nodes[i]
		switch {
		case n.kind == kLeaf && n.dfa.wide && !n.counted():
			n.tdist = v.wideTokenDist(n.dfa, &wide) // nil past maxWideWalk: bytes
		case n.kind == kLeaf && !n.counted():
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
// or nil when that takes more than *work trie steps (taken off *work). A token steps a state
// when d takes all its bytes and passes no term state before its last. Tokens are walked by
// their first byte: the states that the tokens under a first byte reach from the state q that
// byte leads to are the same whichever state led there, so each (first byte, q) is walked once
// (in a wide dfa most states lead to a few q: ~2 walks of the vocabulary instead of one a state).
func (v *Vocab) tokenDist(d *dfa, work *int) []int32 {
	if *work < 0 {
		return nil
	}
	n := d.states()
	t := &v.trie
	type at struct{ i, q int32 }
	memo := map[at]int32{}
	var reach [][]int32 // reach[k]: the states the tokens of walk k end in
	var users [][]int32 // users[k]: the states whose tokens walk k covers
	w := &distWalk{d: d, t: t, stamp: make([]int32, n)}
	for s := range n {
		if d.final[s] { // 0 whatever follows
			continue
		}
		row := d.next[s*d.ncls : (s+1)*d.ncls]
		for i := int32(0); i < int32(len(t.b)); i = t.end[i] {
			q := row[d.cls[t.b[i]]]
			if q < 0 {
				continue
			}
			k, ok := memo[at{i, q}]
			if !ok {
				k = int32(len(reach))
				memo[at{i, q}] = k
				w.k1, w.cur = k+1, nil
				w.note(i, q)
				if !d.term[q] && t.end[i] > i+1 {
					w.walk(i+1, t.end[i], q)
				}
				reach, users = append(reach, w.cur), append(users, nil)
				if *work -= w.steps; *work < 0 {
					return nil
				}
				w.steps = 0
			}
			users[k] = append(users[k], int32(s))
		}
	}
	in := make([][]int32, n) // in[s']: the walks that reach s'
	for k, r := range reach {
		for _, s := range r {
			in[s] = append(in[s], int32(k))
		}
	}
	dist := make([]int32, n)
	var q []int32
	for s := range n {
		if d.final[s] {
			q = append(q, int32(s))
		} else {
			dist[s] = inf
		}
	}
	used := make([]bool, len(reach))
	for len(q) > 0 { // breadth first from the finals, backwards along tokens
		s := q[0]
		q = q[1:]
		for _, k := range in[s] {
			if used[k] {
				continue
			}
			used[k] = true
			for _, p := range users[k] {
				if dist[p] == inf {
					dist[p] = dist[s] + 1
					q = append(q, p)
				}
			}
		}
	}
	return dist
}

// distWalk collects the states that the tokens of a trie subtree end in.
type distWalk struct {
	d     *dfa
	t     *trie
	stamp []int32 // stamp[s] = k1 once s is in cur
	k1    int32
	cur   []int32
	steps int
}

func (w *distWalk) note(i, to int32) {
	w.steps++
	if w.t.off[i+1] > w.t.off[i] && w.stamp[to] != w.k1 {
		w.stamp[to] = w.k1
		w.cur = append(w.cur, to)
	}
}

// walk visits trie nodes lo … hi-1 and their subtrees from state s, stopping at term states.
func (w *distWalk) walk(lo, hi, s int32) {
	d, t := w.d, w.t
	row := d.next[int(s)*d.ncls : int(s+1)*d.ncls]
	for i := lo; i < hi; i = t.end[i] {
		to := row[d.cls[t.b[i]]]
		if to < 0 {
			continue
		}
		w.note(i, to)
		if e := t.end[i]; e > i+1 && !d.term[to] {
			w.walk(i+1, e, to)
		}
	}
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
