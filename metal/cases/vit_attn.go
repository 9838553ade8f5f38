package cases

import (
	"fmt"

	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/kernels"
)

// vitAttnTol: vit_attention's output relative to max|out| against ViTAttention. The reference
// sums each score's hd products in order and the softmax in two passes (l in float64); the
// kernel sums the products in 8×8 blocks, rescales O and l once per tile of 32 keys (online
// softmax: one exp of a difference and a product per tile, each within an ulp) and divides once.
// With scores of standard deviation ~2 and N ≤ 128 keys these move the output by a few ulps of
// max|out| (seen on the emulator: below 1e-6); the rotary's cos and sin are within an ulp of the
// reference's correctly rounded ones (libm on the emulator, metal::precise on Metal). 1e-5 is
// attn_prefill's bound; Metal's fast exp (a few ulps, relative) keeps attention's 1e-4. A wrong
// rotary angle, a dropped key tile or a wrong O rescale moves the output by tenths of max|out|.
var vitAttnTol = Tol{Emu: 1e-5, Metal: 1e-4}

// vitPosTol: vit_pos_embed's h relative to max|h|. Kernel and reference multiply the same float32
// weights and bfloat values and sum four products in the same order, so the emulator is exact
// up to contraction into FMAs (which Metal's Relaxed mode may do: an ulp of a product, ≤ 2⁻²³ of
// max|h| per term, four terms): 1e-6 on both.
var vitPosTol = Tol{Emu: 1e-6, Metal: 1e-6}

// vitRopeTheta is the tower's rotary base.
const vitRopeTheta = 10000

func vitAttnCases() []Case {
	var out []Case
	for _, s := range []struct {
		heads, hd, gh, gw int
		why               string
	}{
		{2, 72, 4, 10, "two query blocks and two key tiles, both partial"},
		{2, 72, 6, 4, "one partial key tile"},
		{16, 72, 2, 4, "the production heads"},
		{1, 72, 2, 66, "columns to 65: rotary angles past 60 radians, five key tiles"},
		{2, 16, 4, 6, "the tiny tower's head width"},
	} {
		out = append(out, vitAttnCase(s.heads, s.hd, s.gh, s.gw, s.why))
	}
	for _, g := range []struct{ side, dim, gh, gw, threads int }{
		{48, 1152, 4, 6, 256}, {48, 1152, 6, 4, 256}, {48, 1152, 2, 2, 256},
		{6, 40, 6, 6, 32},  // the grid is the table: every weight 1 or 0, h gains the rows exactly
		{6, 40, 8, 10, 24}, // larger than the table: upsampled, threads not dividing the width
	} {
		out = append(out, vitPosCase(g.side, g.dim, g.gh, g.gw, g.threads))
	}
	return out
}

// vitAttnCase runs vit_attention on a gh×gw image's random qkv (q and k of standard deviation
// 1.5: scores of std ~2, a sharp softmax that the rotary visibly moves).
func vitAttnCase(heads, hd, gh, gw int, why string) Case {
	n := gh * gw
	return Case{
		Name:    fmt.Sprintf("vit_attention/h%d_hd%d_%dx%d", heads, hd, gh, gw),
		Kernels: []string{"vit_attention"}, Tol: vitAttnTol,
		Shape: fmt.Sprintf("%d heads of %d over a %d×%d grid (%d patches): %s", heads, hd, gh, gw, n, why),
		Run: func(c *Ctx) error {
			D := heads * hd
			qkv := RandFloats(c.R, n*3*D, 1.5)
			inv := kernels.ViTInvFreq(hd, vitRopeTheta)
			o := c.Out("out", 4*n*D)
			c.Add(kernels.ViTAttentionCall(n, heads, hd, gw, kernels.ViTAttentionBuffers[int]{QKV: c.In("qkv", qkv), InvFreq: c.In("inv_freq", inv), Out: o}), false)
			if err := c.Step(); err != nil {
				return err
			}
			c.Rel("out", c.F32(o), kernels.ViTAttention(qkv, n, heads, hd, gw, inv))
			return nil
		},
	}
}

// vitPosCase runs vit_pos_embed on a gh×gw grid over a side×side table of dim-wide bfloat rows;
// h starts random, so the add is checked too. A grid the size of the table must add its rows
// exactly.
func vitPosCase(side, dim, gh, gw, threads int) Case {
	return Case{
		Name:    fmt.Sprintf("vit_pos_embed/s%d_d%d_%dx%d_tg%d", side, dim, gh, gw, threads),
		Kernels: []string{"vit_pos_embed"}, Tol: vitPosTol,
		Shape: fmt.Sprintf("a %d×%d grid over a %d×%d table of %d, threadgroups of %d", gh, gw, side, side, dim, threads),
		Run: func(c *Ctx) error {
			n := gh * gw
			table := quant.F32sToBF16(RandFloats(c.R, side*side*dim, 1))
			h := RandFloats(c.R, n*dim, 1)
			bh := c.InOut("h", h)
			c.Add(kernels.ViTPosEmbedCall(side, dim, gh, gw, threads, kernels.ViTPosEmbedBuffers[int]{
				H: bh, Tab: c.In("table", table), Rows: c.In("rows", kernels.ViTPosAxis(gh, side)), Cols: c.In("cols", kernels.ViTPosAxis(gw, side))}), false)
			if err := c.Step(); err != nil {
				return err
			}
			want := append([]float32(nil), h...)
			kernels.ViTPosEmbed(want, table, side, dim, gh, gw)
			got := c.F32(bh)
			c.Rel("h", got, want)
			if gh == side && gw == side {
				return Bits("h", got, vitTableAdded(h, table, side, dim))
			}
			return nil
		},
	}
}

// vitTableAdded is h plus, for each block-major patch at (r, c), the table's row r·side + c: what
// a grid the size of the table must give.
func vitTableAdded(h []float32, table []uint16, side, dim int) []float32 {
	out := append([]float32(nil), h...)
	for p := range len(h) / dim {
		r, c := kernels.ViTPatchAt(p, side)
		for d := range dim {
			out[p*dim+d] += quant.BF16ToF32(table[(r*side+c)*dim+d])
		}
	}
	return out
}
