//go:build linux

package gpu

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/emu"
	"github.com/lilyformac/lily/metal/plan"
)

// TestTensorRouteG3: a checkpoint whose attention has 3 query heads per kv head, which
// attn_prefill_tensor cannot run (its 32 rows are whole tokens' heads), prefills on the tensor
// route — the GEMMs on tensor ops, attention in its simdgroup form, as PrefillRoute says — and on
// the simdgroup route, and both give tiny-a's golden within the bfloat16 yardstick: the checkpoint
// is tiny-a with query heads 1 and 3 split in two (withSplitHeads), the same function.
func TestTensorRouteG3(t *testing.T) {
	g, w := goldenWeights(t, "../../testdata/golden/tiny-a")
	w3 := withSplitHeads(t, w, []int{0, 1, 1, 2, 3, 3})
	if G := w3.Config.NumHeads / w3.Config.NumKVHeads; G != 3 {
		t.Fatalf("%d query heads per kv head", G)
	}
	for i, pr := range []plan.Route{plan.Tensor, plan.Simdgroup} {
		route := pr.String()
		t.Run(route, func(t *testing.T) {
			forced := RouteChoice{Route: pr, Forced: true}
			e := newEmu(t, w3, EmuOptions{GPUOptions: GPUOptions{MaxCtx: 256, Chunks: []int{32}, ChunkLogits: true, PrefillRoute: forced}, Threads: emu.Shuffle, Seed: uint64(21 + i)})
			defer e.Close()
			d := e.Describe()
			r, why := d.PrefillRoute, d.PrefillRouteWhy
			used := map[string]bool{}
			for _, d := range e.Step().Plan.Dispatches {
				used[d.Kernel] = true
			}
			switch {
			case r != route:
				t.Fatalf("route %s (%s)", r, why)
			case used["attn_prefill_tensor"] || !used["attn_prefill"]:
				t.Fatalf("plan kernels %v: want attn_prefill in its simdgroup form", slices.Sorted(maps.Keys(used)))
			case route == "tensor" && (!used["qmm_q4_tensor"] || !strings.Contains(why, "attn_prefill ×2: attn_prefill_tensor needs query heads per kv head dividing 32, not 3")):
				t.Fatalf("tensor route: qmm_q4_tensor %v, why %q", used["qmm_q4_tensor"], why)
			case route == "simdgroup" && strings.Contains(why, "attn_prefill"):
				t.Fatalf("simdgroup route says %q", why)
			}
			t.Logf("%s: %s", route, why)
			s := e.NewSession().(*EmuSession)
			defer s.Close()
			rows, err := s.Forward(g.PromptIDs, true)
			if err != nil {
				t.Fatal(err)
			}
			checkBF16Rows(t, g, rows)
			if s.NextToken() != g.GreedyIDs[0] {
				t.Fatalf("greedy after the prompt %d, HF %d", s.NextToken(), g.GreedyIDs[0])
			}
		})
	}
}

// withSplitHeads is w with its attention's query heads replaced by src's (query head h a copy of
// w's head src[h], which must read the same kv head under the new grouping) and each head's
// o_proj columns shared among its copies: their scales and biases halved per copy (exact in
// bfloat for a power of two), so the model computes w's function up to rounding.
func withSplitHeads(t *testing.T, w *model.Weights, src []int) *model.Weights {
	t.Helper()
	c := *w.Config
	oldG, hd := c.NumHeads/c.NumKVHeads, c.HeadDim
	c.NumHeads = len(src)
	newG := c.NumHeads / c.NumKVHeads
	copies := map[int]int{}
	for h, s := range src {
		if s/oldG != h/newG {
			t.Fatalf("head %d copies head %d of another kv head", h, s)
		}
		copies[s]++
	}
	if hd%quant.GroupSize != 0 {
		t.Fatalf("head dim %d: not whole quantisation groups", hd)
	}
	out := *w
	out.Config = &c
	out.Layers = slices.Clone(w.Layers)
	for i, l := range out.Layers {
		if l.Attn == nil {
			continue
		}
		a := *l.Attn
		a.Q = rowBlocks(l.Attn.Q, 2*hd, src)
		a.O = colGroups(t, l.Attn.O, hd, src, copies)
		out.Layers[i].Attn = &a
	}
	return &out
}

// rowBlocks is m's row blocks of n rows in the order src names them.
func rowBlocks(m *quant.Matrix, n int, src []int) *quant.Matrix {
	wpr, gpr := m.Cols*m.Bits/32, m.Cols/quant.GroupSize
	out := &quant.Matrix{Rows: n * len(src), Cols: m.Cols, Bits: m.Bits}
	for _, s := range src {
		r0, r1 := s*n, (s+1)*n
		out.Words = append(out.Words, m.Words[r0*wpr:r1*wpr]...)
		out.Scales = append(out.Scales, m.Scales[r0*gpr:r1*gpr]...)
		out.Biases = append(out.Biases, m.Biases[r0*gpr:r1*gpr]...)
	}
	return out
}

// colGroups is m's column blocks of n columns (whole quantisation groups) in the order src names
// them, each block's scales and biases divided by its copies (a power of two).
func colGroups(t *testing.T, m *quant.Matrix, n int, src []int, copies map[int]int) *quant.Matrix {
	wpb, gpb := n*m.Bits/32, n/quant.GroupSize
	wpr, gpr := m.Cols*m.Bits/32, m.Cols/quant.GroupSize
	out := &quant.Matrix{Rows: m.Rows, Cols: n * len(src), Bits: m.Bits}
	for r := range m.Rows {
		for _, s := range src {
			k := copies[s]
			if k&(k-1) != 0 {
				t.Fatalf("head %d in %d copies: not a power of two", s, k)
			}
			out.Words = append(out.Words, m.Words[r*wpr+s*wpb:r*wpr+(s+1)*wpb]...)
			for _, x := range m.Scales[r*gpr+s*gpb : r*gpr+(s+1)*gpb] {
				out.Scales = append(out.Scales, quant.F32ToBF16(quant.BF16ToF32(x)/float32(k)))
			}
			for _, x := range m.Biases[r*gpr+s*gpb : r*gpr+(s+1)*gpb] {
				out.Biases = append(out.Biases, quant.F32ToBF16(quant.BF16ToF32(x)/float32(k)))
			}
		}
	}
	if err := out.Validate(); err != nil {
		t.Fatal(fmt.Errorf("o_proj of split heads: %w", err))
	}
	return out
}
