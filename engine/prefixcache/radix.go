package prefixcache

// radix is a radix tree over token sequences: each edge holds a run of tokens, a node the cache
// entry (if any) whose sequence ends there. The longest cached prefix of a prompt is found in one
// walk down the prompt, however many entries there are, and entries of one conversation share the
// nodes of their common prefix.
type radix struct{ root rnode }

type rnode struct {
	edge     []int          // tokens from the parent to this node
	children map[int]*rnode // by the first token of the child's edge
	parent   *rnode
	entry    *Entry // the entry whose tokens end here, or nil
}

// common is the length of the longest common prefix of a and b.
func common(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// longest returns the entry with the longest token sequence that prefixes prompt, or nil.
func (t *radix) longest(prompt []int) *Entry {
	n, rest := &t.root, prompt
	best := n.entry
	for len(rest) > 0 {
		c := n.children[rest[0]]
		if c == nil || common(c.edge, rest) < len(c.edge) {
			break
		}
		n, rest = c, rest[len(c.edge):]
		if n.entry != nil {
			best = n.entry
		}
	}
	return best
}

// find returns the node where tokens end exactly, or nil.
func (t *radix) find(tokens []int) *rnode {
	n, rest := &t.root, tokens
	for len(rest) > 0 {
		c := n.children[rest[0]]
		if c == nil || common(c.edge, rest) < len(c.edge) {
			return nil
		}
		n, rest = c, rest[len(c.edge):]
	}
	return n
}

// get returns the entry for exactly tokens, or nil.
func (t *radix) get(tokens []int) *Entry {
	if n := t.find(tokens); n != nil {
		return n.entry
	}
	return nil
}

// put attaches e to tokens' node, splitting an edge or adding a leaf as needed; it returns the
// entry it replaces, if any.
func (t *radix) put(tokens []int, e *Entry) *Entry {
	n, rest := &t.root, tokens
	for len(rest) > 0 {
		c := n.children[rest[0]]
		if c == nil {
			leaf := &rnode{edge: append([]int(nil), rest...), parent: n, entry: e}
			if n.children == nil {
				n.children = map[int]*rnode{}
			}
			n.children[rest[0]] = leaf
			return nil
		}
		k := common(c.edge, rest)
		if k < len(c.edge) { // split c's edge at k: a new node between n and c
			mid := &rnode{edge: c.edge[:k:k], parent: n, children: map[int]*rnode{c.edge[k]: c}}
			n.children[rest[0]] = mid
			c.edge, c.parent = c.edge[k:], mid
			c = mid
		}
		n, rest = c, rest[k:]
	}
	old := n.entry
	n.entry = e
	return old
}

// remove detaches the entry of exactly tokens and prunes what no entry needs any more: a leaf
// without an entry goes, and a node without an entry left with one child merges into it.
func (t *radix) remove(tokens []int) {
	n := t.find(tokens)
	if n == nil || n.entry == nil {
		return
	}
	n.entry = nil
	for n != &t.root && n.entry == nil {
		p := n.parent
		switch len(n.children) {
		case 0:
			delete(p.children, n.edge[0])
		case 1:
			for _, c := range n.children {
				c.edge = append(append([]int(nil), n.edge...), c.edge...)
				c.parent = p
				p.children[n.edge[0]] = c
			}
		default:
			return
		}
		n = p
	}
}
