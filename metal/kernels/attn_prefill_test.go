//go:build linux

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/lilyformac/lily/metal/emu"
)

// runAttnPrefill runs attn_prefill for tokens tokens after pos0 cached positions (the chunk's
// K and V in the pool already) and returns the output's error relative to max|out| against
// AttnDecode token by token.
func runAttnPrefill(t *testing.T, lib *emu.Library, r *rand.Rand, s AttnShape, pos0, tokens int, order emu.Order) float64 {
	t.Helper()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	table := randTable(r, s)
	n := pos0 + tokens
	kCache, vCache := randCache(r, s, table, n, 1), randCache(r, s, table, n, 1)
	qd := s.Heads * s.HeadDim
	q := randFloats(r, AttnPrefillRows(tokens)*qd, 2.5)
	qg := randFloats(r, tokens*2*qd, 1)
	want := AttnPrefill(s, pos0, tokens, q, qg, kCache, vCache, table)
	out := emu.NewBuffer(4 * tokens * qd)
	out.Fill(0xFF)
	mustDispatch(t, lib, AttnPrefillCall(s, tokens, AttnPrefillBuffers[*emu.Buffer]{
		Q: emu.BufferOf(q), KCache: emu.BufferOf(kCache), VCache: emu.BufferOf(vCache), Step: emu.BufferOf([]uint32{uint32(pos0), 3}),
		Table: emu.BufferOf(table), QG: emu.BufferOf(qg), Out: out,
	}), order, uint64(tokens))
	e := relErr(out.Float32s(), want)
	if !(e <= 1e-5) {
		t.Errorf("%+v pos0 %d tokens %d %v: error vs AttnDecode %.2g (of max|out|)", s, pos0, tokens, order, e)
	}
	return e
}

// TestAttnPrefill: chunks with and without cached positions before them, partial token blocks,
// key tiles crossing pages of a shuffled table, both cache formats, GQA groups of 1, 2 and 8.
func TestAttnPrefill(t *testing.T) {
	lib := library(t, emu.Options{}, "attn_prefill.metal")
	r := rand.New(rand.NewPCG(81, 82))
	var worst float64
	for _, c := range []struct {
		s            AttnShape
		pos0, tokens int
	}{
		{AttnShape{4, 2, 64, 16, 100, KVBF16, 16, 9}, 0, 13},
		{AttnShape{4, 2, 64, 16, 100, KVBF16, 16, 9}, 37, 20},
		{AttnShape{4, 2, 64, 16, 100, KV8, 16, 9}, 21, 8},
		{AttnShape{2, 2, 32, 32, 64, KVBF16, 0, 0}, 5, 1},
		{AttnShape{16, 2, 256, 64, 96, KVBF16, 32, 4}, 40, 17}, // the model's heads
	} {
		for _, order := range emu.Orders {
			t.Run(fmt.Sprintf("%d_%d_%d_kv%d_pos%d_t%d_%v", c.s.Heads, c.s.KVHeads, c.s.HeadDim, c.s.bits(), c.pos0, c.tokens, order), func(t *testing.T) {
				worst = max(worst, runAttnPrefill(t, lib, r, c.s, c.pos0, c.tokens, order))
			})
		}
	}
	t.Logf("max error vs AttnDecode per token %.2g (of max|out|)", worst)
}

func TestAttnPrefillASan(t *testing.T) {
	lib := library(t, emu.Options{ASan: true}, "attn_prefill.metal")
	r := rand.New(rand.NewPCG(83, 84))
	runAttnPrefill(t, lib, r, AttnShape{4, 2, 64, 16, 48, KV8, 16, 3}, 30, 18, emu.Shuffle) // the pool's last rows
}
