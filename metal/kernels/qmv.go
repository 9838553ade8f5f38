package kernels

import (
	"fmt"

	"github.com/lilyformac/lily/engine/quant"
)

// QMV function constant indices (qmv.metal). QMVRows and QMVCols are required; the others are
// optional (unset: off / 0). The norm variants are separate kernels (they bind the gain).
const (
	QMVRows  = 0 // uint QMV_N: rows (of matrix 0 in qmv_multi)
	QMVCols  = 1 // uint QMV_K
	QMVEps   = 3 // float: the RMSNorm epsilon of the norm kernels
	QMVAdd   = 4 // bool: y += W·x in place
	QMVRows1 = 5 // uint: rows of qmv_multi's matrix 1 (0: absent)
	QMVRows2 = 6 // uint: matrix 2
	QMVRows3 = 7 // uint: matrix 3
	QMVBatch = 8 // uint QMV_BATCH: rows of x and y, [R][K] in and [R][N] out (unset: 1)
)

// QMVMaxBatch is the most rows of x one qmv dispatch takes (QMV_MAX_BATCH: the accumulators a
// lane holds are sized for it).
const QMVMaxBatch = 8

// QMV geometry: 64-thread threadgroups of 8 rows.
const (
	QMVThreads      = 64
	QMVRowsPerGroup = 8
)

// QMV buffer indices. qmv: 0-2 the matrix, 3 x, 4 y; qmv_norm: the same and 5 the bf16 gain.
// qmv_multi: matrix j at QMVMultiMatrix(j) (codes, scales, biases), its output at
// QMVMultiMatrix(j)+3, x at QMVMultiX; qmv_multi_norm: the same and the gain at QMVMultiGain.
// Absent matrices' slots of qmv_multi must be bound to some buffer (never accessed).
const (
	QMVGain        = 5
	QMVMultiX      = 16
	QMVMultiGain   = 17
	QMVMaxMatrices = 4
)

// QMVMultiMatrix is the first buffer index of qmv_multi's matrix j.
func QMVMultiMatrix(j int) int { return 4 * j }

// QMVKernel names the kernel for a bit width: qmv_q4 or qmv_q8.
func QMVKernel(bits int) string { return fmt.Sprintf("qmv_q%d", bits) }

// QMVNormKernel names the RMSNorm-folding kernel: qmv_norm_q4 or qmv_norm_q8.
func QMVNormKernel(bits int) string { return fmt.Sprintf("qmv_norm_q%d", bits) }

// QMVMultiKernel names the multi-matrix kernel: qmv_multi_q4/q8, or with norm qmv_multi_norm_q4/q8.
func QMVMultiKernel(bits int, norm bool) string {
	if norm {
		return fmt.Sprintf("qmv_multi_norm_q%d", bits)
	}
	return fmt.Sprintf("qmv_multi_q%d", bits)
}

// QMVThreadgroups is the number of threadgroups for a matrix of n rows.
func QMVThreadgroups(n int) int { return (n + QMVRowsPerGroup - 1) / QMVRowsPerGroup }

// QMVMultiThreadgroups is qmv_multi's (flattened) grid for matrices of rows[j] rows.
func QMVMultiThreadgroups(rows ...int) int {
	t := 0
	for _, n := range rows {
		t += QMVThreadgroups(n)
	}
	return t
}

// QMVMultiConstants are qmv_multi's row constants for 1 to 4 matrices (plus QMVCols = k).
func QMVMultiConstants(k int, rows ...int) map[int]any {
	if len(rows) < 1 || len(rows) > QMVMaxMatrices {
		panic(fmt.Sprintf("kernels: qmv_multi of %d matrices", len(rows)))
	}
	c := map[int]any{QMVCols: k}
	for j, idx := range []int{QMVRows, QMVRows1, QMVRows2, QMVRows3} {
		if j < len(rows) {
			c[idx] = rows[j]
		} else {
			c[idx] = 0
		}
	}
	return c
}

// QMV is the Go reference of qmv_q4/qmv_q8: engine/quant's matrix-vector product. Buffers 0-2 of
// the kernel are m.Words, m.Scales and m.Biases as they are; buffer 3 is x, buffer 4 y.
func QMV(m *quant.Matrix, x []float32) []float32 {
	y := make([]float32, m.Rows)
	quant.MatVec(m, y, x)
	return y
}

// QMVNormed is the Go reference of qmv_norm: add_rmsnorm's output for x (nothing added)
// and the bf16 gain, then W·x̂.
func QMVNormed(m *quant.Matrix, x []float32, gain []uint16, eps float32) []float32 {
	res, xn := make([]float32, len(x)), make([]float32, len(x))
	AddRMSNorm(res, xn, x, make([]float32, len(x)), gain, eps)
	return QMV(m, xn)
}

