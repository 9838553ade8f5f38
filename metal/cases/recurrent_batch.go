package cases

import "fmt"

// The multi-row decode step's per-sequence kernels (conv1d_step, gdn_step, argmax_partial and
// argmax_final) take R rows on the grid, each row a different sequence with its own window,
// state or sampler buffers. Their "+rowsR" cases (conv_batch.go, gdn_batch.go,
// argmax_batch.go) dispatch the R-row call and, beside it, today's one-row call on a copy of each
// row alone, and check every row (a) against the Go reference within the family's tolerance and
// (b) bit for bit against its one-row dispatch: batch invariance, on the device too.

// recRow is row r of v, which holds rows rows of equal length.
func recRow[T any](v []T, r, rows int) []T {
	n := len(v) / rows
	return v[r*n : (r+1)*n]
}

// recRowName prefixes what with the row it is measured on: "row 2 of 3: u".
func recRowName(r, rows int, what string) string {
	return fmt.Sprintf("row %d of %d: %s", r, rows, what)
}

// recNotInvariant wraps a difference from the one-row dispatch as the batch-invariance failure.
func recNotInvariant(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("not batch-invariant (want the one-row dispatch on the row alone): %w", err)
}

// recScaledRows draws rows rows of n values, row r with spread scale·(r+1): rows that differ in
// magnitude, so a kernel mixing rows up would show.
func recScaledRows(c *Ctx, rows, n int, scale float32) []float32 {
	var v []float32
	for r := range rows {
		v = append(v, RandFloats(c.R, n, scale*float32(r+1))...)
	}
	return v
}

// recEqual requires got to equal want element for element (ids, keys, token states); it returns
// an error naming the first that differs.
func recEqual[T comparable](what string, got, want []T) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			return fmt.Errorf("%s[%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
	return nil
}
