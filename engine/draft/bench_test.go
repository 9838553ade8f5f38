package draft

import (
	"math/rand/v2"
	"testing"
)

// textLike returns n tokens that repeat like code or prose: spans of earlier text recur
// (copied 8 to 64 tokens at a time) between fresh tokens from a 150k vocabulary.
func textLike(r *rand.Rand, n int) []int {
	out := make([]int, 0, n)
	for len(out) < n {
		if len(out) > 1000 && r.IntN(2) == 0 {
			from := r.IntN(len(out) - 64)
			out = append(out, out[from:from+8+r.IntN(56)]...)
		} else {
			out = append(out, randTokens(r, 1+r.IntN(16), 0, 150_000)...)
		}
	}
	return out[:n]
}

// BenchmarkCommit1 commits one token at a time to a sequence with a 100k-token prompt (the
// head doublings while the index fills are amortised in).
func BenchmarkCommit1(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	s := NewSuffix(SuffixOptions{}).Start(textLike(r, 100_000))
	next := textLike(r, 1<<16)
	tok := make([]int, 1)
	b.ResetTimer()
	for i := range b.N {
		tok[0] = next[i&(1<<16-1)]
		s.Commit(tok)
	}
}

// BenchmarkDraft drafts 7 on a 100k-token sequence: hit ends quoting an earlier span, miss
// ends in tokens found nowhere (both the sequence and a full store are searched), and binary is
// a sequence of two tokens, where every chain is full of partial matches (the worst case).
func BenchmarkDraft(b *testing.B) {
	r := rand.New(rand.NewPCG(2, 2))
	d := NewSuffix(SuffixOptions{})
	for range 6 { // fill the store: 6 outputs of 100k tokens
		o := d.Start(nil)
		o.Commit(textLike(r, 100_000))
		o.Close()
	}
	prompt := textLike(r, 100_000)
	for _, c := range []struct {
		name string
		tail []int
	}{{"hit", prompt[50_000:50_012]}, {"miss", randTokens(r, 12, 200_000, 50_000)}, {"binary", nil}} {
		s := d.Start(prompt)
		if c.tail == nil {
			s = d.Start(randTokens(r, 100_000, 0, 2))
		}
		s.Commit(c.tail)
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				if p := s.Draft(7); (len(p.Tokens) == 0) != (c.name == "miss") {
					b.Fatalf("%s drafted %v", c.name, p.Tokens)
				}
			}
		})
	}
}

// BenchmarkStart indexes a 100k-token prompt.
func BenchmarkStart(b *testing.B) {
	prompt := textLike(rand.New(rand.NewPCG(3, 3)), 100_000)
	d := NewSuffix(SuffixOptions{})
	for range b.N {
		d.Start(prompt)
	}
}

// BenchmarkSequence10k is a sequence's whole life but drafting: started on a 100-token prompt,
// 10k tokens committed, closed into the store (which fills and then evicts).
func BenchmarkSequence10k(b *testing.B) {
	r := rand.New(rand.NewPCG(4, 4))
	d := NewSuffix(SuffixOptions{})
	out := textLike(r, 10_000)
	prompt := out[:100]
	for range b.N {
		s := d.Start(prompt)
		s.Commit(out)
		s.Close()
	}
}
