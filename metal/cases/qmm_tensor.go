package cases

import (
	"fmt"

	"github.com/lilyformac/lily/metal/kernels"
)

// qmmTensorCases are qmm_q4_tensor's and qmm_q8_tensor's cases (qmmCase's tensor form): edge
// tiles in both directions, one token, several tile rows and K steps, stacks of matrices, the
// model's width.
func qmmTensorCases() []Case {
	shapes := []qmmShape{
		{4, 37, 128, []int{70}, "edge tiles", false, false}, {4, 1, 64, []int{32}, "one token, one group", false, false},
		{8, 64, 192, []int{64}, "8-bit, three groups", false, false}, {4, 100, 64, []int{130}, "two tile rows, three tile columns", false, false},
		{8, 5, 64, []int{7}, "", false, false},
		{4, 37, 128, []int{70, 33, 1, 40}, "four matrices", true, true}, {8, 13, 64, []int{256, 1}, "the router and the shared gate", true, false},
		{4, 64, 2048, []int{128}, "the model's width", true, true},
	}
	var out []Case
	for _, s := range shapes {
		out = append(out, qmmCase(s, true))
	}
	return out
}

// moeTensorCases are the grouped GEMMs' tensor forms at every tile height of moe_sort's map:
// experts with several blocks and with none, an intermediate size below and across the tile
// width, blocks past the map's end; a down projection at the model's widths.
func moeTensorCases() []Case {
	var out []Case
	for _, bm := range kernels.QMMTileHeights {
		for _, g := range []struct {
			s      kernels.MoEShape
			tokens int
			bf16   bool
		}{
			{kernels.MoEShape{H: 128, E: 16, K: 4, I: 48, SI: 64}, 45, true},
			{kernels.MoEShape{H: 64, E: 4, K: 2, I: 100, SI: 64}, 20, false},
		} {
			out = append(out, moeGateUpMMCase(g.s, g.tokens, bm, false, true, g.bf16))
		}
		out = append(out, moeDownTensorCase(kernels.MoEShape{H: 96, E: 8, K: 2, I: 128, SI: 64}, 20, bm, false, false))
	}
	return append(out, moeDownTensorCase(kernels.MoEShape{H: 2048, E: 8, K: 2, I: 512, SI: 512}, 20, 32, true, true))
}

// moeRouting is a chunk of n tokens' distinct experts each (the last two experts get nobody),
// grouped by moe_sort's reference in blocks of bm, with random weights.
func moeRouting(c *Ctx, s kernels.MoEShape, n, bm int) kernels.MoESorted {
	ids, weights := make([]uint32, n*s.K), make([]float32, n*(s.K+1))
	for t := range n {
		for j, e := range c.R.Perm(s.E - 2)[:s.K] {
			ids[t*s.K+j] = uint32(e)
			weights[t*(s.K+1)+j] = c.R.Float32()
		}
	}
	return kernels.MoESort(s, ids, weights, n, bm)
}

// moeDownTensorCase: moe_down_mm's tensor form equals MoEDownSorted on the activations rounded to
// bfloat, each pair's row scaled by its weight.
func moeDownTensorCase(s kernels.MoEShape, n, bm int, heavy, bf16 bool) Case {
	k := mmKernel("moe_down_mm", bm) + "_tensor"
	tol := moeMMTol
	if s.I >= 512 {
		tol = moeMMWideTol
	}
	acts := ""
	if bf16 {
		acts = ", act and y bfloat"
	}
	return Case{
		Name: fmt.Sprintf("%s/%s_t%d%s", k, moeTag(s), n, actTag(bf16, bf16)), Kernels: []string{k}, Tol: tol, Tensor: true, Heavy: heavy,
		Shape: fmt.Sprintf("%d tokens, E %d, top-%d, I %d, H %d, blocks of %d rows, tensor ops%s", n, s.E, s.K, s.I, s.H, bm, acts),
		Run: func(c *Ctx) error {
			sorted := moeRouting(c, s, n, bm)
			down := moeQ(c.R, s.E*s.H, s.I)
			act := kernels.BF16Round(RandFloats(c.R, n*s.K*s.I, 1)) // as the form stages it
			bs := kernels.MoEDownMMBuffers[int]{Down: c.QM("down", down), Act: c.inAct("act", act, bf16), W: c.In("w", sorted.W), Blocks: c.In("blocks", sorted.BlockWords()),
				Y: c.outAct("y", n*s.K*s.H, bf16)}
			c.Add(kernels.BF16Acts(kernels.MoEDownMMTensorCall(s.H, s.I, n*s.K, len(sorted.Blocks), bm, bs), bf16, bf16), false)
			if err := c.Step(); err != nil {
				return err
			}
			c.relAct("y", bs.Y, kernels.MoEDownSorted(down, s.H, sorted, act), bf16)
			return nil
		},
	}
}
