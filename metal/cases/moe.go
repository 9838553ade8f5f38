package cases

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/kernels"
)

// MoE tolerances. The emulator's (IEEE float32, libm exp) are the kernel tests' bounds, 2-5x
// above the measured errors; moe.metal compiles MathSafe, and Metal's margins (the selftest's)
// cover the hardware's reduction order, FMA contraction and, in qmm.metal, fast math.
var (
	// routing weights (≤ 1) from the kernel's own GEMV logits, max |weight − reference|. The ids
	// must be the reference's exactly on the emulator; on Metal an id may differ where the two
	// experts' reference probabilities tie within the Metal tolerance (a near-tie the hardware's
	// summation order may break either way).
	moeRouterTol = Tol{Emu: 2e-6, Metal: 1e-5}
	// routing weights from the same logits (moe_topk): exp and sum order only; ids exact.
	moeTopKTol = Tol{Emu: 1e-6, Metal: 1e-5}
	// moe_gate_up(_norm): act relative to max|act| (Metal: fast exp in SiLU, FMAs).
	moeGateUpTol = Tol{Emu: 5e-6, Metal: 2e-5}
	// moe_down_combine: res error relative to max|MoE output|.
	moeDownTol = Tol{Emu: 5e-6, Metal: 2e-5}
	// the prefill grouped GEMMs (qmm.metal, simdgroup matrices): y relative to max|y| (Metal: fast
	// math, the hardware's order inside the 8-term products: 1e-4, as qmv's selftest margin).
	moeMMTol = Tol{Emu: 2e-6, Metal: 1e-4}
	// the same at the model's hidden size (sums of 2,048 terms; measured 2.0e-6): 4e-6, as qmv's.
	moeMMWideTol = Tol{Emu: 4e-6, Metal: 1e-4}
	// a chunk's whole MoE block (or down + combine): its contribution relative to its largest
	// element; the normed rows of moe_combine_norm within moeNormRowTol of add_rmsnorm's each
	// (on the emulator an error beyond it is the case's error).
	moeChunkTol = Tol{Emu: 5e-6, Metal: 1e-4}
	// moeChunkBF16Tol: the chunk's MoE block with its activations bfloat (moeChunkCase) against
	// the float reference. x is bfloat on both sides; the block rounds act, each pair's row and
	// the shared row once each (≤ 2^-9 of the element), and a token sums K + 1 of those rows, so
	// its contribution can be off by 2^-9 of the sum of their magnitudes, (K + 1)·2^-9 of the
	// largest row: 1e-2 for the cases' K + 1 ≤ 5 (measured at most 3.3e-3).
	moeChunkBF16Tol = Tol{Emu: 1e-2, Metal: 1e-2}
)

const moeNormRowTol = 1e-6

// moeShapes are the small shapes run in every order: the tiny one, then edges: H not a multiple of
// 512 (a partial step), E not a multiple of 32 and E+1 not of 4 (the shared gate shares a row
// block with router rows), SI ≠ I both ways, K = E, K = 1, H below one simdgroup step.
var moeShapes = []struct {
	s             kernels.MoEShape
	routerThreads int
}{
	{kernels.MoEShape{H: 128, E: 16, K: 4, I: 64, SI: 64}, 64},
	{kernels.MoEShape{H: 192, E: 40, K: 5, I: 64, SI: 128}, 96},
	{kernels.MoEShape{H: 64, E: 8, K: 8, I: 192, SI: 64}, 32},
	{kernels.MoEShape{H: 576, E: 33, K: 1, I: 128, SI: 64}, 1024},
}

// moeProduction is the model's MoE shape.
var moeProduction = func() kernels.MoEShape {
	c := config.Production()
	return kernels.MoEShape{H: c.HiddenSize, E: c.NumExperts, K: c.TopK, I: c.MoEIntermediate, SI: c.SharedIntermed}
}()

func moeTag(s kernels.MoEShape) string {
	return fmt.Sprintf("h%d_e%d_k%d_i%d_si%d", s.H, s.E, s.K, s.I, s.SI)
}

