package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/engine/vision"
)

// vitTiny is a one-block tower of the production layout (2×2 merge, a 6×6 position table,
// head width 16: a multiple of 8 as vit_attention needs), small enough to encode in a test.
func vitTiny() *config.Vision {
	return &config.Vision{
		Depth: 1, Hidden: 64, Heads: 4, Intermediate: 96, PatchSize: 2, TemporalPatch: 2, Merge: 2,
		OutHidden: 32, NumPositions: 36, Side: 6, Eps: 1e-6, RopeTheta: 10000,
	}
}

func vitRandLinear(r *rand.Rand, out, in int, gain float32) model.Linear {
	w := RandFloats(r, out*in, gain/float32(math.Sqrt(float64(in))))
	return model.Linear{W: model.Dense{Rows: out, Cols: in, F32: w}, B: model.Dense{Rows: 1, Cols: out, F32: RandFloats(r, out, 0.1)}}
}

func vitRandNorm(r *rand.Rand, n int) model.LayerNorm {
	w := RandFloats(r, n, 0.2)
	for i := range w {
		w[i]++
	}
	return model.LayerNorm{W: model.Dense{Rows: 1, Cols: n, F32: w}, B: model.Dense{Rows: 1, Cols: n, F32: RandFloats(r, n, 0.2)}}
}

// vitTinyWeights draws the tower: a q/k gain of 3 (sharp attention, which the rotary moves) and a
// bfloat position table comparable to the patches.
func vitTinyWeights(c *config.Vision, r *rand.Rand) *model.Vision {
	D, M := c.Hidden, 4*c.Hidden
	return &model.Vision{
		Patch:      vitRandLinear(r, D, c.PatchInputs(), 1),
		PosEmbed:   model.Dense{Rows: c.NumPositions, Cols: D, BF16: quant.F32sToBF16(RandFloats(r, c.NumPositions*D, 1))},
		MergerNorm: vitRandNorm(r, D), MergerFC1: vitRandLinear(r, M, M, 1.5), MergerFC2: vitRandLinear(r, c.OutHidden, M, 1),
		Blocks: []model.VisionBlock{{
			Norm1: vitRandNorm(r, D), Norm2: vitRandNorm(r, D),
			QKV: vitRandLinear(r, 3*D, D, 3), Proj: vitRandLinear(r, D, D, 1),
			FC1: vitRandLinear(r, c.Intermediate, D, 1.5), FC2: vitRandLinear(r, D, c.Intermediate, 1),
		}},
	}
}

// vitLinear is x (rows of l's input width) through l, float64 sums.
func vitLinear(l model.Linear, x []float32) []float32 {
	in, out := l.W.Cols, l.W.Rows
	y := make([]float32, len(x)/in*out)
	for i := range len(x) / in {
		for o := range out {
			s := float64(l.B.F32[o])
			for k := range in {
				s += float64(x[i*in+k]) * float64(l.W.F32[o*in+k])
			}
			y[i*out+o] = float32(s)
		}
	}
	return y
}

// vitLayerNorm is x's rows (of n) normalised (biased variance), with gain and shift.
func vitLayerNorm(nm model.LayerNorm, x []float32, eps float32) []float32 {
	n := len(nm.W.F32)
	y := make([]float32, len(x))
	for i := 0; i < len(x); i += n {
		var mean, sq float64
		for _, v := range x[i : i+n] {
			mean += float64(v) / float64(n)
		}
		for _, v := range x[i : i+n] {
			sq += (float64(v) - mean) * (float64(v) - mean) / float64(n)
		}
		for d := range n {
			y[i+d] = float32((float64(x[i+d])-mean)/math.Sqrt(sq+float64(eps))*float64(nm.W.F32[d]) + float64(nm.B.F32[d]))
		}
	}
	return y
}

func vitGELU(x []float32, exact bool) {
	for i, f := range x {
		v := float64(f)
		if exact {
			x[i] = float32(0.5 * v * (1 + math.Erf(v/math.Sqrt2)))
		} else {
			x[i] = float32(0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v))))
		}
	}
}

func vitAddInto(h, d []float32) {
	for i := range h {
		h[i] += d[i]
	}
}

// vitEncode is the tiny tower's forward pass with ViTPosEmbed and ViTAttention in place of
// engine/vision's own (the rest written plainly here); pos is the grid (height, width) the
// position embedding is told and attnGW the width attention is told (a wrong one must show).
func vitEncode(c *config.Vision, w *model.Vision, px *vision.Pixels, pos [2]int, attnGW int) []float32 {
	D, n := c.Hidden, px.GridH*px.GridW
	var rows []float32
	for _, r := range px.Rows {
		rows = append(rows, r...)
	}
	h := vitLinear(w.Patch, rows)
	ViTPosEmbed(h, w.PosEmbed.BF16, c.Side, D, pos[0], pos[1])
	b := w.Blocks[0]
	qkv := vitLinear(b.QKV, vitLayerNorm(b.Norm1, h, c.Eps))
	vitAddInto(h, vitLinear(b.Proj, ViTAttention(qkv, n, c.Heads, c.HeadDim(), attnGW, ViTInvFreq(c.HeadDim(), c.RopeTheta))))
	f := vitLinear(b.FC1, vitLayerNorm(b.Norm2, h, c.Eps))
	vitGELU(f, false)
	vitAddInto(h, vitLinear(b.FC2, f))
	f = vitLinear(w.MergerFC1, vitLayerNorm(w.MergerNorm, h, c.Eps)) // 4 consecutive rows are one merged row
	vitGELU(f, true)
	return vitLinear(w.MergerFC2, f)
}

// TestViTReferencesMatchTower: a tiny tower encoded by engine/vision agrees with the same tower
// built from ViTPosEmbed and ViTAttention (to float32 rounding: 2e-5 of max|out|, the tower's
// own bound against its float64 reference), on grids smaller and larger than the table, square
// and not; and telling either reference a transposed grid's width moves the output by more than
// twice that (so the comparison sees the patch order, the rotary axes and the taps).
func TestViTReferencesMatchTower(t *testing.T) {
	const tol = 2e-5
	c := vitTiny()
	r := rand.New(rand.NewPCG(11, 12))
	w := vitTinyWeights(c, r)
	tower := vision.NewTower(c, w)
	for _, g := range [][2]int{{4, 6}, {6, 4}, {8, 2}, {2, 2}, {8, 8}} {
		t.Run(fmt.Sprintf("%dx%d", g[0], g[1]), func(t *testing.T) {
			px := &vision.Pixels{GridH: g[0], GridW: g[1], Merge: 2}
			for range g[0] * g[1] {
				px.Rows = append(px.Rows, RandFloats(r, c.PatchInputs(), 1))
			}
			var got []float32
			for _, row := range tower.Encode(px) {
				got = append(got, row...)
			}
			e := RelErr(vitEncode(c, w, px, g, g[1]), got)
			if !(e <= tol) {
				t.Fatalf("the references are %.3g (of max|out|) from the tower, want ≤ %g", e, tol)
			}
			t.Logf("%.3g (of max|out|) from the tower", e)
			if g[0] == g[1] {
				return
			}
			e = RelErr(vitEncode(c, w, px, [2]int{g[1], g[0]}, g[1]), got)
			if !(e > 2*tol) {
				t.Errorf("position embedding with the transposed width: only %.3g from the tower", e)
			}
			if e := RelErr(vitEncode(c, w, px, g, g[0]), got); !(e > 2*tol) {
				t.Errorf("attention with the transposed width: only %.3g from the tower", e)
			}
		})
	}
}
