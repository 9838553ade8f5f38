package cases

import (
	"fmt"
	"slices"

	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/metal/kernels"
)

// mmKernel is a grouped GEMM's instance for tiles of bm rows (qmm.metal: 32 the plain name,
// 16 and 8 _m16 and _m8).
func mmKernel(name string, bm int) string {
	if bm == 32 {
		return name
	}
	return fmt.Sprintf("%s_m%d", name, bm)
}

// moePrefillCases are the prefill chunk's MoE kernels: routing and grouping (moe_topk over a
// chunk, moe_sort), the grouped gate/up and down GEMMs over moe_sort's blocks at every tile
// height, and the whole block with moe_combine or moe_combine_norm.
func moePrefillCases() []Case {
	var out []Case
	// Tokens that pick the same experts, experts nobody picks and experts with more than a
	// block's pairs; the model's 256 experts over a chunk of 70 (the selftest's).
	for _, r := range []struct {
		s      kernels.MoEShape
		tokens int
	}{
		{kernels.MoEShape{H: 64, E: 16, K: 4, I: 64, SI: 64}, 1},
		{kernels.MoEShape{H: 64, E: 16, K: 4, I: 64, SI: 64}, 45}, // 180 pairs over 16 experts: several blocks each
		{kernels.MoEShape{H: 2048, E: 256, K: 8, I: 512, SI: 512}, 70},
	} {
		for _, bm := range kernels.QMMTileHeights {
			out = append(out, moeChunkRoutingCase(r.s, r.tokens, bm))
		}
	}
	// Grouped gate/up: experts with several blocks, experts with none (the last two), blocks past
	// the map's end, an intermediate size no multiple of the tile width; the selftest's model
	// widths (10 pairs an expert: 1 or 2 blocks).
	for _, g := range []struct {
		s      kernels.MoEShape
		tokens int
		heavy  bool
	}{
		{kernels.MoEShape{H: 128, E: 16, K: 4, I: 48, SI: 64}, 45, false},
		{kernels.MoEShape{H: 256, E: 8, K: 2, I: 64, SI: 64}, 3, false},
		{kernels.MoEShape{H: 64, E: 4, K: 2, I: 40, SI: 64}, 20, false},
		{kernels.MoEShape{H: 2048, E: 8, K: 2, I: 512, SI: 512}, 40, true},
	} {
		for _, bm := range kernels.QMMTileHeights {
			out = append(out, moeGateUpMMCase(g.s, g.tokens, bm, g.heavy, false, g.heavy)) // the model's widths as the chunk stores them
		}
	}
	// The whole block, every tile height with moe_combine and moe_combine_norm.
	for _, b := range []struct {
		s      kernels.MoEShape
		tokens int
	}{
		{kernels.MoEShape{H: 128, E: 16, K: 4, I: 64, SI: 128}, 37},
		{kernels.MoEShape{H: 64, E: 4, K: 2, I: 64, SI: 64}, 9},
	} {
		for _, bm := range kernels.QMMTileHeights {
			for _, norm := range []bool{false, true} {
				out = append(out, moeChunkCase(b.s, b.tokens, bm, norm))
			}
		}
	}
	// The selftest's down + combine at the model's widths, every tile height.
	for _, bm := range kernels.QMMTileHeights {
		for _, norm := range []bool{false, true} {
			out = append(out, moeDownCombineMMCase(bm, norm))
		}
	}
	return out
}

