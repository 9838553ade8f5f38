package selftest

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/engine/sample"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/kernels"
)

type qmatrix = *quant.Matrix

const eps = 1e-6 // the model's RMSNorm epsilon

// Shapes: the model's widths where a check stays cheap on the emulator.
var (
	gdnShape  = kernels.GDNShape{HK: 16, HV: 32, DK: 128, DV: 128}                                                          // the model's
	attnShape = kernels.AttnShape{Heads: 16, KVHeads: 2, HeadDim: 256, RotaryDim: 64, MaxCtx: 512, PageSize: 256, Pages: 3} // the model's heads, 512 positions in pages of 256
	attnTable = []uint32{2, 0}                                                                                              // out of order, pool page 1 unused
	moeRouter = kernels.MoEShape{H: 2048, E: 64, K: 8, I: 512, SI: 512}                                                     // E 64 instead of 256
	moeSmall  = kernels.MoEShape{H: 2048, E: 8, K: 4, I: 512, SI: 512}                                                      // E 8, top-4
)

func randQ(r *rand.Rand, rows, cols, bits int) qmatrix {
	return quant.Quantize(randFloats(r, rows*cols, 0.05), rows, cols, bits)
}

func randGain(r *rand.Rand, n int) []uint16 {
	g := make([]uint16, n)
	for i := range g {
		g[i] = quant.F32ToBF16(1 + 0.5*float32(r.NormFloat64()))
	}
	return g
}

// normed is add_rmsnorm's output for x (nothing added), the input the _norm kernels fold in.
func normed(x []float32, gain []uint16) []float32 {
	res, xn := make([]float32, len(x)), make([]float32, len(x))
	kernels.AddRMSNorm(res, xn, x, make([]float32, len(x)), gain, eps)
	return xn
}

// Tolerances. The emulator's measured errors are 2-5x below the kernels' test tolerances; the
// Metal margins below cover fast math (see each constant).
const (
	// qmv*: |kernel − quant.MatVec| / max(Σ|w·x̂|, |y₀|). Tests: 4e-6 (float32 sums of k terms in
	// two orders, one ulp of rsqrt). Metal may contract into FMAs and use its own rsqrt: 1e-5.
	qmvTol = 1e-5
	// embed_q4: the dequantized row, relative to max|row|. Bit-exact on the emulator; Metal may
	// fuse scale·q + bias into one FMA (half an ulp): 1e-6.
	embedTol = 1e-6
	// add_rmsnorm: out relative to max|out| (test 2e-6; fast rsqrt): 1e-5. The residual is exact.
	rmsTol = 1e-5
	// conv1d_step: u relative to max|u| (test 1e-6; fast exp in SiLU): 1e-5. The window is exact.
	convTol = 1e-5
	// gdn_step / gdn_conv_step: max(y, state) relative error after one token (tests 1e-5; fast
	// exp in the decay and gates, rsqrt in the norms): 1e-4.
	gdnTol = 1e-4
	// attn_qk_rope_kv: rotated q relative to max|q| (test 2e-6; fast sin/cos of angles up to a
	// few hundred radians, rsqrt): 1e-4. K must be within 2 bf16 steps (test: 1), V exact.
	ropeTol = 1e-4
	// attn_decode_partial+combine vs AttnDecode, relative to max|out| (test 1e-5; fast exp): 1e-4.
	attnTol = 1e-4
	// moe_router(_norm): max |weight − reference| (weights ≤ 1; test 2e-6; fast exp): 1e-5. The
	// chosen ids must match, except experts whose reference probabilities tie within 1e-5.
	routerTol = 1e-5
	// moe_gate_up(_norm): act relative to max|act| (test 5e-6; fast exp in SiLU, FMAs): 2e-5.
	gateUpTol = 2e-5
	// moe_down_combine: res error relative to max|MoE output| (test 5e-6): 2e-5.
	downTol = 2e-5
	// argmax and the sampler choose ids: the error is the number of wrong choices; none pass.
	idTol = 0
	// logprob_partial+final: the largest logprob difference from engine/sample's, relative to
	// max(1, |logprob|) (test: 0 on the emulator, float32 sums): 2e-5; the alternatives' ids must
	// be engine/sample's.
	logprobTol = 2e-5
	// qmm_q4/q8 (prefill GEMM on simdgroup matrices): y relative to max|y| (test 1e-6 at K 2048;
	// fast math, the hardware's order inside the 8-term products): 1e-4, as qmv.
	qmmTol = 1e-4
	// simdgroup_layout_probe: elements in the wrong lane; none pass (the emulator's layout must be
	// the hardware's).
	layoutTol = 0
)

