//go:build linux

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/emu"
)

// exactQMV is W·x in float64 from the dequantized rows, and Σ|w·x| per row (the scale errors
// are measured against).
func exactQMV(m *quant.Matrix, x []float32) (y, mag []float64) {
	row := make([]float32, m.Cols)
	y, mag = make([]float64, m.Rows), make([]float64, m.Rows)
	for r := range m.Rows {
		m.DequantRow(r, row)
		for k, w := range row {
			y[r] += float64(w) * float64(x[k])
			mag[r] += math.Abs(float64(w) * float64(x[k]))
		}
	}
	return y, mag
}

// runQMV dispatches qmv on m and x and returns y.
func runQMV(t *testing.T, lib *emu.Library, m *quant.Matrix, x []float32, order emu.Order) []float32 {
	t.Helper()
	y := emu.NewBuffer(4 * m.Rows)
	y.Fill(0xFF)
	mustDispatch(t, lib, QMVCall(m.Bits, m.Rows, m.Cols, QMVVariant{}, QMVBuffers[*emu.Buffer]{W: bufsOf(m), X: emu.BufferOf(x), Y: y}), order, 5)
	return y.Float32s()
}

// checkQMV compares the kernel with the Go reference and with float64, relative to max Σ|w·x|.
func checkQMV(t *testing.T, lib *emu.Library, r *rand.Rand, bits, n, k int, order emu.Order) (kernelErr, refErr float64) {
	m := quant.Quantize(randFloats(r, n*k, 0.05), n, k, bits)
	x := randFloats(r, k, 1)
	got := runQMV(t, lib, m, x, order)
	ref := QMV(m, x)
	exact, mag := exactQMV(m, x)
	var scale float64
	for _, v := range mag {
		scale = max(scale, v)
	}
	for i := range got {
		if math.IsNaN(float64(got[i])) {
			t.Fatalf("row %d: NaN", i)
		}
		kernelErr = max(kernelErr, math.Abs(float64(got[i])-exact[i])/scale)
		refErr = max(refErr, math.Abs(float64(got[i])-float64(ref[i]))/scale)
	}
	// float32 sums of k terms: a few ulps of Σ|w·x| on both sides.
	if kernelErr > 2e-6 || refErr > 4e-6 {
		t.Errorf("q%d %dx%d %v: error vs float64 %.2g, vs quant.MatVec %.2g (of max Σ|w·x|)", bits, n, k, order, kernelErr, refErr)
	}
	return kernelErr, refErr
}

func TestQMV(t *testing.T) {
	lib := library(t, emu.Options{}, "qmv.metal")
	r := rand.New(rand.NewPCG(7, 8))
	shapes := []struct{ n, k int }{
		{1, 64}, {7, 64}, {9, 128}, {13, 192}, {8, 512}, {17, 576}, {5, 640}, {33, 1088},
	}
	for _, bits := range []int{4, 8} {
		var worstK, worstR float64
		for _, s := range shapes {
			for _, order := range emu.Orders {
				t.Run(fmt.Sprintf("q%d_%dx%d_%v", bits, s.n, s.k, order), func(t *testing.T) {
					ke, re := checkQMV(t, lib, r, bits, s.n, s.k, order)
					worstK, worstR = max(worstK, ke), max(worstR, re)
				})
			}
		}
		t.Logf("q%d, edge shapes: max error vs float64 %.2g, vs quant.MatVec %.2g (of max Σ|w·x|)", bits, worstK, worstR)
	}
}

// TestQMVProduction runs the model's shapes: hidden 2048 in, 2048 out (and the 4096-wide
// out-projection input), and the 8-bit router (256 experts).
func TestQMVProduction(t *testing.T) {
	lib := library(t, emu.Options{}, "qmv.metal")
	r := rand.New(rand.NewPCG(9, 10))
	for i, c := range []struct{ bits, n, k int }{{4, 2048, 2048}, {4, 512, 4096}, {8, 256, 2048}} {
		order := emu.Orders[i]
		ke, re := checkQMV(t, lib, r, c.bits, c.n, c.k, order)
		t.Logf("q%d %dx%d %v: max error vs float64 %.2g, vs quant.MatVec %.2g (of max Σ|w·x|)", c.bits, c.n, c.k, order, ke, re)
	}
}

func TestQMVASan(t *testing.T) {
	lib := library(t, emu.Options{ASan: true}, "qmv.metal")
	r := rand.New(rand.NewPCG(11, 12))
	for _, bits := range []int{4, 8} {
		checkQMV(t, lib, r, bits, 13, 192, emu.Shuffle) // a partial last threadgroup, a partial step over K
		checkQMV(t, lib, r, bits, 8, 512, emu.Reverse)
	}
}
