// Package tokenizer implements Hugging Face byte-level BPE tokenizers (tokenizer.json) as Qwen3 and Qwen3.5/3.6 use them.
//
// Encoding follows the Rust tokenizers crate with add_special_tokens=false: added tokens are cut
// out of the raw text first (leftmost-longest), the rest is normalized (NFC for Qwen), split by
// the pre-tokenizer regex, mapped to the byte-level alphabet and merged by BPE rank. The Qwen3
// and Qwen3.5/3.6 split patterns run on hand-written scanners; any other pattern runs on
// regexp2. A Tokenizer is safe for concurrent use.
package tokenizer

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Tokenizer encodes text to token ids and back.
type Tokenizer struct {
	vocab   map[string]int // token (byte-level alphabet, or added-token content) → id
	tokens  []string       // id → token; "" where an id is undefined
	defined []bool
	special []bool
	added   []bool

	text []byte   // the decoded bytes of every id, concatenated
	offs []uint32 // id → its bytes are text[offs[id]:offs[id+1]]

	byteID       [256]int32        // id of each single byte
	merges       map[uint64]uint64 // left<<32|right → rank<<32|merged id
	ignoreMerges bool
	rawVocab     map[string]int // raw bytes → id, only with ignore_merges

	forms  []norm.Form
	splits []splitter
	raw    addedSet // added tokens matched in the raw text
	normed addedSet // added tokens matched after normalization

	cache   wordCache
	scratch sync.Pool
}

type added struct {
	content              string
	id                   int
	lstrip, rstrip, word bool
}

// addedSet finds added tokens leftmost-longest, like the Aho-Corasick automaton tokenizers uses.
type addedSet struct {
	first [256]bool
	toks  []added // longest first
}

func (a *addedSet) add(tok added) {
	a.first[tok.content[0]] = true
	a.toks = append(a.toks, tok)
}

func (a *addedSet) sort() {
	slices.SortStableFunc(a.toks, func(x, y added) int { return len(y.content) - len(x.content) })
}

// find returns the leftmost-longest added token in s at or after from.
func (a *addedSet) find(s string, from int) (start int, tok *added) {
	if len(a.toks) == 0 {
		return -1, nil
	}
	for i := from; i < len(s); i++ {
		if !a.first[s[i]] {
			continue
		}
		for k := range a.toks {
			if strings.HasPrefix(s[i:], a.toks[k].content) {
				return i, &a.toks[k]
			}
		}
	}
	return -1, nil
}

// split calls f for the text between added tokens and appends each token's id, as tokenizers'
// AddedVocabulary does: single_word tokens must not touch word characters on either side;
// lstrip/rstrip tokens swallow the white space before/after them. It stops once ids holds more
// than limit.
func (a *addedSet) split(s string, ids []int, limit int, f func(string, []int) []int) []int {
	start := 0
	for pos := 0; len(ids) <= limit; {
		m, tok := a.find(s, pos)
		if tok == nil {
			break
		}
		e := m + len(tok.content)
		pos = e
		if tok.word && (wordBefore(s[:m]) || wordAfter(s[e:])) {
			continue
		}
		if tok.lstrip {
			m = max(start, len(strings.TrimRightFunc(s[:m], unicode.IsSpace)))
		}
		if tok.rstrip {
			e = len(s) - len(strings.TrimLeftFunc(s[e:], unicode.IsSpace))
			pos = e
		}
		if m > start {
			if ids = f(s[start:m], ids); len(ids) > limit {
				return ids
			}
		}
		ids = append(ids, tok.id)
		start = e
	}
	if start < len(s) && len(ids) <= limit {
		ids = f(s[start:], ids)
	}
	return ids
}

// isWord is \w of the Rust regex crate, which tokenizers' single_word check uses:
// Alphabetic, marks, decimal digits, connector punctuation and joiners.
func isWord(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.In(r, unicode.Nd, unicode.Nl, unicode.Pc,
		unicode.Other_Alphabetic, unicode.Join_Control)
}

func wordBefore(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWord(r)
}

func wordAfter(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWord(r)
}

