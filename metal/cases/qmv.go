package cases

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/kernels"
)

// qmvTol: |kernel − reference| relative to max(Σ|w·x̂|, |y₀|) over a matrix's rows (quant.MatVec,
// plus y₀ when adding; x̂ normed for the _norm kernels): 4e-6 on the emulator — float32 sums of
// k terms in two orders, plus one ulp of rsqrt(mean(x²)+eps) (libm vs Go), which scales the whole
// row. Metal may contract into FMAs and use its own rsqrt: 1e-5. On the emulator the plain
// kernels must also be within 2e-6 of the float64 product (qmvExactTol).
var qmvTol = Tol{Emu: 4e-6, Metal: 1e-5}

const qmvExactTol = 2e-6

// qmvShape is one qmv case: the matrices' rows (several: qmv_multi), their columns, the fused
// modes, the input's scale, and the matrix's source (nil: N(0, 0.05²) values quantized).
type qmvShape struct {
	bits             int
	rows             []int
	k                int
	norm, add, multi bool
	xs               float32
	perRow           bool // measure each row against its own Σ|w·x| (the full LM head)
	codes            bool // random codes, scales and biases (too large to quantize)
	heavy            bool
	why              string
	batch            int // rows of x in one dispatch (qmv_batch.go); 0: today's one-row cases
}

func (s qmvShape) kernel() string {
	k := kernels.QMVKernel(s.bits)
	switch {
	case s.multi:
		k = kernels.QMVMultiKernel(s.bits, s.norm)
	case s.norm:
		k = kernels.QMVNormKernel(s.bits)
	}
	if s.add {
		k += "+add"
	}
	return k
}

func qmvCases() []Case {
	var shapes []qmvShape
	// Plain qmv: one row, rows and K that fill no threadgroup or K step.
	for _, bits := range []int{4, 8} {
		for _, s := range []struct{ n, k int }{{1, 64}, {7, 64}, {9, 128}, {13, 192}, {8, 512}, {17, 576}, {5, 640}, {33, 1088}} {
			shapes = append(shapes, qmvShape{bits: bits, rows: []int{s.n}, k: s.k, xs: 1})
		}
	}
	// The model's: hidden 2048 in and out, the 4096-wide out-projection input, the 8-bit router
	// (256 experts).
	shapes = append(shapes, qmvShape{bits: 4, rows: []int{2048}, k: 2048, xs: 3}, qmvShape{bits: 4, rows: []int{512}, k: 4096, xs: 1},
		qmvShape{bits: 8, rows: []int{256}, k: 2048, xs: 3})
	// The LM head is qmv_q4 over the untied [248320, 2048] head: 31,040 threadgroups of 64. Tall
	// narrow heads with and without a partial last threadgroup, row blocks at K 2048 that are no
	// multiple of 8, and the full head once (row offsets past 2^26 words, every row against its
	// own Σ|w·x|).
	for _, n := range []int{5000, 5001, 5003} {
		shapes = append(shapes, qmvShape{bits: 4, rows: []int{n}, k: 256, xs: 1, why: "a tall head"})
	}
	for _, n := range []int{1029, 61} {
		shapes = append(shapes, qmvShape{bits: 4, rows: []int{n}, k: 2048, xs: 1, why: "an LM head row block"})
	}
	shapes = append(shapes, qmvShape{bits: 4, rows: []int{248320}, k: 2048, xs: 1, perRow: true, codes: true, heavy: true, why: "the LM head"})
	// Fused modes: the norm folded in, the product added into y, up to four matrices over the
	// same x with partial threadgroups between them.
	for _, bits := range []int{4, 8} {
		for _, s := range []struct{ n, k int }{{7, 64}, {13, 192}, {17, 576}} {
			for _, m := range [][2]bool{{true, false}, {false, true}, {true, true}} {
				shapes = append(shapes, qmvShape{bits: bits, rows: []int{s.n}, k: s.k, norm: m[0], add: m[1], xs: 3})
			}
		}
		for _, rows := range [][]int{{9}, {5, 3}, {16, 1, 9}, {13, 8, 2, 21}} {
			shapes = append(shapes, qmvShape{bits: bits, rows: rows, k: 192, norm: true, multi: true, xs: 3},
				qmvShape{bits: bits, rows: rows, k: 576, multi: true, xs: 3})
		}
	}
	shapes = append(shapes, qmvShape{bits: 4, rows: []int{7, 4}, k: 128, norm: true, add: true, multi: true, xs: 3})
	// The decode plan's fused shapes: the DeltaNet in_proj qkv|z|b|a and attention's q|k|v (normed,
	// multi), out_proj added into the residual, qmv_norm over 2048 columns (the LM head's kernel),
	// and the selftest's: 8-bit normed, an 8-bit multi added, a 1024-wide add.
	shapes = append(shapes,
		qmvShape{bits: 4, rows: []int{8192, 4096, 32, 32}, k: 2048, norm: true, multi: true, xs: 3, heavy: true, why: "the DeltaNet in_proj"},
		qmvShape{bits: 4, rows: []int{8192, 512, 512}, k: 2048, norm: true, multi: true, xs: 3, heavy: true, why: "attention's q|k|v"},
		qmvShape{bits: 4, rows: []int{2048}, k: 4096, add: true, xs: 3, why: "out_proj into the residual"},
		qmvShape{bits: 4, rows: []int{2048}, k: 2048, norm: true, xs: 3},
		qmvShape{bits: 4, rows: []int{1024, 512, 32, 32}, k: 2048, norm: true, multi: true, xs: 3},
		qmvShape{bits: 8, rows: []int{256}, k: 2048, norm: true, xs: 3},
		qmvShape{bits: 8, rows: []int{256, 64}, k: 2048, add: true, multi: true, xs: 3},
		qmvShape{bits: 4, rows: []int{2048}, k: 1024, add: true, xs: 3},
	)
	var out []Case
	for _, s := range shapes {
		out = append(out, qmvCase(s))
	}
	for _, s := range qmvBatchShapes() {
		out = append(out, qmvBatchCase(s))
	}
	return out
}