func checks() []check {
	return []check{
		qmvCheck("qmv_q4", 4, []int{2048}, 2048, false, false, false),
		qmvCheck("qmv_q8", 8, []int{256}, 2048, false, false, false),
		qmvCheck("qmv_q4+add", 4, []int{2048}, 1024, false, true, false),
		qmvCheck("qmv_norm_q4", 4, []int{1024}, 2048, true, false, false),
		qmvCheck("qmv_norm_q8", 8, []int{256}, 2048, true, false, false),
		qmvCheck("qmv_multi_q8+add", 8, []int{256, 64}, 2048, false, true, true),
		qmvCheck("qmv_multi_norm_q4", 4, []int{1024, 512, 32, 32}, 2048, true, false, true),
		{"embed_q4", "vocab 1000 × hidden 2048, token 777", embedTol, checkEmbed},
		{"add_rmsnorm", "hidden 2048", rmsTol, checkRMSNorm},
		{"conv1d_step", "8192 channels", convTol, checkConv},
		{"gdn_step", "16/32 heads × 128, one token, 1024 threads", gdnTol, checkGDN},
		{"gdn_chunk", "16/32 heads × 128, 8 tokens in one dispatch, 512 threads (four lanes a column)", gdnTol, checkGDNChunk},
		{"gdn_conv_step", "16/32 heads × 128, one token, 1024 threads", gdnTol, checkGDNConv},
		{"attn_qk_rope_kv", "16/2 heads × 256, rotary 64, pos 300 of 512, pages of 256", ropeTol, func(e *env) (float64, error) { return checkRope(e, kernels.KVBF16) }},
		{"attn_qk_rope_kv_kv8", "8-bit KV cache, 16/2 heads × 256, rotary 64, pos 300 of 512, pages of 256", ropeTol, func(e *env) (float64, error) { return checkRope(e, kernels.KV8) }},
		{"attn_decode", "partial+combine, 16/2 heads × 256, 300 positions in two pages, 8 splits", attnTol, func(e *env) (float64, error) { return checkAttnDecode(e, kernels.KVBF16) }},
		{"attn_decode_kv8", "8-bit KV cache, partial+combine, 16/2 heads × 256, 300 positions in two pages, 8 splits", attnTol, func(e *env) (float64, error) { return checkAttnDecode(e, kernels.KV8) }},
		{"moe_router", fmt.Sprintf("H %d, E %d, top-%d", moeRouter.H, moeRouter.E, moeRouter.K), routerTol, func(e *env) (float64, error) { return checkRouter(e, false) }},
		{"moe_router_norm", fmt.Sprintf("H %d, E %d, top-%d", moeRouter.H, moeRouter.E, moeRouter.K), routerTol, func(e *env) (float64, error) { return checkRouter(e, true) }},
		{"moe_gate_up", fmt.Sprintf("H %d, E %d, top-%d, I %d, SI %d", moeSmall.H, moeSmall.E, moeSmall.K, moeSmall.I, moeSmall.SI), gateUpTol, func(e *env) (float64, error) { return checkGateUp(e, false) }},
		{"moe_gate_up_norm", fmt.Sprintf("H %d, E %d, top-%d, I %d, SI %d", moeSmall.H, moeSmall.E, moeSmall.K, moeSmall.I, moeSmall.SI), gateUpTol, func(e *env) (float64, error) { return checkGateUp(e, true) }},
		{"moe_down_combine", fmt.Sprintf("H %d, E %d, top-%d, I %d, SI %d", moeSmall.H, moeSmall.E, moeSmall.K, moeSmall.I, moeSmall.SI), downTol, checkDown},
		{"argmax", "partial+final, 248320 ids, 128 groups", idTol, checkArgmax},
		{"moe_chunk_routing", "moe_topk + moe_sort, 70 tokens, E 256, top-8", idTol, checkMoEChunkRouting},
		{"moe_gate_up_mm", "grouped gate/up + SwiGLU, 40 tokens, E 8, top-2, I 512, H 2048", qmmTol, checkMoEGateUpMM},
		{"moe_down_combine_mm", "grouped down + combine with the shared expert, 20 tokens, E 8, top-2, I 512, H 2048", qmmTol, func(e *env) (float64, error) { return checkMoEDownCombineMM(e, false) }},
		{"moe_down_combine_norm_mm", "the same, the combine normalising the residual (moe_combine_norm)", qmmTol, func(e *env) (float64, error) { return checkMoEDownCombineMM(e, true) }},
		{"sample", "penalties+select+final, 65536 ids, top-k 20 top-p 0.95 presence 1.5, 3 steps", idTol, checkSample},
		{"logprob", "partial+final, 248320 ids, 20 alternatives", logprobTol, checkLogprob},
		{"simdgroup_layout", "8×8 matrix, lane → elements", layoutTol, checkLayout},
		{"attn_prefill", "16/2 heads × 256, 20 tokens after 300 cached positions, pages of 256", attnTol, func(e *env) (float64, error) { return checkAttnPrefill(e, kernels.KVBF16) }},
		{"attn_prefill_kv8", "8-bit KV cache, 16/2 heads × 256, 20 tokens after 300 cached positions", attnTol, func(e *env) (float64, error) { return checkAttnPrefill(e, kernels.KV8) }},
		{"qmm_q4", "64, 13 and 5 tokens × 512 × 2048", qmmTol, func(e *env) (float64, error) { return checkQMM(e, 4, []int{512}) }},
		{"qmm_q8", "64, 13 and 5 tokens × 70 × 2048 (edge tiles)", qmmTol, func(e *env) (float64, error) { return checkQMM(e, 8, []int{70}) }},
		{"qmm_q4_stack", "64, 13 and 5 tokens × [1024 512 32 32] × 2048", qmmTol, func(e *env) (float64, error) { return checkQMM(e, 4, []int{1024, 512, 32, 32}) }},
		{"qmm_q8_stack", "64, 13 and 5 tokens × [256 1] × 2048", qmmTol, func(e *env) (float64, error) { return checkQMM(e, 8, []int{256, 1}) }},
	}
}

// ---- qmv --------------------------------------------------------------------------------------

func qmvCheck(name string, bits int, rows []int, k int, norm, add, multi bool) check {
	return check{name: name, shape: fmt.Sprintf("%v × %d", rows, k), tol: qmvTol, run: func(e *env) (float64, error) {
		r := e.r
		x := randFloats(r, k, 3)
		gain := randGain(r, k)
		xn := x
		if norm {
			xn = normed(x, gain)
		}
		b := newPB()
		var ms []qmatrix
		var ws []kernels.QMatrixBuffers[int]
		var ys []int
		var y0s [][]float32
		for j, n := range rows {
			m := randQ(r, n, k, bits)
			y0 := make([]float32, n)
			var y int
			if add {
				y0 = randFloats(r, n, 1)
				y = b.inout(fmt.Sprintf("y%d", j), y0)
			} else {
				y = b.out(fmt.Sprintf("y%d", j), 4*n)
			}
			ws = append(ws, b.qm(fmt.Sprintf("m%d", j), m))
			ms, ys, y0s = append(ms, m), append(ys, y), append(y0s, y0)
		}
		bx, bg := b.in("x", x), 0
		if norm {
			bg = b.in("gain", gain)
		}
		v := kernels.QMVVariant{Norm: norm, Eps: eps, Add: add}
		if multi {
			b.add(kernels.QMVMultiCall(bits, k, rows, v, kernels.QMVMultiBuffers[int]{W: ws, Y: ys, X: bx, Gain: bg}), false)
		} else {
			b.add(kernels.QMVCall(bits, rows[0], k, v, kernels.QMVBuffers[int]{W: ws[0], X: bx, Y: ys[0], Gain: bg}), false)
		}
		x2, err := b.run(e, 1, nil, nil)
		if err != nil {
			return math.NaN(), err
		}
		var worst float64
		row := make([]float32, k)
		for j, m := range ms {
			got := f32s(x2.Bytes(ys[j]))
			want := kernels.QMV(m, xn)
			var scale float64
			for i := range m.Rows {
				m.DequantRow(i, row)
				var mag float64
				for c, w := range row {
					mag += math.Abs(float64(w) * float64(xn[c]))
				}
				scale = max(scale, mag, math.Abs(float64(y0s[j][i])))
				want[i] += y0s[j][i] // zero unless add
			}
			for i := range want {
				if math.IsNaN(float64(got[i])) {
					return math.NaN(), fmt.Errorf("matrix %d row %d: NaN (not written?)", j, i)
				}
				worst = max(worst, math.Abs(float64(got[i])-float64(want[i]))/scale)
			}
		}
		return worst, nil
	}}
}

