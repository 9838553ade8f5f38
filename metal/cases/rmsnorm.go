package cases

import (
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
		inPlace          bool
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
		{h: 2048, rows: 2, threads: 256, inPlace: true},
		{h: 2048, rows: 1, threads: 256, inPlace: true},
		{h: 2048, rows: 1, threads: kernels.RMSNormThreads, xs: 3, ds: 1, gs: 0.5}, // the selftest's: wide inputs and gains
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
		shape := fmt.Sprintf("%d rows of %d, threadgroups of %d", s.rows, s.h, s.threads)
		if s.inPlace {
			shape += ", the residual written over x"
		}
		out = append(out, Case{
			Name: "add_rmsnorm/" + tag, Kernels: []string{"add_rmsnorm"}, Shape: shape, Tol: rmsTol,
			Run: func(c *Ctx) error {
				h, rows := s.h, s.rows
				x, d, w := RandFloats(c.R, h*rows, s.xs), RandFloats(c.R, h*rows, s.ds), RandGain(c.R, h, s.gs)
				wantRes, wantOut := make([]float32, h*rows), make([]float32, h*rows)
				for row := range rows {
					o := row * h
					kernels.AddRMSNorm(wantRes[o:o+h], wantOut[o:o+h], x[o:o+h], d[o:o+h], w, eps)
				}
				bs := kernels.AddRMSNormBuffers[int]{D: c.In("d", d), W: c.In("w", w), Out: c.Out("out", 4*h*rows)}
				if s.inPlace {
					bs.X = c.InOut("x", x)
					bs.Res = bs.X
				} else {
					bs.X, bs.Res = c.In("x", x), c.Out("res", 4*h*rows)
				}
				c.Add(kernels.AddRMSNormCall(h, rows, eps, s.threads, bs), false)
				if err := c.Step(); err != nil {
					return err
				}
				c.Rel("out", c.F32(bs.Out), wantOut)
				return Bits("res", c.F32(bs.Res), wantRes)
			},
		})
	}
	return out
}