// moeChunkRoutingCase: moe_topk over a chunk's tokens routes each as MoERoute does (ids exactly,
// weights within the case's tolerance), and moe_sort groups the pairs by expert, then token,
// exactly as MoESort, with a block map within its bound.
func moeChunkRoutingCase(s kernels.MoEShape, n, bm int) Case {
	return Case{
		Name: fmt.Sprintf("moe_topk/chunk_e%d_k%d_t%d_b%d", s.E, s.K, n, bm), Kernels: []string{"moe_topk+chunk", "moe_sort"}, Tol: moeTopKTol,
		Shape: fmt.Sprintf("%d tokens, E %d, top-%d, blocks of %d", n, s.E, s.K, bm),
		Run: func(c *Ctx) error {
			logits := make([]float32, n*s.E)
			for i := range logits {
				logits[i] = float32(c.R.NormFloat64() * 2)
			}
			if n > 1 {
				copy(logits[s.E:2*s.E], logits[:s.E]) // two tokens with the same choice
			}
			shared := RandFloats(c.R, n, 1)
			tk := kernels.MoETopKBuffers[int]{Logits: c.In("logits", logits), Shared: c.In("shared", shared), IDs: c.Out("ids", 4*n*s.K), Weights: c.Out("weights", 4*n*(s.K+1))}
			c.Add(kernels.MoETopKChunkCall(s, n, tk), false)
			nb := s.MoEBlocks(n, bm)
			so := kernels.MoESortBuffers[int]{IDs: tk.IDs, Weights: tk.Weights, Offs: c.Out("offs", 4*(s.E+1)), Tok: c.Out("tok", 4*n*s.K), W: c.Out("w", 4*n*s.K),
				Blocks: c.Out("blocks", 16*nb), Pos: c.Out("pos", 4*n*s.K)}
			c.Add(kernels.MoESortCall(s, n, bm, so), true)
			if err := c.Step(); err != nil {
				return err
			}
			ids, weights := c.U32(tk.IDs), c.F32(tk.Weights)
			for t := range n {
				if err := c.route(fmt.Sprintf("token %d", t), ids[t*s.K:(t+1)*s.K], weights[t*(s.K+1):(t+1)*(s.K+1)], logits[t*s.E:(t+1)*s.E], shared[t], s.K, false, 0); err != nil {
					return err
				}
			}
			want := kernels.MoESort(s, ids, weights, n, bm)
			for _, cmp := range []struct {
				what      string
				got, want []uint32
			}{
				{"offs", c.U32(so.Offs), want.Offs}, {"tok", c.U32(so.Tok), want.Tok}, {"pos", c.U32(so.Pos), want.Pos},
				{"w", c.U32(so.W), U32s(Encode(want.W))}, {"blocks", c.U32(so.Blocks), want.BlockWords()},
			} {
				for i := range cmp.want {
					if cmp.got[i] != cmp.want[i] {
						return fmt.Errorf("moe_sort's %s[%d] = %#x, MoESort's %#x", cmp.what, i, cmp.got[i], cmp.want[i])
					}
				}
			}
			used := 0
			for _, b := range want.Blocks {
				if b[0] != 0xffffffff {
					used++
				}
			}
			if len(want.Blocks) != nb || used > nb {
				return fmt.Errorf("%d blocks used of a bound of %d", used, nb)
			}
			return nil
		},
	}
}

// moeGateUpMMCase: moe_gate_up_mm (tiles of bm) over MoESort's blocks equals each pair's expert
// gate/up product with SwiGLU (MoEGateUpSorted); with tensor, its tensor-op form (Case.Tensor)
// equals that on x rounded to bfloat. Distinct experts per token (moeRouting); the last two
// experts get nobody.
func moeGateUpMMCase(s kernels.MoEShape, n, bm int, heavy, tensor, bf16 bool) Case {
	k, call, ops := mmKernel("moe_gate_up_mm", bm), kernels.MoEGateUpMMCall[int], ""
	if tensor {
		k, call, ops = k+"_tensor", kernels.MoEGateUpMMTensorCall[int], ", tensor ops"
	}
	if bf16 {
		ops += ", x and act bfloat"
	}
	tol := moeMMTol
	if s.H >= 2048 {
		tol = moeMMWideTol
	}
	return Case{
		Name: fmt.Sprintf("%s/%s_t%d%s", k, moeTag(s), n, actTag(bf16, bf16)), Kernels: []string{k}, Tol: tol, Heavy: heavy, Tensor: tensor,
		Shape: fmt.Sprintf("%d tokens, E %d, top-%d, I %d, H %d, tiles of %d rows%s", n, s.E, s.K, s.I, s.H, bm, ops),
		Run: func(c *Ctx) error {
			sorted := moeRouting(c, s, n, bm)
			gate, up := moeQ(c.R, s.E*s.I, s.H), moeQ(c.R, s.E*s.I, s.H)
			x := RandFloats(c.R, n*s.H, 1)
			if tensor || bf16 { // the tensor form rounds x to bfloat as it stages it
				x = kernels.BF16Round(x)
			}
			bs := kernels.MoEGateUpMMBuffers[int]{Gate: c.QM("gate", gate), Up: c.QM("up", up), X: c.inAct("x", x, bf16), Tok: c.In("tok", sorted.Tok),
				Blocks: c.In("blocks", sorted.BlockWords()), Act: c.outAct("act", n*s.K*s.I, bf16)}
			c.Add(kernels.BF16Acts(call(s.H, s.I, n*s.K, len(sorted.Blocks), bm, bs), bf16, bf16), false)
			if err := c.Step(); err != nil {
				return err
			}
			c.relAct("act", bs.Act, kernels.MoEGateUpSorted(gate, up, s.I, sorted, x), bf16)
			return nil
		},
	}
}

