package selftest

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

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
	moeRouter = kernels.MoEShape{H: 2048, E: 64, K: 8, I: 512, SI: 512} // E 64 instead of 256
	moeSmall  = kernels.MoEShape{H: 2048, E: 8, K: 4, I: 512, SI: 512}  // E 8, top-4
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
	// qmv, embed, add_rmsnorm, conv: metal/cases (qmvTol, embedTol, rmsTol, convTol there).
	// moe_router(_norm): max |weight − reference| (weights ≤ 1; test 2e-6; fast exp): 1e-5. The
	// chosen ids must match, except experts whose reference probabilities tie within 1e-5.
	routerTol = 1e-5
	// moe_gate_up(_norm): act relative to max|act| (test 5e-6; fast exp in SiLU, FMAs): 2e-5.
	gateUpTol = 2e-5
	// moe_down_combine: res error relative to max|MoE output| (test 5e-6): 2e-5.
	downTol = 2e-5
	// the sampler chooses ids: the error is the number of wrong choices; none pass (argmax: metal/cases).
	idTol = 0
	// moe_*_mm (prefill grouped GEMMs on simdgroup matrices, as qmm): y relative to max|y| (test
	// 1e-6 at K 2048; fast math, the hardware's order inside the 8-term products): 1e-4, as qmv.
	qmmTol = 1e-4
)

