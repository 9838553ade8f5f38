package kernels

import "fmt"

// recurrentRows is the row count of a multi-row call of the per-sequence decode kernels (conv1d_step,
// gdn_step, argmax_partial/argmax_final), which take it on the grid: at least one row. No upper
// bound is the kernels' (each row runs in threadgroups of its own); the step's is QMVMaxBatch.
func recurrentRows(rows int) int {
	if rows < 1 {
		panic(fmt.Sprintf("kernels: a multi-row call over %d rows", rows))
	}
	return rows
}
