package grammar

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
)

// multiVocab has a token per byte, multi-byte tokens of the tool-call tags and JSON, the added
// tokens <tool_call>, </tool_call> and an EOS. No token spans two pieces of the no-parameter
// call "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>", so there the counted
// minimum is the true one.
var multiVocab = func() *Vocab {
	var toks [][]byte
	var added []bool
	for b := range 256 {
		toks = append(toks, []byte{byte(b)})
		added = append(added, false)
	}
	for _, s := range []string{"<function=", "\n<", "function", "<parameter=", "parameter", ">\n", "\n</", "</",
		"get", "_weather", "city", "fun", "ction", "\"fun", "ction\"", "param", "eter\"", "true", "null", "\":", "{\"", "\"}"} {
		toks = append(toks, []byte(s))
		added = append(added, false)
	}
	for _, s := range []string{"<tool_call>", "</tool_call>", "<|eos|>"} {
		toks = append(toks, []byte(s))
		added = append(added, true)
	}
	v, err := NewVocab(toks, added, []int{len(toks) - 1})
	if err != nil {
		panic(err)
	}
	return v
}()

var (
	weatherRequired = []Tool{{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}}
	weatherOptional = []Tool{{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)}}
)

func toolGrammar(tb testing.TB, tools []Tool, mode ToolMode, name string) *Grammar {
	tb.Helper()
	g, err := ToolCalls(tools, mode, name)
	if err != nil {
		tb.Fatal(err)
	}
	return g
}

// trueMin is the fewest tokens of v (the EOS included) of any complete output of g, by a
// breadth-first search over matcher states with every id tried by Accept.
func trueMin(tb testing.TB, g *Grammar, v *Vocab, limit int) int {
	tb.Helper()
	m0, err := g.NewMatcher(v, 1<<20)
	if err != nil {
		tb.Fatal(err)
	}
	key := func(m *Matcher) string { return fmt.Sprint(m.stk, m.ended) }
	seen := map[string]bool{key(m0): true}
	level := []*Matcher{m0}
	for depth := 1; depth <= limit && len(level) > 0; depth++ {
		var next []*Matcher
		for _, m := range level {
			for id := range v.Size() {
				if v.bytes[id] == nil {
					continue
				}
				c := *m
				c.stk, c.tmp = append([]frame(nil), m.stk...), nil
				if c.Accept(id) != nil {
					continue
				}
				if c.Ended() {
					return depth
				}
				if k := key(&c); !seen[k] {
					seen[k] = true
					next = append(next, &c)
				}
			}
		}
		level = next
	}
	tb.Fatalf("no complete output within %d tokens", limit)
	return 0
}

