package cases

import (
	"fmt"
	"math"
	"strings"

	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/kernels"
)

// qmmTol: y relative to max|y| against QMM (engine/quant's product row by row) — and on the
// emulator, for one matrix, against the float64 product: float32 sums of K terms in different
// orders, a bound that grows like √K (2e-6 up to K = 256). Metal: fast math and the hardware's
// order inside the 8-term products, 1e-4 (as qmv's margin over its test).
func qmmTol(cols int) Tol {
	return Tol{Emu: 2e-6 * math.Sqrt(float64(max(cols, 256))/256), Metal: 1e-4}
}

// qmmShape is one qmm case: tokens × (rows of each matrix) × cols.
type qmmShape struct {
	bits, tokens, cols int
	rows               []int
	why                string
	in, out            bool // X, Y stored as bfloat (kernels.BF16Acts): the chunk mode's
}

// bf16 is s with its X (in) and Y (out) stored as bfloat, as the chunk mode runs the
// projections (both) and the router and LM head (X only: their logits stay float).
func (s qmmShape) bf16(in, out bool) qmmShape {
	s.in, s.out = in, out
	return s
}

// actTag names a case's bfloat activations: "+bf16" both, "+bf16in" the inputs only.
func actTag(in, out bool) string {
	switch {
	case in && out:
		return "+bf16"
	case in:
		return "+bf16in"
	case out:
		return "+bf16out"
	}
	return ""
}

func qmmCases() []Case {
	var shapes []qmmShape
	// Edge tiles in both directions (tokens and rows not multiples of the tile), one token, one
	// quantisation group, 8-bit, several K steps, each tile height (QMMTileRows: 32 above 16
	// tokens, 16, 8), the last rows and columns of every buffer.
	for _, s := range [][4]int{{4, 37, 70, 128}, {4, 1, 32, 64}, {8, 64, 64, 192}, {4, 32, 33, 256}, {8, 5, 7, 64}, {4, 13, 70, 128}, {8, 16, 130, 64},
		{4, 8, 300, 128}, {4, 33, 40, 64}, {4, 7, 130, 64}} {
		shapes = append(shapes, qmmShape{bits: s[0], tokens: s[1], rows: []int{s[2]}, cols: s[3]})
	}
	// A chunk of 64 tokens through the attention output projection's K = 4096 (N cut to 256).
	shapes = append(shapes, qmmShape{bits: 4, tokens: 64, rows: []int{256}, cols: 4096, why: "out_proj's K"})
	// Stacks of 1 to 4 matrices (rows no multiple of any tile width, a one-row matrix as the
	// shared expert's gate is).
	for _, s := range []qmmShape{{bits: 4, tokens: 37, cols: 128, rows: []int{70, 33, 1, 40}}, {bits: 8, tokens: 13, cols: 64, rows: []int{256, 1}},
		{bits: 4, tokens: 5, cols: 128, rows: []int{130, 64, 8}}, {bits: 4, tokens: 64, cols: 64, rows: []int{32}}, {bits: 4, tokens: 9, cols: 64, rows: []int{40, 1, 17}}} {
		shapes = append(shapes, s)
	}
	// The model's width (K 2048) at each tile height: a projection, edge tiles, the DeltaNet
	// layer's stack, the router with the shared expert's gate.
	// Their activations bfloat as the chunk mode stores them (the router's logits float).
	for _, tokens := range []int{64, 13, 5} {
		shapes = append(shapes, qmmShape{4, tokens, 2048, []int{512}, "", true, true}, qmmShape{8, tokens, 2048, []int{70}, "edge tiles", false, false},
			qmmShape{4, tokens, 2048, []int{1024, 512, 32, 32}, "the DeltaNet projections", true, true},
			qmmShape{8, tokens, 2048, []int{256, 1}, "the router and the shared gate", true, false})
	}
	shapes = append(shapes, qmmShape{bits: 4, tokens: 37, rows: []int{70}, cols: 128}.bf16(true, true))
	var out []Case
	for _, s := range shapes {
		out = append(out, qmmCase(s, false))
	}
	return append(out, layoutProbeCase())
}

