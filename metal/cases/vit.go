package cases

import (
	"fmt"
	"math"

	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/kernels"
)

// The vision tower's width, MLP width and merged width (4 patches of 1152), and the patch
// embedding's input features.
const (
	vitD      = 1152
	vitMLP    = 4304
	vitMerged = 4608
	vitPatch  = 768
)

// vitNormTol: vit_layernorm's out relative to max|out|. The kernel sums the row in float32 in a
// tree (per-thread strided sums, simd_sum, then the simdgroups'), the reference in float64 in
// order: the mean and variance differ by a few float32 ulps of the row's sums (D ≤ 1152 terms,
// relative error ~log2(D)·2⁻²⁴ < 1e-6 each), plus one ulp of rsqrt; 2e-6 bounds that. Metal's
// fast rsqrt and contracted multiply-adds: 1e-5 (add_rmsnorm's margin).
var vitNormTol = Tol{Emu: 2e-6, Metal: 1e-5}

// vitGEMMTol: vit_gemm's y relative to max|y| against the float64-summed reference: float32 sums
// of K terms (each simdgroup multiply a fused multiply-add chain, k ascending), a rounding error
// that grows like √K — qmm's bound, 2e-6 at K = 256, so 8.5e-6 at K = 4608; the epilogues add an
// ulp or two of their own (vit_erf's is checked on its own below), well inside it. Metal: the
// hardware's order inside the 8-term products and relaxed math, 1e-4 (as qmm's).
func vitGEMMTol(k int) Tol { return qmmTol(k) }

func vitCases() []Case {
	out := []Case{
		vitNormCase(vitD, 3, kernels.LayerNormThreads), // the model's width
		vitNormCase(vitD, 2, 1024),
		vitNormCase(301, 2, 96), // an odd width: a partial stride, 3 simdgroups
		vitNormCase(37, 1, 7),   // fewer threads than a simdgroup
		erfProbeCase(),
	}
	for _, s := range vitGEMMShapes {
		out = append(out, vitGEMMCase(s, false))
	}
	return out
}

// vitShape is one vit_gemm case: rows × out × in with an epilogue, float32 weights or bfloat.
type vitShape struct {
	rows, out, in int
	epi           kernels.ViTEpilogue
	f32           bool
	why           string
}

// vitGEMMShapes: each production K (q|k|v's and fc1's 1152, fc2's 4304, the merger's 4608, the
// patch embedding's 768) with its layer's epilogue, the outputs cut to a few tiles; edge tiles in
// rows and outputs, a K that is no multiple of the tiles' steps, one K step of 8.
var vitGEMMShapes = []vitShape{
	{5, 72, vitD, kernels.EpilogueNone, false, "q|k|v's K, one head's outputs"},
	{37, 200, vitD, kernels.EpilogueGELUTanh, false, "fc1's K and activation"},
	{37, 72, vitMLP, kernels.EpilogueAdd, false, "fc2's K into the residual"},
	{5, 200, vitMerged, kernels.EpilogueGELUErf, false, "the merger's fc1"},
	{37, 72, vitMerged, kernels.EpilogueNone, false, "the merger's fc2's K"},
	{37, 200, vitPatch, kernels.EpilogueNone, true, "the patch embedding, float32 weights"},
	{33, 40, 72, kernels.EpilogueGELUErf, false, "K not a multiple of the tile's 32"},
	{64, 64, 8, kernels.EpilogueAdd, false, "whole tiles, one K step of 8"},
}

// vitTensorCases are vit_gemm_tensor's cases (vitGEMMCase's tensor form), bfloat weights only
// (the form has none for float32 ones: kernels.TensorFits): each production K with its layer's
// epilogue — q|k|v's 1152 (the merger's fc2 has the same epilogue), fc1's 1152, fc2's 4304 (67
// whole steps of 64 and a partial one), the merger's fc1's 4608 — the outputs cut to two or three
// tiles of 64 with an edge (the form's code does not depend on the grid, and the emulator's cost
// grows with whole tiles); two tile rows and three tile columns over a K of one whole and one
// partial step; one whole tile over one partial step.
func vitTensorCases() []Case {
	var out []Case
	for _, s := range []vitShape{
		{5, 72, vitD, kernels.EpilogueNone, false, "q|k|v's K"},
		{37, 130, vitD, kernels.EpilogueGELUTanh, false, "fc1's K and activation"},
		{37, 72, vitMLP, kernels.EpilogueAdd, false, "fc2's K into the residual"},
		{5, 72, vitMerged, kernels.EpilogueGELUErf, false, "the merger's fc1"},
		{33, 40, 72, kernels.EpilogueGELUErf, false, "one whole K step and a partial one"},
		{100, 130, 72, kernels.EpilogueGELUTanh, false, "two tile rows, three tile columns"},
		{64, 64, 8, kernels.EpilogueAdd, false, "one whole tile, one partial K step"},
	} {
		out = append(out, vitGEMMCase(s, true))
	}
	return out
}