// TestTokenCosts: with multi-byte tokens MinTokens counts tokens, not bytes; exactly where no
// token spans two pieces.
func TestTokenCosts(t *testing.T) {
	bare := toolGrammar(t, weatherOptional, ToolsRequired, "")
	call := "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>"
	if got, want := bare.MinTokens(byteVocab), len(call)-len("<tool_call></tool_call>")+3; got != want {
		t.Errorf("byte vocabulary: MinTokens %d, want %d (the bytes, two added tokens and the EOS)", got, want)
	}
	// <tool_call> "\n" "<function=" "get" "_weather" ">\n" "</" "function" ">\n" </tool_call> EOS
	if got := bare.MinTokens(multiVocab); got != 11 {
		t.Errorf("multi-byte vocabulary: MinTokens %d, want 11", got)
	}
	for _, c := range []struct {
		name string
		g    *Grammar
	}{
		{"bare call", bare},
		{"named call", toolGrammar(t, weatherOptional, ToolsNamed, "get_weather")},
		{"enum", mustSchema(t, `{"enum":["function","parameter","fun","x"]}`)},
		{"const", mustSchema(t, `{"const":"function<parameter="}`)},
		{"bool or null", mustSchema(t, `{"type":["boolean","null"]}`)},
	} {
		if got, want := c.g.MinTokens(multiVocab), trueMin(t, c.g, multiVocab, 40); got != want {
			t.Errorf("%s: MinTokens %d, shortest output %d tokens", c.name, got, want)
		}
		if got, want := c.g.MinTokens(byteVocab), trueMin(t, c.g, byteVocab, 80); got != want {
			t.Errorf("%s, one token per byte: MinTokens %d, shortest output %d tokens", c.name, got, want)
		}
	}
	// A raw string value: its end "\n</parameter>" costs tokens too. Pieces are counted apart,
	// so MinTokens may exceed the shortest output (">\n" spans a value's end and its suffix),
	// never fall below it; one token per byte, it is exact.
	for _, c := range []struct {
		name      string
		g         *Grammar
		multiWant int
	}{
		// <tool_call> "\n" "<function=" "get" "_weather" ">\n" "<parameter=" "city" ">\n" "\n</"
		// "parameter" ">" "\n" "</" "function" ">\n" </tool_call> EOS
		{"required city", toolGrammar(t, weatherRequired, ToolsRequired, ""), 18},
		{"named, required city", toolGrammar(t, weatherRequired, ToolsNamed, "get_weather"), 12},
	} {
		if got, short := c.g.MinTokens(multiVocab), trueMin(t, c.g, multiVocab, 40); got != c.multiWant || got < short {
			t.Errorf("%s: MinTokens %d, want %d; shortest output %d tokens", c.name, got, c.multiWant, short)
		}
		if got, want := c.g.MinTokens(byteVocab), trueMin(t, c.g, byteVocab, 80); got != want {
			t.Errorf("%s, one token per byte: MinTokens %d, shortest output %d tokens", c.name, got, want)
		}
	}
	// With parameters and JSON, fewer tokens than bytes.
	for _, g := range []*Grammar{toolGrammar(t, weatherRequired, ToolsRequired, ""), mustTools(t, ToolsRequired, ""),
		mustTools(t, ToolsNamed, "Read"), mustSchema(t, acceptanceSchemas[3]), mustSchema(t, acceptanceSchemas[0])} {
		if tok, byt := g.MinTokens(multiVocab), g.MinTokens(byteVocab); tok >= byt {
			t.Errorf("%v: MinTokens %d tokens, %d bytes", g.specials, tok, byt)
		}
	}
	// A view is built once per vocabulary and leaves the compiled grammar's byte costs alone.
	if bare.forVocab(multiVocab) != bare.forVocab(multiVocab) || bare.forVocab(multiVocab).forVocab(byteVocab) != bare.forVocab(byteVocab) {
		t.Error("vocabulary views not cached")
	}
	if bare.nodes[bare.root].minLen != int32(bare.MinTokens(byteVocab)-1) {
		t.Error("the compiled grammar's costs changed")
	}
}

// TestTokenCostsQwen: the real tokenizer counts a forced call in far fewer tokens than bytes, and
// never fewer than the shortest output really takes.
func TestTokenCostsQwen(t *testing.T) {
	_, v := qwen(t)
	for _, c := range []struct {
		name  string
		tools []Tool
		mode  ToolMode
		below int // MinTokens before the raw value's end counted tokens
	}{
		{"required city", weatherRequired, ToolsRequired, 32}, {"optional city", weatherOptional, ToolsRequired, 14},
		{"named, required city", weatherRequired, ToolsNamed, 24}, {"named, optional city", weatherOptional, ToolsNamed, 6},
	} {
		g := toolGrammar(t, c.tools, c.mode, "get_weather")
		tok, byt := g.MinTokens(v), g.MinTokens(byteVocab)
		if tok*2 > byt || tok >= c.below {
			t.Errorf("%s: MinTokens %d tokens (want < %d), %d bytes", c.name, tok, c.below, byt)
		}
		t.Logf("%s: MinTokens %d (bytes: %d)", c.name, tok, byt)
	}
	// The shortest bare call, searched through the masks (which hold exactly what Accept takes).
	g := toolGrammar(t, weatherOptional, ToolsRequired, "")
	m0, _ := g.NewMatcher(v, 1<<20)
	mask := make([]uint64, v.MaskWords())
	level, seen, shortest := []*Matcher{m0}, map[string]bool{}, 0
	for depth := 1; shortest == 0 && depth < 40; depth++ {
		var next []*Matcher
		for _, m := range level {
			m.Mask(mask, 1<<20)
			for id := range v.Size() {
				if mask[id>>6]>>(id&63)&1 == 0 {
					continue
				}
				c := *m
				c.stk, c.tmp, c.bufs = append([]frame(nil), m.stk...), nil, nil
				if err := c.Accept(id); err != nil {
					t.Fatal(err)
				}
				if c.Ended() {
					shortest = depth
				} else if k := fmt.Sprint(c.stk); !seen[k] {
					seen[k] = true
					next = append(next, &c)
				}
			}
		}
		level = next
	}
	if got := g.MinTokens(v); got < shortest {
		t.Errorf("MinTokens %d below the shortest output, %d tokens", got, shortest)
	}
	t.Logf("bare call: MinTokens %d, shortest output %d tokens", g.MinTokens(v), shortest)
}