// ---- embed, rmsnorm, conv ---------------------------------------------------------------------

func checkAttnPrefill(e *env, bits int) (float64, error) {
	s, r := attnShape, e.r
	s.KVBits = bits
	const pos0, tokens = 300, 20 // positions 300..319 in page 1 (pool page 0)
	cache := func() []byte {
		c := make([]byte, s.CacheBytes())
		for i := range c {
			c[i] = 0xFF
		}
		x := make([]float32, s.HeadDim)
		for kvh := range s.KVHeads {
			for j := range pos0 + tokens {
				for d := range x {
					x[d] = float32(r.NormFloat64())
				}
				s.StoreKV(c, kvh, s.Row(attnTable, j), x)
			}
		}
		return c
	}
	kc, vc := cache(), cache()
	qd := s.Heads * s.HeadDim
	q, qg := randFloats(r, kernels.AttnPrefillRows(tokens)*qd, 2.5), randFloats(r, tokens*2*qd, 1)
	b := newPB()
	bs := kernels.AttnPrefillBuffers[int]{Q: b.in("q", q), KCache: b.in("k_cache", kc), VCache: b.in("v_cache", vc),
		Step: b.in("step", []uint32{pos0, 3}), Table: b.in("table", attnTable), QG: b.in("qg", qg), Out: b.out("out", 4*tokens*qd)}
	b.add(kernels.AttnPrefillCall(s, tokens, bs), false)
	x, err := b.run(e, 1, nil, nil)
	if err != nil {
		return math.NaN(), err
	}
	return relErr(f32s(x.Bytes(bs.Out)), kernels.AttnPrefill(s, pos0, tokens, q, qg, kc, vc, attnTable)), nil
}

func checkMoEChunkRouting(e *env) (float64, error) {
	s := kernels.MoEShape{H: 2048, E: 256, K: 8, I: 512, SI: 512}
	const n = 70
	logits, shared := randFloats(e.r, n*s.E, 2), randFloats(e.r, n, 1)
	var ids []uint32
	var weights []float32
	for t := range n {
		i, w := kernels.MoERoute(logits[t*s.E:(t+1)*s.E], shared[t], s.K)
		ids, weights = append(ids, i...), append(weights, w...)
	}
	b := newPB()
	tk := kernels.MoETopKBuffers[int]{Logits: b.in("logits", logits), Shared: b.in("shared", shared), IDs: b.out("ids", 4*n*s.K), Weights: b.out("weights", 4*n*(s.K+1))}
	b.add(kernels.MoETopKChunkCall(s, n, tk), false)
	so := kernels.MoESortBuffers[int]{IDs: tk.IDs, Weights: tk.Weights, Offs: b.out("offs", 4*(s.E+1)), Tok: b.out("tok", 4*n*s.K), W: b.out("w", 4*n*s.K), Blocks: b.out("blocks", 16*s.MoEBlocks(n, s.BlockRows(n))), Pos: b.out("pos", 4*n*s.K)}
	b.add(kernels.MoESortCall(s, n, s.BlockRows(n), so), true)
	x, err := b.run(e, 1, nil, nil)
	if err != nil {
		return math.NaN(), err
	}
	// moe.metal computes in IEEE mode (MathSafe): with random logits the reference's order holds
	// (moe_router's check allows for ties within rounding).
	gotIDs := u32s(x.Bytes(tk.IDs))
	if !slices.Equal(gotIDs, ids) {
		return 1, fmt.Errorf("moe_topk chose %v, the reference %v (first tokens)", gotIDs[:s.K], ids[:s.K])
	}
	want := kernels.MoESort(s, gotIDs, f32s(x.Bytes(tk.Weights)), n, s.BlockRows(n))
	if !slices.Equal(u32s(x.Bytes(so.Tok)), want.Tok) || !slices.Equal(u32s(x.Bytes(so.Offs)), want.Offs) || !slices.Equal(u32s(x.Bytes(so.Pos)), want.Pos) ||
		!slices.Equal(u32s(x.Bytes(so.Blocks)), want.BlockWords()) {
		return 1, fmt.Errorf("moe_sort's grouping differs from the reference's")
	}
	return 0, nil
}

func checkMoEGateUpMM(e *env) (float64, error) {
	s := kernels.MoEShape{H: 2048, E: 8, K: 2, I: 512, SI: 512}
	const n = 40
	ids := make([]uint32, n*s.K)
	for t := range n {
		ids[t*s.K], ids[t*s.K+1] = uint32(t%s.E), uint32((t*3+1)%s.E)
		if ids[t*s.K+1] == ids[t*s.K] {
			ids[t*s.K+1] = (ids[t*s.K] + 1) % uint32(s.E)
		}
	}
	gate, up := randQ(e.r, s.E*s.I, s.H, 4), randQ(e.r, s.E*s.I, s.H, 4)
	xs := randFloats(e.r, n*s.H, 1)
	worst := 0.0
	for _, bm := range kernels.QMMTileHeights { // each instance: 10 pairs an expert fill 1 or 2 blocks
		sorted := kernels.MoESort(s, ids, make([]float32, n*(s.K+1)), n, bm)
		b := newPB()
		bs := kernels.MoEGateUpMMBuffers[int]{Gate: b.qm("gate", gate), Up: b.qm("up", up), X: b.in("x", xs), Tok: b.in("tok", sorted.Tok),
			Blocks: b.in("blocks", sorted.BlockWords()), Act: b.out("act", 4*n*s.K*s.I)}
		b.add(kernels.MoEGateUpMMCall(s.H, s.I, n*s.K, len(sorted.Blocks), bm, bs), false)
		x, err := b.run(e, 1, nil, nil)
		if err != nil {
			return math.NaN(), err
		}
		worst = max(worst, relErr(f32s(x.Bytes(bs.Act)), kernels.MoEGateUpSorted(gate, up, s.I, sorted, xs)))
	}
	return worst, nil
}