// qmmCase is qmm's case of shape s, or with tensor its tensor-op form's (Case.Tensor): compared
// with qmm's reference on x rounded to bfloat (kernels.BF16Round) at the same float32 tolerance —
// the form's only rounding beyond qmm's is x's, which the reference makes too.
func qmmCase(s qmmShape, tensor bool) Case {
	kernel, call := kernels.QMMKernel(s.bits, kernels.QMMTileRows(s.tokens)), kernels.QMMCall[int]
	tiles := fmt.Sprintf("tiles of %d tokens", kernels.QMMTileRows(s.tokens))
	if tensor {
		kernel, call = kernels.QMMTensorKernel(s.bits), kernels.QMMTensorCall[int]
		tiles = fmt.Sprintf("tensor ops in tiles of %d", kernels.QMMTensorTile)
	}
	rows, work := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(s.rows)), "_"), "[]"), 0
	for _, n := range s.rows {
		work += s.tokens * n * s.cols
	}
	shape := fmt.Sprintf("%d tokens × %v × %d, %d-bit, %s", s.tokens, s.rows, s.cols, s.bits, tiles)
	if s.why != "" {
		shape += " (" + s.why + ")"
	}
	if s.in || s.out {
		shape += ", activations " + strings.TrimPrefix(actTag(s.in, s.out), "+")
	}
	return Case{
		Name: fmt.Sprintf("%s/%dx%sx%d%s", kernel, s.tokens, rows, s.cols, actTag(s.in, s.out)), Kernels: []string{kernel}, Shape: shape, Tol: qmmTol(s.cols),
		Heavy: work > 16<<20, Tensor: tensor,
		Run: func(c *Ctx) error {
			x := RandFloats(c.R, s.tokens*s.cols, 2)
			var bs kernels.QMMBuffers[int]
			if s.in {
				x = kernels.BF16Round(x)
				bs.X = c.InBF16("x", x)
			} else {
				bs.X = c.In("x", x)
			}
			var ms []*quant.Matrix
			for j, n := range s.rows {
				m := RandQ(c.R, n, s.cols, s.bits)
				ms = append(ms, m)
				bs.W = append(bs.W, c.QM(fmt.Sprintf("w%d", j), m))
				if s.out {
					bs.Y = append(bs.Y, c.OutBF16(fmt.Sprintf("y%d", j), s.tokens*n))
				} else {
					bs.Y = append(bs.Y, c.Out(fmt.Sprintf("y%d", j), 4*s.tokens*n))
				}
			}
			c.Add(kernels.BF16Acts(call(s.bits, s.tokens, s.cols, s.rows, bs), s.in, s.out), false)
			if err := c.Step(); err != nil {
				return err
			}
			xr := x
			if tensor {
				xr = kernels.BF16Round(x)
			}
			for j, m := range ms {
				name := outName(j, len(ms))
				if s.out {
					c.RelBF16(name, c.BF16(bs.Y[j]), kernels.QMM(m, xr, s.tokens))
					continue
				}
				got := c.F32(bs.Y[j])
				c.Rel(name, got, kernels.QMM(m, xr, s.tokens))
				if len(ms) == 1 && c.Kind == Emu && !tensor {
					if err := qmmExact(name, m, x, s.tokens, got, c.tolerance()); err != nil {
						return err
					}
				}
			}
			return nil
		},
	}
}

// qmmExact requires got ([tokens][rows]) within tol of the float64 product, relative to its
// largest magnitude.
func qmmExact(name string, m *quant.Matrix, x []float32, tokens int, got []float32, tol float64) error {
	row := make([]float32, m.Cols)
	var diff, scale float64
	at := 0
	for n := range m.Rows {
		m.DequantRow(n, row)
		for t := range tokens {
			var dot float64
			for k, v := range row {
				dot += float64(v) * float64(x[t*m.Cols+k])
			}
			if d := math.Abs(float64(got[t*m.Rows+n]) - dot); d > diff {
				diff, at = d, t*m.Rows+n
			}
			scale = max(scale, math.Abs(dot))
		}
	}
	if e := diff / scale; !(e <= tol) {
		return fmt.Errorf("%s[%d] = %g: error %.2g of max|y| against the float64 product, want ≤ %.2g", name, at, got[at], e, tol)
	}
	return nil
}

// layoutProbeCase: simdgroup_layout_probe reports kernels.SimdgroupLayout — the emulator's lane
// → element layout, which on a Mac confirms the hardware's. The error is the number of elements
// in the wrong lane; none pass.
func layoutProbeCase() Case {
	return Case{
		Name: "simdgroup_layout_probe/8x8", Kernels: []string{"simdgroup_layout_probe"}, Tol: Tol{}, Shape: "8×8 matrix, lane → elements",
		Run: func(c *Ctx) error {
			labels := make([]float32, 64)
			for i := range labels {
				labels[i] = float32(i)
			}
			bs := kernels.LayoutProbeBuffers[int]{Labels: c.In("labels", labels), Out: c.Out("out", 4*64)}
			c.Add(kernels.LayoutProbeCall(bs), false)
			if err := c.Step(); err != nil {
				return err
			}
			got := c.F32(bs.Out)
			wrong := 0
			var first error
			seen := map[float32]bool{}
			for l := range 32 {
				r, col := kernels.SimdgroupLayout(l)
				for i := range 2 {
					want := float32(r*8 + col + i)
					seen[want] = true
					if got[2*l+i] != want {
						if wrong++; first == nil {
							first = fmt.Errorf("lane %d element %d holds %g, the emulator's layout says %g", l, i, got[2*l+i], want)
						}
					}
				}
			}
			c.note(float64(wrong), fmt.Sprintf("%d of 64 elements in the wrong lane", wrong))
			if len(seen) != 64 {
				return fmt.Errorf("kernels.SimdgroupLayout: the lanes cover %d of 64 elements", len(seen))
			}
			return first
		},
	}
}