// TestTokenBudgets: from MinTokens(v) tokens on, every random generation ends with an EOS within
// its budget, a mask never empty before; one token less is a *BudgetError naming MinTokens(v).
func TestTokenBudgets(t *testing.T) {
	_, qv := qwen(t)
	grammars := []*Grammar{toolGrammar(t, weatherRequired, ToolsRequired, ""), toolGrammar(t, weatherOptional, ToolsRequired, ""),
		toolGrammar(t, weatherRequired, ToolsNamed, "get_weather"), mustTools(t, ToolsRequired, ""), mustTools(t, ToolsNamed, "TodoWrite"),
		mustTools(t, ToolsNamed, "set_level"), JSONObject()}
	for _, s := range append(acceptanceSchemas, leafSchemas...) {
		grammars = append(grammars, mustSchema(t, s))
	}
	grammars = append(grammars, toolGrammar(t, leafTools, ToolsRequired, ""), toolGrammar(t, leafTools, ToolsNamed, "strings"),
		toolGrammar(t, leafTools, ToolsNamed, "bounded"))
	seeds := 12
	if testing.Short() {
		seeds = 3
	}
	for vi, v := range []*Vocab{multiVocab, qv, byteVocab} {
		for gi, g := range grammars {
			need := g.MinTokens(v)
			var be *BudgetError
			if _, err := g.NewMatcher(v, need-1); !errors.As(err, &be) || be.Need != need || be.Have != need-1 {
				t.Errorf("vocab %d grammar %d: NewMatcher(%d): %v, want a BudgetError needing %d", vi, gi, need-1, err, need)
			}
			for seed := range seeds {
				r := rand.New(rand.NewSource(int64(1000*vi + 100*gi + seed)))
				for extra := range 6 {
					budget := need + extra
					ids, ended := generate(t, g, v, r, budget) // fails on an empty mask
					if !ended || len(ids)+1 > budget {
						t.Fatalf("vocab %d grammar %d budget %d: ended %v after %d tokens: %q", vi, gi, budget, ended, len(ids), decode(v, ids))
					}
				}
			}
		}
	}
}

// leafSchemas and leafTools hold wide leaves of every kind: free JSON strings, strings with a
// maxLength only, a minLength, both, patterns and formats, raw values free or bounded; a free
// string and a counted one share the free string's dfa.
var (
	leafSchemas = []string{
		`{"type":"string"}`,
		`{"type":"string","maxLength":3}`,
		`{"type":"string","minLength":4}`,
		`{"type":"string","minLength":2,"maxLength":5}`,
		`{"type":"string","pattern":"^[a-z_]+[0-9]*$"}`,
		`{"type":"string","pattern":"^(ab|cd)+x?$","maxLength":9}`,
		`{"type":"object","properties":{"a":{"type":"string","maxLength":2},"b":{"type":"string"},"c":{"type":"string","minLength":3},"d":{"type":"array","items":{"type":"string","maxLength":1},"maxItems":3}},"required":["a","b","c","d"]}`,
		`{"type":"object","properties":{"u":{"type":"string","format":"uri"},"h":{"type":"string","format":"hostname"}},"required":["u","h"]}`,
	}
	leafTools = []Tool{
		{Name: "strings", Parameters: json.RawMessage(`{"type":"object","properties":{"free":{"type":"string"},"short":{"type":"string","maxLength":4},"long":{"type":"string","minLength":3},"both":{"type":"string","minLength":1,"maxLength":3}},"required":["free","short","long","both"]}`)},
		{Name: "bounded", Parameters: json.RawMessage(`{"type":"object","properties":{"code":{"type":"string","pattern":"^[A-Z]{2}-[0-9]+$"},"url":{"type":"string","format":"uri"},"n":{"type":"integer"},"opt":{"type":"string"}},"required":["code","url","n"]}`)},
	}
)

