//go:build linux

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/lilyformac/lily/metal/emu"
)

// runConv runs steps tokens through conv1d_step and Conv1DStep from the same random window and
// returns the largest relative error of u over the steps; the window must match exactly.
func runConv(t *testing.T, lib *emu.Library, r *rand.Rand, c, group, steps int, order emu.Order) float64 {
	t.Helper()
	taps := randFloats(r, c*ConvKernel, 0.5)
	window := randFloats(r, (ConvKernel-1)*c, 1)
	bTaps, bWin, bU := emu.BufferOf(taps), emu.BufferOf(window), emu.NewBuffer(4*c)
	u := make([]float32, c)
	var worst float64
	for step := range steps {
		x := randFloats(r, c, 1)
		Conv1DStep(u, window, taps, x)
		bU.Fill(0xFF)
		mustDispatch(t, lib, Conv1DStepCall(c, group, Conv1DStepBuffers[*emu.Buffer]{X: emu.BufferOf(x), Taps: bTaps, Window: bWin, U: bU}),
			order, uint64(step))
		if e := relErr(bWin.Float32s(), window); e != 0 {
			t.Fatalf("C %d step %d: window differs (rel %g), want exact", c, step, e)
		}
		worst = max(worst, relErr(bU.Float32s(), u))
	}
	if !(worst <= 1e-6) {
		t.Errorf("C %d group %d %v: relative error of u %.2g", c, group, order, worst)
	}
	return worst
}

func TestConv1DStep(t *testing.T) {
	lib := library(t, emu.Options{}, "conv.metal")
	r := rand.New(rand.NewPCG(31, 32))
	var worst float64
	for _, s := range []struct{ c, group int }{{1, 32}, {31, 32}, {257, ConvThreads}, {640, 96}, {1000, 1024}} {
		for _, order := range emu.Orders {
			t.Run(fmt.Sprintf("c%d_g%d_%v", s.c, s.group, order), func(t *testing.T) {
				worst = max(worst, runConv(t, lib, r, s.c, s.group, 3, order))
			})
		}
	}
	t.Logf("edge shapes: max relative error of u %.2g (window exact)", worst)
}

// TestConv1DStepProduction runs the model's 8192 channels (2·16·128 + 32·128).
func TestConv1DStepProduction(t *testing.T) {
	lib := library(t, emu.Options{}, "conv.metal")
	r := rand.New(rand.NewPCG(33, 34))
	c := GDNShape{HK: 16, HV: 32, DK: 128, DV: 128}.Channels()
	e := runConv(t, lib, r, c, ConvThreads, 4, emu.Shuffle)
	t.Logf("model shape (%d channels): max relative error of u %.2g (window exact)", c, e)
}

func TestConv1DStepASan(t *testing.T) {
	lib := library(t, emu.Options{ASan: true}, "conv.metal")
	r := rand.New(rand.NewPCG(35, 36))
	runConv(t, lib, r, 300, 256, 2, emu.Reverse)
}

// TestConv1DChunk: a chunk in one dispatch equals token-by-token Conv1DStep (u and the window
// exact: the same operations in the same order), for one token, a partial threadgroup and the
// model's channels.
func TestConv1DChunk(t *testing.T) {
	lib := library(t, emu.Options{}, "conv.metal")
	r := rand.New(rand.NewPCG(37, 38))
	for _, s := range []struct{ c, group, tokens int }{{31, 32, 1}, {257, ConvThreads, 7}, {GDNShape{HK: 16, HV: 32, DK: 128, DV: 128}.Channels(), ConvThreads, 5}} {
		for _, order := range emu.Orders {
			taps, window := randFloats(r, s.c*ConvKernel, 0.5), randFloats(r, (ConvKernel-1)*s.c, 1)
			x := randFloats(r, s.tokens*s.c, 1)
			bWin, bU := emu.BufferOf(window), emu.NewBuffer(4*s.tokens*s.c)
			bU.Fill(0xFF)
			u := make([]float32, s.tokens*s.c)
			Conv1DChunk(u, window, taps, x, s.tokens)
			mustDispatch(t, lib, Conv1DChunkCall(s.c, s.group, s.tokens, Conv1DStepBuffers[*emu.Buffer]{X: emu.BufferOf(x), Taps: emu.BufferOf(taps), Window: bWin, U: bU}), order, 1)
			if we, ue := relErr(bWin.Float32s(), window), relErr(bU.Float32s(), u); we != 0 || !(ue <= 1e-6) {
				t.Fatalf("C %d, %d tokens %v: window differs by %g, u by %g", s.c, s.tokens, order, we, ue)
			}
		}
	}
}

func TestConv1DChunkASan(t *testing.T) {
	lib := library(t, emu.Options{ASan: true}, "conv.metal")
	r := rand.New(rand.NewPCG(39, 40))
	const c, tokens = 70, 3
	taps, window, x := randFloats(r, c*ConvKernel, 0.5), randFloats(r, (ConvKernel-1)*c, 1), randFloats(r, tokens*c, 1)
	bWin, bU := emu.BufferOf(window), emu.NewBuffer(4*tokens*c)
	u := make([]float32, tokens*c)
	Conv1DChunk(u, window, taps, x, tokens)
	mustDispatch(t, lib, Conv1DChunkCall(c, 64, tokens, Conv1DStepBuffers[*emu.Buffer]{X: emu.BufferOf(x), Taps: emu.BufferOf(taps), Window: bWin, U: bU}), emu.Reverse, 1)
	if we, ue := relErr(bWin.Float32s(), window), relErr(bU.Float32s(), u); we != 0 || !(ue <= 1e-6) {
		t.Fatalf("window differs by %g, u by %g", we, ue)
	}
}