func moeCases() []Case {
	var out []Case
	for _, m := range moeShapes {
		out = append(out, moeRouterCase(m.s, m.routerThreads, false), moeNormChainCase(m.s, m.routerThreads),
			moeGateUpCase(m.s, false, false), moeDownCase(m.s, false))
	}
	// The selftest's: the model's widths with fewer experts (the router E 64; gate/up and down E 8,
	// top-4).
	router := kernels.MoEShape{H: 2048, E: 64, K: 8, I: 512, SI: 512}
	small := kernels.MoEShape{H: 2048, E: 8, K: 4, I: 512, SI: 512}
	out = append(out, moeRouterCase(router, kernels.MoERouterThreads, false), moeRouterCase(router, kernels.MoERouterThreads, true),
		moeGateUpCase(small, false, true), moeGateUpCase(small, true, true), moeDownCase(small, true))
	out = append(out, moeRouterTiesCase(), moeRouterZeroCase())
	out = append(out, moeTopKCases()...)
	out = append(out, moeProductionCase(false), moeProductionCase(true))
	out = append(out, moeBatchCases()...)
	return append(out, moePrefillCases()...)
}

// randomMoE quantizes random float weights (router and shared gate 8-bit; large 4-bit matrices
// random codes, moeQ).
func randomMoE(r *rand.Rand, s kernels.MoEShape) *model.MoE {
	return &model.MoE{
		Router: RandQ(r, s.E, s.H, 8), SharedExpertGate: RandQ(r, 1, s.H, 8),
		Gate: moeQ(r, s.E*s.I, s.H), Up: moeQ(r, s.E*s.I, s.H), Down: moeQ(r, s.E*s.H, s.I),
		SharedGate: moeQ(r, s.SI, s.H), SharedUp: moeQ(r, s.SI, s.H), SharedDown: moeQ(r, s.H, s.SI),
	}
}

// moeQ is a rows × cols 4-bit matrix: N(0, 0.05²) values quantized, or above 2^20 values random
// codes with MLX-like scales and biases (quicker than quantizing at the model's widths).
func moeQ(r *rand.Rand, rows, cols int) *quant.Matrix {
	return qmvMatrix(r, rows, cols, 4, rows*cols > 1<<20)
}

// normed is add_rmsnorm's output for x alone: the input the _norm kernels fold in.
func normed(x []float32, gain []uint16) []float32 {
	res, out := make([]float32, len(x)), make([]float32, len(x))
	kernels.AddRMSNorm(res, out, x, make([]float32, len(x)), gain, eps)
	return out
}

// absErr is max |got − want|, NaN when got holds a NaN.
var absErr = kernels.AbsErr

// route compares a kernel's routing with MoERoute's of logits: the ids exactly (on Metal, with
// nearTie, an id may differ where the two experts' probabilities tie within the case's
// tolerance), the weights by max |difference|, recorded; bound, when positive, is the weights'
// own bound (an error beyond it is the case's error).
func (c *Ctx) route(what string, ids []uint32, weights, logits []float32, shared float32, k int, nearTie bool, bound float64) error {
	wantIDs, wantW := kernels.MoERoute(logits, shared, k)
	if !slices.Equal(ids, wantIDs) {
		ok := nearTie && c.Kind != Emu
		if ok {
			order, all := kernels.MoERoute(logits, shared, len(logits))
			p := make([]float32, len(logits))
			for i, id := range order {
				p[id] = all[i]
			}
			for i := range ids {
				if int(ids[i]) >= len(p) || math.Abs(float64(p[ids[i]]-p[wantIDs[i]])) > c.tolerance() {
					ok = false
				}
			}
		}
		if !ok {
			c.note(1, fmt.Sprintf("%s ids = %v, want %v", what, ids, wantIDs))
			return fmt.Errorf("%s: expert ids %v, want %v", what, ids, wantIDs)
		}
	}
	e := absErr(weights, wantW)
	i := worstIndex(weights, wantW)
	c.note(e, fmt.Sprintf("%s weights[%d] = %g, want %g", what, i, weights[i], wantW[i]))
	if bound > 0 && !(e <= bound) {
		return fmt.Errorf("%s: routing weights off by %.2g, bound %.2g", what, e, bound)
	}
	return nil
}