// checkMoEDownCombineMM runs moe_down_mm and moe_combine, or with norm moe_combine_norm (whose
// normed rows must be add_rmsnorm's of the residual it wrote).
func checkMoEDownCombineMM(e *env, norm bool) (float64, error) {
	s := kernels.MoEShape{H: 2048, E: 8, K: 2, I: 512, SI: 512}
	const n = 20
	ids, weights := make([]uint32, n*s.K), make([]float32, n*(s.K+1))
	for t := range n {
		ids[t*s.K], ids[t*s.K+1] = uint32(t%s.E), uint32((t+3)%s.E)
		weights[t*(s.K+1)], weights[t*(s.K+1)+1], weights[t*(s.K+1)+2] = 0.6, 0.4, 0.3
	}
	const bm = 16 // checkMoEGateUpMM runs every height
	sorted := kernels.MoESort(s, ids, weights, n, bm)
	blocks := sorted.BlockWords()
	down := randQ(e.r, s.E*s.H, s.I, 4)
	act, sh, res := randFloats(e.r, n*s.K*s.I, 1), randFloats(e.r, n*s.H, 1), randFloats(e.r, n*s.H, 1)
	b := newPB()
	db := kernels.MoEDownMMBuffers[int]{Down: b.qm("down", down), Act: b.in("act", act), W: b.in("w", sorted.W), Blocks: b.in("blocks", blocks), Y: b.out("y", 4*n*s.K*s.H)}
	b.add(kernels.MoEDownMMCall(s.H, s.I, n*s.K, len(sorted.Blocks), bm, db), false)
	cb := kernels.MoECombineBuffers[int]{IDs: b.in("ids", ids), Weights: b.in("weights", weights), Pos: b.in("pos", sorted.Pos), Y: db.Y, Shared: b.in("sh", sh), Res: b.inout("res", res)}
	const eps = 1e-6
	gain := randGain(e.r, s.H)
	if norm {
		cb.Gain, cb.Out = b.in("gain", gain), b.out("out", 4*n*s.H)
		b.add(kernels.MoECombineNormCall(s, n, eps, cb), true)
	} else {
		b.add(kernels.MoECombineCall(s, n, cb), true)
	}
	x, err := b.run(e, 1, nil, nil)
	if err != nil {
		return math.NaN(), err
	}
	y := kernels.MoEDownSorted(down, s.H, sorted, act)
	if re := relErr(f32s(x.Bytes(db.Y)), y); !(re <= qmmTol) {
		return re, fmt.Errorf("moe_down_mm: relative error %.2g", re)
	}
	want := slices.Clone(res)
	kernels.MoECombine(s, ids, weights, sorted, y, sh, want, n)
	got := f32s(x.Bytes(cb.Res))
	worst := relErr(got, want)
	if norm {
		out, wantOut := f32s(x.Bytes(cb.Out)), make([]float32, n*s.H)
		for t := range n {
			row := got[t*s.H : (t+1)*s.H]
			kernels.AddRMSNorm(make([]float32, s.H), wantOut[t*s.H:(t+1)*s.H], row, make([]float32, s.H), gain, eps)
		}
		worst = max(worst, relErr(out, wantOut))
	}
	return worst, nil
}

// checkQMM runs qmm over a stack of matrices at each tile height (kernels.QMMTileRows: 32, 16
// and 8 rows).
func checkQMM(e *env, bits int, rows []int) (float64, error) {
	const cols = 2048
	worst := 0.0
	for _, tokens := range []int{64, 13, 5} {
		xs := randFloats(e.r, tokens*cols, 2)
		b := newPB()
		var ms []qmatrix
		bs := kernels.QMMBuffers[int]{X: b.in("x", xs)}
		for j, n := range rows {
			m := randQ(e.r, n, cols, bits)
			ms = append(ms, m)
			bs.W = append(bs.W, b.qm(fmt.Sprintf("w%d", j), m))
			bs.Y = append(bs.Y, b.out(fmt.Sprintf("y%d", j), 4*tokens*n))
		}
		b.add(kernels.QMMCall(bits, tokens, cols, rows, bs), false)
		x, err := b.run(e, 1, nil, nil)
		if err != nil {
			return math.NaN(), err
		}
		for j, m := range ms {
			worst = max(worst, relErr(f32s(x.Bytes(bs.Y[j])), kernels.QMM(m, xs, tokens)))
		}
	}
	return worst, nil
}

func checkLayout(e *env) (float64, error) {
	labels := make([]float32, 64)
	for i := range labels {
		labels[i] = float32(i)
	}
	b := newPB()
	bs := kernels.LayoutProbeBuffers[int]{Labels: b.in("labels", labels), Out: b.out("out", 4*64)}
	b.add(kernels.LayoutProbeCall(bs), false)
	x, err := b.run(e, 1, nil, nil)
	if err != nil {
		return math.NaN(), err
	}
	got := f32s(x.Bytes(bs.Out))
	wrong := 0
	var first error
	for l := range 32 {
		r, c := kernels.SimdgroupLayout(l)
		for i := range 2 {
			if want := float32(r*8 + c + i); got[2*l+i] != want {
				if wrong++; first == nil {
					first = fmt.Errorf("lane %d element %d holds %g, the emulator's layout says %g", l, i, got[2*l+i], want)
				}
			}
		}
	}
	return float64(wrong), first
}

func checkEmbed(e *env) (float64, error) {
	const V, H, token = 1000, 2048, 777
	m := randQ(e.r, V, H, 4)
	b := newPB()
	bs := kernels.EmbedBuffers[int]{Embed: b.qm("embed", m), Step: b.in("step", []uint32{17, token}), Out: b.out("out", 4*H)}
	b.add(kernels.EmbedCall(H, V, bs), false)
	x, err := b.run(e, 1, nil, nil)
	if err != nil {
		return math.NaN(), err
	}
	return relErr(f32s(x.Bytes(bs.Out)), kernels.Embed(m, token)), nil
}

