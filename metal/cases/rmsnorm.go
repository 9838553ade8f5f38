package cases

import (
	"errors"
	"fmt"

	"github.com/lilyformac/lily/metal/kernels"
)

// eps is the model's RMSNorm epsilon.
const eps = 1e-6

// rmsTol: add_rmsnorm's out relative to max|out|: 2e-6 on the emulator (a tree sum against Go's
// ordered sum, one ulp of rsqrt); Metal's fast rsqrt: 1e-5. The residual must be exact on both.
var rmsTol = Tol{Emu: 2e-6, Metal: 1e-5}

func rmsnormCases() []Case {
	type shape struct {
		h, rows, threads int
		inPlace, bf16    bool    // bf16: d and out bfloat (kernels.BF16Acts), as the chunk mode runs it
		xs, ds, gs       float32 // scales of x, d and the gain's spread
	}
	var out []Case
	for _, s := range []shape{
		{h: 2048, rows: 3, threads: kernels.RMSNormThreads}, // the model's hidden size
		{h: 2048, rows: 1, threads: 1024},
		{h: 64, rows: 2, threads: 32},
		{h: 1, rows: 1, threads: 32},
		{h: 200, rows: 2, threads: 96},
		{h: 1000, rows: 1, threads: 40}, // a partial last simdgroup of 8
		{h: 33, rows: 2, threads: 7},    // fewer threads than a simdgroup
		{h: 300, rows: 2, threads: 64},
		{h: 2048, rows: 2, threads: 256, inPlace: true, bf16: true},
		{h: 2048, rows: 1, threads: 256, inPlace: true},
		{h: 2048, rows: 1, threads: kernels.RMSNormThreads, xs: 3, ds: 1, gs: 0.5}, // the selftest's: wide inputs and gains
		{h: 300, rows: 3, threads: 64, inPlace: true, bf16: true},
	} {
		if s.xs == 0 {
			s.xs, s.ds, s.gs = 1, 0.5, 0.1
		}
		tag := fmt.Sprintf("h%d_rows%d_tg%d", s.h, s.rows, s.threads)
		if s.inPlace {
			tag += "_in_place"
		}
		if s.xs != 1 {
			tag += fmt.Sprintf("_x%g_gain%g", s.xs, s.gs)
		}
		tag += actTag(s.bf16, s.bf16)
		shape := fmt.Sprintf("%d rows of %d, threadgroups of %d", s.rows, s.h, s.threads)
		if s.inPlace {
			shape += ", the residual written over x"
		}
		if s.bf16 {
			shape += ", d and out bfloat"
		}
		out = append(out, Case{
			Name: "add_rmsnorm/" + tag, Kernels: []string{"add_rmsnorm"}, Shape: shape, Tol: rmsTol,
			Run: func(c *Ctx) error {
				h, rows := s.h, s.rows
				x, d, w := RandFloats(c.R, h*rows, s.xs), RandFloats(c.R, h*rows, s.ds), RandGain(c.R, h, s.gs)
				if s.bf16 {
					d = kernels.BF16Round(d)
				}
				wantRes, wantOut := make([]float32, h*rows), make([]float32, h*rows)
				for row := range rows {
					o := row * h
					kernels.AddRMSNorm(wantRes[o:o+h], wantOut[o:o+h], x[o:o+h], d[o:o+h], w, eps)
				}
				bs := kernels.AddRMSNormBuffers[int]{D: c.inAct("d", d, s.bf16), W: c.In("w", w), Out: c.outAct("out", h*rows, s.bf16)}
				if s.inPlace {
					bs.X = c.InOut("x", x)
					bs.Res = bs.X
				} else {
					bs.X, bs.Res = c.In("x", x), c.Out("res", 4*h*rows)
				}
				c.Add(kernels.BF16Acts(kernels.AddRMSNormCall(h, rows, eps, s.threads, bs), s.bf16, s.bf16), false)
				if err := c.Step(); err != nil {
					return err
				}
				c.relAct("out", bs.Out, wantOut, s.bf16)
				return Bits("res", c.F32(bs.Res), wantRes)
			},
		})
	}
	for _, r := range qmvBatches {
		out = append(out, rmsnormBatchCase(200, 96, r, false), rmsnormBatchCase(2048, kernels.RMSNormThreads, r, true))
	}
	return out
}

// rmsnormBatchCase runs rows rows of h through one dispatch and checks each row against the
// reference on that row alone and, bit for bit (res and out), against a one-row dispatch on it:
// the multi-row decode step's batch invariance (a threadgroup per row, so the rows never meet).
func rmsnormBatchCase(h, threads, rows int, inPlace bool) Case {
	kernel := fmt.Sprintf("add_rmsnorm+rows%d", rows)
	shape := fmt.Sprintf("%d rows of %d in one dispatch and one at a time, threadgroups of %d", rows, h, threads)
	if inPlace {
		shape += ", the residual written over x"
	}
	return Case{
		Name: fmt.Sprintf("%s/h%d_tg%d", kernel, h, threads), Kernels: []string{kernel}, Shape: shape, Tol: rmsTol,
		Run: func(c *Ctx) error {
			x, d, w := RandFloats(c.R, h*rows, 1), RandFloats(c.R, h*rows, 0.5), RandGain(c.R, h, 0.1)
			all := rmsnormBuffers(c, "", x, d, w, inPlace)
			c.Add(kernels.AddRMSNormCall(h, rows, eps, threads, all), false)
			one := make([]kernels.AddRMSNormBuffers[int], rows)
			for r := range rows {
				one[r] = rmsnormBuffers(c, fmt.Sprintf("row%d.", r), x[r*h:(r+1)*h], d[r*h:(r+1)*h], w, inPlace)
				c.Add(kernels.AddRMSNormCall(h, 1, eps, threads, one[r]), false)
			}
			if err := c.Step(); err != nil {
				return err
			}
			res, out := c.F32(all.Res), c.F32(all.Out)
			for r := range rows {
				wantRes, wantOut := make([]float32, h), make([]float32, h)
				o := r * h
				kernels.AddRMSNorm(wantRes, wantOut, x[o:o+h], d[o:o+h], w, eps)
				name := fmt.Sprintf("row %d of %d: ", r, rows)
				c.Rel(name+"out", out[o:o+h], wantOut)
				if err := errors.Join(Bits(name+"res", res[o:o+h], wantRes), Bits(name+"res", res[o:o+h], c.F32(one[r].Res)),
					Bits(name+"out", out[o:o+h], c.F32(one[r].Out))); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// rmsnormBuffers declares add_rmsnorm's buffers for x and d (names prefixed), the residual
// written over x with inPlace.
func rmsnormBuffers(c *Ctx, prefix string, x, d []float32, w []uint16, inPlace bool) kernels.AddRMSNormBuffers[int] {
	bs := kernels.AddRMSNormBuffers[int]{D: c.In(prefix+"d", d), W: c.In(prefix+"w", w), Out: c.Out(prefix+"out", 4*len(x))}
	if inPlace {
		bs.X = c.InOut(prefix+"x", x)
		bs.Res = bs.X
	} else {
		bs.X, bs.Res = c.In(prefix+"x", x), c.Out(prefix+"res", 4*len(x))
	}
	return bs
}
