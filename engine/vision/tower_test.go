package vision

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/model"
)

// tinyVision is a small tower of the production shape: head width 16 (a multiple of 4, as the
// 2-D rotary needs), a 6×6 position table.
func tinyVision() *config.Vision {
	return &config.Vision{
		Depth: 2, Hidden: 64, Heads: 4, Intermediate: 96, PatchSize: 16, TemporalPatch: 2, Merge: 2,
		OutHidden: 32, NumPositions: 36, Side: 6, Eps: 1e-6, RopeTheta: 10000,
	}
}

func randDense(rng *rand.Rand, rows, cols int, mean, std float64) model.Dense {
	d := model.Dense{Rows: rows, Cols: cols, F32: make([]float32, rows*cols)}
	for i := range d.F32 {
		d.F32[i] = float32(mean + std*rng.NormFloat64())
	}
	return d
}

func randLinear(rng *rand.Rand, out, in int, gain float64) model.Linear {
	return model.Linear{W: randDense(rng, out, in, 0, gain/math.Sqrt(float64(in))), B: randDense(rng, 1, out, 0, 0.1)}
}

func randNorm(rng *rand.Rand, n int) model.LayerNorm {
	return model.LayerNorm{W: randDense(rng, 1, n, 1, 0.2), B: randDense(rng, 1, n, 0, 0.2)}
}

// randomTower draws weights large enough that every part of the forward pass moves the
// output: sharp attention (a q/k gain of 3) and position embeddings comparable to the patches.
func randomTower(c *config.Vision, seed uint64) *model.Vision {
	rng := rand.New(rand.NewPCG(seed, 1))
	D, M := c.Hidden, c.Hidden*c.Merge*c.Merge
	w := &model.Vision{
		Patch:      randLinear(rng, D, c.PatchInputs(), 1),
		PosEmbed:   randDense(rng, c.NumPositions, D, 0, 1),
		MergerNorm: randNorm(rng, D),
		MergerFC1:  randLinear(rng, M, M, 1.5),
		MergerFC2:  randLinear(rng, c.OutHidden, M, 1),
	}
	for range c.Depth {
		w.Blocks = append(w.Blocks, model.VisionBlock{
			Norm1: randNorm(rng, D), Norm2: randNorm(rng, D),
			QKV: randLinear(rng, 3*D, D, 3), Proj: randLinear(rng, D, D, 1),
			FC1: randLinear(rng, c.Intermediate, D, 1.5), FC2: randLinear(rng, D, c.Intermediate, 1),
		})
	}
	return w
}

func randomPixels(c *config.Vision, gh, gw int, seed uint64) *Pixels {
	rng := rand.New(rand.NewPCG(seed, 2))
	px := &Pixels{GridH: gh, GridW: gw, Merge: c.Merge}
	for range gh * gw {
		row := make([]float32, c.PatchInputs())
		for i := range row {
			row[i] = float32(2*rng.Float64() - 1)
		}
		px.Rows = append(px.Rows, row)
	}
	return px
}

// maxDiff is the largest |a−b| over all elements and the largest |b| (the output's scale).
func maxDiff(a [][]float32, b [][]float64) (diff, scale float64) {
	for i := range b {
		for j := range b[i] {
			diff = max(diff, math.Abs(float64(a[i][j])-b[i][j]))
			scale = max(scale, math.Abs(b[i][j]))
		}
	}
	return diff, scale
}

// encodeTol is the tower's allowed distance from the float64 reference, relative to the output's
// largest magnitude: float32 rounding through two blocks (sums of up to 768 terms accumulated in
// float32) measures at most 4e-6 here. It is that tight so that the merger's GELU being the tanh
// approximation instead of the exact one (a 2e-4 relative change) fails the comparison.
const encodeTol = 2e-5

// TestEncodeMatchesNaive compares the tower with the float64 reference below on grids smaller
// than, equal to and larger than the position table along each axis.
func TestEncodeMatchesNaive(t *testing.T) {
	c := tinyVision()
	w := randomTower(c, 7)
	tower := NewTower(c, w)
	for _, g := range [][2]int{{4, 6}, {6, 4}, {8, 2}, {2, 10}} {
		t.Run(fmt.Sprintf("%dx%d", g[0], g[1]), func(t *testing.T) {
			px := randomPixels(c, g[0], g[1], uint64(g[0]*100+g[1]))
			got := tower.Encode(px)
			if len(got) != px.Tokens() {
				t.Fatalf("%d rows, expected %d", len(got), px.Tokens())
			}
			for i, r := range got {
				if len(r) != c.OutHidden {
					t.Fatalf("row %d has %d values, expected %d", i, len(r), c.OutHidden)
				}
			}
			diff, scale := maxDiff(got, naiveEncode(c, w, px, naiveOpts{}))
			if scale < 0.1 || diff > encodeTol*scale {
				t.Fatalf("max |tower − float64 reference| = %g at output scale %g (allowed %g relative)", diff, scale, encodeTol)
			}
		})
	}
}

// TestNaiveDetectsMistakes shows the comparison above can fail: the reference with one detail
// of the forward pass changed disagrees with the tower by at least twice the tolerance.
func TestNaiveDetectsMistakes(t *testing.T) {
	c := tinyVision()
	w := randomTower(c, 7)
	px := randomPixels(c, 4, 6, 406)
	got := NewTower(c, w).Encode(px)
	for name, o := range map[string]naiveOpts{
		"no rotary": {noRotary: true}, "rotary axes swapped": {swapAxes: true}, "causal": {causal: true},
		"raster order": {raster: true}, "tanh GELU in the merger": {mergerTanh: true}, "no positions": {noPositions: true},
	} {
		diff, scale := maxDiff(got, naiveEncode(c, w, px, o))
		if diff < 2*encodeTol*scale {
			t.Errorf("%s: the reference moved only %g at scale %g; the test would not notice this mistake", name, diff, scale)
		}
	}
}