func checkRMSNorm(e *env) (float64, error) {
	const H = 2048
	xs, d, w := randFloats(e.r, H, 3), randFloats(e.r, H, 1), randGain(e.r, H)
	b := newPB()
	bs := kernels.AddRMSNormBuffers[int]{X: b.in("x", xs), D: b.in("d", d), W: b.in("w", w), Res: b.out("res", 4*H), Out: b.out("out", 4*H)}
	b.add(kernels.AddRMSNormCall(H, 1, eps, kernels.RMSNormThreads, bs), false)
	x, err := b.run(e, 1, nil, nil)
	if err != nil {
		return math.NaN(), err
	}
	res, out := make([]float32, H), make([]float32, H)
	kernels.AddRMSNorm(res, out, xs, d, w, eps)
	if re := relErr(f32s(x.Bytes(bs.Res)), res); re != 0 {
		return math.NaN(), fmt.Errorf("residual differs (relative %.2g), want exact", re)
	}
	return relErr(f32s(x.Bytes(bs.Out)), out), nil
}

func checkConv(e *env) (float64, error) {
	C := gdnShape.Channels()
	taps, window, xs := randFloats(e.r, C*kernels.ConvKernel, 0.5), randFloats(e.r, (kernels.ConvKernel-1)*C, 1), randFloats(e.r, C, 1)
	b := newPB()
	bs := kernels.Conv1DStepBuffers[int]{X: b.in("x", xs), Taps: b.in("taps", taps), Window: b.inout("window", window), U: b.out("u", 4*C)}
	b.add(kernels.Conv1DStepCall(C, kernels.ConvThreads, bs), false)
	x, err := b.run(e, 1, nil, nil)
	if err != nil {
		return math.NaN(), err
	}
	u := make([]float32, C)
	kernels.Conv1DStep(u, window, taps, xs)
	if we := relErr(f32s(x.Bytes(bs.Window)), window); we != 0 {
		return math.NaN(), fmt.Errorf("window differs (relative %.2g), want exact", we)
	}
	return relErr(f32s(x.Bytes(bs.U)), u), nil
}

// ---- Gated DeltaNet -----------------------------------------------------------------------------

func gdnInputs(r *rand.Rand, s kernels.GDNShape) (p kernels.GDNParams, state, z, a, bb []float32) {
	p = kernels.GDNParams{ALog: make([]float32, s.HV), DtBias: randFloats(r, s.HV, 0.5), NormW: make([]float32, s.DV), Eps: eps}
	for i := range p.ALog {
		p.ALog[i] = float32(math.Log(1 + 15*r.Float64()))
	}
	for i := range p.NormW {
		p.NormW[i] = 1 + 0.1*float32(r.NormFloat64())
	}
	state = randFloats(r, s.StateLen(), 0.1)
	z, a, bb = randFloats(r, s.HV*s.DV, 1), randFloats(r, s.HV, 1), randFloats(r, s.HV, 1)
	a[0], a[len(a)-1] = 25, -30 // both softplus special cases
	return
}

func checkGDN(e *env) (float64, error) {
	s := gdnShape
	p, state, z, a, bb := gdnInputs(e.r, s)
	qkv := randFloats(e.r, s.Channels(), 1)
	b := newPB()
	bs := kernels.GDNStepBuffers[int]{QKV: b.in("qkv", qkv), Z: b.in("z", z), A: b.in("a", a), Beta: b.in("b", bb), ALog: b.in("A_log", p.ALog),
		DtBias: b.in("dt_bias", p.DtBias), NormW: b.in("norm", p.NormW), State: b.inout("state", state), Y: b.out("y", 4*s.HV*s.DV)}
	b.add(kernels.GDNStepCall(s, eps, kernels.GDNSimdgroups, bs), false)
	x, err := b.run(e, 1, nil, nil)
	if err != nil {
		return math.NaN(), err
	}
	y := make([]float32, s.HV*s.DV)
	kernels.GDNStep(s, p, state, y, qkv, z, a, bb)
	return nanMax(relErr(f32s(x.Bytes(bs.Y)), y), relErr(f32s(x.Bytes(bs.State)), state)), nil
}

func checkGDNChunk(e *env) (float64, error) {
	const tokens = 8
	s := gdnShape
	p, state, _, _, _ := gdnInputs(e.r, s)
	qkv, z := randFloats(e.r, tokens*s.Channels(), 1), randFloats(e.r, tokens*s.HV*s.DV, 1)
	a, bb := randFloats(e.r, tokens*s.HV, 1), randFloats(e.r, tokens*s.HV, 1)
	b := newPB()
	bs := kernels.GDNStepBuffers[int]{QKV: b.in("qkv", qkv), Z: b.in("z", z), A: b.in("a", a), Beta: b.in("b", bb), ALog: b.in("A_log", p.ALog),
		DtBias: b.in("dt_bias", p.DtBias), NormW: b.in("norm", p.NormW), State: b.inout("state", state), Y: b.out("y", 4*tokens*s.HV*s.DV)}
	b.add(kernels.GDNChunkCall(s, eps, tokens, bs), false)
	x, err := b.run(e, 1, nil, nil)
	if err != nil {
		return math.NaN(), err
	}
	y := make([]float32, tokens*s.HV*s.DV)
	kernels.GDNChunk(s, p, state, y, qkv, z, a, bb, tokens)
	return nanMax(relErr(f32s(x.Bytes(bs.Y)), y), relErr(f32s(x.Bytes(bs.State)), state)), nil
}

func checkGDNConv(e *env) (float64, error) {
	s := gdnShape
	C := s.Channels()
	p, state, z, a, bb := gdnInputs(e.r, s)
	taps, window, xs := randFloats(e.r, C*kernels.ConvKernel, 0.5), randFloats(e.r, (kernels.ConvKernel-1)*C, 1), randFloats(e.r, C, 1)
	b := newPB()
	bs := kernels.GDNConvStepBuffers[int]{
		X: b.in("x", xs), Z: b.in("z", z), A: b.in("a", a), Beta: b.in("b", bb),
		ALog: b.in("A_log", p.ALog), DtBias: b.in("dt_bias", p.DtBias), NormW: b.in("norm", p.NormW),
		State: b.inout("state", state), Y: b.out("y", 4*s.HV*s.DV), Taps: b.in("taps", taps),
		WinIn: b.in("win_in", window), WinOut: b.out("win_out", 4*len(window)),
	}
	b.add(kernels.GDNConvStepCall(s, eps, kernels.GDNSimdgroups, bs), false)
	x, err := b.run(e, 1, nil, nil)
	if err != nil {
		return math.NaN(), err
	}
	win := slices.Clone(window)
	y := make([]float32, s.HV*s.DV)
	kernels.GDNConvStep(s, p, state, y, win, taps, xs, z, a, bb)
	if we := relErr(f32s(x.Bytes(bs.WinOut)), win); we != 0 {
		return math.NaN(), fmt.Errorf("out window differs (relative %.2g), want exact", we)
	}
	if !slices.Equal(f32s(x.Bytes(bs.WinIn)), window) {
		return math.NaN(), fmt.Errorf("the in window was written")
	}
	return nanMax(relErr(f32s(x.Bytes(bs.Y)), y), relErr(f32s(x.Bytes(bs.State)), state)), nil
}