// moeRouterCase: moe_router (or moe_router_norm on an un-normed x of scale 3) in threadgroups of
// threads against MoERoute of the reference logits (quant.MatVec of the 8-bit router).
func moeRouterCase(s kernels.MoEShape, threads int, norm bool) Case {
	k := "moe_router"
	if norm {
		k = "moe_router_norm"
	}
	return Case{
		Name: fmt.Sprintf("%s/%s_tg%d", k, moeTag(s), threads), Kernels: []string{k}, Tol: moeRouterTol,
		Shape: fmt.Sprintf("H %d, E %d, top-%d, threadgroup of %d", s.H, s.E, s.K, threads),
		Run: func(c *Ctx) error {
			if err := s.Validate(); err != nil {
				return err
			}
			mo := &model.MoE{Router: RandQ(c.R, s.E, s.H, 8), SharedExpertGate: RandQ(c.R, 1, s.H, 8)}
			x := RandFloats(c.R, s.H, 1)
			bs := kernels.MoERouterBuffers[int]{Router: c.QM("router", mo.Router), SharedGate: c.QM("shared_gate", mo.SharedExpertGate), X: c.In("x", x),
				IDs: c.Out("ids", 4*s.K), Weights: c.Out("weights", 4*(s.K+1))}
			call, xn := kernels.MoERouterCall(s, threads, bs), x
			if norm {
				gain := RandGain(c.R, s.H, 0.5)
				bs.Gain = c.In("gain", gain)
				call, xn = kernels.MoERouterNormCall(s, eps, threads, bs), normed(x, gain)
			}
			c.Add(call, false)
			if err := c.Step(); err != nil {
				return err
			}
			logits, shared := kernels.MoERouterLogits(mo, xn)
			return c.route(k, c.U32(bs.IDs), c.F32(bs.Weights), logits, shared, s.K, true, 0)
		},
	}
}

// moeRouterTiesCase duplicates the top expert's router row into other rows (bitwise-equal
// logits): the tie must go to the lower ids, also across the K boundary, in every order.
func moeRouterTiesCase() Case {
	s := kernels.MoEShape{H: 128, E: 40, K: 4, I: 64, SI: 64}
	return Case{
		Name: "moe_router/ties_" + moeTag(s), Kernels: []string{"moe_router"}, Tol: moeRouterTol,
		Shape: "H 128, E 40, top-4, the top expert's row copied to 5 others (6 equal maxima), threadgroup of 64",
		Run: func(c *Ctx) error {
			router, seg := RandQ(c.R, s.E, s.H, 8), RandQ(c.R, 1, s.H, 8)
			x := RandFloats(c.R, s.H, 1)
			mo := &model.MoE{Router: router, SharedExpertGate: seg}
			logits, shared := kernels.MoERouterLogits(mo, x)
			wantIDs, _ := kernels.MoERoute(logits, shared, s.K)
			src := int(wantIDs[0])
			wpr, gpr := s.H/4, s.H/64
			for _, dst := range []int{1, 7, 33, 38, 39} { // only the 4 lowest ids of the maxima are taken
				if dst == src {
					continue
				}
				copy(router.Words[dst*wpr:(dst+1)*wpr], router.Words[src*wpr:(src+1)*wpr])
				copy(router.Scales[dst*gpr:(dst+1)*gpr], router.Scales[src*gpr:(src+1)*gpr])
				copy(router.Biases[dst*gpr:(dst+1)*gpr], router.Biases[src*gpr:(src+1)*gpr])
				logits[dst] = logits[src] // equal in exact arithmetic; make the reference agree exactly
			}
			bs := kernels.MoERouterBuffers[int]{Router: c.QM("router", router), SharedGate: c.QM("shared_gate", seg), X: c.In("x", x),
				IDs: c.Out("ids", 4*s.K), Weights: c.Out("weights", 4*(s.K+1))}
			c.Add(kernels.MoERouterCall(s, 64, bs), false)
			if err := c.Step(); err != nil {
				return err
			}
			return c.route("moe_router", c.U32(bs.IDs), c.F32(bs.Weights), logits, shared, s.K, false, 0)
		},
	}
}