// vitNormCase runs vit_layernorm over rows rows of d in threadgroups of threads. The rows have
// a mean far from 0 (3) so the variance's second pass over x − mean matters, and gains and
// biases as trained ones spread.
func vitNormCase(d, rows, threads int) Case {
	return Case{
		Name: fmt.Sprintf("vit_layernorm/d%d_rows%d_tg%d", d, rows, threads), Kernels: []string{"vit_layernorm"},
		Shape: fmt.Sprintf("%d rows of %d, threadgroups of %d", rows, d, threads), Tol: vitNormTol,
		Run: func(c *Ctx) error {
			x := RandFloats(c.R, d*rows, 1.5)
			for i := range x {
				x[i] += 3
			}
			w, b := RandGain(c.R, d, 0.3), quant.F32sToBF16(RandFloats(c.R, d, 0.2))
			want := make([]float32, d*rows)
			for r := range rows {
				kernels.LayerNorm(want[r*d:(r+1)*d], x[r*d:(r+1)*d], w, b, eps)
			}
			bs := kernels.LayerNormBuffers[int]{X: c.In("x", x), W: c.In("w", w), B: c.In("b", b), Out: c.Out("out", 4*d*rows)}
			c.Add(kernels.LayerNormCall(d, rows, eps, threads, bs), false)
			if err := c.Step(); err != nil {
				return err
			}
			c.Rel("out", c.F32(bs.Out), want)
			return nil
		},
	}
}

// vitGEMMCase runs vit_gemm over s, or with tensor its tensor form (Case.Tensor): x N(0, 1), W
// N(0, 0.05²) and the bias N(0, 0.1²) rounded to bfloat (or float32 with s.f32), and with
// EpilogueAdd a residual y of N(0, 1) to add into. The tensor form is compared with vit_gemm's
// reference on x rounded to bfloat (kernels.BF16Round) at the same float32 tolerance: the products
// of bfloat x and w are exact, so its only rounding beyond vit_gemm's is x's, which the reference
// makes too.
func vitGEMMCase(s vitShape, tensor bool) Case {
	rows, out, in, epi := s.rows, s.out, s.in, s.epi
	kernel, tile, heavy := "vit_gemm", fmt.Sprintf("tiles of %d", kernels.ViTGEMMTile), false
	if tensor {
		kernel, tile = "vit_gemm_tensor", fmt.Sprintf("tensor ops in tiles of %d", kernels.ViTGEMMTensorTile)
		heavy = vitTensorWork(rows, out, in) > 16<<20
	}
	variant := []string{"", "+gelu_tanh", "+gelu_erf", "+add"}[epi]
	if s.f32 {
		variant += "+f32w"
	}
	return Case{
		Name:    fmt.Sprintf("%s%s/%dx%dx%d", kernel, variant, rows, out, in),
		Kernels: []string{kernel + variant},
		Shape:   fmt.Sprintf("%d rows × %d outputs × %d inputs, %s (%s)", rows, out, in, tile, s.why),
		Tol:     vitGEMMTol(in), Tensor: tensor, Heavy: heavy,
		Run: func(c *Ctx) error {
			x, w, bias := RandFloats(c.R, rows*in, 1), RandFloats(c.R, out*in, 0.05), RandFloats(c.R, out, 0.1)
			bs := kernels.ViTGEMMBuffers[int]{X: c.In("x", x)}
			if s.f32 {
				bs.W, bs.Bias = c.In("w", w), c.In("bias", bias)
			} else {
				w, bias = kernels.BF16Round(w), kernels.BF16Round(bias)
				bs.W, bs.Bias = c.In("w", quant.F32sToBF16(w)), c.In("bias", quant.F32sToBF16(bias))
			}
			want := make([]float32, rows*out)
			if epi == kernels.EpilogueAdd {
				want = RandFloats(c.R, rows*out, 1)
				bs.Y = c.InOut("y", want)
			} else {
				bs.Y = c.Out("y", 4*rows*out)
			}
			call := kernels.ViTGEMMCall(rows, out, in, epi, s.f32, bs)
			if tensor {
				x, call = kernels.BF16Round(x), kernels.ViTGEMMTensorCall(rows, out, in, epi, bs)
			}
			kernels.ViTGEMM(want, x, w, bias, rows, out, in, epi) // after InOut copied the residual
			c.Add(call, false)
			if err := c.Step(); err != nil {
				return err
			}
			c.Rel("y", c.F32(bs.Y), want)
			return nil
		},
	}
}

