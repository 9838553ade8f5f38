package vision

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAxisTaps checks the per-axis resampling: indices inside the table, non-negative weights
// summing to 1 (also for the four 2-D products), the end patches on the table's end rows, and
// the lower tap and weights agreeing with a float64 computation of i·(side−1)/(n−1).
func TestAxisTaps(t *testing.T) {
	for _, side := range []int{6, 48} {
		// src is a float32 below side: rounding it moves the fraction by up to half an ulp there.
		fracTol := 1e-6 + float64(side)*6e-8
		for n := 2; n <= 100; n++ {
			for i := range n {
				taps, w := axisTaps(i, n, side)
				src := float64(i) * float64(side-1) / float64(n-1)
				frac := src - math.Floor(src)
				if taps[0] != int(math.Floor(src)) || taps[1] != min(taps[0]+1, side-1) {
					t.Fatalf("side %d, n %d, i %d: taps %v, expected ⌊%g⌋ and the next", side, n, i, taps, src)
				}
				if w[0] < 0 || w[1] < 0 || math.Abs(float64(w[1])-frac) > fracTol || math.Abs(float64(w[0]+w[1])-1) > 1e-6 {
					t.Fatalf("side %d, n %d, i %d: weights %v, expected %g and %g", side, n, i, w, 1-frac, frac)
				}
			}
			for _, i := range []int{0, n - 1} {
				taps, w := axisTaps(i, n, side)
				if want := i * (side - 1) / (n - 1); taps[0] != want || w != [2]float32{1, 0} {
					t.Fatalf("side %d, n %d: end patch %d gets taps %v weights %v, expected row %d alone", side, n, i, taps, w, want)
				}
			}
		}
	}
	for _, g := range [][2]int{{4, 6}, {7, 13}, {48, 2}} {
		for i := range g[0] {
			for j := range g[1] {
				_, wh := axisTaps(i, g[0], 48)
				_, ww := axisTaps(j, g[1], 48)
				sum := float64(wh[0]*ww[0]) + float64(wh[0]*ww[1]) + float64(wh[1]*ww[0]) + float64(wh[1]*ww[1])
				if math.Abs(sum-1) > 1e-6 {
					t.Fatalf("grid %v patch (%d, %d): 2-D weights sum to %g", g, i, j, sum)
				}
			}
		}
	}
}

func randomTable(side, dim int) []float32 {
	rng := rand.New(rand.NewPCG(3, 4))
	table := make([]float32, side*side*dim)
	for i := range table {
		table[i] = float32(rng.NormFloat64())
	}
	return table
}

// TestPositionsAtTableSize: a grid the size of the table takes its rows unchanged, bit for bit,
// in block-major order.
func TestPositionsAtTableSize(t *testing.T) {
	const side, dim = 6, 5
	table := randomTable(side, dim)
	got := positionEmbeddings(table, side, dim, side, side, 2)
	for p, rc := range naiveCoords(side, side, 2, false) {
		want := table[(rc[0]*side+rc[1])*dim : (rc[0]*side+rc[1]+1)*dim]
		for d := range dim {
			if got[p][d] != want[d] {
				t.Fatalf("patch %d at (%d, %d): %v, expected table row %v", p, rc[0], rc[1], got[p], want)
			}
		}
	}
}

// TestPositionsInterpolate compares resampled grids with a float64 bilinear interpolation.
func TestPositionsInterpolate(t *testing.T) {
	const side, dim = 6, 5
	table := randomTable(side, dim)
	t64 := make([]float64, len(table))
	for i, x := range table {
		t64[i] = float64(x)
	}
	for _, g := range [][2]int{{4, 10}, {2, 2}, {12, 4}} {
		got := positionEmbeddings(table, side, dim, g[0], g[1], 2)
		for p, rc := range naiveCoords(g[0], g[1], 2, false) {
			want := naivePosition(t64, side, dim, rc[0], rc[1], g[0], g[1])
			for d := range dim {
				if math.Abs(float64(got[p][d])-want[d]) > 1e-5 {
					t.Fatalf("grid %v patch %d at %v: %v, expected %v", g, p, rc, got[p], want)
				}
			}
		}
	}
}
