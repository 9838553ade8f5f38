//go:build linux

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/emu"
)

func TestAddRMSNorm(t *testing.T) {
	lib := library(t, emu.Options{}, "rmsnorm.metal")
	cases := []struct{ h, rows, threads int }{
		{2048, 3, RMSNormThreads}, // the model's hidden size
		{2048, 1, 1024},
		{64, 2, 32},
		{1, 1, 32},
		{200, 2, 96},
		{1000, 1, 40}, // a partial last simdgroup of 8
		{33, 2, 7},    // fewer threads than a simdgroup
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range cases {
		for _, order := range emu.Orders {
			t.Run(fmt.Sprintf("h%d_rows%d_tg%d_%v", c.h, c.rows, c.threads, order), func(t *testing.T) {
				testAddRMSNorm(t, lib, r, c.h, c.rows, c.threads, order, false)
			})
		}
	}
	t.Run("in_place", func(t *testing.T) { testAddRMSNorm(t, lib, r, 2048, 2, 256, emu.Shuffle, true) })
	t.Logf("max relative error of out %.2g (residual exact)", rmsWorst)
}

func testAddRMSNorm(t *testing.T, lib *emu.Library, r *rand.Rand, h, rows, threads int, order emu.Order, inPlace bool) {
	const eps = 1e-6
	x, d := randFloats(r, h*rows, 1), randFloats(r, h*rows, 0.5)
	w := make([]uint16, h)
	for i := range w {
		w[i] = quant.F32ToBF16(1 + 0.1*float32(r.NormFloat64()))
	}
	wantRes, wantOut := make([]float32, h*rows), make([]float32, h*rows)
	for row := range rows {
		s := row * h
		AddRMSNorm(wantRes[s:s+h], wantOut[s:s+h], x[s:s+h], d[s:s+h], w, eps)
	}
	bx, bd, bw := emu.BufferOf(x), emu.BufferOf(d), emu.BufferOf(w)
	bres, bout := emu.NewBuffer(4*h*rows), emu.NewBuffer(4*h*rows)
	bres.Fill(0xFF)
	bout.Fill(0xFF)
	if inPlace {
		bres = bx
	}
	mustDispatch(t, lib, AddRMSNormCall(h, rows, eps, threads, AddRMSNormBuffers[*emu.Buffer]{X: bx, D: bd, W: bw, Res: bres, Out: bout}), order, 7)
	if e := relErr(bres.Float32s(), wantRes); e != 0 {
		t.Errorf("residual: rel error %g, want exact", e)
	}
	e := relErr(bout.Float32s(), wantOut)
	if !(e <= 2e-6) {
		t.Errorf("out: rel error %g", e)
	}
	rmsWorst = max(rmsWorst, e)
}

var rmsWorst float64

func TestAddRMSNormASan(t *testing.T) {
	lib := library(t, emu.Options{ASan: true}, "rmsnorm.metal")
	r := rand.New(rand.NewPCG(3, 4))
	testAddRMSNorm(t, lib, r, 300, 2, 64, emu.Shuffle, false)
	testAddRMSNorm(t, lib, r, 2048, 1, 256, emu.Reverse, true)
}
