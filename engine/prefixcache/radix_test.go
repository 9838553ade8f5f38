package prefixcache

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRadixMatchesScan: over random inserts and removals of sequences that share prefixes, the
// tree's longest-prefix lookup and exact get agree with a scan of the live entries, and removing
// everything leaves an empty root.
func TestRadixMatchesScan(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var tr radix
	live := map[*Entry]bool{}
	seq := func() []int {
		// three-token alphabet and a common stem: many shared prefixes, splits and merges
		s := []int{7, 7}
		for range r.IntN(8) {
			s = append(s, r.IntN(3))
		}
		return s
	}
	scan := func(prompt []int) *Entry {
		var best *Entry
		for e := range live {
			if len(e.Tokens) <= len(prompt) && slices.Equal(e.Tokens, prompt[:len(e.Tokens)]) && (best == nil || len(e.Tokens) > len(best.Tokens)) {
				best = e
			}
		}
		return best
	}
	for step := range 20000 {
		s := seq()
		switch r.IntN(3) {
		case 0, 1:
			e := &Entry{Tokens: s}
			if old := tr.put(s, e); old != nil {
				delete(live, old)
			}
			live[e] = true
		case 2:
			if e := tr.get(s); e != nil {
				tr.remove(s)
				delete(live, e)
			}
		}
		p := seq()
		if got, want := tr.longest(p), scan(p); got != want {
			t.Fatalf("step %d: longest(%v) = %v, scan %v", step, p, got, want)
		}
	}
	for e := range live {
		if tr.get(e.Tokens) != e {
			t.Fatalf("entry %v not found", e.Tokens)
		}
		tr.remove(e.Tokens)
	}
	if len(tr.root.children) != 0 || tr.root.entry != nil {
		t.Fatalf("root after removing every entry: %d children", len(tr.root.children))
	}
	if tr.longest([]int{7, 7, 1}) != nil {
		t.Fatal("a lookup in an empty tree found something")
	}
}

// TestRadixCompact: no node without an entry has fewer than two children (every split is needed),
// so the tree has at most twice as many nodes as entries.
func TestRadixCompact(t *testing.T) {
	var tr radix
	for _, s := range [][]int{{1, 2, 3, 4}, {1, 2, 3, 5}, {1, 2}, {1, 2, 3, 4, 6}, {9}} {
		tr.put(s, &Entry{Tokens: s})
	}
	tr.remove([]int{1, 2, 3, 5}) // {1,2,3} is left with one child: it merges into {4}
	var walk func(n *rnode, depth int)
	nodes := 0
	walk = func(n *rnode, depth int) {
		nodes++
		if n != &tr.root && n.entry == nil && len(n.children) < 2 {
			t.Errorf("node at depth %d (edge %v) has no entry and %d children", depth, n.edge, len(n.children))
		}
		for _, c := range n.children {
			if c.parent != n {
				t.Errorf("edge %v: wrong parent", c.edge)
			}
			walk(c, depth+len(c.edge))
		}
	}
	walk(&tr.root, 0)
	if nodes != 5 { // root, {1,2}, {3,4}, {6}, {9}
		t.Fatalf("%d nodes, want 5", nodes)
	}
	if e := tr.longest([]int{1, 2, 3, 4, 6, 0}); e == nil || !slices.Equal(e.Tokens, []int{1, 2, 3, 4, 6}) {
		t.Fatalf("longest: %v", e)
	}
}
