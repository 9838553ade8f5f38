package cases

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/lilyformac/lily/metal/kernels"
)

// gdnTol: y (every token's) and the final state relative to their max: 1e-5 on the emulator
// for gdn_step; gdn_chunk's errors compound over the chunk's tokens like decode steps', so
// 1e-5·√tokens. Metal's fast exp in the decay and gates and rsqrt in the norms: 1e-4.
func gdnTol(tokens int) Tol {
	return Tol{Emu: 1e-5 * math.Sqrt(float64(tokens)), Metal: 1e-4}
}

// gdnModel is the model's DeltaNet shape: 16 key heads, 32 value heads, 128-dim heads.
var gdnModel = kernels.GDNShape{HK: 16, HV: 32, DK: 128, DV: 128}

// randGDNParams draws a layer's recurrence parameters: A in [1, 16), as Qwen initialises it, and
// norm gains near 1.
func randGDNParams(r *rand.Rand, s kernels.GDNShape) kernels.GDNParams {
	p := kernels.GDNParams{ALog: make([]float32, s.HV), DtBias: RandFloats(r, s.HV, 0.5), NormW: make([]float32, s.DV), Eps: eps}
	for i := range p.ALog {
		p.ALog[i] = float32(math.Log(1 + 15*r.Float64()))
	}
	for i := range p.NormW {
		p.NormW[i] = 1 + 0.1*float32(r.NormFloat64())
	}
	return p
}

func gdnTag(s kernels.GDNShape) string {
	return fmt.Sprintf("hk%d_hv%d_dk%d_dv%d", s.HK, s.HV, s.DK, s.DV)
}

// gdnEdge is a DeltaNet shape with the simdgroups a threadgroup and the tokens a case runs.
type gdnEdge struct {
	s          kernels.GDNShape
	nsg, steps int
}

// gdnEdges are the edge shapes of gdn_step.
var gdnEdges = []gdnEdge{
	{kernels.GDNShape{HK: 1, HV: 1, DK: 32, DV: 8}, 1, 3},
	{kernels.GDNShape{HK: 2, HV: 4, DK: 64, DV: 16}, 3, 3},  // pairs; columns do not divide evenly
	{kernels.GDNShape{HK: 2, HV: 4, DK: 64, DV: 40}, 3, 3},  // 40 columns over three simdgroups
	{kernels.GDNShape{HK: 2, HV: 2, DK: 96, DV: 16}, 4, 3},  // three key rows per lane
	{kernels.GDNShape{HK: 1, HV: 3, DK: 32, DV: 33}, 2, 3},  // three heads share a key head
	{kernels.GDNShape{HK: 2, HV: 4, DK: 128, DV: 8}, 16, 3}, // more simdgroups than columns, more threads than channels
	{kernels.GDNShape{HK: 3, HV: 12, DK: 32, DV: 16}, 1, 3}, // groups of four, one simdgroup
}

func gdnCases() []Case {
	var out []Case
	// gdn_step: tokens one at a time from the same state: the edge shapes, a short run, the
	// model's in the 1024-thread production geometry and a 256-thread one.
	for _, c := range append(gdnEdges[:len(gdnEdges):len(gdnEdges)], gdnEdge{kernels.GDNShape{HK: 2, HV: 4, DK: 64, DV: 40}, 3, 2}, gdnEdge{gdnModel, kernels.GDNSimdgroups, 2}, gdnEdge{gdnModel, 8, 2}) {
		out = append(out, gdnStepCase(c.s, c.nsg, c.steps))
	}
	// gdn_chunk: a chunk scanned in one dispatch equals token-by-token GDNStep: a last simdgroup
	// with spare columns, each key dim, one token, tokens of both parities, the model's heads.
	// The conv folded in: blocks of GDNConvBlock tokens, a partial last one, fewer tokens than the
	// window; x, z, a, b and y bfloat as the chunk mode stores them (bf16) or float.
	for _, c := range []struct {
		s      kernels.GDNShape
		tokens int
		bf16   bool
	}{
		{kernels.GDNShape{HK: 1, HV: 1, DK: 32, DV: 8}, 1, false},
		{kernels.GDNShape{HK: 2, HV: 4, DK: 64, DV: 40}, 9, true},
		{kernels.GDNShape{HK: 2, HV: 4, DK: 64, DV: 40}, 3, false},
		{kernels.GDNShape{HK: 2, HV: 2, DK: 96, DV: 12}, 6, true},
		{kernels.GDNShape{HK: 2, HV: 4, DK: 128, DV: 3}, 5, false},
		{gdnModel, 8, true},
		{gdnModel, 19, true},
	} {
		out = append(out, gdnChunkCase(c.s, c.tokens, c.bf16))
	}
	return append(append(out, gdnBatchCases()...), gdnVerifyCases()...)
}