// moeRouterZeroCase: a zero x makes every logit equal: experts 0..K-1 with weight 1/K each,
// shared gate 1/2, exactly.
func moeRouterZeroCase() Case {
	s := kernels.MoEShape{H: 128, E: 40, K: 4, I: 64, SI: 64}
	return Case{
		Name: "moe_router/zero_x_" + moeTag(s), Kernels: []string{"moe_router"}, Tol: Tol{},
		Shape: "H 128, E 40, top-4, x = 0, threadgroup of 128",
		Run: func(c *Ctx) error {
			bs := kernels.MoERouterBuffers[int]{Router: c.QM("router", RandQ(c.R, s.E, s.H, 8)), SharedGate: c.QM("shared_gate", RandQ(c.R, 1, s.H, 8)),
				X: c.In("x", make([]float32, s.H)), IDs: c.Out("ids", 4*s.K), Weights: c.Out("weights", 4*(s.K+1))}
			c.Add(kernels.MoERouterCall(s, 128, bs), false)
			if err := c.Step(); err != nil {
				return err
			}
			ids := c.U32(bs.IDs)
			if want := []uint32{0, 1, 2, 3}; !slices.Equal(ids, want) {
				c.note(1, fmt.Sprintf("ids = %v, want %v", ids, want))
				return fmt.Errorf("expert ids %v, want %v", ids, want)
			}
			w, want := c.F32(bs.Weights), []float32{0.25, 0.25, 0.25, 0.25, 0.5}
			i := worstIndex(w, want)
			c.note(absErr(w, want), fmt.Sprintf("weights[%d] = %g, want %g", i, w[i], want[i]))
			return nil
		},
	}
}

// moeTopKCases route given logits (moe_topk): the same logits as the reference, so ids exactly
// and weights to exp/summation rounding; exact ties, ties among probabilities that underflow to
// zero, K = E and the largest E and K.
func moeTopKCases() []Case {
	var out []Case
	for _, t := range []struct {
		name   string
		e, k   int
		logits func(r *rand.Rand) []float32
	}{
		{"random", 256, 8, func(r *rand.Rand) []float32 { return RandFloats(r, 256, 2) }},
		{"random_e40", 40, 5, func(r *rand.Rand) []float32 { return RandFloats(r, 40, 3) }},
		{"max_e", kernels.MoEMaxExperts, kernels.MoEMaxTopK, func(r *rand.Rand) []float32 { return RandFloats(r, kernels.MoEMaxExperts, 1) }},
		{"k_eq_e", 8, 8, func(r *rand.Rand) []float32 { return RandFloats(r, 8, 1) }},
		{"ties", 64, 8, func(r *rand.Rand) []float32 {
			l := RandFloats(r, 64, 0.1)
			for _, i := range []int{3, 17, 40, 41, 63, 9, 12, 50, 51, 52} {
				l[i] = 2 // ten equal maxima: the eight lowest ids win
			}
			return l
		}},
		{"underflow", 20, 6, func(r *rand.Rand) []float32 {
			l := make([]float32, 20)
			for i := range l {
				l[i] = -1e4 // probability exactly 0
			}
			l[2], l[19], l[5], l[11] = 1, 0.5, 0.5, -1
			return l // four non-zero, then the zero-probability tie: ids 0 and 1
		}},
	} {
		s := kernels.MoEShape{H: 64, E: t.e, K: t.k, I: 64, SI: 64}
		out = append(out, Case{
			Name: fmt.Sprintf("moe_topk/%s_e%d_k%d", t.name, t.e, t.k), Kernels: []string{"moe_topk"}, Tol: moeTopKTol,
			Shape: fmt.Sprintf("E %d, top-%d, %s logits", t.e, t.k, t.name),
			Run: func(c *Ctx) error {
				logits, shared := t.logits(c.R), float32(c.R.NormFloat64()*4)
				bs := kernels.MoETopKBuffers[int]{Logits: c.In("logits", logits), Shared: c.In("shared", []float32{shared}), IDs: c.Out("ids", 4*s.K), Weights: c.Out("weights", 4*(s.K+1))}
				c.Add(kernels.MoETopKCall(s, bs), false)
				if err := c.Step(); err != nil {
					return err
				}
				return c.route("moe_topk", c.U32(bs.IDs), c.F32(bs.Weights), logits, shared, s.K, false, 0)
			},
		})
	}
	return out
}