// build turns a parsed tokenizer.json into a Tokenizer.
func build(f *fileJSON) (*Tokenizer, error) {
	m := &f.Model
	switch {
	case m.Type != "BPE" && !(m.Type == "" && f.merges != nil):
		return nil, fmt.Errorf("model type %q is not supported (only BPE)", m.Type)
	case m.Dropout != nil && *m.Dropout != 0:
		return nil, errors.New("BPE dropout is not supported")
	case m.ContinuingSubwordPrefix != "" || m.EndOfWordSuffix != "":
		return nil, errors.New("BPE continuing_subword_prefix/end_of_word_suffix are not supported")
	case m.ByteFallback:
		return nil, errors.New("BPE byte_fallback is not supported (byte-level BPE needs none)")
	case len(f.vocab) == 0:
		return nil, errors.New("BPE vocab is empty")
	}
	t := &Tokenizer{vocab: f.vocab, ignoreMerges: m.IgnoreMerges}
	var err error
	if t.forms, err = normalizers(f.Normalizer); err != nil {
		return nil, err
	}
	if t.splits, err = preTokenizers(f.PreTokenizer); err != nil {
		return nil, err
	}
	if typ, err := typeOf(f.Decoder); err != nil || typ != "ByteLevel" {
		return nil, fmt.Errorf("decoder %s is not supported (only ByteLevel)", f.Decoder)
	}

	size := 0
	for tok, id := range f.vocab {
		if id < 0 {
			return nil, fmt.Errorf("vocab: token %q has negative id %d", tok, id)
		}
		size = max(size, id+1)
	}
	for _, a := range f.AddedTokens {
		if a.ID < 0 || a.Content == "" {
			return nil, fmt.Errorf("added token %q has id %d", a.Content, a.ID)
		}
		size = max(size, a.ID+1)
	}
	t.tokens, t.defined, t.special, t.added = make([]string, size), make([]bool, size), make([]bool, size), make([]bool, size)
	for tok, id := range f.vocab {
		if t.defined[id] {
			return nil, fmt.Errorf("vocab: id %d is used by %q and %q", id, t.tokens[id], tok)
		}
		t.tokens[id], t.defined[id] = tok, true
	}

	// The model's own tokens, before the added ones join the map.
	for b := range 256 {
		id, ok := f.vocab[string(byteRune[b])]
		if !ok {
			return nil, fmt.Errorf("vocab lacks the byte-level token %q for byte %#02x: not a byte-level BPE", byteRune[b], b)
		}
		t.byteID[b] = int32(id)
	}
	t.merges = make(map[uint64]uint64, len(f.merges))
	var ab []byte
	for rank, pair := range f.merges {
		ia, oka := f.vocab[pair[0]]
		ib, okb := f.vocab[pair[1]]
		ab = append(append(ab[:0], pair[0]...), pair[1]...)
		ic, okc := f.vocab[string(ab)]
		if !oka || !okb || !okc {
			return nil, fmt.Errorf("merges[%d] (%q %q): token not in vocab", rank, pair[0], pair[1])
		}
		// Like tokenizers' HashMap collect, a repeated pair keeps its last rank.
		t.merges[uint64(ia)<<32|uint64(ib)] = uint64(rank)<<32 | uint64(ic)
	}
	if t.ignoreMerges {
		t.rawVocab = make(map[string]int, len(f.vocab))
		for tok, id := range f.vocab {
			if b, ok := appendUnmapped(nil, tok); ok {
				t.rawVocab[string(b)] = id
			}
		}
	}

	addedIDs := map[int]string{}
	for _, a := range f.AddedTokens {
		if c, dup := addedIDs[a.ID]; dup && c != a.Content {
			return nil, fmt.Errorf("added tokens: id %d is used by %q and %q", a.ID, c, a.Content)
		}
		addedIDs[a.ID] = a.Content
		t.tokens[a.ID], t.defined[a.ID], t.special[a.ID], t.added[a.ID] = a.Content, true, a.Special, true
		t.vocab[a.Content] = a.ID
		tok := added{content: a.Content, id: a.ID, lstrip: a.LStrip, rstrip: a.RStrip, word: a.SingleWord}
		if a.Normalized {
			tok.content = t.normalize(a.Content)
			t.normed.add(tok)
		} else {
			t.raw.add(tok)
		}
	}

	t.raw.sort()
	t.normed.sort()

	t.offs = make([]uint32, size+1)
	for id, tok := range t.tokens {
		if t.defined[id] {
			var ok bool
			n := len(t.text)
			if t.text, ok = appendUnmapped(t.text, tok); !ok {
				// tokenizers' ByteLevel decoder passes such tokens through as UTF-8.
				t.text = append(t.text[:n], tok...)
			}
		}
		t.offs[id+1] = uint32(len(t.text))
	}
	t.cache.m = map[string][]int{}
	return t, nil
}

