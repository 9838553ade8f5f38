//go:build linux

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/emu"
)

// The LM head is qmv_q4 over the untied [vocab, hidden] head: 248,320 rows × 2048, float32
// logits, QMVThreadgroups(248320) = 31,040 threadgroups of 64 (far below Metal's 2^32-1 per
// grid dimension). Row offsets are computed in ulong, so the largest word offset (~6.4e7) and
// byte offset (~254 MB) need nothing more; rows past N in the last threadgroup are skipped.

const lmVocab, lmHidden = 248320, 2048

// TestLMHeadTall: a tall, narrow head (many threadgroups), with and without a partial last
// threadgroup, in every order.
func TestLMHeadTall(t *testing.T) {
	lib := library(t, emu.Options{}, "qmv.metal")
	r := rand.New(rand.NewPCG(41, 42))
	var worstK, worstR float64
	for _, n := range []int{5000, 5001, 5003} {
		for _, order := range emu.Orders {
			t.Run(fmt.Sprintf("%dx256_%v", n, order), func(t *testing.T) {
				ke, re := checkQMV(t, lib, r, 4, n, 256, order)
				worstK, worstR = max(worstK, ke), max(worstR, re)
			})
		}
	}
	t.Logf("max error vs float64 %.2g, vs quant.MatVec %.2g (of max Σ|w·x|)", worstK, worstR)
}

// TestLMHeadRowBlock: a block of rows at the production width (K = 2048), a row count that is
// not a multiple of 8.
func TestLMHeadRowBlock(t *testing.T) {
	lib := library(t, emu.Options{}, "qmv.metal")
	r := rand.New(rand.NewPCG(43, 44))
	for i, n := range []int{1029, 61} {
		ke, re := checkQMV(t, lib, r, 4, n, lmHidden, emu.Orders[i])
		t.Logf("%dx%d %v: max error vs float64 %.2g, vs quant.MatVec %.2g (of max Σ|w·x|)", n, lmHidden, emu.Orders[i], ke, re)
	}
}

// TestLMHeadFull runs the production head once: 248,320 × 2048 random codes, the full grid.
// It takes a while in the emulator, so -short skips it.
func TestLMHeadFull(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	lib := library(t, emu.Options{}, "qmv.metal")
	r := rand.New(rand.NewPCG(45, 46))
	n, k := lmVocab, lmHidden
	// Build the matrix straight in device buffers.
	bw, bs, bb := emu.NewBuffer(n*k/2), emu.NewBuffer(n*k/32), emu.NewBuffer(n*k/32)
	m := &quant.Matrix{Rows: n, Cols: k, Bits: 4, Words: bw.Uint32s(), Scales: bs.Uint16s(), Biases: bb.Uint16s()}
	fillQ4(r, m)
	x := randFloats(r, k, 1)
	y := emu.NewBuffer(4 * n)
	y.Fill(0xFF)
	start := time.Now()
	mustDispatch(t, lib, QMVCall(4, n, k, QMVVariant{}, QMVBuffers[*emu.Buffer]{W: QMatrixBuffers[*emu.Buffer]{Words: bw, Scales: bs, Biases: bb}, X: emu.BufferOf(x), Y: y}),
		emu.Shuffle, 7)
	elapsed := time.Since(start)
	got, want := y.Float32s(), QMV(m, x)
	// Every row against quant.MatVec, relative to the row's Σ|w·x| (exact for a sample of rows).
	row := make([]float32, k)
	var worstRef, worstExact float64
	for i := range n {
		m.DequantRow(i, row)
		var exact, mag float64
		for j, w := range row {
			exact += float64(w) * float64(x[j])
			mag += math.Abs(float64(w) * float64(x[j]))
		}
		if math.IsNaN(float64(got[i])) {
			t.Fatalf("row %d: NaN", i)
		}
		worstRef = max(worstRef, math.Abs(float64(got[i])-float64(want[i]))/mag)
		worstExact = max(worstExact, math.Abs(float64(got[i])-exact)/mag)
	}
	if !(worstExact <= 2e-6 && worstRef <= 4e-6) {
		t.Errorf("error vs float64 %.2g, vs quant.MatVec %.2g (of the row's Σ|w·x|)", worstExact, worstRef)
	}
	t.Logf("%d×%d, %d threadgroups in %v: max error vs float64 %.2g, vs quant.MatVec %.2g (of the row's Σ|w·x|)",
		n, k, QMVThreadgroups(n), elapsed.Round(time.Millisecond), worstExact, worstRef)
}
