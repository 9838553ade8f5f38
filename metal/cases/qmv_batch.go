package cases

import (
	"fmt"

	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/kernels"
)

// qmvBatches are the row counts R of the multi-row decode step the batched qmv cases run.
var qmvBatches = []int{1, 2, 3, 4, 8}

// qmvBatchShapes are the batched qmv cases: every instance at every R on small shapes (partial
// threadgroups and K steps, the fused modes), the 8-bit router (256 rows of hidden 2048) at every
// R, and one production shape of each instance at R = 8.
func qmvBatchShapes() []qmvShape {
	var shapes []qmvShape
	for _, r := range qmvBatches {
		for _, bits := range []int{4, 8} {
			shapes = append(shapes,
				qmvShape{bits: bits, rows: []int{13}, k: 192, xs: 1, batch: r},
				qmvShape{bits: bits, rows: []int{7}, k: 576, norm: true, add: r%2 == 0, xs: 3, batch: r},
				qmvShape{bits: bits, rows: []int{5, 3}, k: 128, norm: true, multi: true, xs: 3, batch: r},
				qmvShape{bits: bits, rows: []int{9, 2}, k: 64, add: true, multi: true, xs: 3, batch: r})
		}
		shapes = append(shapes, qmvShape{bits: 8, rows: []int{256}, k: 2048, xs: 3, batch: r, why: "the router"})
	}
	return append(shapes,
		qmvShape{bits: 8, rows: []int{256}, k: 2048, norm: true, xs: 3, batch: 8, why: "the router, normed"},
		qmvShape{bits: 4, rows: []int{2048}, k: 2048, add: true, xs: 3, batch: 8, heavy: true, why: "a projection into the residual"},
		qmvShape{bits: 4, rows: []int{2048}, k: 2048, norm: true, xs: 3, batch: 8, heavy: true},
		qmvShape{bits: 4, rows: []int{1024, 512, 32, 32}, k: 2048, norm: true, multi: true, xs: 3, batch: 8, heavy: true},
		qmvShape{bits: 4, rows: []int{512, 512}, k: 2048, multi: true, xs: 3, batch: 8, heavy: true},
		qmvShape{bits: 8, rows: []int{256, 64}, k: 2048, add: true, multi: true, xs: 3, batch: 8},
		qmvShape{bits: 8, rows: []int{256, 1}, k: 2048, norm: true, multi: true, xs: 3, batch: 8})
}

// qmvBatchCase runs s.batch rows of x through one dispatch and checks (a) each row against the
// reference on that row alone, and (b) batch invariance: each row bit for bit against the
// one-row dispatch every decode step makes today (QMV_BATCH unset) on that row alone, the
// other rows holding different random data. The bits are the case's error on every device.
func qmvBatchCase(s qmvShape) Case {
	kernel := fmt.Sprintf("%s+rows%d", s.kernel(), s.batch)
	shape := fmt.Sprintf("%d rows of x × %v × %d, %d-bit", s.batch, s.rows, s.k, s.bits)
	if s.why != "" {
		shape += " (" + s.why + ")"
	}
	return Case{
		Name: fmt.Sprintf("%s/%sx%d", kernel, qmvRowsTag(s.rows), s.k), Kernels: []string{kernel}, Shape: shape, Tol: qmvTol, Heavy: s.heavy,
		Run: func(c *Ctx) error {
			b := newQMVBatch(c, s)
			if err := c.Step(); err != nil {
				return err
			}
			return b.check(c)
		},
	}
}

// qmvBatch is a batched case's inputs and buffers: one[r][j] is matrix j's output of the one-row
// dispatch on row r.
type qmvBatch struct {
	s       qmvShape
	ms      []*quant.Matrix
	x, y0   []float32 // x [R][K]; y0 [R][Σ rows] (the residuals of the add mode)
	gain    []uint16
	ys      []int
	one     [][]int
	offsets []int // each matrix's first column in y0
}