// distinctIDs returns k distinct random experts, the last expert among them when k > 1.
func distinctIDs(r *rand.Rand, e, k int) []uint32 {
	ids := make([]uint32, k)
	for i, v := range r.Perm(e)[:k] {
		ids[i] = uint32(v)
	}
	if k > 1 && !slices.Contains(ids, uint32(e-1)) {
		ids[k/2] = uint32(e - 1)
	}
	return ids
}

// gateUpBuffers declares moe_gate_up's weights, ids, x and act.
func (c *Ctx) gateUpBuffers(mo *model.MoE, s kernels.MoEShape, ids, x int) kernels.MoEGateUpBuffers[int] {
	return kernels.MoEGateUpBuffers[int]{IDs: ids, X: x, Act: c.Out("act", 4*s.ActLen()),
		Gate: c.QM("gate", mo.Gate), Up: c.QM("up", mo.Up), SharedGate: c.QM("shared_gate", mo.SharedGate), SharedUp: c.QM("shared_up", mo.SharedUp)}
}

// moeGateUpCase: moe_gate_up (or moe_gate_up_norm on an un-normed x) for K distinct experts,
// the last among them, against MoEGateUp.
func moeGateUpCase(s kernels.MoEShape, norm, heavy bool) Case {
	k := "moe_gate_up"
	if norm {
		k = "moe_gate_up_norm"
	}
	return Case{
		Name: fmt.Sprintf("%s/%s", k, moeTag(s)), Kernels: []string{k}, Tol: moeGateUpTol, Heavy: heavy,
		Shape: fmt.Sprintf("H %d, E %d, top-%d, I %d, SI %d", s.H, s.E, s.K, s.I, s.SI),
		Run: func(c *Ctx) error {
			mo := randomMoE(c.R, s)
			ids, x := distinctIDs(c.R, s.E, s.K), RandFloats(c.R, s.H, 1)
			bs := c.gateUpBuffers(mo, s, c.In("ids", ids), c.In("x", x))
			call, xn := kernels.MoEGateUpCall(s, bs), x
			if norm {
				gain := RandGain(c.R, s.H, 0.5)
				bs.Gain = c.In("gain", gain)
				call, xn = kernels.MoEGateUpNormCall(s, eps, bs), normed(x, gain)
			}
			c.Add(call, false)
			if err := c.Step(); err != nil {
				return err
			}
			c.Rel("act", c.F32(bs.Act), kernels.MoEGateUp(mo, s, ids, xn))
			return nil
		},
	}
}

