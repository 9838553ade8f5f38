package kernels

import (
	"fmt"

	"github.com/lilyformac/lily/engine/quant"
)

// QMV function constant indices (qmv.metal).
const (
	QMVRows = 0 // uint QMV_N
	QMVCols = 1 // uint QMV_K
)

// QMV geometry: 64-thread threadgroups of 8 rows.
const (
	QMVThreads      = 64
	QMVRowsPerGroup = 8
)

// QMVKernel names the kernel for a bit width: qmv_q4 or qmv_q8.
func QMVKernel(bits int) string { return fmt.Sprintf("qmv_q%d", bits) }

// QMVThreadgroups is the number of threadgroups for a matrix of n rows.
func QMVThreadgroups(n int) int { return (n + QMVRowsPerGroup - 1) / QMVRowsPerGroup }

// QMV is the Go reference of qmv_q4/qmv_q8: engine/quant's matrix-vector product. Buffers 0-2 of
// the kernel are m.Words, m.Scales and m.Biases as they are; buffer 3 is x, buffer 4 y.
func QMV(m *quant.Matrix, x []float32) []float32 {
	y := make([]float32, m.Rows)
	quant.MatVec(m, y, x)
	return y
}