// VocabSize is the number of ids the tokenizer defines (the highest id plus one): Encode never
// produces an id at or above it, and Decode skips such ids (as tokenizers does unknown ids).
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// Token returns the vocabulary string of id (byte-level alphabet, e.g. "Ġthe"), or an added
// token's content.
func (t *Tokenizer) Token(id int) (string, bool) {
	if id < 0 || id >= len(t.tokens) || !t.defined[id] {
		return "", false
	}
	return t.tokens[id], true
}

// TokenID is the inverse of Token.
func (t *Tokenizer) TokenID(token string) (int, bool) {
	id, ok := t.vocab[token]
	return id, ok
}

// IsSpecial reports whether id is an added token marked special (e.g. <|im_end|>; Qwen's
// <think> and <tool_call> are added tokens that are not special).
func (t *Tokenizer) IsSpecial(id int) bool {
	return id >= 0 && id < len(t.special) && t.special[id]
}

// IsAdded reports whether id is an added token, special or not (<|im_end|>, <think>, <tool_call>):
// the tokenizer cuts those out of the text whole, so their bytes never come from BPE.
func (t *Tokenizer) IsAdded(id int) bool {
	return id >= 0 && id < len(t.added) && t.added[id]
}

func (t *Tokenizer) normalize(s string) string {
	for _, f := range t.forms {
		s = f.String(s)
	}
	return s
}

type scratch struct {
	pieces, tmp []string
	heap        []uint64
	syms        []int32
	prev, next  []int32
	rank        []uint64
}

// Encode returns the ids of text, without adding special tokens. Invalid UTF-8 is first
// replaced by U+FFFD as Decode does (tokenizers only accepts valid strings).
func (t *Tokenizer) Encode(text string) []int {
	ids, _ := t.EncodeLimit(text, math.MaxInt)
	return ids
}

// EncodeLimit is Encode that gives up once text is known to have more than limit tokens: it
// then returns ok=false and a prefix of the ids (more than limit of them). Work and memory stay
// proportional to the text consumed, so a 15 MB prompt against a 32k context costs a few
// hundred kilobytes of tokenizing, not the whole text.
func (t *Tokenizer) EncodeLimit(text string, limit int) (ids []int, ok bool) {
	if !utf8.ValidString(text) {
		text = string(appendLossy(nil, []byte(text)))
	}
	sc, _ := t.scratch.Get().(*scratch)
	if sc == nil {
		sc = new(scratch)
	}
	defer t.scratch.Put(sc)
	ids = make([]int, 0, min(len(text)/4, limit)+4)
	ids = t.raw.split(text, ids, limit, func(s string, ids []int) []int {
		s = t.normalize(s)
		return t.normed.split(s, ids, limit, func(s string, ids []int) []int { return t.encodeWords(s, ids, sc, limit) })
	})
	return ids, len(ids) <= limit
}

// piecesPerBatch bounds the first pre-tokenizer stage's output held at once.
const piecesPerBatch = 4096

// encodeWords pre-tokenizes normalized text and BPE-encodes each piece, stopping between
// batches of pieces once ids holds more than limit.
func (t *Tokenizer) encodeWords(s string, ids []int, sc *scratch, limit int) []int {
	for from := 0; from < len(s) && len(ids) <= limit; {
		var pieces []string
		pieces, from = t.firstPieces(s, from, sc.pieces[:0])
		for _, sp := range t.splits[min(1, len(t.splits)):] {
			sc.tmp = sc.tmp[:0]
			for _, p := range pieces {
				sc.tmp = sp.split(p, sc.tmp)
			}
			pieces, sc.tmp = sc.tmp, pieces
		}
		for _, w := range pieces {
			ids = t.encodeWord(w, ids, sc)
		}
		clear(pieces) // don't keep the caller's text alive from the pool
		clear(sc.tmp)
		sc.pieces = pieces[:0]
	}
	return ids
}

// firstPieces appends the first stage's pieces of s from byte from on and returns where they
// end: a batch of them when the stage is a scanner (which yields one piece at a time), all of
// them for a regexp2 splitter, or the whole rest when there is no split stage.
func (t *Tokenizer) firstPieces(s string, from int, dst []string) ([]string, int) {
	if len(t.splits) == 0 {
		return append(dst, s[from:]), len(s)
	}
	sc, ok := t.splits[0].(*scanner)
	if !ok {
		return t.splits[0].split(s[from:], dst), len(s)
	}
	for n := 0; n < piecesPerBatch && from < len(s); n++ {
		end := sc.next(s, from)
		dst = append(dst, s[from:end])
		from = end
	}
	return dst, from
}

