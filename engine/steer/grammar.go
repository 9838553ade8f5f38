package steer

import "github.com/lilyformac/lily/engine/grammar"

// Grammar restricts the answer to a grammar (constrained decoding): every token is one the
// matcher allows, with the tokens left in the generation as its budget, so even a model that
// never ends by itself ends with a complete output. When the model reasons first, the grammar
// waits for the end of the reasoning (the End token), forces the separator Qwen writes after it
// ("\n\n"), then applies.
type Grammar struct {
	m     *grammar.Matcher
	bits  []uint64
	noEOS []uint64 // every token but the stop ones: the reasoning may not end the generation
	left  int      // tokens the generation may still produce
	wait  bool     // reasoning not yet closed
	end   int      // the </think> id
	sep   []int    // the separator's tokens
	sepAt int      // separator tokens already generated
}

// NewGrammar steers a generation of at most maxTokens tokens; thinking says the prompt opened a
// reasoning block, during which no stop id may end the generation (the answer has not come).
func NewGrammar(m *grammar.Matcher, v *grammar.Vocab, maxTokens int, thinking bool, end int, sep, stops []int) *Grammar {
	g := &Grammar{m: m, bits: make([]uint64, v.MaskWords()), left: maxTokens, wait: thinking, end: end, sep: sep, sepAt: len(sep)}
	if thinking {
		g.noEOS = make([]uint64, v.MaskWords())
		for i := range g.noEOS {
			g.noEOS[i] = ^uint64(0)
		}
		for _, id := range stops {
			g.noEOS[id/64] &^= 1 << (id % 64)
		}
	}
	return g
}

// Next forces the separator after the reasoning, then masks by the grammar.
func (g *Grammar) Next() (int, bool, []uint64) {
	switch {
	case g.wait:
		return 0, false, g.noEOS
	case g.sepAt < len(g.sep):
		return g.sep[g.sepAt], true, nil
	}
	g.m.Mask(g.bits, g.left)
	return 0, false, g.bits
}

// Accept follows the reasoning's end and the separator, then advances the matcher.
func (g *Grammar) Accept(id int) error {
	g.left--
	switch {
	case g.wait:
		if id == g.end {
			g.wait, g.sepAt = false, 0
		}
		return nil
	case g.sepAt < len(g.sep):
		g.sepAt++
		return nil
	}
	return g.m.Accept(id)
}