// newQMVBatch draws the inputs and adds the R-row dispatch and the R one-row dispatches.
func newQMVBatch(c *Ctx, s qmvShape) *qmvBatch {
	R, k := s.batch, s.k
	b := &qmvBatch{s: s, x: RandFloats(c.R, R*k, s.xs), one: make([][]int, R)}
	v := kernels.QMVVariant{Norm: s.norm, Eps: eps, Add: s.add}
	var gain int
	if s.norm {
		b.gain = RandGain(c.R, k, 0.5)
		gain = c.In("gain", b.gain)
	}
	var ws []kernels.QMatrixBuffers[int]
	total := 0
	for j, n := range s.rows {
		b.ms = append(b.ms, qmvMatrix(c.R, n, k, s.bits, false))
		ws = append(ws, c.QM(fmt.Sprintf("w%d", j), b.ms[j]))
		b.offsets = append(b.offsets, total)
		total += n
	}
	b.y0 = make([]float32, R*total)
	if s.add {
		b.y0 = RandFloats(c.R, R*total, 1)
	}
	b.ys = b.outputs(c, "y", 0, R)
	v.Batch = R
	b.add(c, v, c.In("x", b.x), b.ys, ws, gain)
	v.Batch = 0 // today's one-row dispatch
	for r := range R {
		b.one[r] = b.outputs(c, fmt.Sprintf("row%d.y", r), r, 1)
		b.add(c, v, c.In(fmt.Sprintf("row%d.x", r), b.x[r*k:(r+1)*k]), b.one[r], ws, gain)
	}
	return b
}

// outputs declares each matrix's output for rows rows of x starting at row first: the residual
// rows of y0 in the add mode, else poisoned.
func (b *qmvBatch) outputs(c *Ctx, name string, first, rows int) []int {
	var ys []int
	for j, n := range b.s.rows {
		what := fmt.Sprintf("%s%d", name, j)
		if !b.s.add {
			ys = append(ys, c.Out(what, 4*rows*n))
			continue
		}
		var y0 []float32
		for r := first; r < first+rows; r++ {
			y0 = append(y0, b.rowOf(b.y0, r, j)...)
		}
		ys = append(ys, c.InOut(what, y0))
	}
	return ys
}

// rowOf is matrix j's part of row r of a [R][Σ rows] vector.
func (b *qmvBatch) rowOf(v []float32, r, j int) []float32 {
	total := len(v) / b.s.batch
	o := r*total + b.offsets[j]
	return v[o : o+b.s.rows[j]]
}

func (b *qmvBatch) add(c *Ctx, v kernels.QMVVariant, x int, ys []int, ws []kernels.QMatrixBuffers[int], gain int) {
	s := b.s
	if s.multi {
		c.Add(kernels.QMVMultiCall(s.bits, s.k, s.rows, v, kernels.QMVMultiBuffers[int]{W: ws, Y: ys, X: x, Gain: gain}), false)
		return
	}
	c.Add(kernels.QMVCall(s.bits, s.rows[0], s.k, v, kernels.QMVBuffers[int]{W: ws[0], X: x, Y: ys[0], Gain: gain}), false)
}

// check compares every row of every matrix with the reference and, bit for bit, with the one-row
// dispatch on that row.
func (b *qmvBatch) check(c *Ctx) error {
	s := b.s
	for j, m := range b.ms {
		got := c.F32(b.ys[j])
		want := kernels.QMVBatched(b.x, s.batch, func(x []float32) []float32 {
			if s.norm {
				return kernels.QMVNormed(m, x, b.gain, eps)
			}
			return kernels.QMV(m, x)
		})
		n := s.rows[j]
		for r := range s.batch {
			name := fmt.Sprintf("row %d of %d: %s", r, s.batch, outName(j, len(b.ms)))
			row := got[r*n : (r+1)*n]
			if err := c.qmvCompare(name, m, b.normed(r), want[r*n:(r+1)*n], b.rowOf(b.y0, r, j), row, false, !s.norm && !s.add); err != nil {
				return err
			}
			if err := Bits(name, row, c.F32(b.one[r][j])); err != nil {
				return fmt.Errorf("not batch-invariant (want the one-row dispatch on the row alone): %w", err)
			}
		}
	}
	return nil
}

// normed is row r of x as the kernel multiplies it: add_rmsnorm's output for the norm kernels.
func (b *qmvBatch) normed(r int) []float32 {
	k := b.s.k
	x := b.x[r*k : (r+1)*k]
	if !b.s.norm {
		return x
	}
	res, xn := make([]float32, k), make([]float32, k)
	kernels.AddRMSNorm(res, xn, x, make([]float32, k), b.gain, eps)
	return xn
}
