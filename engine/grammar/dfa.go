package grammar

import (
	"errors"
	"slices"
	"strconv"
	"sync"
)

// dfa is a deterministic automaton over bytes. Leaves of a grammar (strings, literals, enums)
// and the key tables of objects are dfas; a frame on the matcher's stack holds its state.
type dfa struct {
	cls   [256]uint8 // byte → class: bytes no state tells apart share a column
	ncls  int
	next  []int32 // state*ncls + class → state, -1 for none
	final []bool
	term  []bool // final with no way on: the leaf is complete the moment it gets here
	// Character counting, for strings whose length limits are checked at run time: a byte
	// leaving a bound state into a content state starts a character.
	bound, content []bool
	mark           []int32  // per state: what a final state stands for (an object entry), else -1
	dist           []int32  // min bytes from a state to a final one
	depth          []int32  // tries: bytes from the start
	sealed         bool     // never ends on a byte, only before an added token (free text)
	wide           bool     // some state allows many bytes: masks are worth caching per state
	shared         bool     // a leaf of many grammars (free strings, raw values)
	cache          sync.Map // *Vocab → *leafCache: masks by byte distances (counted leaves, or no token distances)
	tcache         sync.Map // *Vocab → *leafCache: masks by token distances (uncounted leaves)
	tdists         sync.Map // *Vocab → *wideDist: a wide dfa's token distances
}

const inf = int32(1 << 28)

func (d *dfa) states() int { return len(d.final) }

func (d *dfa) step(s int32, b byte) int32 { return d.next[int(s)*d.ncls+int(d.cls[b])] }

// dtable is a dfa under construction: a full 256-column table.
type dtable struct {
	next  [][256]int32
	final []bool
	tag   []uint8
	mark  []int32
}

const (
	tagOther uint8 = iota
	tagBound
	tagInside
)

func (t *dtable) add(final bool, tag uint8, mark int32) int32 {
	row := [256]int32{}
	for i := range row {
		row[i] = -1
	}
	t.next = append(t.next, row)
	t.final = append(t.final, final)
	t.tag = append(t.tag, tag)
	t.mark = append(t.mark, mark)
	return int32(len(t.next) - 1)
}

// build trims the states that cannot reach a final one (so a mask never lets a token walk into
// a dead end) and compresses the columns into byte classes. State 0 is the start.
func (t *dtable) build() (*dfa, error) {
	n := len(t.next)
	dist := make([]int32, n)
	for i := range dist {
		dist[i] = inf
	}
	// Reverse breadth-first search from the finals.
	rev := make([][]int32, n)
	for s := range t.next {
		for _, to := range t.next[s] {
			if to >= 0 && (len(rev[to]) == 0 || rev[to][len(rev[to])-1] != int32(s)) {
				rev[to] = append(rev[to], int32(s))
			}
		}
	}
	var q []int32
	for s, f := range t.final {
		if f {
			dist[s] = 0
			q = append(q, int32(s))
		}
	}
	for len(q) > 0 {
		s := q[0]
		q = q[1:]
		for _, p := range rev[s] {
			if dist[p] == inf {
				dist[p] = dist[s] + 1
				q = append(q, p)
			}
		}
	}
	if n == 0 || dist[0] == inf {
		return nil, errors.New("admits no value")
	}
	// Renumber the live states reachable from the start.
	id := make([]int32, n)
	for i := range id {
		id[i] = -1
	}
	order := []int32{0}
	id[0] = 0
	for i := 0; i < len(order); i++ {
		for _, to := range t.next[order[i]] {
			if to >= 0 && dist[to] < inf && id[to] < 0 {
				id[to] = int32(len(order))
				order = append(order, to)
			}
		}
	}
	d := &dfa{}
	cols := map[string]uint8{}
	var key []byte
	for b := range 256 {
		key = key[:0]
		for _, s := range order {
			to := t.next[s][b]
			if to >= 0 {
				to = id[to]
			}
			key = strconv.AppendInt(key, int64(to), 36)
			key = append(key, ',')
		}
		c, ok := cols[string(key)]
		if !ok {
			c = uint8(len(cols))
			cols[string(key)] = c
		}
		d.cls[b] = c
	}
	d.ncls = len(cols)
	m := len(order)
	d.next = make([]int32, m*d.ncls)
	d.final, d.term, d.mark, d.dist = make([]bool, m), make([]bool, m), make([]int32, m), make([]int32, m)
	d.bound, d.content = make([]bool, m), make([]bool, m)
	for i, s := range order {
		ways := 0
		for b := range 256 {
			to := t.next[s][b]
			if to >= 0 {
				to = id[to]
			}
			if to >= 0 {
				ways++
			}
			d.next[i*d.ncls+int(d.cls[b])] = to
		}
		d.final[i], d.term[i], d.mark[i], d.dist[i] = t.final[s], t.final[s] && ways == 0, t.mark[s], dist[s]
		d.bound[i], d.content[i] = t.tag[s] == tagBound, t.tag[s] != tagOther
		if ways >= 16 {
			d.wide = true
		}
	}
	return d, nil
}

