package grammar

import (
	"encoding/json"
	"math/bits"
	"math/rand"
	"strings"
	"sync"
	"testing"

	"github.com/lilyformac/lily/engine/tokenizer"
	"github.com/lilyformac/lily/resources"
)

var (
	qwenOnce  sync.Once
	qwenTok   *tokenizer.Tokenizer
	qwenVocab *Vocab
	qwenEOS   []int
)

// qwen is the real Qwen tokenizer (the demo model's) with <|im_end|> and <|endoftext|> as EOS.
func qwen(tb testing.TB) (*tokenizer.Tokenizer, *Vocab) {
	tb.Helper()
	qwenOnce.Do(func() {
		raw, err := resources.DemoTokenizerJSON()
		if err != nil {
			panic(err)
		}
		if qwenTok, err = tokenizer.LoadJSON(raw); err != nil {
			panic(err)
		}
		for _, s := range []string{"<|im_end|>", "<|endoftext|>"} {
			id, _ := qwenTok.TokenID(s)
			qwenEOS = append(qwenEOS, id)
		}
		// Padded like the model's logit rows.
		if qwenVocab, err = VocabFromTokenizer(qwenTok, qwenTok.VocabSize()+300, qwenEOS); err != nil {
			panic(err)
		}
	})
	return qwenTok, qwenVocab
}

// byteVocab has one token per byte, the added tokens <tool_call>, </tool_call>, <|x|> and an
// EOS: feeding text byte by byte tests the grammar alone.
var byteVocab = func() *Vocab {
	var toks [][]byte
	var added []bool
	for b := range 256 {
		toks = append(toks, []byte{byte(b)})
		added = append(added, false)
	}
	for _, s := range []string{"<tool_call>", "</tool_call>", "<|x|>", "<|eos|>"} {
		toks = append(toks, []byte(s))
		added = append(added, true)
	}
	v, err := NewVocab(toks, added, []int{259})
	if err != nil {
		panic(err)
	}
	return v
}()

const byteEOS = 259

func mustSchema(tb testing.TB, schema string) *Grammar {
	tb.Helper()
	g, err := CompileJSONSchema(json.RawMessage(schema))
	if err != nil {
		tb.Fatalf("compile %s: %v", schema, err)
	}
	return g
}

// feedText feeds text byte by byte (the strings "<tool_call>" and "</tool_call>" as their added
// tokens); it returns how many bytes were accepted and whether the output is then complete.
func feedText(tb testing.TB, g *Grammar, text string) (int, bool) {
	tb.Helper()
	m, err := g.NewMatcher(byteVocab, 1<<20)
	if err != nil {
		tb.Fatal(err)
	}
	for i := 0; i < len(text); {
		id, n := int(text[i]), 1
		for k, s := range []string{"<tool_call>", "</tool_call>"} {
			if strings.HasPrefix(text[i:], s) {
				id, n = 256+k, len(s)
			}
		}
		if m.Accept(id) != nil {
			return i, false
		}
		i += n
	}
	return len(text), m.Done()
}

// accepts checks that text is a complete output of g.
func accepts(t *testing.T, g *Grammar, texts ...string) {
	t.Helper()
	for _, s := range texts {
		if n, done := feedText(t, g, s); n != len(s) || !done {
			t.Errorf("%q: rejected at byte %d (complete: %v)", s, n, done)
		}
	}
}

// rejects checks that text is not a complete output of g (a prefix may be fine).
func rejects(t *testing.T, g *Grammar, texts ...string) {
	t.Helper()
	for _, s := range texts {
		if n, done := feedText(t, g, s); n == len(s) && done {
			t.Errorf("%q: accepted", s)
		}
	}
}

// prefixes checks that text is accepted as far as it goes, but not complete.
func prefixes(t *testing.T, g *Grammar, texts ...string) {
	t.Helper()
	for _, s := range texts {
		if n, done := feedText(t, g, s); n != len(s) || done {
			t.Errorf("%q: want an incomplete prefix, got %d bytes accepted, complete %v", s, n, done)
		}
	}
}

// generate runs one generation with random logits: each step masks, picks an allowed token at
// random (biased to a few favourites so texts repeat and grow like a model's) and accepts it. It
// returns the ids without the EOS and whether an EOS ended it.
func generate(tb testing.TB, g *Grammar, v *Vocab, r *rand.Rand, budget int) ([]int, bool) {
	tb.Helper()
	m, err := g.NewMatcher(v, budget)
	if err != nil {
		tb.Fatal(err)
	}
	mask := make([]uint64, v.MaskWords())
	var ids []int
	for left := budget; left > 0; left-- {
		if !m.Mask(mask, left) {
			tb.Fatalf("nothing allowed after %d tokens (%d left): %q", len(ids), left, decode(v, ids))
		}
		id := pick(v, mask, r)
		if err := m.Accept(id); err != nil {
			tb.Fatalf("accept %d after %q: %v", id, decode(v, ids), err)
		}
		if m.Ended() {
			return ids, true
		}
		ids = append(ids, id)
	}
	return ids, false
}

// pick draws an allowed id as the argmax of random logits would: uniform among the allowed ids,
// half the time among the short ones only (a length prior, so structure varies, not only the
// length of strings).
func pick(v *Vocab, mask []uint64, r *rand.Rand) int {
	if r.Intn(2) == 0 {
		short := make([]uint64, len(mask))
		any := false
		for i, w := range mask {
			for w != 0 {
				j := bits.TrailingZeros64(w)
				w &= w - 1
				if id := i<<6 | j; len(v.bytes[id]) <= 2 {
					short[i] |= 1 << j
					any = true
				}
			}
		}
		if any {
			return uniform(short, r)
		}
	}
	return uniform(mask, r)
}

func uniform(mask []uint64, r *rand.Rand) int {
	n := 0
	for _, w := range mask {
		n += bits.OnesCount64(w)
	}
	k := r.Intn(n)
	for i, w := range mask {
		c := bits.OnesCount64(w)
		if k >= c {
			k -= c
			continue
		}
		for ; ; k-- {
			j := bits.TrailingZeros64(w)
			if k == 0 {
				return i<<6 | j
			}
			w &= w - 1
		}
	}
	panic("unreachable")
}

func decode(v *Vocab, ids []int) string {
	var b strings.Builder
	for _, id := range ids {
		b.Write(v.bytes[id])
	}
	return b.String()
}
