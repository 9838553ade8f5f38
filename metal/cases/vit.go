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
	type shape struct {
		rows, out, in int
		epi           kernels.ViTEpilogue
		f32           bool
		why           string
	}
	for _, s := range []shape{
		{5, 72, vitD, kernels.EpilogueNone, false, "q|k|v's K, one head's outputs"},
		{37, 200, vitD, kernels.EpilogueGELUTanh, false, "fc1's K and activation"},
		{37, 72, vitMLP, kernels.EpilogueAdd, false, "fc2's K into the residual"},
		{5, 200, vitMerged, kernels.EpilogueGELUErf, false, "the merger's fc1"},
		{37, 72, vitMerged, kernels.EpilogueNone, false, "the merger's fc2's K"},
		{37, 200, vitPatch, kernels.EpilogueNone, true, "the patch embedding, float32 weights"},
		{33, 40, 72, kernels.EpilogueGELUErf, false, "K not a multiple of the tile's 32"},
		{64, 64, 8, kernels.EpilogueAdd, false, "whole tiles, one K step of 8"},
	} {
		out = append(out, vitGEMMCase(s.rows, s.out, s.in, s.epi, s.f32, s.why))
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

// vitGEMMCase runs vit_gemm over rows × out × in with epilogue epi: x N(0, 1), W N(0, 0.05²) and
// the bias N(0, 0.1²) rounded to bfloat (or float32 with f32), and with EpilogueAdd a residual
// y of N(0, 1) to add into.
func vitGEMMCase(rows, out, in int, epi kernels.ViTEpilogue, f32 bool, why string) Case {
	variant := []string{"", "+gelu_tanh", "+gelu_erf", "+add"}[epi]
	if f32 {
		variant += "+f32w"
	}
	return Case{
		Name:    fmt.Sprintf("vit_gemm%s/%dx%dx%d", variant, rows, out, in),
		Kernels: []string{"vit_gemm" + variant},
		Shape:   fmt.Sprintf("%d rows × %d outputs × %d inputs, tiles of %d (%s)", rows, out, in, kernels.ViTGEMMTile, why),
		Tol:     vitGEMMTol(in),
		Run: func(c *Ctx) error {
			x, w, bias := RandFloats(c.R, rows*in, 1), RandFloats(c.R, out*in, 0.05), RandFloats(c.R, out, 0.1)
			bs := kernels.ViTGEMMBuffers[int]{X: c.In("x", x)}
			if f32 {
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
			kernels.ViTGEMM(want, x, w, bias, rows, out, in, epi) // after InOut copied the residual
			c.Add(kernels.ViTGEMMCall(rows, out, in, epi, f32, bs), false)
			if err := c.Step(); err != nil {
				return err
			}
			c.Rel("y", c.F32(bs.Y), want)
			return nil
		},
	}
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