func gdnStepCase(s kernels.GDNShape, nsg, steps int) Case {
	return Case{
		Name: fmt.Sprintf("gdn_step/%s_nsg%d_%dsteps", gdnTag(s), nsg, steps), Kernels: []string{"gdn_step"}, Tol: gdnTol(1),
		Shape: fmt.Sprintf("%d/%d heads × %d/%d, %d simdgroups, %d tokens in turn", s.HK, s.HV, s.DK, s.DV, nsg, steps),
		Run: func(c *Ctx) error {
			if err := s.Validate(); err != nil {
				return err
			}
			r := c.R
			p := randGDNParams(r, s)
			state := RandFloats(r, s.StateLen(), 0.1)
			bs := kernels.GDNStepBuffers[int]{QKV: c.In("qkv", make([]float32, s.Channels())), Z: c.In("z", make([]float32, s.HV*s.DV)),
				A: c.In("a", make([]float32, s.HV)), Beta: c.In("b", make([]float32, s.HV)), ALog: c.In("A_log", p.ALog),
				DtBias: c.In("dt_bias", p.DtBias), NormW: c.In("norm", p.NormW), State: c.InOut("state", state), Y: c.Out("y", 4*s.HV*s.DV)}
			c.Add(kernels.GDNStepCall(s, p.Eps, nsg, bs), false)
			y := make([]float32, s.HV*s.DV)
			var qkv, z, a, b []float32
			return c.Steps(steps, func(step int) {
				qkv, z = RandFloats(r, s.Channels(), 1), RandFloats(r, s.HV*s.DV, 1)
				a, b = RandFloats(r, s.HV, 1), RandFloats(r, s.HV, 1)
				if step == 1 {
					a[0], a[len(a)-1] = 25, -30 // both softplus special cases
				}
				c.Set(bs.QKV, qkv)
				c.Set(bs.Z, z)
				c.Set(bs.A, a)
				c.Set(bs.Beta, b)
				c.Poison(bs.Y)
			}, func(step int) error {
				kernels.GDNStep(s, p, state, y, qkv, z, a, b)
				c.Rel(fmt.Sprintf("step %d: y", step), c.F32(bs.Y), y)
				if step == steps-1 {
					c.Rel("state", c.F32(bs.State), state)
				}
				return nil
			})
		},
	}
}

func gdnChunkCase(s kernels.GDNShape, tokens int, bf16 bool) Case {
	acts := ""
	if bf16 {
		acts = ", x, z, a, b and y bfloat"
	}
	return Case{
		Name: fmt.Sprintf("gdn_chunk/%s_t%d%s", gdnTag(s), tokens, actTag(bf16, bf16)), Kernels: []string{"gdn_chunk"}, Tol: gdnTol(tokens),
		Shape: fmt.Sprintf("%d/%d heads × %d/%d, %d tokens in one dispatch (four lanes a column), the conv folded in%s", s.HK, s.HV, s.DK, s.DV, tokens, acts),
		Run: func(c *Ctx) error {
			r := c.R
			p := randGDNParams(r, s)
			state := RandFloats(r, s.StateLen(), 0.1)
			taps, window := RandFloats(r, s.Channels()*kernels.ConvKernel, 0.5), RandFloats(r, (kernels.ConvKernel-1)*s.Channels(), 1)
			x, z := RandFloats(r, tokens*s.Channels(), 1), RandFloats(r, tokens*s.HV*s.DV, 1)
			a, b := RandFloats(r, tokens*s.HV, 1), RandFloats(r, tokens*s.HV, 1)
			a[0], a[len(a)-1] = 25, -30 // both softplus special cases
			if bf16 {
				x, z, a, b = kernels.BF16Round(x), kernels.BF16Round(z), kernels.BF16Round(a), kernels.BF16Round(b)
			}
			bs := kernels.GDNChunkBuffers[int]{X: c.inAct("x", x, bf16), Z: c.inAct("z", z, bf16), A: c.inAct("a", a, bf16), Beta: c.inAct("b", b, bf16),
				ALog: c.In("A_log", p.ALog), DtBias: c.In("dt_bias", p.DtBias), NormW: c.In("norm", p.NormW), State: c.InOut("state", state),
				Y: c.outAct("y", tokens*s.HV*s.DV, bf16), Taps: c.In("taps", taps), Window: c.In("window", window)}
			c.Add(kernels.BF16Acts(kernels.GDNChunkCall(s, p.Eps, tokens, bs), bf16, bf16), false)
			if err := c.Step(); err != nil {
				return err
			}
			y := make([]float32, tokens*s.HV*s.DV)
			kernels.GDNChunk(s, p, state, y, window, taps, x, z, a, b, tokens)
			c.relAct("y", bs.Y, y, bf16)
			c.Rel("state", c.F32(bs.State), state)
			return Bits("window (read only)", c.F32(bs.Window), window)
		},
	}
}