// wordsDFA is a trie of words: the final state of word i is marked i. space[i] lets one optional
// ' ' follow word i (the whitespace after ':' and ','). Words must be distinct.
func wordsDFA(words []string, space []bool) (*dfa, error) {
	t := &dtable{}
	t.add(false, tagOther, -1)
	depth := []int32{0}
	for i, w := range words {
		s := int32(0)
		for j := 0; j < len(w); j++ {
			to := t.next[s][w[j]]
			if to < 0 {
				to = t.add(false, tagOther, -1)
				depth = append(depth, depth[s]+1)
				t.next[s][w[j]] = to
			}
			s = to
		}
		if t.final[s] {
			return nil, errors.New("duplicate word " + strconv.Quote(w))
		}
		t.final[s], t.mark[s] = true, int32(i)
		if space != nil && space[i] {
			if t.next[s][' '] >= 0 {
				return nil, errors.New("word " + strconv.Quote(w) + " is followed by both a space and more")
			}
			sp := t.add(true, tagOther, int32(i))
			depth = append(depth, depth[s]+1)
			t.next[s][' '] = sp
		}
	}
	d, err := t.build()
	if err != nil {
		return nil, err
	}
	// A trie's states are all live and numbered breadth first from 0: recover each one's depth
	// by walking the words again.
	d.depth = make([]int32, d.states())
	for _, w := range words {
		s := int32(0)
		for j := 0; j < len(w); j++ {
			s = d.step(s, w[j])
			d.depth[s] = int32(j + 1)
		}
		if sp := d.step(s, ' '); sp >= 0 && d.final[sp] && d.mark[sp] == d.mark[s] {
			d.depth[sp] = int32(len(w) + 1)
		}
	}
	return d, nil
}

// litDFA accepts exactly s.
func litDFA(s string) *dfa {
	d, err := wordsDFA([]string{s}, nil)
	if err != nil {
		panic(err)
	}
	return d
}

// distK returns dist[j][s]: the min bytes from s to a final state starting at least j more
// characters, for j ≤ k (the run-time minLength of a free string).
func (d *dfa) distK(k int) [][]int32 {
	rows := [][]int32{d.dist}
	for j := 1; j <= k; j++ {
		row := make([]int32, d.states())
		for i := range row {
			row[i] = inf
		}
		// Bellman-Ford: a counting byte drops to row j-1, any other stays in row j; every cycle
		// counts, so this settles within the number of states.
		for changed := true; changed; {
			changed = false
			for s := range row {
				for c := range d.ncls {
					to := d.next[s*d.ncls+c]
					if to < 0 {
						continue
					}
					var v int32
					if d.bound[s] && d.content[to] {
						v = rows[j-1][to]
					} else {
						v = row[to]
					}
					if v+1 < row[s] {
						row[s], changed = v+1, true
					}
				}
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// bnfa is a nondeterministic automaton over bytes without ε moves; determinize turns it into a
// dfa. Strings are built this way: a char-level automaton, each character spelled as its UTF-8
// bytes or JSON escapes.
type bnfa struct {
	edges [][]bedge
	final []bool
	tag   []uint8
}

type bedge struct {
	lo, hi byte
	to     int32
}

func (a *bnfa) add(tag uint8) int32 {
	a.edges = append(a.edges, nil)
	a.final = append(a.final, false)
	a.tag = append(a.tag, tag)
	return int32(len(a.edges) - 1)
}

func (a *bnfa) edge(from int32, lo, hi byte, to int32) {
	a.edges[from] = append(a.edges[from], bedge{lo, hi, to})
}

// path adds states spelling the byte ranges seq from from to to; the inner states get tag.
func (a *bnfa) path(from int32, seq [][2]byte, to int32, tag uint8) {
	for i, r := range seq {
		next := to
		if i < len(seq)-1 {
			next = a.add(tag)
		}
		a.edge(from, r[0], r[1], next)
		from = next
	}
}

const maxDFAStates = 20000

// determinize runs the subset construction from start.
func (a *bnfa) determinize(start int32) (*dfa, error) {
	t := &dtable{}
	ids := map[string]int32{}
	var sets [][]int32
	keyOf := func(set []int32) string {
		b := make([]byte, 0, 4*len(set))
		for _, s := range set {
			b = append(b, byte(s), byte(s>>8), byte(s>>16), byte(s>>24))
		}
		return string(b)
	}
	intern := func(set []int32) (int32, error) {
		k := keyOf(set)
		if id, ok := ids[k]; ok {
			return id, nil
		}
		if len(sets) >= maxDFAStates {
			return 0, errors.New("is too complex (more than 20000 automaton states)")
		}
		final, tag := false, a.tag[set[0]]
		for _, s := range set {
			final = final || a.final[s]
			if a.tag[s] != tag {
				tag = tagInside // mixed: count nothing here
			}
		}
		id := t.add(final, tag, -1)
		ids[k] = id
		sets = append(sets, set)
		return id, nil
	}
	if _, err := intern([]int32{start}); err != nil {
		return nil, err
	}
	var targets [256][]int32
	for i := 0; i < len(sets); i++ {
		for b := range targets {
			targets[b] = targets[b][:0]
		}
		for _, s := range sets[i] {
			for _, e := range a.edges[s] {
				for b := int(e.lo); b <= int(e.hi); b++ {
					targets[b] = append(targets[b], e.to)
				}
			}
		}
		for b := range targets {
			if len(targets[b]) == 0 {
				continue
			}
			set := slices.Compact(slices.Sorted(slices.Values(targets[b])))
			id, err := intern(slices.Clone(set))
			if err != nil {
				return nil, err
			}
			t.next[i][b] = id
		}
	}
	return t.build()
}