// ---- attention ----------------------------------------------------------------------------------

func checkRope(e *env, bits int) (float64, error) {
	s, r := attnShape, e.r
	s.KVBits = bits
	const pos = 300
	p := kernels.AttnRopeParams{QNorm: make([]float32, s.HeadDim), KNorm: make([]float32, s.HeadDim), InvFreq: kernels.RopeInvFreq(s.RotaryDim, 1e7), Eps: eps}
	for i := range p.QNorm {
		p.QNorm[i], p.KNorm[i] = 1+0.2*float32(r.NormFloat64()), 1+0.2*float32(r.NormFloat64())
	}
	qg := randFloats(r, s.Heads*2*s.HeadDim, 1)
	k, v := randFloats(r, s.KVHeads*s.HeadDim, 1), randFloats(r, s.KVHeads*s.HeadDim, 1)
	kWant, vWant := make([]byte, s.CacheBytes()), make([]byte, s.CacheBytes())
	for i := range kWant {
		kWant[i], vWant[i] = 0xFF, 0xFF
	}
	b := newPB()
	bs := kernels.AttnQKRopeKVBuffers[int]{QG: b.in("qg", qg), K: b.in("k", k), V: b.in("v", v), QNorm: b.in("q_norm", p.QNorm), KNorm: b.in("k_norm", p.KNorm),
		InvFreq: b.in("inv_freq", p.InvFreq), Step: b.in("step", []uint32{pos, 7}), QOut: b.out("q_rot", 4*s.Heads*s.HeadDim),
		KCache: b.inout("k_cache", kWant), VCache: b.inout("v_cache", vWant), Table: b.in("table", attnTable)}
	b.add(kernels.AttnQKRopeKVCall(s, eps, kernels.AttnRopeThreads, bs), false)
	x, err := b.run(e, 1, nil, nil)
	if err != nil {
		return math.NaN(), err
	}
	qWant := kernels.AttnQKRopeKV(s, p, pos, qg, k, v, kWant, vWant, attnTable)
	kGot, vGot := x.Bytes(bs.KCache), x.Bytes(bs.VCache)
	inRow := make([]bool, len(kWant))
	prow := s.Row(attnTable, pos)
	s.CacheSpans(prow, 1, func(off, n int64) {
		for i := off; i < off+n; i++ {
			inRow[i] = true
		}
	})
	for i := range vWant {
		if vGot[i] != vWant[i] {
			return math.NaN(), fmt.Errorf("V cache byte %d = %#x, want %#x", i, vGot[i], vWant[i])
		}
		if !inRow[i] && kGot[i] != 0xFF {
			return math.NaN(), fmt.Errorf("K cache byte %d written outside row %d", i, pos)
		}
	}
	// K: within 2 bf16 steps, or 2 codes of its block's scale in an 8-bit cache.
	got, want := make([]float32, s.HeadDim), make([]float32, s.HeadDim)
	for j := range s.KVHeads {
		s.LoadKV(kGot, j, prow, got)
		s.LoadKV(kWant, j, prow, want)
		for d := range want {
			step := float64(max(abs32(want[d]), 1e-30)) / 128
			if bits == kernels.KV8 {
				var amax float32
				for _, w := range want[d/kernels.KVBlock*kernels.KVBlock:][:kernels.KVBlock] {
					amax = max(amax, abs32(w))
				}
				step = float64(amax) / 127
			}
			if math.Abs(float64(got[d]-want[d])) > 2*step {
				return math.NaN(), fmt.Errorf("K cache head %d dim %d = %g, want %g: more than 2 steps of %g apart", j, d, got[d], want[d], step)
			}
		}
	}
	return relErr(f32s(x.Bytes(bs.QOut)), qWant), nil
}

func abs32(f float32) float32 { return float32(math.Abs(float64(f))) }

func checkAttnDecode(e *env, bits int) (float64, error) {
	s, r := attnShape, e.r
	s.KVBits = bits
	const n = 300
	cache := func() []byte {
		c := make([]byte, s.CacheBytes())
		for i := range c {
			c[i] = 0xFF // NaN past pos (bf16 values, 8-bit scales): reading it poisons the output
		}
		x := make([]float32, s.HeadDim)
		for kvh := range s.KVHeads {
			for j := range n {
				for d := range x {
					x[d] = float32(r.NormFloat64())
				}
				s.StoreKV(c, kvh, s.Row(attnTable, j), x)
			}
		}
		return c
	}
	kc, vc := cache(), cache()
	q, qg := randFloats(r, s.Heads*s.HeadDim, 2.5), randFloats(r, s.Heads*2*s.HeadDim, 1)
	splits := kernels.AttnSplits(s.MaxCtx)
	oLen, mlLen := s.AttnPartialLens(splits)
	b := newPB()
	bq, bk, bv, step := b.in("q", q), b.in("k_cache", kc), b.in("v_cache", vc), b.in("step", []uint32{n - 1, 3})
	bo, bml, bqg, out := b.out("o_part", 4*oLen), b.out("ml_part", 4*mlLen), b.in("qg", qg), b.out("out", 4*s.Heads*s.HeadDim)
	b.add(kernels.AttnDecodePartialCall(s, splits, kernels.AttnDecodePartialBuffers[int]{
		Q: bq, KCache: bk, VCache: bv, Step: step, OPart: bo, MLPart: bml, Table: b.in("table", attnTable)}), false)
	b.add(kernels.AttnDecodeCombineCall(s, splits, kernels.AttnDecodeCombineBuffers[int]{OPart: bo, MLPart: bml, QG: bqg, Step: step, Out: out}), true)
	x, err := b.run(e, 1, nil, nil)
	if err != nil {
		return math.NaN(), err
	}
	return relErr(f32s(x.Bytes(out)), kernels.AttnDecode(s, n-1, q, qg, kc, vc, attnTable)), nil
}