// moeChunkKernels are the instances a chunk's MoE block dispatches with tiles of bm (the shared
// expert's identity map in tiles of QMMTileRows(n)).
func moeChunkKernels(n, bm int, norm bool) []string {
	combine := "moe_combine"
	if norm {
		combine = "moe_combine_norm"
	}
	ks := []string{"moe_topk+chunk", "moe_sort", mmKernel("moe_gate_up_mm", bm), mmKernel("moe_down_mm", bm)}
	if id := kernels.QMMTileRows(n); id != bm {
		ks = append(ks, mmKernel("moe_gate_up_mm", id), mmKernel("moe_down_mm", id))
	}
	return append(ks, combine)
}

// moeChunkCase: a prefill chunk's whole MoE block on the GPU as the chunk mode runs it — moe_topk,
// moe_sort, the grouped gate/up and down GEMMs in tiles of bm, the shared expert through the
// same kernels over an identity map, and moe_combine (or moe_combine_norm, whose normed rows are
// checked too), the activations between them bfloat — adds to every token's residual what the
// decode block's reference (MoEGateUp + MoEDownCombine, in float) adds for that token alone,
// within moeChunkBF16Tol.
func moeChunkCase(s kernels.MoEShape, n, bm int, norm bool) Case {
	combine := "combine"
	if norm {
		combine = "combine_norm"
	}
	return Case{
		Name: fmt.Sprintf("moe_topk/block_%s_t%d_b%d_%s+bf16", moeTag(s), n, bm, combine), Kernels: moeChunkKernels(n, bm, norm), Tol: moeChunkBF16Tol,
		Shape: fmt.Sprintf("%d tokens, H %d, E %d, top-%d, I %d, SI %d, tiles of %d rows, moe_%s, activations bfloat", n, s.H, s.E, s.K, s.I, s.SI, bm, combine),
		Run: func(c *Ctx) error {
			r := c.R
			mo := &model.MoE{
				Gate: RandQ(r, s.E*s.I, s.H, 4), Up: RandQ(r, s.E*s.I, s.H, 4), Down: RandQ(r, s.E*s.H, s.I, 4),
				SharedGate: RandQ(r, s.SI, s.H, 4), SharedUp: RandQ(r, s.SI, s.H, 4), SharedDown: RandQ(r, s.H, s.SI, 4),
			}
			x, res := RandBF16(r, n*s.H, 1), RandFloats(r, n*s.H, 1)
			logits, shared := RandFloats(r, n*s.E, 2), RandFloats(r, n, 1)
			gain := RandGain(r, s.H, 0.5)
			want := slices.Clone(res)
			for t := range n {
				ids, w := kernels.MoERoute(logits[t*s.E:(t+1)*s.E], shared[t], s.K)
				kernels.MoEDownCombine(mo, s, ids, w, kernels.MoEGateUp(mo, s, ids, x[t*s.H:(t+1)*s.H]), want[t*s.H:(t+1)*s.H], false)
			}
			pairs, nb := n*s.K, s.MoEBlocks(n, bm)
			tk := kernels.MoETopKBuffers[int]{Logits: c.In("logits", logits), Shared: c.In("shared", shared), IDs: c.Out("ids", 4*pairs), Weights: c.Out("weights", 4*n*(s.K+1))}
			c.Add(kernels.MoETopKChunkCall(s, n, tk), false)
			sb := kernels.MoESortBuffers[int]{IDs: tk.IDs, Weights: tk.Weights, Offs: c.Out("offs", 4*(s.E+1)), Tok: c.Out("tok", 4*pairs), W: c.Out("w", 4*pairs),
				Blocks: c.Out("blocks", 16*nb), Pos: c.Out("pos", 4*pairs)}
			c.Add(kernels.MoESortCall(s, n, bm, sb), true)
			bx, act, y := c.InBF16("x", x), c.OutBF16("act", pairs*s.I), c.OutBF16("y", pairs*s.H)
			bf := func(k kernels.Call[int]) kernels.Call[int] { return kernels.BF16Acts(k, true, true) }
			c.Add(bf(kernels.MoEGateUpMMCall(s.H, s.I, pairs, nb, bm, kernels.MoEGateUpMMBuffers[int]{Gate: c.QM("gate", mo.Gate), Up: c.QM("up", mo.Up), X: bx, Tok: sb.Tok, Blocks: sb.Blocks, Act: act})), true)
			c.Add(bf(kernels.MoEDownMMCall(s.H, s.I, pairs, nb, bm, kernels.MoEDownMMBuffers[int]{Down: c.QM("down", mo.Down), Act: act, W: sb.W, Blocks: sb.Blocks, Y: y})), true)
			// the shared expert: one expert over the identity map, weight 1 (its gate comes in moe_combine)
			idBM := kernels.QMMTileRows(n)
			tokens, ones, idBlocks := kernels.MoEIdentity(n, idBM)
			shAct, sh := c.OutBF16("shared_act", n*s.SI), c.OutBF16("shared_y", n*s.H)
			bIDBlocks := c.In("identity_blocks", idBlocks)
			c.Add(bf(kernels.MoEGateUpMMCall(s.H, s.SI, n, len(idBlocks)/4, idBM, kernels.MoEGateUpMMBuffers[int]{Gate: c.QM("shared_gate", mo.SharedGate), Up: c.QM("shared_up", mo.SharedUp),
				X: bx, Tok: c.In("identity_tok", tokens), Blocks: bIDBlocks, Act: shAct})), false)
			c.Add(bf(kernels.MoEDownMMCall(s.H, s.SI, n, len(idBlocks)/4, idBM, kernels.MoEDownMMBuffers[int]{Down: c.QM("shared_down", mo.SharedDown), Act: shAct,
				W: c.In("ones", ones), Blocks: bIDBlocks, Y: sh})), true)
			cb := c.combine(s, n, kernels.MoECombineBuffers[int]{IDs: tk.IDs, Weights: tk.Weights, Pos: sb.Pos, Y: y, Shared: sh, Res: c.InOut("res", res)}, gain, norm, true)
			if err := c.Step(); err != nil {
				return err
			}
			// the MoE's contribution, relative to its largest element
			gotRes := c.F32(cb.Res)
			got, contrib := make([]float32, len(res)), make([]float32, len(res))
			for i := range res {
				got[i], contrib[i] = gotRes[i]-res[i], want[i]-res[i]
			}
			c.Rel("contribution", got, contrib)
			if norm {
				return c.normRows(c.BF16(cb.Out), gotRes, gain, s.H, n, true)
			}
			return nil
		},
	}
}