const (
	cacheMaxWords = 1 << 17
	cacheMaxLen   = 256 // longer pieces are rare and would crowd out the useful ones
)

type wordCache struct {
	mu sync.RWMutex
	m  map[string][]int
}

func (t *Tokenizer) encodeWord(w string, ids []int, sc *scratch) []int {
	if len(w) == 1 {
		return append(ids, int(t.byteID[w[0]]))
	}
	if len(w) > cacheMaxLen {
		return t.bpe(w, ids, sc)
	}
	t.cache.mu.RLock()
	hit, ok := t.cache.m[w]
	t.cache.mu.RUnlock()
	if ok {
		return append(ids, hit...)
	}
	n := len(ids)
	ids = t.bpe(w, ids, sc)
	word := slices.Clone(ids[n:])
	t.cache.mu.Lock()
	if len(t.cache.m) >= cacheMaxWords {
		clear(t.cache.m)
	}
	t.cache.m[strings.Clone(w)] = word
	t.cache.mu.Unlock()
	return ids
}

// bpe merges the bytes of w by rank, lowest first and leftmost among equals, like tokenizers'
// Word::merge_all: a min-heap of candidate pairs over a linked list of symbols.
func (t *Tokenizer) bpe(w string, ids []int, sc *scratch) []int {
	if t.ignoreMerges {
		if id, ok := t.rawVocab[w]; ok {
			return append(ids, id)
		}
	}
	n := len(w)
	syms, prev, next := sc.syms[:0], sc.prev[:0], sc.next[:0]
	rank := sc.rank[:0] // rank<<32|merged id of the pair starting at i; noPair if none
	for i := range n {
		syms = append(syms, t.byteID[w[i]])
		prev = append(prev, int32(i-1))
		next = append(next, int32(i+1))
		rank = append(rank, noPair)
	}
	next[n-1] = -1
	h := sc.heap[:0]
	for i := range n - 1 {
		if r, ok := t.merges[uint64(syms[i])<<32|uint64(syms[i+1])]; ok {
			rank[i] = r
			h = heapPush(h, r&^0xffffffff|uint64(i))
		}
	}
	for len(h) > 0 {
		var top uint64
		top, h = heapPop(h)
		i := int32(top)
		if syms[i] < 0 || rank[i]>>32 != top>>32 {
			continue // stale: the pair at i changed since this entry was pushed
		}
		j := next[i]
		syms[i], syms[j] = int32(uint32(rank[i])), -1
		next[i] = next[j]
		if next[j] >= 0 {
			prev[next[j]] = i
		}
		rank[i] = noPair
		if p := prev[i]; p >= 0 {
			rank[p] = noPair
			if r, ok := t.merges[uint64(syms[p])<<32|uint64(syms[i])]; ok {
				rank[p] = r
				h = heapPush(h, r&^0xffffffff|uint64(p))
			}
		}
		if q := next[i]; q >= 0 {
			if r, ok := t.merges[uint64(syms[i])<<32|uint64(syms[q])]; ok {
				rank[i] = r
				h = heapPush(h, r&^0xffffffff|uint64(i))
			}
		}
	}
	for i := int32(0); i >= 0; i = next[i] {
		ids = append(ids, int(syms[i]))
	}
	sc.syms, sc.prev, sc.next, sc.rank, sc.heap = syms, prev, next, rank, h
	return ids
}

const noPair = ^uint64(0)

func heapPush(h []uint64, v uint64) []uint64 {
	h = append(h, v)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if h[p] <= v {
			break
		}
		h[i], h[p] = h[p], v
		i = p
	}
	return h
}

func heapPop(h []uint64) (uint64, []uint64) {
	top := h[0]
	last := h[len(h)-1]
	h = h[:len(h)-1]
	for i := 0; ; {
		c := 2*i + 1
		if c >= len(h) {
			if len(h) > 0 {
				h[i] = last
			}
			break
		}
		if c+1 < len(h) && h[c+1] < h[c] {
			c++
		}
		if last <= h[c] {
			h[i] = last
			break
		}
		h[i] = h[c]
		i = c
	}
	return top, h
}
