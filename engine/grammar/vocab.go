package grammar

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/lilyformac/lily/engine/tokenizer"
)

// Vocab is a tokenizer's vocabulary indexed for mask computation: the plain tokens in a trie laid
// out depth first, the added tokens (special or not) by their text. It is built once per tokenizer,
// read-only afterwards and safe for concurrent use.
type Vocab struct {
	size    int // mask bits: one per id, 0 … size-1
	bytes   [][]byte
	trie    trie
	eos     []int
	added   map[string]int // added token text → id: never allowed by their bytes
	isAdded []bool
	lead    []uint8    // per id: bytes that start a character (an upper bound on its characters)
	leadLE  [][]uint64 // leadLE[k]: plain tokens with lead ≤ k, for k < leadCap
	long    []int32    // plain tokens with lead ≥ leadCap
}

const leadCap = 16

// trie holds byte strings depth first: node i has byte b[i], its subtree is i … end[i]-1 and its
// ids are ids[off[i]:off[i+1]]. Walking it visits each kept prefix once and skips a rejected
// prefix's whole subtree in one step.
type trie struct {
	b   []byte
	end []int32
	off []int32
	ids []int32
}

// NewVocab indexes a vocabulary: tokens[id] is the bytes of id (nil where undefined), added[id]
// marks added tokens (special or not, such as <|im_end|> or <tool_call>), which a mask allows only
// where the grammar names them, and eos are the ids that end the generation. The mask covers
// len(tokens) ids: pass one entry per logit row.
func NewVocab(tokens [][]byte, added []bool, eos []int) (*Vocab, error) {
	v := &Vocab{size: len(tokens), bytes: tokens, added: map[string]int{}, isAdded: make([]bool, len(tokens)),
		lead: make([]uint8, len(tokens))}
	for _, id := range eos {
		if id < 0 || id >= len(tokens) || tokens[id] == nil {
			return nil, fmt.Errorf("grammar: EOS id %d is not in the vocabulary", id)
		}
	}
	v.eos = slices.Clone(eos)
	var plain []int32
	for id, b := range tokens {
		switch {
		case b == nil:
		case id < len(added) && added[id]:
			v.isAdded[id] = true
			if _, dup := v.added[string(b)]; !dup {
				v.added[string(b)] = id
			}
		case len(b) > 0:
			plain = append(plain, int32(id))
			v.lead[id] = uint8(min(255, leadBytes(b)))
		}
	}
	for _, id := range eos {
		v.isAdded[id] = true // an EOS is never a plain token, whatever its bytes
	}
	plain = slices.DeleteFunc(plain, func(id int32) bool { return v.isAdded[id] })
	v.trie = buildTrie(tokens, plain)
	v.indexLead(plain)
	return v, nil
}

// VocabFromTokenizer indexes t's vocabulary with eos as the ids that end generation; size is the
// number of logit rows (at least t.VocabSize(); rows past it are never allowed).
func VocabFromTokenizer(t *tokenizer.Tokenizer, size int, eos []int) (*Vocab, error) {
	size = max(size, t.VocabSize())
	tokens, added := make([][]byte, size), make([]bool, size)
	for id := range t.VocabSize() {
		if b, ok := t.TokenBytes(id); ok {
			tokens[id], added[id] = b, t.IsAdded(id)
		}
	}
	return NewVocab(tokens, added, eos)
}

// Size is the number of ids a mask covers.
func (v *Vocab) Size() int { return v.size }

// MaskWords is the length of the []uint64 a mask needs.
func (v *Vocab) MaskWords() int { return (v.size + 63) / 64 }

func leadBytes(b []byte) int {
	n := 0
	for _, c := range b {
		if c&0xC0 != 0x80 {
			n++
		}
	}
	return n
}

func (v *Vocab) indexLead(plain []int32) {
	v.leadLE = make([][]uint64, leadCap)
	for k := range v.leadLE {
		v.leadLE[k] = make([]uint64, v.MaskWords())
	}
	for _, id := range plain {
		l := int(v.lead[id])
		if l >= leadCap {
			v.long = append(v.long, id)
			continue
		}
		for k := l; k < leadCap; k++ {
			v.leadLE[k][id>>6] |= 1 << (id & 63)
		}
	}
}

// buildTrie lays out the tokens ids (sorted by bytes) depth first.
func buildTrie(tokens [][]byte, ids []int32) trie {
	slices.SortFunc(ids, func(a, b int32) int {
		if c := bytes.Compare(tokens[a], tokens[b]); c != 0 {
			return c
		}
		return int(a - b)
	})
	var t trie
	var path []int32 // open nodes, one per depth
	var prev []byte
	for _, id := range ids {
		b := tokens[id]
		common := 0
		for common < len(prev) && common < len(b) && prev[common] == b[common] && common < len(path) {
			common++
		}
		for len(path) > common { // close the nodes the new token leaves
			t.end[path[len(path)-1]] = int32(len(t.b))
			path = path[:len(path)-1]
		}
		for _, c := range b[len(path):] {
			path = append(path, int32(len(t.b)))
			t.b = append(t.b, c)
			t.end = append(t.end, 0)
			t.off = append(t.off, int32(len(t.ids)))
		}
		// ids of equal byte strings are adjacent: all land on the same node
		last := path[len(path)-1]
		if int(last) != len(t.b)-1 { // the node already has ids and children may follow: keep ids contiguous
			panic("grammar: trie order")
		}
		t.ids = append(t.ids, id)
		prev = b
	}
	for _, i := range path {
		t.end[i] = int32(len(t.b))
	}
	t.off = append(t.off, int32(len(t.ids)))
	return t
}

// idsAt returns the ids whose bytes end at node i.
func (t *trie) idsAt(i int32) []int32 { return t.ids[t.off[i]:t.off[i+1]] }