// qmvRowsTag is a case name's spelling of the matrices' rows: "13", "5_3".
func qmvRowsTag(rows []int) string {
	return strings.Trim(strings.Join(strings.Fields(fmt.Sprint(rows)), "_"), "[]")
}

func qmvCase(s qmvShape) Case {
	rows := qmvRowsTag(s.rows)
	shape := fmt.Sprintf("%v × %d, %d-bit", s.rows, s.k, s.bits)
	if s.why != "" {
		shape += " (" + s.why + ")"
	}
	return Case{
		Name: fmt.Sprintf("%s/%sx%d", s.kernel(), rows, s.k), Kernels: []string{s.kernel()}, Shape: shape, Tol: qmvTol, Heavy: s.heavy,
		Run: func(c *Ctx) error {
			r := c.R
			x := RandFloats(r, s.k, s.xs)
			v := kernels.QMVVariant{Norm: s.norm, Eps: eps, Add: s.add}
			xn, gain := x, 0
			if s.norm {
				g := RandGain(r, s.k, 0.5)
				res := make([]float32, s.k)
				xn = make([]float32, s.k)
				kernels.AddRMSNorm(res, xn, x, make([]float32, s.k), g, eps)
				gain = c.In("gain", g)
			}
			var ms []*quant.Matrix
			var ws []kernels.QMatrixBuffers[int]
			var ys []int
			var y0s [][]float32
			for j, n := range s.rows {
				m := qmvMatrix(r, n, s.k, s.bits, s.codes)
				y0 := make([]float32, n)
				var y int
				if s.add {
					y0 = RandFloats(r, n, 1)
					y = c.InOut(fmt.Sprintf("y%d", j), y0)
				} else {
					y = c.Out(fmt.Sprintf("y%d", j), 4*n)
				}
				ws = append(ws, c.QM(fmt.Sprintf("w%d", j), m))
				ms, ys, y0s = append(ms, m), append(ys, y), append(y0s, y0)
			}
			bx := c.In("x", x)
			if s.multi {
				c.Add(kernels.QMVMultiCall(s.bits, s.k, s.rows, v, kernels.QMVMultiBuffers[int]{W: ws, Y: ys, X: bx, Gain: gain}), false)
			} else {
				c.Add(kernels.QMVCall(s.bits, s.rows[0], s.k, v, kernels.QMVBuffers[int]{W: ws[0], X: bx, Y: ys[0], Gain: gain}), false)
			}
			if err := c.Step(); err != nil {
				return err
			}
			for j, m := range ms {
				name := outName(j, len(ms))
				if err := c.qmvCompare(name, m, xn, kernels.QMV(m, xn), y0s[j], c.F32(ys[j]), s.perRow, !s.norm && !s.add); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// qmvMatrix is a rows × cols matrix of N(0, 0.05²) values quantized to bits, or with codes one
// of random codes (the distribution MLX's 4-bit checkpoints have: scales of either sign).
func qmvMatrix(r *rand.Rand, rows, cols, bits int, codes bool) *quant.Matrix {
	if !codes {
		return RandQ(r, rows, cols, bits)
	}
	return RandCodes(r, rows, cols, func(r *rand.Rand) (float32, float32) {
		sc := float32(0.004 + 0.01*r.Float64())
		if r.IntN(2) == 0 {
			sc = -sc
		}
		return sc, -7.5*sc + 0.01*float32(r.NormFloat64())
	})
}

// qmvCompare measures got against want, the reference's W·x (quant.MatVec), plus y0 relative to
// max(Σ|w·x|, |y₀|) over the rows (each row's own with perRow); with exact, on the emulator, it
// also requires got within qmvExactTol of the float64 product.
func (c *Ctx) qmvCompare(name string, m *quant.Matrix, x, want, y0, got []float32, perRow, exact bool) error {
	want = slices.Clone(want)
	row := make([]float32, m.Cols)
	f64, mag := make([]float64, m.Rows), make([]float64, m.Rows)
	var scale float64
	for i := range m.Rows {
		m.DequantRow(i, row)
		for k, w := range row {
			f64[i] += float64(w) * float64(x[k])
			mag[i] += math.Abs(float64(w) * float64(x[k]))
		}
		mag[i] = max(mag[i], math.Abs(float64(y0[i])))
		scale = max(scale, mag[i])
		want[i] += y0[i]
	}
	worst, at, worstExact, atExact := 0.0, 0, 0.0, 0
	for i := range want {
		if math.IsNaN(float64(got[i])) {
			c.note(math.NaN(), fmt.Sprintf("%s[%d] = NaN, want %g (not written?)", name, i, want[i]))
			return nil
		}
		sc := scale
		if perRow {
			sc = mag[i]
		}
		if e := math.Abs(float64(got[i])-float64(want[i])) / sc; e > worst {
			worst, at = e, i
		}
		if e := math.Abs(float64(got[i])-f64[i]) / sc; e > worstExact {
			worstExact, atExact = e, i
		}
	}
	c.note(worst, fmt.Sprintf("%s[%d] = %g, want %g (of max(Σ|w·x|, |y₀|))", name, at, got[at], want[at]))
	if exact && c.Kind == Emu && worstExact > qmvExactTol {
		return fmt.Errorf("%s[%d] = %g, the float64 product %g: error %.2g of Σ|w·x|, want ≤ %g", name, atExact, got[atExact], f64[atExact], worstExact, qmvExactTol)
	}
	return nil
}