// vitTensorWork is the multiply-adds vit_gemm_tensor executes over rows × out × in: whole 64 × 64
// tiles, whole 64-column steps of K. The emulator computes each op's tile twice (to catch inputs
// changed under it), so past 16 Mi of them (qmm's bound for a Heavy case) a case of the
// production widths runs in one thread order and its three layouts, not under ASan; the smaller
// cases take every order and ASan through the same code (edge tiles, a partial K step, each
// epilogue).
func vitTensorWork(rows, out, in int) int {
	pad := func(n int) int { t := kernels.ViTGEMMTensorTile; return (n + t - 1) / t * t }
	return pad(rows) * pad(out) * pad(in)
}

// erfTol: vit_erf's error relative to erf itself (math.Erf in float64), element by element:
// fdlibm's erff is within about an ulp, 2⁻²³ ≈ 1.2e-7 relative at worst; 1.5e-7 allows that and
// no more. Metal: the same precise exp and divide, with multiply-adds that relaxed math may
// contract, 3e-7.
var erfTol = Tol{Emu: 1.5e-7, Metal: 3e-7}

// erfProbeCase runs vit_erf over a dense grid of [-7, 7] (each approximation's interval and the
// boundaries between them, 2¹⁶ points), values log-spaced from 1e-12 to 1 of both signs (where
// erf(x) ≈ 1.13x and a relative error shows), ±0, ±inf and the boundaries' neighbours.
func erfProbeCase() Case {
	return Case{
		Name: "vit_erf_probe/dense", Kernels: []string{"vit_erf_probe"}, Tol: erfTol,
		Shape: "2^16 points of [-7, 7], 2^13 log-spaced of ±[1e-12, 1], the intervals' ends",
		Run: func(c *Ctx) error {
			var x []float32
			for i := range 1 << 16 {
				x = append(x, float32(-7+14*float64(i)/(1<<16)))
			}
			for i := range 1 << 12 {
				v := float32(math.Pow(10, -12+12*float64(i)/(1<<12)))
				x = append(x, v, -v)
			}
			for _, e := range []float32{0.84375, 1.25, 2.857142857, 6} {
				x = append(x, e, -e, math.Nextafter32(e, 0), -math.Nextafter32(e, 0), math.Nextafter32(e, 10))
			}
			x = append(x, 0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)))
			bs := kernels.ErfProbeBuffers[int]{In: c.In("x", x), Out: c.Out("erf", 4*len(x))}
			c.Add(kernels.ErfProbeCall(len(x), 16, bs), false)
			if err := c.Step(); err != nil {
				return err
			}
			return erfCompare(c, x, c.F32(bs.Out))
		},
	}
}

// erfCompare records the worst |got − erf(x)| / |erf(x)| (0 where both are 0) and requires the
// sign of zero and ±1 at infinity exactly.
func erfCompare(c *Ctx, x, got []float32) error {
	worst, at := 0.0, 0
	for i, v := range x {
		want := math.Erf(float64(v))
		g := float64(got[i])
		if math.IsInf(float64(v), 0) || v == 0 {
			if got[i] != float32(want) || math.Signbit(g) != math.Signbit(want) {
				return fmt.Errorf("erf(%g) = %g, want %g", v, g, want)
			}
			continue
		}
		if e := math.Abs(g-want) / math.Abs(want); e > worst || math.IsNaN(e) {
			worst, at = e, i
			if math.IsNaN(e) {
				break
			}
		}
	}
	c.note(worst, fmt.Sprintf("erf(%g) = %.9g, want %.9g", x[at], got[at], math.Erf(float64(x[at]))))
	return nil
}
