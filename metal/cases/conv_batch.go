package cases

import (
	"errors"
	"fmt"

	"github.com/lilyformac/lily/metal/kernels"
)

// convBatchCases are conv1d_step's multi-row cases: at every R a partial simdgroup and a
// partial threadgroup, and the model's 8192 channels at R = 8.
func convBatchCases() []Case {
	var out []Case
	for _, r := range qmvBatches {
		out = append(out, convBatchCase(31, 32, r, 2), convBatchCase(300, kernels.ConvThreads, r, 2))
	}
	return append(out, convBatchCase(modelChannels, kernels.ConvThreads, 8, 2))
}

// convBatchCase runs rows sequences' tokens through conv1d_step for steps steps, each row
// shifting its own window, beside a one-row dispatch per row on copies of its window and x.
func convBatchCase(channels, group, rows, steps int) Case {
	kernel := fmt.Sprintf("conv1d_step+rows%d", rows)
	return Case{
		Name: fmt.Sprintf("%s/c%d_g%d_%dsteps", kernel, channels, group, steps), Kernels: []string{kernel}, Tol: convTol,
		Shape: fmt.Sprintf("%d rows of %d channels, threadgroups of %d, %d tokens in turn, in one dispatch and one row at a time", rows, channels, group, steps),
		Run: func(c *Ctx) error {
			taps := RandFloats(c.R, channels*kernels.ConvKernel, 0.5)
			window := recScaledRows(c, rows, (kernels.ConvKernel-1)*channels, 1)
			tp := c.In("taps", taps)
			all := convBuffers(c, "", tp, window, rows*channels)
			c.Add(kernels.Conv1DStepRowsCall(channels, group, rows, all), false)
			one := make([]kernels.Conv1DStepBuffers[int], rows)
			for r := range rows {
				one[r] = convBuffers(c, fmt.Sprintf("row%d.", r), tp, recRow(window, r, rows), channels)
				c.Add(kernels.Conv1DStepCall(channels, group, one[r]), false)
			}
			u := make([]float32, rows*channels)
			var x []float32
			return c.Steps(steps, func(int) {
				x = recScaledRows(c, rows, channels, 1)
				c.Set(all.X, x)
				c.Poison(all.U)
				for r := range rows {
					c.Set(one[r].X, recRow(x, r, rows))
					c.Poison(one[r].U)
				}
			}, func(step int) error {
				kernels.Conv1DStepRows(u, window, taps, x, rows)
				return convBatchCheck(c, step, rows, all, one, u, window)
			})
		},
	}
}

// convBuffers declares conv1d_step's buffers for n values of x (names prefixed) on window.
func convBuffers(c *Ctx, prefix string, taps int, window []float32, n int) kernels.Conv1DStepBuffers[int] {
	return kernels.Conv1DStepBuffers[int]{X: c.In(prefix+"x", make([]float32, n)), Taps: taps,
		Window: c.InOut(prefix+"window", window), U: c.Out(prefix+"u", 4*n)}
}

// convBatchCheck compares every row's u and window with the reference (u, window) and, bit for
// bit, with its one-row dispatch.
func convBatchCheck(c *Ctx, step, rows int, all kernels.Conv1DStepBuffers[int], one []kernels.Conv1DStepBuffers[int], u, window []float32) error {
	gotU, gotW := c.F32(all.U), c.F32(all.Window)
	for r := range rows {
		name := func(what string) string { return recRowName(r, rows, fmt.Sprintf("step %d: %s", step, what)) }
		rowU, rowW := recRow(gotU, r, rows), recRow(gotW, r, rows)
		c.Rel(name("u"), rowU, recRow(u, r, rows))
		if err := Bits(name("window"), rowW, recRow(window, r, rows)); err != nil {
			return err
		}
		if err := recNotInvariant(errors.Join(Bits(name("u"), rowU, c.F32(one[r].U)), Bits(name("window"), rowW, c.F32(one[r].Window)))); err != nil {
			return err
		}
	}
	return nil
}