// TestLeafEntryCosts: a wide leaf's cached masks group its inside tokens by the very cost its
// remLeaf gives after them (tokens for uncounted leaves, bytes for counted ones), which the tight
// masks rely on; the token distances are built once per dfa and vocabulary and end where the dfa
// does.
func TestLeafEntryCosts(t *testing.T) {
	_, qv := qwen(t)
	var grammars []*Grammar
	for _, s := range leafSchemas {
		grammars = append(grammars, mustSchema(t, s))
	}
	grammars = append(grammars, toolGrammar(t, leafTools, ToolsRequired, ""), toolGrammar(t, weatherRequired, ToolsRequired, ""))
	kinds := map[bool]int{}
	for vi, v := range []*Vocab{byteVocab, multiVocab, qv} {
		for gi, g := range grammars {
			w := g.forVocab(v)
			for ni := range w.nodes {
				n := &w.nodes[ni]
				if n.kind != kLeaf || !n.dfa.wide {
					continue
				}
				if n.counted() && n.tdist != nil {
					t.Fatalf("vocab %d grammar %d node %d: a counted leaf with token distances", vi, gi, ni)
				}
				if n.tdist != nil {
					if got := v.wideTokenDist(n.dfa, new(int)); &got[0] != &n.tdist[0] {
						t.Fatalf("vocab %d grammar %d node %d: token distances built twice", vi, gi, ni)
					}
					for s, d := range n.tdist {
						if (d == 0) != n.dfa.final[s] || d > n.dfa.dist[s] {
							t.Fatalf("vocab %d grammar %d node %d: state %d costs %d tokens, %d bytes, final %v", vi, gi, ni, s, d, n.dfa.dist[s], n.dfa.final[s])
						}
					}
				}
				kinds[n.tdist != nil]++
				for st := range int32(min(n.dfa.states(), 6)) {
					e := v.nodeEntry(n, st) // as Mask takes it
					if e == nil {
						continue
					}
					for _, set := range e.byDist {
						checked := 0
						for id := range v.Size() {
							if set.ids[id>>6]>>(id&63)&1 == 0 {
								continue
							}
							if checked++; checked > 200 {
								break
							}
							s := st
							for _, b := range v.bytes[id] {
								s = n.dfa.step(s, b)
							}
							f := frame{st: s, a: n.minCh} // characters aside: what the tight mask compares
							if got := n.remLeaf(&f); got != set.dist {
								t.Fatalf("vocab %d grammar %d node %d state %d: token %q grouped at cost %d, leaves %d", vi, gi, ni, st, v.bytes[id], set.dist, got)
							}
						}
					}
				}
			}
		}
	}
	if kinds[true] == 0 || kinds[false] == 0 {
		t.Errorf("wide leaves with token costs %d, with byte costs %d: want both", kinds[true], kinds[false])
	}
}

// TestTokenCostsMissingBytes: where the vocabulary cannot write a piece at all, no matcher starts.
func TestTokenCostsMissingBytes(t *testing.T) {
	var toks [][]byte
	for b := range 256 {
		if b != '!' {
			toks = append(toks, []byte{byte(b)})
		}
	}
	toks = append(toks, []byte("!!"), []byte("<|eos|>"))
	added := make([]bool, len(toks))
	added[len(toks)-1] = true
	v, err := NewVocab(toks, added, []int{len(toks) - 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mustSchema(t, `{"const":"a!"}`).NewMatcher(v, 100); err == nil || !strings.Contains(err.Error(), "cannot write") {
		t.Errorf("a literal the vocabulary cannot spell: %v", err)
	}
	g := mustSchema(t, `{"enum":["a!","b!!"]}`) // the second one it can: " b !! " and the EOS
	if got := g.MinTokens(v); got != 5 {
		t.Errorf("MinTokens %d, want 5", got)
	}
	if _, err := g.NewMatcher(v, 5); err != nil {
		t.Error(err)
	}
}