// QMVBatched is the Go reference of a dispatch of rows batch rows (QMVVariant.Batch): row r of
// the result is ref on row r of x ([rows][K]) alone.
func QMVBatched(x []float32, rows int, ref func(x []float32) []float32) []float32 {
	k := len(x) / rows
	var y []float32
	for r := range rows {
		y = append(y, ref(x[r*k:(r+1)*k])...)
	}
	return y
}

// QMVVariant selects qmv's fused modes, which combine freely.
type QMVVariant struct {
	// Norm folds the RMSNorm in: y = W·rmsnorm(x, gain) with epsilon Eps (the _norm kernels,
	// which bind the gain).
	Norm bool
	Eps  float32
	// Add adds the product into y in place (QMV_ADD): the residual add of a projection.
	Add bool
	// Batch is the number of rows of x and y (QMV_BATCH, 1 to QMVMaxBatch): x [Batch][cols], y
	// [Batch][rows], each row's result bit-identical to a one-row dispatch on it. 0 leaves the
	// constant unset: one row, the pipeline every one-row dispatch has always had.
	Batch int
}

func (v QMVVariant) constants(c map[int]any) map[int]any {
	if v.Batch < 0 || v.Batch > QMVMaxBatch {
		panic(fmt.Sprintf("kernels: qmv over %d rows of x (at most %d)", v.Batch, QMVMaxBatch))
	}
	if v.Batch > 0 {
		c[QMVBatch] = v.Batch
	}
	if v.Norm {
		c[QMVEps] = v.Eps
	}
	if v.Add {
		c[QMVAdd] = true
	}
	return c
}

// QMVBuffers are qmv's and qmv_norm's buffers, by role.
type QMVBuffers[B any] struct {
	W    QMatrixBuffers[B] // 0-2: [rows, cols]
	X    B                 // 3: [batch][cols] float32
	Y    B                 // 4: [batch][rows] float32
	Gain B                 // QMVGain: [cols] bf16, bound by the Norm variant only
}

// QMVCall is qmv_q<bits> (qmv_norm_q<bits> with v.Norm) over a rows × cols matrix, for
// v.Batch rows of x (the same grid for any).
func QMVCall[B any](bits, rows, cols int, v QMVVariant, b QMVBuffers[B]) Call[B] {
	bs := map[int]B{3: b.X, 4: b.Y}
	b.W.bind(bs, 0)
	kernel := QMVKernel(bits)
	if v.Norm {
		kernel = QMVNormKernel(bits)
		bs[QMVGain] = b.Gain
	}
	return Call[B]{
		Kernel: kernel, Constants: v.constants(map[int]any{QMVRows: rows, QMVCols: cols}), Buffers: bs,
		Threadgroups: grid(QMVThreadgroups(rows)), Group: grid(QMVThreads),
	}
}

// QMVMultiBuffers are qmv_multi's and qmv_multi_norm's buffers, by role: W[j] and Y[j] are
// matrix j and its output, for 1 to QMVMaxMatrices matrices.
type QMVMultiBuffers[B any] struct {
	W    []QMatrixBuffers[B] // at QMVMultiMatrix(j)
	Y    []B                 // at QMVMultiMatrix(j)+3: [batch][rows[j]] float32
	X    B                   // QMVMultiX: [batch][cols] float32
	Gain B                   // QMVMultiGain: [cols] bf16, bound by the Norm variant only
}

// QMVMultiCall is qmv_multi_q<bits> (qmv_multi_norm_q<bits> with v.Norm) over matrices of
// rows[j] × cols, one per W, in one dispatch. The absent matrices' slots are bound to the last
// matrix and its output, which the kernel never accesses.
func QMVMultiCall[B any](bits, cols int, rows []int, v QMVVariant, b QMVMultiBuffers[B]) Call[B] {
	if len(b.W) != len(rows) || len(b.Y) != len(rows) {
		panic(fmt.Sprintf("kernels: qmv_multi of %d row counts, %d matrices and %d outputs", len(rows), len(b.W), len(b.Y)))
	}
	c := v.constants(QMVMultiConstants(cols, rows...)) // checks 1 to 4 matrices
	bs := map[int]B{QMVMultiX: b.X}
	for j := range QMVMaxMatrices {
		k := min(j, len(rows)-1)
		b.W[k].bind(bs, QMVMultiMatrix(j))
		bs[QMVMultiMatrix(j)+3] = b.Y[k]
	}
	if v.Norm {
		bs[QMVMultiGain] = b.Gain
	}
	return Call[B]{
		Kernel: QMVMultiKernel(bits, v.Norm), Constants: c, Buffers: bs,
		Threadgroups: grid(QMVMultiThreadgroups(rows...)), Group: grid(QMVThreads),
	}
}