// combine adds moe_combine over cb, or with norm moe_combine_norm with gain (its output rows
// declared here), after a barrier; bf16 makes y, the shared rows and out bfloat. It returns the
// buffers bound.
func (c *Ctx) combine(s kernels.MoEShape, n int, cb kernels.MoECombineBuffers[int], gain []uint16, norm, bf16 bool) kernels.MoECombineBuffers[int] {
	if norm {
		cb.Gain, cb.Out = c.In("gain", gain), c.outAct("out", n*s.H, bf16)
		c.Add(kernels.BF16Acts(kernels.MoECombineNormCall(s, n, eps, cb), bf16, bf16), true)
	} else {
		c.Add(kernels.BF16Acts(kernels.MoECombineCall(s, n, cb), bf16, bf16), true)
	}
	return cb
}

// normRows compares moe_combine_norm's rows (bfloat with bf16: RelErrBF16) with add_rmsnorm's
// of the residual the kernel wrote, each relative to its largest element: on the emulator
// within moeNormRowTol (beyond it the case's error), recorded against the case's tolerance.
func (c *Ctx) normRows(out, res []float32, gain []uint16, h, n int, bf16 bool) error {
	wantOut := make([]float32, h)
	for t := range n {
		kernels.AddRMSNorm(make([]float32, h), wantOut, res[t*h:(t+1)*h], make([]float32, h), gain, eps)
		got := out[t*h : (t+1)*h]
		e := kernels.RelErr(got, wantOut)
		i := worstIndex(got, wantOut)
		if bf16 {
			e, i = RelErrBF16(got, wantOut)
		}
		c.note(e, fmt.Sprintf("token %d: out[%d] = %g, want %g", t, i, got[i], wantOut[i]))
		if c.Kind == Emu && !(e <= moeNormRowTol) {
			return fmt.Errorf("token %d's normed row differs from add_rmsnorm's by %.2g, bound %g", t, e, moeNormRowTol)
		}
	}
	return nil
}