// moeNormChainCase: moe_router_norm then moe_gate_up_norm on its ids (as the decode step runs
// them) on an un-normed x of scale 3, against the references on add_rmsnorm's output: ids
// exactly (near-ties on Metal), weights within moeRouterTol, act within the case's tolerance of
// max |act|.
func moeNormChainCase(s kernels.MoEShape, threads int) Case {
	return Case{
		Name: fmt.Sprintf("moe_router_norm/chain_%s_tg%d", moeTag(s), threads), Kernels: []string{"moe_router_norm", "moe_gate_up_norm"}, Tol: moeGateUpTol,
		Shape: fmt.Sprintf("H %d, E %d, top-%d, I %d, SI %d, router threadgroup of %d, then gate/up on its ids", s.H, s.E, s.K, s.I, s.SI, threads),
		Run: func(c *Ctx) error {
			mo := randomMoE(c.R, s)
			x, gain := RandFloats(c.R, s.H, 3), RandGain(c.R, s.H, 0.5)
			xn := normed(x, gain)
			bx, bg := c.In("x", x), c.In("gain", gain)
			rb := kernels.MoERouterBuffers[int]{Router: c.QM("router", mo.Router), SharedGate: c.QM("shared_gate_logit", mo.SharedExpertGate), X: bx, Gain: bg,
				IDs: c.Out("ids", 4*s.K), Weights: c.Out("weights", 4*(s.K+1))}
			c.Add(kernels.MoERouterNormCall(s, eps, threads, rb), false)
			gb := c.gateUpBuffers(mo, s, rb.IDs, bx)
			gb.Gain = bg
			c.Add(kernels.MoEGateUpNormCall(s, eps, gb), true)
			if err := c.Step(); err != nil {
				return err
			}
			logits, shared := kernels.MoERouterLogits(mo, xn)
			ids := c.U32(rb.IDs)
			if err := c.route("moe_router_norm", ids, c.F32(rb.Weights), logits, shared, s.K, true, moeRouterTol.For(c.Kind)); err != nil {
				return err
			}
			c.Rel("act", c.F32(gb.Act), kernels.MoEGateUp(mo, s, ids, xn))
			return nil
		},
	}
}

// moeDownCase: moe_down_combine for K distinct experts with normalised weights and a shared
// gate, added to a residual, against MoEDownCombine in ascending expert id (the kernel's order),
// relative to max |MoE output|.
func moeDownCase(s kernels.MoEShape, heavy bool) Case {
	return Case{
		Name: "moe_down_combine/" + moeTag(s), Kernels: []string{"moe_down_combine"}, Tol: moeDownTol, Heavy: heavy,
		Shape: fmt.Sprintf("H %d, E %d, top-%d, I %d, SI %d", s.H, s.E, s.K, s.I, s.SI),
		Run: func(c *Ctx) error {
			r := c.R
			mo := randomMoE(r, s)
			ids := distinctIDs(r, s.E, s.K)
			weights := make([]float32, s.K+1)
			var sum float32
			for i := range s.K {
				weights[i] = 0.05 + r.Float32()
				sum += weights[i]
			}
			for i := range s.K {
				weights[i] /= sum
			}
			weights[s.K] = r.Float32()
			act, res0 := RandFloats(r, s.ActLen(), 0.5), RandFloats(r, s.H, 1)
			bs := kernels.MoEDownCombineBuffers[int]{IDs: c.In("ids", ids), Weights: c.In("weights", weights), Act: c.In("act", act), Res: c.InOut("res", res0),
				Down: c.QM("down", mo.Down), SharedDown: c.QM("shared_down", mo.SharedDown)}
			c.Add(kernels.MoEDownCombineCall(s, bs), false)
			if err := c.Step(); err != nil {
				return err
			}
			c.moeRes("res", c.F32(bs.Res), res0, func(res []float32) { kernels.MoEDownCombine(mo, s, ids, weights, act, res, false) })
			return nil
		},
	}
}

// moeRes records got's error against res0 plus the MoE output add writes, relative to max
// |MoE output| (add applied to zeros).
func (c *Ctx) moeRes(what string, got, res0 []float32, add func(res []float32)) {
	want, out := slices.Clone(res0), make([]float32, len(res0))
	add(want)
	add(out)
	var scale float64
	for _, v := range out {
		scale = max(scale, math.Abs(float64(v)))
	}
	i := worstIndex(got, want)
	c.note(absErr(got, want)/scale, fmt.Sprintf("%s[%d] = %g, want %g (of max |MoE output| %.3g)", what, i, got[i], want[i], scale))
}

