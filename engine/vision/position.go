package vision

import "math"

// patchAt is the pre-merge (row, col) of the patch at index p of block-major order: the merge
// blocks row-major, the patches of a block row-major inside it.
func patchAt(p, gridW, merge int) (r, c int) {
	blocksW := gridW / merge
	blk, in := p/(merge*merge), p%(merge*merge)
	return (blk/blocksW)*merge + in/merge, (blk%blocksW)*merge + in%merge
}

// axisTaps are the two table indices and weights that resample position i of an axis of n
// patches from a table side entries long, bilinear with aligned corners. It follows the float32
// arithmetic of transformers' interpolation helper: src = i·(side−1)/(n−1) rounded once, and each
// tap's weight is the hat kernel 1 − |src − ⌊src⌋ − offset| (clamped at 0), the upper tap's index
// clamped to the table while its weight is not (it is 0 there).
func axisTaps(i, n, side int) (taps [2]int, w [2]float32) {
	src := float32(i*(side-1)) / float32(max(n-1, 1))
	fl := float32(math.Floor(float64(src)))
	for off := range 2 {
		taps[off] = min(max(int(fl)+off, 0), side-1)
		dist := float32(math.Abs(float64(src - fl - float32(off))))
		w[off] = max(1-dist, 0)
	}
	return taps, w
}

// positionEmbeddings resamples the side×side learned table (rows of dim values) to a gh×gw grid,
// one row per patch in block-major order. The four taps' products are rounded to float32 and
// summed in tap order (h0w0, h0w1, h1w0, h1w1): the explicit conversions stop the compiler from
// fusing them into FMAs, so a grid equal to the table returns its rows bit for bit.
func positionEmbeddings(table []float32, side, dim, gh, gw, merge int) [][]float32 {
	out := matrix(gh*gw, dim)
	for p := range out {
		r, c := patchAt(p, gw, merge)
		th, wh := axisTaps(r, gh, side)
		tw, ww := axisTaps(c, gw, side)
		var rows [4][]float32
		var wts [4]float32
		for a := range 2 {
			for b := range 2 {
				k := (th[a]*side + tw[b]) * dim
				rows[2*a+b] = table[k : k+dim]
				wts[2*a+b] = wh[a] * ww[b]
			}
		}
		for d := range out[p] {
			s := float32(rows[0][d] * wts[0])
			s += float32(rows[1][d] * wts[1])
			s += float32(rows[2][d] * wts[2])
			s += float32(rows[3][d] * wts[3])
			out[p][d] = s
		}
	}
	return out
}