// moeDownCombineMMCase: moe_down_mm (tiles of bm) over MoESort's blocks, each pair's row scaled
// by its weight, then moe_combine (or moe_combine_norm) with a shared expert's output, at the
// model's widths: y against MoEDownSorted, res against MoECombine, the normed rows against
// add_rmsnorm's of the residual written.
func moeDownCombineMMCase(bm int, norm bool) Case {
	s := kernels.MoEShape{H: 2048, E: 8, K: 2, I: 512, SI: 512}
	const n = 20
	combine := "moe_combine"
	if norm {
		combine = "moe_combine_norm"
	}
	k := mmKernel("moe_down_mm", bm)
	return Case{
		Name: fmt.Sprintf("%s/%s_t%d_%s", k, moeTag(s), n, combine), Kernels: []string{k, combine}, Tol: moeChunkTol, Heavy: true,
		Shape: fmt.Sprintf("%d tokens, E %d, top-%d, I %d, H %d, tiles of %d rows, then %s with the shared expert, activations bfloat", n, s.E, s.K, s.I, s.H, bm, combine),
		Run: func(c *Ctx) error {
			ids, weights := make([]uint32, n*s.K), make([]float32, n*(s.K+1))
			for t := range n {
				ids[t*s.K], ids[t*s.K+1] = uint32(t%s.E), uint32((t+3)%s.E)
				weights[t*(s.K+1)], weights[t*(s.K+1)+1], weights[t*(s.K+1)+2] = 0.6, 0.4, 0.3
			}
			sorted := kernels.MoESort(s, ids, weights, n, bm)
			down := moeQ(c.R, s.E*s.H, s.I)
			act, sh, res := RandBF16(c.R, n*s.K*s.I, 1), RandBF16(c.R, n*s.H, 1), RandFloats(c.R, n*s.H, 1)
			db := kernels.MoEDownMMBuffers[int]{Down: c.QM("down", down), Act: c.InBF16("act", act), W: c.In("w", sorted.W), Blocks: c.In("blocks", sorted.BlockWords()), Y: c.OutBF16("y", n*s.K*s.H)}
			c.Add(kernels.BF16Acts(kernels.MoEDownMMCall(s.H, s.I, n*s.K, len(sorted.Blocks), bm, db), true, true), false)
			gain := RandGain(c.R, s.H, 0.5)
			cb := c.combine(s, n, kernels.MoECombineBuffers[int]{IDs: c.In("ids", ids), Weights: c.In("weights", weights), Pos: c.In("pos", sorted.Pos), Y: db.Y,
				Shared: c.InBF16("sh", sh), Res: c.InOut("res", res)}, gain, norm, true)
			if err := c.Step(); err != nil {
				return err
			}
			gotY := c.BF16(db.Y)
			c.RelBF16("y", gotY, kernels.MoEDownSorted(down, s.H, sorted, act))
			// the combine from the rows down stored, so its own sums are checked at float32's tolerance
			want := slices.Clone(res)
			kernels.MoECombine(s, ids, weights, sorted, gotY, sh, want, n)
			got := c.F32(cb.Res)
			c.Rel("res", got, want)
			if norm {
				return c.normRows(c.BF16(cb.Out), got, gain, s.H, n, true)
			}
			return nil
		},
	}
}