// moeProductionCase runs the model's shape through the decode step's chain on device buffers —
// moe_router → moe_gate_up → moe_down_combine, or moe_router_norm → moe_gate_up_norm — against
// the references: ids exactly, routing weights within moeRouterTol, act and res within the
// case's tolerance. Only the chosen experts' rows of the stacked tensors hold data (the rest are
// zero, so reading a wrong expert shows).
func moeProductionCase(norm bool) Case {
	s := moeProduction
	name, ks := "moe_router/production_chain", []string{"moe_router", "moe_gate_up", "moe_down_combine"}
	if norm {
		name, ks = "moe_router_norm/production_chain", []string{"moe_router_norm", "moe_gate_up_norm"}
	}
	return Case{
		Name: name, Kernels: ks, Tol: moeDownTol, Heavy: true,
		Shape: fmt.Sprintf("the model's: H %d, E %d, top-%d, I %d, SI %d, stacked experts (only the chosen filled)", s.H, s.E, s.K, s.I, s.SI),
		Run: func(c *Ctx) error {
			r := c.R
			codes := func(rows, cols int) *quant.Matrix { return qmvMatrix(r, rows, cols, 4, true) }
			mo := &model.MoE{Router: RandQ(r, s.E, s.H, 8), SharedExpertGate: RandQ(r, 1, s.H, 8),
				SharedGate: codes(s.SI, s.H), SharedUp: codes(s.SI, s.H), SharedDown: codes(s.H, s.SI)}
			x, gain := RandFloats(r, s.H, 1), RandGain(r, s.H, 0.5)
			xn := x
			if norm {
				x = RandFloats(r, s.H, 3)
				xn = normed(x, gain)
			}
			logits, shared := kernels.MoERouterLogits(mo, xn)
			wantIDs, _ := kernels.MoERoute(logits, shared, s.K)
			stacked := func(rows, cols, perExpert int) *quant.Matrix {
				m := &quant.Matrix{Rows: rows, Cols: cols, Bits: 4, Words: make([]uint32, rows*cols/8), Scales: make([]uint16, rows*cols/64), Biases: make([]uint16, rows*cols/64)}
				for _, e := range wantIDs {
					part := m.RowRange(int(e)*perExpert, perExpert)
					src := codes(perExpert, cols)
					copy(part.Words, src.Words)
					copy(part.Scales, src.Scales)
					copy(part.Biases, src.Biases)
				}
				return m
			}
			mo.Gate, mo.Up = stacked(s.E*s.I, s.H, s.I), stacked(s.E*s.I, s.H, s.I)
			bx := c.In("x", x)
			rb := kernels.MoERouterBuffers[int]{Router: c.QM("router", mo.Router), SharedGate: c.QM("shared_gate_logit", mo.SharedExpertGate), X: bx,
				IDs: c.Out("ids", 4*s.K), Weights: c.Out("weights", 4*(s.K+1))}
			gb := c.gateUpBuffers(mo, s, rb.IDs, bx)
			if norm {
				rb.Gain = c.In("gain", gain)
				gb.Gain = rb.Gain
				c.Add(kernels.MoERouterNormCall(s, eps, kernels.MoERouterThreads, rb), false)
				c.Add(kernels.MoEGateUpNormCall(s, eps, gb), true)
			} else {
				c.Add(kernels.MoERouterCall(s, kernels.MoERouterThreads, rb), false)
				c.Add(kernels.MoEGateUpCall(s, gb), true)
			}
			res0 := RandFloats(r, s.H, 1)
			var db kernels.MoEDownCombineBuffers[int]
			if !norm {
				mo.Down = stacked(s.E*s.H, s.I, s.H)
				db = kernels.MoEDownCombineBuffers[int]{IDs: rb.IDs, Weights: rb.Weights, Act: gb.Act, Res: c.InOut("res", res0),
					Down: c.QM("down", mo.Down), SharedDown: c.QM("shared_down", mo.SharedDown)}
				c.Add(kernels.MoEDownCombineCall(s, db), true)
			}
			if err := c.Step(); err != nil {
				return err
			}
			ids, weights := c.U32(rb.IDs), c.F32(rb.Weights)
			if err := c.route(ks[0], ids, weights, logits, shared, s.K, true, moeRouterTol.For(c.Kind)); err != nil {
				return err
			}
			act := kernels.MoEGateUp(mo, s, ids, xn)
			c.Rel("act", c.F32(gb.Act), act)
			if !norm {
				c.moeRes("res", c.F32(db.Res), res0, func(res []float32) { kernels.MoEDownCombine(mo, s, ids, weights, act, res, false) })
			}
			return nil
		},
	}
}