// ---- MoE ----------------------------------------------------------------------------------------

// routeErr compares the kernel's routing with the reference's: ids in the same order, except
// that an id may differ from the reference's when their probabilities tie within routerTol (a
// near-tie fast math may break either way); the error is max |weight difference|.
func routeErr(ids []uint32, weights []float32, logits []float32, shared float32, k int) (float64, error) {
	wantIDs, wantW := kernels.MoERoute(logits, shared, k)
	if !slices.Equal(ids, wantIDs) {
		// probabilities of every expert, as MoERoute computes them
		_, all := kernels.MoERoute(logits, shared, len(logits))
		order, _ := kernels.MoERoute(logits, shared, len(logits))
		p := make([]float32, len(logits))
		for i, id := range order {
			p[id] = all[i]
		}
		for i := range ids {
			if int(ids[i]) >= len(p) || math.Abs(float64(p[ids[i]]-p[wantIDs[i]])) > routerTol {
				return math.NaN(), fmt.Errorf("expert ids %v, want %v", ids, wantIDs)
			}
		}
	}
	return absErr(weights, wantW), nil
}

func checkRouter(e *env, norm bool) (float64, error) {
	s, r := moeRouter, e.r
	mo := &model.MoE{Router: randQ(r, s.E, s.H, 8), SharedExpertGate: randQ(r, 1, s.H, 8)}
	x, gain := randFloats(r, s.H, 1), randGain(r, s.H)
	b := newPB()
	bs := kernels.MoERouterBuffers[int]{X: b.in("x", x), IDs: b.out("ids", 4*s.K), Weights: b.out("weights", 4*(s.K+1))}
	bs.Router = b.qm("router", mo.Router)
	bs.SharedGate = b.qm("shared_gate", mo.SharedExpertGate)
	call, xn := kernels.MoERouterCall(s, kernels.MoERouterThreads, bs), x
	if norm {
		bs.Gain = b.in("gain", gain)
		call, xn = kernels.MoERouterNormCall(s, eps, kernels.MoERouterThreads, bs), normed(x, gain)
	}
	b.add(call, false)
	ex, err := b.run(e, 1, nil, nil)
	if err != nil {
		return math.NaN(), err
	}
	logits, shared := kernels.MoERouterLogits(mo, xn)
	return routeErr(u32s(ex.Bytes(bs.IDs)), f32s(ex.Bytes(bs.Weights)), logits, shared, s.K)
}

func randIDs(r *rand.Rand, s kernels.MoEShape) []uint32 {
	var ids []uint32
	for _, e := range r.Perm(s.E)[:s.K] {
		ids = append(ids, uint32(e))
	}
	return ids
}

func checkGateUp(e *env, norm bool) (float64, error) {
	s, r := moeSmall, e.r
	mo := &model.MoE{Gate: randQ(r, s.E*s.I, s.H, 4), Up: randQ(r, s.E*s.I, s.H, 4), SharedGate: randQ(r, s.SI, s.H, 4), SharedUp: randQ(r, s.SI, s.H, 4)}
	ids, x, gain := randIDs(r, s), randFloats(r, s.H, 1), randGain(r, s.H)
	b := newPB()
	bs := kernels.MoEGateUpBuffers[int]{IDs: b.in("ids", ids), X: b.in("x", x), Act: b.out("act", 4*s.ActLen())}
	bs.Gate = b.qm("gate", mo.Gate)
	bs.Up = b.qm("up", mo.Up)
	bs.SharedGate = b.qm("shared_gate", mo.SharedGate)
	bs.SharedUp = b.qm("shared_up", mo.SharedUp)
	call, xn := kernels.MoEGateUpCall(s, bs), x
	if norm {
		bs.Gain = b.in("gain", gain)
		call, xn = kernels.MoEGateUpNormCall(s, eps, bs), normed(x, gain)
	}
	b.add(call, false)
	ex, err := b.run(e, 1, nil, nil)
	if err != nil {
		return math.NaN(), err
	}
	return relErr(f32s(ex.Bytes(bs.Act)), kernels.MoEGateUp(mo, s, ids, xn)), nil
}

func checkDown(e *env) (float64, error) {
	s, r := moeSmall, e.r
	mo := &model.MoE{Down: randQ(r, s.E*s.H, s.I, 4), SharedDown: randQ(r, s.H, s.SI, 4)}
	ids := randIDs(r, s)
	weights := make([]float32, s.K+1)
	for i := range weights {
		weights[i] = float32(r.Float64())
	}
	act, res0 := randFloats(r, s.ActLen(), 1), randFloats(r, s.H, 1)
	b := newPB()
	bs := kernels.MoEDownCombineBuffers[int]{IDs: b.in("ids", ids), Weights: b.in("weights", weights), Act: b.in("act", act), Res: b.inout("res", res0)}
	bs.Down = b.qm("down", mo.Down)
	bs.SharedDown = b.qm("shared_down", mo.SharedDown)
	b.add(kernels.MoEDownCombineCall(s, bs), false)
	ex, err := b.run(e, 1, nil, nil)
	if err != nil {
		return math.NaN(), err
	}
	want := slices.Clone(res0)
	kernels.MoEDownCombine(mo, s, ids, weights, act, want, true)
	got := f32s(ex.Bytes(bs.Res))
	var diff, scale float64
	for i := range want {
		if math.IsNaN(float64(got[i])) {
			return math.NaN(), fmt.Errorf("res[%d] is NaN", i)
		}
		diff = max(diff, math.Abs(float64(got[i])-float64(want[i])))
		scale = max(scale, math.Abs(float64(want[i])-float64(res0[i])))
	}
	return diff / scale, nil
}

// ---- selection ----------------------------------------------------------------------------------

// modelLogits are logits with a bulk near 0 and a few strong candidates, as a model produces.
func modelLogits(r *rand.Rand, x []float32) {
	for i := range x {
		x[i] = float32(r.NormFloat64() * 2)
	}
	for range 6 {
		x[r.IntN(len(x))] = float32(15 + r.NormFloat64()*3)
	}
}