func checks() []check {
	return []check{
		{"moe_router", fmt.Sprintf("H %d, E %d, top-%d", moeRouter.H, moeRouter.E, moeRouter.K), routerTol, func(e *env) (float64, error) { return checkRouter(e, false) }},
		{"moe_router_norm", fmt.Sprintf("H %d, E %d, top-%d", moeRouter.H, moeRouter.E, moeRouter.K), routerTol, func(e *env) (float64, error) { return checkRouter(e, true) }},
		{"moe_gate_up", fmt.Sprintf("H %d, E %d, top-%d, I %d, SI %d", moeSmall.H, moeSmall.E, moeSmall.K, moeSmall.I, moeSmall.SI), gateUpTol, func(e *env) (float64, error) { return checkGateUp(e, false) }},
		{"moe_gate_up_norm", fmt.Sprintf("H %d, E %d, top-%d, I %d, SI %d", moeSmall.H, moeSmall.E, moeSmall.K, moeSmall.I, moeSmall.SI), gateUpTol, func(e *env) (float64, error) { return checkGateUp(e, true) }},
		{"moe_down_combine", fmt.Sprintf("H %d, E %d, top-%d, I %d, SI %d", moeSmall.H, moeSmall.E, moeSmall.K, moeSmall.I, moeSmall.SI), downTol, checkDown},
		{"moe_chunk_routing", "moe_topk + moe_sort, 70 tokens, E 256, top-8", idTol, checkMoEChunkRouting},
		{"moe_gate_up_mm", "grouped gate/up + SwiGLU, 40 tokens, E 8, top-2, I 512, H 2048", qmmTol, checkMoEGateUpMM},
		{"moe_down_combine_mm", "grouped down (each tile height) + combine with the shared expert, 20 tokens, E 8, top-2, I 512, H 2048", qmmTol, func(e *env) (float64, error) { return checkMoEDownCombineMM(e, false) }},
		{"moe_down_combine_norm_mm", "the same, the combine normalising the residual (moe_combine_norm)", qmmTol, func(e *env) (float64, error) { return checkMoEDownCombineMM(e, true) }},
		{"sample", "penalties+select+final, 65536 ids, top-k 20 top-p 0.95 presence 1.5, 3 steps", idTol, checkSample},
	}
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
	tk := kernels.MoETopKBuffers[int]{Logits: b.In("logits", logits), Shared: b.In("shared", shared), IDs: b.Out("ids", 4*n*s.K), Weights: b.Out("weights", 4*n*(s.K+1))}
	b.Add(kernels.MoETopKChunkCall(s, n, tk), false)
	so := kernels.MoESortBuffers[int]{IDs: tk.IDs, Weights: tk.Weights, Offs: b.Out("offs", 4*(s.E+1)), Tok: b.Out("tok", 4*n*s.K), W: b.Out("w", 4*n*s.K), Blocks: b.Out("blocks", 16*s.MoEBlocks(n, s.BlockRows(n))), Pos: b.Out("pos", 4*n*s.K)}
	b.Add(kernels.MoESortCall(s, n, s.BlockRows(n), so), true)
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
		bs := kernels.MoEGateUpMMBuffers[int]{Gate: b.QM("gate", gate), Up: b.QM("up", up), X: b.In("x", xs), Tok: b.In("tok", sorted.Tok),
			Blocks: b.In("blocks", sorted.BlockWords()), Act: b.Out("act", 4*n*s.K*s.I)}
		b.Add(kernels.MoEGateUpMMCall(s.H, s.I, n*s.K, len(sorted.Blocks), bm, bs), false)
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
	worst := 0.0
	for _, bm := range kernels.QMMTileHeights { // moe_down_mm's every instance
		sorted := kernels.MoESort(s, ids, weights, n, bm)
		blocks := sorted.BlockWords()
		down := randQ(e.r, s.E*s.H, s.I, 4)
		act, sh, res := randFloats(e.r, n*s.K*s.I, 1), randFloats(e.r, n*s.H, 1), randFloats(e.r, n*s.H, 1)
		b := newPB()
		db := kernels.MoEDownMMBuffers[int]{Down: b.QM("down", down), Act: b.In("act", act), W: b.In("w", sorted.W), Blocks: b.In("blocks", blocks), Y: b.Out("y", 4*n*s.K*s.H)}
		b.Add(kernels.MoEDownMMCall(s.H, s.I, n*s.K, len(sorted.Blocks), bm, db), false)
		cb := kernels.MoECombineBuffers[int]{IDs: b.In("ids", ids), Weights: b.In("weights", weights), Pos: b.In("pos", sorted.Pos), Y: db.Y, Shared: b.In("sh", sh), Res: b.InOut("res", res)}
		const eps = 1e-6
		gain := randGain(e.r, s.H)
		if norm {
			cb.Gain, cb.Out = b.In("gain", gain), b.Out("out", 4*n*s.H)
			b.Add(kernels.MoECombineNormCall(s, n, eps, cb), true)
		} else {
			b.Add(kernels.MoECombineCall(s, n, cb), true)
		}
		x, err := b.run(e, 1, nil, nil)
		if err != nil {
			return math.NaN(), err
		}
		y := kernels.MoEDownSorted(down, s.H, sorted, act)
		if re := relErr(f32s(x.Bytes(db.Y)), y); !(re <= qmmTol) {
			return re, fmt.Errorf("moe_down_mm, tiles of %d: relative error %.2g", bm, re)
		}
		want := slices.Clone(res)
		kernels.MoECombine(s, ids, weights, sorted, y, sh, want, n)
		got := f32s(x.Bytes(cb.Res))
		worst = max(worst, relErr(got, want))
		if norm {
			out, wantOut := f32s(x.Bytes(cb.Out)), make([]float32, n*s.H)
			for t := range n {
				row := got[t*s.H : (t+1)*s.H]
				kernels.AddRMSNorm(make([]float32, s.H), wantOut[t*s.H:(t+1)*s.H], row, make([]float32, s.H), gain, eps)
			}
			worst = max(worst, relErr(out, wantOut))
		}
	}
	return worst, nil
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
	bs := kernels.MoERouterBuffers[int]{X: b.In("x", x), IDs: b.Out("ids", 4*s.K), Weights: b.Out("weights", 4*(s.K+1))}
	bs.Router = b.QM("router", mo.Router)
	bs.SharedGate = b.QM("shared_gate", mo.SharedExpertGate)
	call, xn := kernels.MoERouterCall(s, kernels.MoERouterThreads, bs), x
	if norm {
		bs.Gain = b.In("gain", gain)
		call, xn = kernels.MoERouterNormCall(s, eps, kernels.MoERouterThreads, bs), normed(x, gain)
	}
	b.Add(call, false)
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
	bs := kernels.MoEGateUpBuffers[int]{IDs: b.In("ids", ids), X: b.In("x", x), Act: b.Out("act", 4*s.ActLen())}
	bs.Gate = b.QM("gate", mo.Gate)
	bs.Up = b.QM("up", mo.Up)
	bs.SharedGate = b.QM("shared_gate", mo.SharedGate)
	bs.SharedUp = b.QM("shared_up", mo.SharedUp)
	call, xn := kernels.MoEGateUpCall(s, bs), x
	if norm {
		bs.Gain = b.In("gain", gain)
		call, xn = kernels.MoEGateUpNormCall(s, eps, bs), normed(x, gain)
	}
	b.Add(call, false)
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
	bs := kernels.MoEDownCombineBuffers[int]{IDs: b.In("ids", ids), Weights: b.In("weights", weights), Act: b.In("act", act), Res: b.InOut("res", res0)}
	bs.Down = b.QM("down", mo.Down)
	bs.SharedDown = b.QM("shared_down", mo.SharedDown)
	b.Add(kernels.MoEDownCombineCall(s, bs), false)
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
	logits := b.In("logits", make([]float32, n+3))
	params, state, bb, pt := b.In("params", setup.Params.Words()), b.InOut("state", setup.State), b.In("bias", bias), b.In("penalties", pen)
	adj, cand := b.Out("adjusted", 4*n), b.Out("candidates", 8*kernels.SampleCandLen(n, chunk))
	step, stat := b.InOut("step", []uint32{pos0, 0}), b.Out("status", 4)
	b.Add(kernels.SamplePenaltiesCall(n, chunk, kernels.SamplePenaltiesBuffers[int]{Logits: logits, Params: params, State: state, Bias: bb, Pen: pt, Out: adj}), false)
	b.Add(kernels.SampleSelectCall(n, chunk, kernels.SampleThreads, kernels.SampleSelectBuffers[int]{Logits: adj, Params: params, Cand: cand}), true)
	b.Add(kernels.SampleFinalCall(n, chunk, kernels.SampleThreads, kernels.SampleFinalBuffers[int]{Params: params, Cand: cand, Step: step, State: state, Status: stat}), true)
	x := make([]float32, n+3)
	wrong := 0
	var firstErr error
	errStop := errors.New("stop")
	_, err = b.run(e, steps, func(ex *exec.Executor, s int) {
		kernels.ModelLogits(e.r, x)
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
