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

type qmmCase struct{ bits, tokens, rows, cols int }

// runQMM runs qmm on a random matrix and activations and returns y's error relative to max|y|
// against QMM (engine/quant's product, row by row) and against a float64 product.
func runQMM(t *testing.T, lib *emu.Library, r *rand.Rand, c qmmCase, order emu.Order) (refErr, exactErr float64) {
	t.Helper()
	m := quant.Quantize(randFloats(r, c.rows*c.cols, 0.05), c.rows, c.cols, c.bits)
	x := randFloats(r, c.tokens*c.cols, 2)
	want := QMM(m, x, c.tokens)
	y := emu.NewBuffer(4 * c.tokens * c.rows)
	y.Fill(0xFF) // an element no thread writes stays NaN
	w := qbufs{Words: emu.BufferOf(m.Words), Scales: emu.BufferOf(m.Scales), Biases: emu.BufferOf(m.Biases)}
	mustDispatch(t, lib, QMMCall(c.bits, c.tokens, c.cols, []int{c.rows}, QMMBuffers[*emu.Buffer]{W: []qbufs{w}, X: emu.BufferOf(x), Y: []*emu.Buffer{y}}), order, uint64(c.tokens))
	got := y.Float32s()
	row := make([]float32, c.cols)
	var diff, scale float64
	for n := range c.rows {
		m.DequantRow(n, row)
		for tk := range c.tokens {
			var dot float64
			for k, v := range row {
				dot += float64(v) * float64(x[tk*c.cols+k])
			}
			diff = max(diff, math.Abs(float64(got[tk*c.rows+n])-dot))
			scale = max(scale, math.Abs(dot))
		}
	}
	refErr, exactErr = relErr(got, want), diff/scale
	// float32 sums of K terms in different orders: the bound grows like √K (2e-6 up to K = 256)
	tol := 2e-6 * math.Sqrt(float64(max(c.cols, 256))/256)
	if !(refErr <= tol && exactErr <= tol) {
		t.Errorf("%+v %v: error vs engine/quant %.2g, vs float64 %.2g (of max|y|)", c, order, refErr, exactErr)
	}
	return refErr, exactErr
}

// TestQMM: edge tiles in both directions (tokens and rows not multiples of the tile), one token,
// one quantisation group, 8-bit, several K steps, each tile height (QMMTileRows: 32 above 16
// tokens, 16, 8); every thread order.
func TestQMM(t *testing.T) {
	lib := library(t, emu.Options{}, "qmm.metal")
	r := rand.New(rand.NewPCG(71, 72))
	var worstR, worstX float64
	for _, c := range []qmmCase{{4, 37, 70, 128}, {4, 1, 32, 64}, {8, 64, 64, 192}, {4, 32, 33, 256}, {8, 5, 7, 64}, {4, 13, 70, 128}, {8, 16, 130, 64}, {4, 8, 300, 128}} {
		for _, order := range emu.Orders {
			t.Run(fmt.Sprintf("q%d_m%d_n%d_k%d_%v", c.bits, c.tokens, c.rows, c.cols, order), func(t *testing.T) {
				re, xe := runQMM(t, lib, r, c, order)
				worstR, worstX = max(worstR, re), max(worstX, xe)
			})
		}
	}
	t.Logf("max error vs engine/quant %.2g, vs float64 %.2g (of max|y|)", worstR, worstX)
}

// TestQMMProduction runs a chunk of 64 tokens through a production projection's width (the
// attention output projection's K = 4096, N = 2048 cut to 256 rows to stay quick).
func TestQMMProduction(t *testing.T) {
	lib := library(t, emu.Options{}, "qmm.metal")
	r := rand.New(rand.NewPCG(73, 74))
	re, xe := runQMM(t, lib, r, qmmCase{4, 64, 256, 4096}, emu.Shuffle)
	t.Logf("64 tokens × 256 rows × 4096: error vs engine/quant %.2g, vs float64 %.2g", re, xe)
}

func TestQMMASan(t *testing.T) {
	lib := library(t, emu.Options{ASan: true}, "qmm.metal")
	r := rand.New(rand.NewPCG(75, 76))
	runQMM(t, lib, r, qmmCase{4, 33, 40, 64}, emu.Reverse) // the last rows and columns of every buffer
	runQMM(t, lib, r, qmmCase{4, 7, 130, 64}, emu.Reverse) // the 8-row tile: 128 columns a tile
}

