package cases

import (
	"fmt"
	"slices"

	"github.com/lilyformac/lily/metal/kernels"
)

// convTol: u relative to max|u|: 1e-6 on the emulator (Go's and libm's exp in the SiLU); Metal's
// fast exp: 1e-5. The window is a copy: exact on both.
var convTol = Tol{Emu: 1e-6, Metal: 1e-5}

// modelChannels is the model's conv width, 2·16·128 + 32·128.
var modelChannels = kernels.GDNShape{HK: 16, HV: 32, DK: 128, DV: 128}.Channels()

func convCases() []Case {
	var out []Case
	// conv1d_step: tokens one at a time from the same window, which must shift exactly.
	for _, s := range []struct{ c, group, steps int }{
		{1, 32, 3}, {31, 32, 3}, {257, kernels.ConvThreads, 3}, {640, 96, 3}, {1000, 1024, 3}, {300, 256, 2},
		{modelChannels, kernels.ConvThreads, 4}, // the model's
	} {
		out = append(out, Case{
			Name: fmt.Sprintf("conv1d_step/c%d_g%d_%dsteps", s.c, s.group, s.steps), Kernels: []string{"conv1d_step"}, Tol: convTol,
			Shape: fmt.Sprintf("%d channels, threadgroups of %d, %d tokens in turn", s.c, s.group, s.steps),
			Run: func(c *Ctx) error {
				taps, window := RandFloats(c.R, s.c*kernels.ConvKernel, 0.5), RandFloats(c.R, (kernels.ConvKernel-1)*s.c, 1)
				bs := kernels.Conv1DStepBuffers[int]{X: c.In("x", make([]float32, s.c)), Taps: c.In("taps", taps), Window: c.InOut("window", window), U: c.Out("u", 4*s.c)}
				c.Add(kernels.Conv1DStepCall(s.c, s.group, bs), false)
				u := make([]float32, s.c)
				var x []float32
				return c.Steps(s.steps, func(int) {
					x = RandFloats(c.R, s.c, 1)
					c.Set(bs.X, x)
					c.Poison(bs.U)
				}, func(step int) error {
					kernels.Conv1DStep(u, window, taps, x)
					c.Rel(fmt.Sprintf("step %d: u", step), c.F32(bs.U), u)
					return Bits(fmt.Sprintf("step %d: window", step), c.F32(bs.Window), window)
				})
			},
		})
	}
	// conv1d_chunk: the window after a chunk in one dispatch equals token-by-token Conv1DStep's,
	// bit for bit, x bfloat as the chunk mode stores it (fewer tokens than the window, too).
	for _, s := range []struct{ c, group, tokens int }{{31, 32, 1}, {70, 64, 2}, {257, kernels.ConvThreads, 7}, {modelChannels, kernels.ConvThreads, 5}} {
		out = append(out, Case{
			Name: fmt.Sprintf("conv1d_chunk/c%d_g%d_t%d+bf16in", s.c, s.group, s.tokens), Kernels: []string{"conv1d_chunk"}, Tol: convTol,
			Shape: fmt.Sprintf("%d channels, threadgroups of %d, the window after %d bfloat tokens in one dispatch", s.c, s.group, s.tokens),
			Run: func(c *Ctx) error {
				taps, window := RandFloats(c.R, s.c*kernels.ConvKernel, 0.5), RandFloats(c.R, (kernels.ConvKernel-1)*s.c, 1)
				x := RandBF16(c.R, s.tokens*s.c, 1)
				bs := kernels.Conv1DChunkBuffers[int]{X: c.InBF16("x", x), Window: c.InOut("window", window)}
				c.Add(kernels.BF16Acts(kernels.Conv1DChunkCall(s.c, s.group, s.tokens, bs), true, false), false)
				if err := c.Step(); err != nil {
					return err
				}
				win := slices.Clone(window)
				kernels.Conv1DChunk(make([]float32, s.tokens*s.c), win, taps, x, s.tokens)
				return Bits("window", c.F32(bs.Window), win)
			},
		})
	}
	out = append(out, convBatchCases()...)
	return append(out, convVerifyCases()...)
}