func checkLogprob(e *env) (float64, error) {
	n := config.Production().VocabSize
	chunk := kernels.SampleDefaultChunk
	groups := kernels.SampleGroups(n, chunk)
	x := make([]float32, n)
	modelLogits(e.r, x)
	const token = 777
	b := newPB()
	logits, ms, top := b.in("logits", x), b.out("ms", 8*groups), b.out("top", 8*groups*kernels.LogprobTopN)
	step, out := b.in("step", []uint32{9, token}), b.out("record", 4*kernels.LogprobRecordLen)
	b.add(kernels.LogprobPartialCall(n, chunk, kernels.LogprobPartialBuffers[int]{Logits: logits, MS: ms, Top: top}), false)
	b.add(kernels.LogprobFinalCall(n, chunk, kernels.LogprobFinalBuffers[int]{Logits: logits, MS: ms, Top: top, Step: step, Out: out}), true)
	ex, err := b.run(e, 1, nil, nil)
	if err != nil {
		return math.NaN(), err
	}
	want := sample.New(sample.Params{TopLogprobs: kernels.LogprobTopN}, nil).Next(x)
	logZ := x[want.ID] - want.Logprob
	gotToken, lp, alts := kernels.LogprobRecord(f32s(ex.Bytes(out)), kernels.LogprobTopN)
	if gotToken != token || len(alts) != len(want.Top) {
		return math.NaN(), fmt.Errorf("record for token %d with %d alternatives, want %d and %d", gotToken, len(alts), token, len(want.Top))
	}
	rel := func(a, b float32) float64 { return math.Abs(float64(a-b)) / max(1, math.Abs(float64(b))) }
	worst := rel(lp, x[token]-logZ)
	for r, c := range want.Top {
		if alts[r].ID != c.ID {
			return math.NaN(), fmt.Errorf("alternative %d is id %d, engine/sample's %d", r, alts[r].ID, c.ID)
		}
		worst = max(worst, rel(alts[r].Logprob, c.Logprob))
	}
	return worst, nil
}

func checkArgmax(e *env) (float64, error) {
	n := config.Production().VocabSize
	groups := kernels.ArgmaxDefaultGroups
	x := make([]float32, n+64)
	modelLogits(e.r, x)
	for i := n; i < len(x); i++ {
		x[i] = 1e30 // past the vocab limit: never chosen
	}
	b := newPB()
	logits, partial, step := b.in("logits", x), b.out("partial", 8*groups), b.inout("step", []uint32{9, 77})
	params, state := b.in("params", kernels.SampleParams{}.Words()), b.in("state", []uint32{0})
	b.add(kernels.ArgmaxPartialCall(n, groups, kernels.ArgmaxThreads, kernels.ArgmaxPartialBuffers[int]{Logits: logits, Partial: partial}), false)
	b.add(kernels.ArgmaxFinalCall(n, groups, kernels.ArgmaxThreads, kernels.ArgmaxFinalBuffers[int]{Partial: partial, Step: step, Params: params, State: state}), true)
	ex, err := b.run(e, 1, nil, nil)
	if err != nil {
		return math.NaN(), err
	}
	st := u32s(ex.Bytes(step))
	if st[0] != 10 {
		return math.NaN(), fmt.Errorf("step.pos 9 -> %d, want 10", st[0])
	}
	if want := kernels.Argmax(x, n); int(st[1]) != want {
		return 1, fmt.Errorf("chose id %d, want %d", st[1], want)
	}
	return 0, nil
}

func checkSample(e *env) (float64, error) {
	const n, chunk, steps, pos0 = 65536, kernels.SampleDefaultChunk, 3, 41
	seed := e.r.Uint64()
	p := sample.Params{Temperature: 1, TopP: 0.95, TopK: 20, PresencePenalty: 1.5, VocabLimit: n, Seed: &seed}
	prompt := []int{1, 5, 5, n - 1, 4242}
	setup, err := kernels.NewSampleSetup(p, prompt, n, pos0, 64)
	if err != nil {
		return math.NaN(), err
	}
	cpu := sample.New(p, prompt)
	bias, pen := setup.Bias, setup.Pen
	if bias == nil {
		bias = []float32{0}
	}
	if pen == nil {
		pen = []float32{0}
	}
	b := newPB()
	logits := b.in("logits", make([]float32, n+3))
	params, state, bb, pt := b.in("params", setup.Params.Words()), b.inout("state", setup.State), b.in("bias", bias), b.in("penalties", pen)
	adj, cand := b.out("adjusted", 4*n), b.out("candidates", 8*kernels.SampleCandLen(n, chunk))
	step, stat := b.inout("step", []uint32{pos0, 0}), b.out("status", 4)
	b.add(kernels.SamplePenaltiesCall(n, chunk, kernels.SamplePenaltiesBuffers[int]{Logits: logits, Params: params, State: state, Bias: bb, Pen: pt, Out: adj}), false)
	b.add(kernels.SampleSelectCall(n, chunk, kernels.SampleThreads, kernels.SampleSelectBuffers[int]{Logits: adj, Params: params, Cand: cand}), true)
	b.add(kernels.SampleFinalCall(n, chunk, kernels.SampleThreads, kernels.SampleFinalBuffers[int]{Params: params, Cand: cand, Step: step, State: state, Status: stat}), true)
	x := make([]float32, n+3)
	wrong := 0
	var firstErr error
	errStop := errors.New("stop")
	_, err = b.run(e, steps, func(ex *exec.Executor, s int) {
		modelLogits(e.r, x)
		for i := n; i < len(x); i++ {
			x[i] = 1e30
		}
		copy(ex.Bytes(logits), enc(x))
	}, func(ex *exec.Executor, s int) error {
		want := cpu.Next(x).ID
		st := u32s(ex.Bytes(step))
		if st[0] != uint32(pos0+s+1) {
			return fmt.Errorf("step %d: step.pos %d, want %d", s, st[0], pos0+s+1)
		}
		if status := u32s(ex.Bytes(stat))[0]; status != 0 {
			return fmt.Errorf("step %d: status %#x, want 0 (no CPU redo at top-k 20)", s, status)
		}
		if int(st[1]) != want {
			wrong++
			firstErr = fmt.Errorf("step %d: chose id %d, engine/sample chose %d", s, st[1], want)
			return errStop // the token states now differ: stop comparing
		}
		return nil
	})
	if firstErr != nil {
		return float64(wrong), firstErr
	}
	if err != nil {
		return math.NaN(), err
	}
	return float64(wrong), firstErr
}
