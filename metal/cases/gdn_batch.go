package cases

import (
	"errors"
	"fmt"

	"github.com/lilyformac/lily/metal/kernels"
)

// gdnBatchCases are gdn_step's multi-row cases: at every R two edge shapes (columns that do not
// divide among the simdgroups; three value heads sharing a key head), and the model's DeltaNet
// in the production geometry at R = 8.
func gdnBatchCases() []Case {
	var out []Case
	for _, r := range qmvBatches {
		out = append(out, gdnBatchCase(kernels.GDNShape{HK: 2, HV: 4, DK: 64, DV: 16}, 3, r, 2, false),
			gdnBatchCase(kernels.GDNShape{HK: 1, HV: 3, DK: 32, DV: 33}, 2, r, 2, false))
	}
	return append(out, gdnBatchCase(gdnModel, kernels.GDNSimdgroups, 8, 2, true))
}

// gdnBatchCase runs rows sequences' tokens through gdn_step for steps steps, each row updating
// its own state, beside a one-row dispatch per row on copies of its state and inputs.
func gdnBatchCase(s kernels.GDNShape, nsg, rows, steps int, heavy bool) Case {
	kernel := fmt.Sprintf("gdn_step+rows%d", rows)
	return Case{
		Name: fmt.Sprintf("%s/%s_nsg%d_%dsteps", kernel, gdnTag(s), nsg, steps), Kernels: []string{kernel}, Tol: gdnTol(1), Heavy: heavy,
		Shape: fmt.Sprintf("%d rows of %d/%d heads × %d/%d, %d simdgroups, %d tokens in turn, in one dispatch and one row at a time",
			rows, s.HK, s.HV, s.DK, s.DV, nsg, steps),
		Run: func(c *Ctx) error {
			if err := s.Validate(); err != nil {
				return err
			}
			p := randGDNParams(c.R, s)
			state := recScaledRows(c, rows, s.StateLen(), 0.1)
			shared := gdnShared(c, p)
			all := gdnBuffers(c, "", shared, s, state, rows)
			c.Add(kernels.GDNStepRowsCall(s, p.Eps, nsg, rows, all), false)
			one := make([]kernels.GDNStepBuffers[int], rows)
			for r := range rows {
				one[r] = gdnBuffers(c, fmt.Sprintf("row%d.", r), shared, s, recRow(state, r, rows), 1)
				c.Add(kernels.GDNStepCall(s, p.Eps, nsg, one[r]), false)
			}
			in := &gdnBatchInputs{}
			y := make([]float32, rows*s.HV*s.DV)
			return c.Steps(steps, func(step int) {
				in.draw(c, s, rows, step)
				in.set(c, all, 0, rows, rows)
				for r := range rows {
					in.set(c, one[r], r, 1, rows)
				}
			}, func(step int) error {
				kernels.GDNStepRows(s, p, state, y, in.qkv, in.z, in.a, in.b, rows)
				return gdnBatchCheck(c, step, rows, all, one, y, state)
			})
		},
	}
}

// gdnShared declares the layer's parameters, which every row shares: the ALog, DtBias and NormW
// of GDNStepBuffers.
func gdnShared(c *Ctx, p kernels.GDNParams) kernels.GDNStepBuffers[int] {
	return kernels.GDNStepBuffers[int]{ALog: c.In("A_log", p.ALog), DtBias: c.In("dt_bias", p.DtBias), NormW: c.In("norm", p.NormW)}
}

// gdnBuffers declares gdn_step's per-sequence buffers for rows rows (names prefixed) on state,
// beside the shared parameters.
func gdnBuffers(c *Ctx, prefix string, shared kernels.GDNStepBuffers[int], s kernels.GDNShape, state []float32, rows int) kernels.GDNStepBuffers[int] {
	b := shared
	b.QKV, b.Z = c.In(prefix+"qkv", make([]float32, rows*s.Channels())), c.In(prefix+"z", make([]float32, rows*s.HV*s.DV))
	b.A, b.Beta = c.In(prefix+"a", make([]float32, rows*s.HV)), c.In(prefix+"b", make([]float32, rows*s.HV))
	b.State, b.Y = c.InOut(prefix+"state", state), c.Out(prefix+"y", 4*rows*s.HV*s.DV)
	return b
}

// gdnBatchInputs are a step's inputs, a row per sequence.
type gdnBatchInputs struct{ qkv, z, a, b []float32 }

// draw makes a step's inputs, different in every row; at step 1 the first and last rows take
// both softplus special cases.
func (in *gdnBatchInputs) draw(c *Ctx, s kernels.GDNShape, rows, step int) {
	in.qkv, in.z = recScaledRows(c, rows, s.Channels(), 1), recScaledRows(c, rows, s.HV*s.DV, 1)
	in.a, in.b = recScaledRows(c, rows, s.HV, 1), recScaledRows(c, rows, s.HV, 1)
	if step == 1 {
		in.a[0], in.a[len(in.a)-1] = 25, -30
	}
}

// set uploads rows first .. first+n-1 of the inputs' rows rows into b and poisons its output.
func (in *gdnBatchInputs) set(c *Ctx, b kernels.GDNStepBuffers[int], first, n, rows int) {
	span := func(v []float32) []float32 {
		w := len(v) / rows
		return v[first*w : (first+n)*w]
	}
	c.Set(b.QKV, span(in.qkv))
	c.Set(b.Z, span(in.z))
	c.Set(b.A, span(in.a))
	c.Set(b.Beta, span(in.b))
	c.Poison(b.Y)
}

// gdnBatchCheck compares every row's y and state with the reference's (y every step, the state
// after the last) and, bit for bit, with its one-row dispatch every step.
func gdnBatchCheck(c *Ctx, step, rows int, all kernels.GDNStepBuffers[int], one []kernels.GDNStepBuffers[int], y, state []float32) error {
	gotY, gotS := c.F32(all.Y), c.F32(all.State)
	for r := range rows {
		name := func(what string) string { return recRowName(r, rows, fmt.Sprintf("step %d: %s", step, what)) }
		rowY, rowS := recRow(gotY, r, rows), recRow(gotS, r, rows)
		c.Rel(name("y"), rowY, recRow(y, r, rows))
		c.Rel(name("state"), rowS, recRow(state, r, rows))
		if err := recNotInvariant(errors.Join(Bits(name("y"), rowY, c.F32(one[r].Y)), Bits(name("state"), rowS, c.F32(one[r].State)))); err != nil {
			return err
		}
	}
	return nil
}
