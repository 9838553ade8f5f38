package kernels

import (
	"fmt"

	"github.com/lilyformac/lily/engine/quant"
)

// qmm function constant indices (qmm.metal).
const (
	QMMTokens = 0 // uint QMM_M: rows of X and Y
	QMMRows   = 1 // uint QMM_N: rows of W (output features)
	QMMCols   = 2 // uint QMM_K: columns of W (input features), a multiple of 64
)

// qmm geometry: a threadgroup of QMMThreads computes a QMMTileM × QMMTileN tile of Y.
const (
	QMMThreads = 128
	QMMTileM   = 32
	QMMTileN   = 32
)

// QMMKernel names the kernel for a bit width.
func QMMKernel(bits int) string { return fmt.Sprintf("qmm_q%d", bits) }

// QMM is the Go reference of qmm_q4/qmm_q8: engine/quant's matrix-vector product for each of the
// tokens' rows of x ([tokens][m.Cols]), giving y [tokens][m.Rows].
func QMM(m *quant.Matrix, x []float32, tokens int) []float32 {
	y := make([]float32, tokens*m.Rows)
	for t := range tokens {
		quant.MatVec(m, y[t*m.Rows:(t+1)*m.Rows], x[t*m.Cols:(t+1)*m.Cols])
	}
	return y
}

// QMMBuffers are qmm's buffers, by role.
type QMMBuffers[B any] struct {
	W QMatrixBuffers[B] // 0-2: [rows, cols]
	X B                 // 3: [tokens][cols] float32
	Y B                 // 4: [tokens][rows] float32
}

// QMMCall is qmm_q<bits>: y = x·Wᵀ for tokens rows of x over a rows × cols matrix.
func QMMCall[B any](bits, tokens, rows, cols int, b QMMBuffers[B]) Call[B] {
	bs := map[int]B{3: b.X, 4: b.Y}
	b.W.bind(bs, 0)
	return Call[B]{
		Kernel: QMMKernel(bits), Constants: map[int]any{QMMTokens: tokens, QMMRows: rows, QMMCols: cols}, Buffers: bs,
		Threadgroups: [3]int{groupsFor(rows, QMMTileN), groupsFor(tokens, QMMTileM), 1}, Group: grid(QMMThreads),
	}
}

// SimdgroupLayout is the element (row, column) lane l holds first in an 8×8 simdgroup matrix
// (the second is at column+1): Apple GPUs' layout, as metal/emu implements it.
func SimdgroupLayout(l int) (row, col int) {
	return (l/4)&4 + (l/2)%4, (l/4)&2*2 + l%2*2
}

// LayoutProbeBuffers are simdgroup_layout_probe's buffers.
type LayoutProbeBuffers[B any] struct {
	Labels B // 0: [64] float32, element (r, c) = r·8 + c
	Out    B // 1: [32][2] float32, each lane's thread_elements()
}

// LayoutProbeCall is simdgroup_layout_probe over one simdgroup.
func LayoutProbeCall[B any](b LayoutProbeBuffers[B]) Call[B] {
	return Call[B]{Kernel: "simdgroup_layout_probe", Constants: map[int]any{QMMTokens: 1, QMMRows: 1, QMMCols: 64},
		Buffers: map[int]B{0: b.Labels, 1: b.Out}, Threadgroups: grid(1), Group: grid(32)}
}