// TestLayoutProbe: the probe reports SimdgroupLayout on the emulator (the selftest runs it on a
// Mac to confirm the hardware agrees), in every thread order and under ASan.
func TestLayoutProbe(t *testing.T) {
	labels := make([]float32, 64)
	for i := range labels {
		labels[i] = float32(i)
	}
	for _, asan := range []bool{false, true} {
		lib := library(t, emu.Options{ASan: asan}, "qmm.metal")
		for _, order := range emu.Orders {
			out := emu.NewBuffer(4 * 64)
			mustDispatch(t, lib, LayoutProbeCall(LayoutProbeBuffers[*emu.Buffer]{Labels: emu.BufferOf(labels), Out: out}), order, 1)
			seen := map[float32]bool{}
			for l := range 32 {
				r, c := SimdgroupLayout(l)
				for i := range 2 {
					got := out.Float32s()[2*l+i]
					if want := float32(r*8 + c + i); got != want {
						t.Fatalf("ASan %v %v: lane %d element %d: %g, want %g", asan, order, l, i, got, want)
					}
					seen[got] = true
				}
			}
			if len(seen) != 64 {
				t.Fatalf("the lanes cover %d of 64 elements", len(seen))
			}
		}
	}
}

// TestQMMStack: qmm over stacks of 1 to 4 matrices (rows not multiples of any tile width,
// a one-row matrix as the shared expert's gate is) equals QMM per matrix, at each tile height, in every order.
func TestQMMStack(t *testing.T) {
	lib := library(t, emu.Options{}, "qmm.metal")
	r := rand.New(rand.NewPCG(77, 78))
	for i, c := range []struct {
		bits, tokens, cols int
		rows               []int
	}{
		{4, 37, 128, []int{70, 33, 1, 40}},
		{8, 13, 64, []int{256, 1}},
		{4, 5, 128, []int{130, 64, 8}},
		{4, 64, 64, []int{32}},
	} {
		for _, order := range emu.Orders {
			t.Run(fmt.Sprintf("q%d_m%d_%v_%v", c.bits, c.tokens, c.rows, order), func(t *testing.T) {
				x := randFloats(r, c.tokens*c.cols, 2)
				var b QMMBuffers[*emu.Buffer]
				var ms []*quant.Matrix
				for _, n := range c.rows {
					m := quant.Quantize(randFloats(r, n*c.cols, 0.05), n, c.cols, c.bits)
					ms = append(ms, m)
					y := emu.NewBuffer(4 * c.tokens * n)
					y.Fill(0xFF)
					b.W = append(b.W, qbufs{Words: emu.BufferOf(m.Words), Scales: emu.BufferOf(m.Scales), Biases: emu.BufferOf(m.Biases)})
					b.Y = append(b.Y, y)
				}
				b.X = emu.BufferOf(x)
				mustDispatch(t, lib, QMMCall(c.bits, c.tokens, c.cols, c.rows, b), order, uint64(i))
				for j, m := range ms {
					if e := relErr(b.Y[j].Float32s(), QMM(m, x, c.tokens)); !(e <= 2e-6) {
						t.Errorf("matrix %d: relative error %.2g", j, e)
					}
				}
			})
		}
	}
}

func TestQMMStackASan(t *testing.T) {
	lib := library(t, emu.Options{ASan: true}, "qmm.metal")
	r := rand.New(rand.NewPCG(79, 80))
	x := randFloats(r, 9*64, 1)
	var b QMMBuffers[*emu.Buffer]
	var ms []*quant.Matrix
	for _, n := range []int{40, 1, 17} {
		m := quant.Quantize(randFloats(r, n*64, 0.05), n, 64, 4)
		ms = append(ms, m)
		b.W = append(b.W, qbufs{Words: emu.BufferOf(m.Words), Scales: emu.BufferOf(m.Scales), Biases: emu.BufferOf(m.Biases)})
		b.Y = append(b.Y, emu.NewBuffer(4*9*n))
	}
	b.X = emu.BufferOf(x)
	mustDispatch(t, lib, QMMCall(4, 9, 64, []int{40, 1, 17}, b), emu.Reverse, 1)
	for j, m := range ms {
		if e := relErr(b.Y[j].Float32s(), QMM(m, x, 9)); !(e <= 2e-6) {
			t.Errorf("matrix %d: relative error %.2g", j, e)
		}
	}
}
